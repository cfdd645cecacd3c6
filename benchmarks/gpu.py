"""Robots on a GPU: ukjax's tree kernel (`ukjax/_robots/kernels.cc` built for CUDA) against
ukjax's XLA route on the same GPU, MJX and MuJoCo Warp where installed, and MuJoCo's `rollout`
on every host core as the baseline. The cases of `ukjax bench` (`ukjax/cli/bench.py`: same files,
RK4 at 1 ms, limits off in MuJoCo): Cassie, the gripper of `examples/gripper.xml`, the
coordinated robots [3] (ukjax's own model, which the kernel does not cover, and the same chain
read from its MJCF, which it does); and the contact scene `examples/contacts.xml` (1 s, adaptive;
its contact solve and, between events, its contact dynamics on the kernel where built for the
GPU) against MuJoCo's C step on one host thread and MuJoCo Warp (`contact_scene`).

Columns: members, M steps/s (member-steps per second of wall clock, after compiling), the ratio
to MuJoCo's `rollout`, the compile time (ukjax: the first call's time beyond a compiled call's;
MuJoCo Warp: from its model's transfer to the end of its first run, beyond a later run's time),
and the largest loop-closure violation over the run (ukjax: `sol.phi` every 10th step; MuJoCo's,
MJX's and MuJoCo Warp's: their equality rows' `efc_pos`, from their states every 10th step of
32 members). MuJoCo Warp runs in float32, its only precision, one captured graph a step. A peer
that is not installed (`pip install -e '.[bench]'`) is left out with a line that says so. Where
the kernel runs, a line after each of its rows gives its solve alone (a call on the batch, four
a step) and its share of a step.

    python benchmarks/gpu.py [--batches 1024,16384,65536] [--steps 200] [--xla-batch 16384]
                             [--mujoco-batch 4096] [--mjx-batch 4096] [--warp-batch 16384]
                             [--contacts-batch 0]
"""

import argparse
import warnings

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models
from ukjax.cli import bench as _bench  # noqa: E402
from ukjax._backends import _tree_kernel as kernels  # noqa: E402


def coordinated_mjcf():
    """The coordinated robots [3] read from their MJCF by `models.from_mjcf` (a tree with one
    `connect`: the kernel covers it), from the paper's start as MuJoCo runs it."""
    name, _, _, xml, qpos, ctrl, violation = _bench.coordinated()
    with warnings.catch_warnings():
        # the file's own start (all angles zero) is far from its loop, and not where it starts
        warnings.simplefilter("ignore")
        m = models.from_mjcf(xml)
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    return f"{name}, MJCF", system, jnp.asarray(qpos), xml, qpos, ctrl, violation


def agreement(system, q0, members=64):
    """The kernel's accelerations against the XLA route's at `members` states about `q0`
    (coordinates and velocities perturbed at random): the largest difference over the largest
    acceleration."""
    rng = np.random.default_rng(0)
    q = jnp.asarray(np.asarray(q0) + 0.05 * rng.standard_normal((members, q0.shape[0])))
    qd = jnp.asarray(rng.standard_normal(q.shape))
    bound = ukjax.TreeKernel().bind(system, q.dtype, jax.default_backend())
    kernel = jax.jit(jax.vmap(lambda q, qd: kernels.solve(bound, 0.0, q, qd).acceleration))(q, qd)
    xla = jax.jit(jax.vmap(lambda q, qd: system.solve(0.0, q, qd).acceleration))(q, qd)
    return float(jnp.max(jnp.abs(kernel - xla)) / jnp.max(jnp.abs(xla)))


def solve_alone(system, q0, batch, calls=8):
    """The kernel's solve of `batch` states about `q0`, alone: seconds a call, over `calls`
    calls in one program, each fed the last one's result (so that none is left out)."""
    rng = np.random.default_rng(1)
    q = jnp.asarray(np.asarray(q0) + 0.01 * rng.standard_normal((batch, q0.shape[0])))
    bound = ukjax.TreeKernel().bind(system, q.dtype, jax.default_backend())
    acceleration = jax.vmap(lambda q, qd: kernels.solve(bound, 0.0, q, qd).acceleration)
    chain = jax.jit(lambda q, qd: jax.lax.fori_loop(0, calls, lambda _, qd: qd + 1e-12 * acceleration(q, qd), qd))
    _, wall, _ = _bench.compiled_and_timed(lambda: chain(q, jnp.zeros_like(q)))
    return wall / calls


def row(case, route, batch, rate, baseline, compile_s=None, violation=None, failed=None):
    compiled = "" if compile_s is None else f"{compile_s:8.1f}"
    closure = "" if violation is None else f"{violation:10.1e}"
    outcome = "" if not failed else "  not finished: " + ", ".join(f"{n} {k}" for n, k in failed.items())
    print(
        f"{case:32s} {route:14s} {batch:>8d} {rate / 1e6:10.3f} {rate / baseline:8.2f} {compiled:>8s} {closure:>10s}{outcome}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1024,16384,65536", help="members of the kernel's batches")
    parser.add_argument("--steps", type=int, default=200, help="RK4 steps of 1 ms per member")
    parser.add_argument("--xla-batch", type=int, default=16384, help="members of the XLA route's batch (0: left out)")
    parser.add_argument("--mujoco-batch", type=int, default=4096, help="members of MuJoCo's `rollout`")
    parser.add_argument("--mjx-batch", type=int, default=4096, help="members of MJX's batch (0: left out)")
    parser.add_argument("--warp-batch", type=int, default=16384, help="members of MuJoCo Warp's batch (0: left out)")
    parser.add_argument("--contacts-batch", type=int, default=0, help="members of the contact scene (0: left out)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    import mujoco

    device = jax.devices()[0]
    print(
        f"{device.device_kind} ({jax.default_backend()}); {_bench.CORES} host cores; jax {jax.__version__}, "
        f"mujoco {mujoco.__version__}; float64 (MuJoCo's own float64 on the host); RK4, dt {_bench.DT} s, "
        f"{args.steps} steps (the XLA route {args.steps // 2})"
    )
    print(f"{'case':32s} {'simulator':14s} {'members':>8s} {'M steps/s':>10s} {'ratio':>8s} {'compile':>8s} {'violation':>10s}")
    cases = [_bench.cassie(), _bench.gripper(), _bench.coordinated(), coordinated_mjcf()]
    xla = []
    for name, system, q0, xml, qpos, ctrl, violation in cases:
        baseline, mj_violation = _bench.run_mujoco(xml, qpos, ctrl, args.mujoco_batch, args.steps, violation)
        row(name, "mujoco rollout", args.mujoco_batch, baseline, baseline, violation=mj_violation)
        if args.mjx_batch:
            mjx = _bench.peer(name, "mjx", _bench.run_mjx, xml, qpos, ctrl, args.mjx_batch, args.steps, violation)
            if mjx is not None:
                row(name, "mjx", args.mjx_batch, mjx[0], baseline, violation=mjx[1])
        if args.warp_batch:
            run = _bench.run_mujoco_warp
            warp = _bench.peer(name, "mujoco warp", run, xml, qpos, ctrl, args.warp_batch, args.steps, violation)
            if warp is not None:
                row(name, "mujoco warp", args.warp_batch, warp[0], baseline, warp[2], warp[1])
        covered = kernels.covered(system) is not None and kernels.can_run(system, q0.dtype, jax.default_backend())
        if covered:
            print(f"{name:32s} (kernel against the XLA route at 64 states: {agreement(system, q0):.1e})", flush=True)
        for batch in batches:
            rate, worst, compile_s, failed = _bench.run_ukjax(system, q0, batch, args.steps)
            row(name, "ukjax kernel" if covered else "ukjax XLA", batch, rate, baseline, compile_s, worst, failed)
            if covered:
                alone = solve_alone(system, q0, batch)
                print(f"{name:32s} (the kernel's solve alone: {alone * 1e3:.2f} ms a call, {4 * alone * rate / batch:.0%} of a step)")
        if covered and args.xla_batch:
            xla.append((name, system, q0, baseline))
    # the XLA route last: its compiles are the longest
    for name, system, q0, baseline in xla:
        batch, steps = args.xla_batch, args.steps // 2
        rate, worst, compile_s, failed = _bench.run_ukjax(system, q0, batch, steps, ukjax.XLABackend())
        row(name, "ukjax XLA", args.xla_batch, rate, baseline, compile_s, worst, failed)
    if args.contacts_batch:
        contact_scene(args)


def contact_scene(args):
    """`examples/contacts.xml`, 1 s of every member (`benchmarks/contacts.py`'s runs): member-seconds
    per second, compile time, the largest penetration and the sphere's and box's largest distance
    from their closed forms; MuJoCo's C step on one host thread (`rollout`, its default `solref`,
    0.1 ms, at most 64 members) as the baseline, MuJoCo Warp at the same step."""
    import mujoco

    from benchmarks import contacts
    from benchmarks.references import mujoco_c_rate

    speeds = np.linspace(0.5, 1.5, args.contacts_batch)
    exact = contacts.closed_forms(speeds)
    case = "contacts.xml, 1 s, contacts"

    def line(route, members, result, baseline):
        error = max(float(np.max(np.abs(result["final"][i] - exact[i]))) for i in range(2))
        print(
            f"{case:32s} {route:14s} {members:>8d} {result['rate']:10.1f} member-s/s {result['rate'] / baseline:8.2f}x, "
            f"compile {result['compile']:.1f} s, penetration {result['penetration']:.1e} m, from the closed forms "
            f"{error:.1e} m" + (f", all SUCCESS: {result['success']}" if "success" in result else ""),
            flush=True,
        )

    mj = mujoco.MjModel.from_xml_path(str(contacts.SCENE))
    few = speeds[: min(64, len(speeds))]
    baseline = mujoco_c_rate(mj, list(zip(*contacts.mujoco_starts(mj, few))), 1.0)
    print(f"{case:32s} {'mujoco 1 thread':14s} {len(few):>8d} {baseline:10.1f} member-s/s", flush=True)
    if args.warp_batch:
        warp = _bench.peer(case, "mujoco warp", contacts.run_mujoco_warp, speeds)
        if warp is not None:
            line("mujoco warp", len(speeds), warp, baseline)
    picked = ukjax.AutoBackend().select(contacts.scene()[1], jnp.float64, jax.default_backend())
    on_kernel = isinstance(picked, ukjax.TreeKernel)
    line("ukjax kernel" if on_kernel else "ukjax XLA", len(speeds), contacts.run_ukjax(speeds), baseline)

if __name__ == "__main__":
    main()
