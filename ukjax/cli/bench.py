"""Batch throughput of closed-chain simulation: ukjax against MuJoCo (`rollout`) and MJX.

Two mechanisms of the source papers, each written once for ukjax and once as MJCF with `connect`
equality constraints: the servo-control paper's coordinated robots (a 5-link closed chain hinged to the
ground at both ends, passive under gravity) and the parallel-robot paper's parallel robot (three 2-link chains
joined at the end effector, driven by constant base torques); and the parallel robot read from
one MJCF file by both simulators (`ukjax.models.PARALLEL_2DOF_MJCF` through
`ukjax.models.from_mjcf`); the four-bar of `examples/fourbar.xml` read by both (one `connect`
loop); the two-finger gripper of `examples/gripper.xml` read by both (two
four-bar fingers, a joint equality mirroring them, a tendon with a spring and a position
actuator on it, held at a constant command); and Agility's Cassie read from
`shared/robots/cassie.xml` by both (a free pelvis, two ball joints, four loops). A file that
is not beside the clone leaves its case out. Same integrator (RK4), step (1 ms), horizon and
batch for all; times are taken after compilation, in the same run.
ukjax runs `simulate_batch` over every CPU core (one JAX device per core), MuJoCo's threaded
`rollout` on every core; MJX (the JAX port of MuJoCo) runs a smaller batch, vmapped.

Loop-closure violation: the largest coordinate of the tip-to-anchor (or tip-to-tip)
distance over the run (MuJoCo: every step, from sensors, or for the gripper and Cassie its
equality rows at every 10th step of 32 members; ukjax: every 10th step, `sol.phi`, Cassie's quaternion norms
included).

    ukjax bench [--batch 256] [--steps 200] [--mjx-batch 0]       (about a minute on 2 cores)
    python benchmarks/throughput.py [--batch 2048] [--steps 1000] [--mjx-batch 256]

Last line: `throughput ratio ukjax/mujoco R (case) violation ukjax V1 mujoco V2 (case) ukjax
failed members F` (the smallest of the cases' ratios and its case; ukjax's largest violation and
MuJoCo's on the same case; how many ukjax members did not finish, by status: NONFINITE_STATE and
the like; the violation is over the members that did). A peer that cannot run a case (MJX
without `mujoco-mjx`, or failing on a model) is left out of it with a line that says why.
"""

import argparse
import os
import textwrap
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import ukjax
from ukjax import examples, models
from ukjax.cli.cache import compilation_cache

CORES = os.cpu_count() or 1
DT = 1e-3
TORQUES = (0.02, -0.01, 0.005)  # parallel robot, base motors of chains 1–3 [N·m]


def _link(name, com, mass, inertia, pos, inner=""):
    return (
        f'<body name="{name}" pos="{pos[0]} {pos[1]} 0"><joint name="{name}" type="hinge" axis="0 0 1"/>'
        f'<inertial pos="{com} 0 0" mass="{mass}" diaginertia="{inertia} {inertia} {inertia}"/>'
        f"{inner}</body>"
    )


def coordinated():
    """The servo-control paper [3] §V: ukjax's model, and the same chain as MJCF (relative angles)."""
    m = models.coordinated_robots()
    body = '<site name="tip" pos="1 0 0"/>'
    for i in range(5, 0, -1):
        body = _link(f"l{i}", 0.5, 1.0, 1.0, (0, 0) if i == 1 else (1, 0), inner=body)
    xml = f"""<mujoco><option gravity="0 -9.8 0" timestep="{DT}" integrator="RK4"/>
      <worldbody><site name="anchor" pos="3 0 0"/>{body}</worldbody>
      <equality><connect site1="tip" site2="anchor"/></equality>
      <sensor><framepos objtype="site" objname="tip"/></sensor></mujoco>"""
    qpos = np.diff(np.asarray(m.q0), prepend=0.0)  # absolute angles → relative
    system = ukjax.ConstrainedSystem(m.system, m.constraints)

    def violation(sensors, qpos):
        return np.max(np.abs(sensors[..., :2] - np.array([3.0, 0.0])))

    return "coordinated robots [3]", system, m.q0, xml, qpos, np.zeros(0), violation


def parallel():
    """The parallel-robot paper [1]: ukjax's model (floating bases held by constraints) under constant base
    torques, and the same robot as MJCF (bases hinged to the world)."""
    m = models.parallel_2dof()
    q0 = np.asarray(m.q0)
    chains = []
    for i, (name, (a, b)) in enumerate(models.PARALLEL_2DOF_LINKS.items()):
        tip = f'<site name="tip{i}" pos="{b[0]} 0 0"/>'
        inner = _link(f"{name}b", b[1], b[2], b[3], (a[0], 0), inner=tip)
        chains.append(_link(f"{name}a", a[1], a[2], a[3], q0[4 * i + 2 : 4 * i + 4], inner=inner))
    motors = "".join(f'<motor joint="{name}a" gear="1"/>' for name in models.PARALLEL_2DOF_LINKS)
    xml = f"""<mujoco><option gravity="0 0 0" timestep="{DT}" integrator="RK4"/>
      <worldbody>{"".join(chains)}</worldbody>
      <equality><connect site1="tip1" site2="tip0"/><connect site1="tip2" site2="tip0"/></equality>
      <actuator>{motors}</actuator>
      <sensor>{"".join(f'<framepos objtype="site" objname="tip{i}"/>' for i in range(3))}</sensor></mujoco>"""
    qpos = q0.reshape(3, 4)[:, :2].reshape(-1)
    torque = jnp.zeros(12).at[jnp.array([0, 4, 8])].set(jnp.array(TORQUES))
    system = ukjax.ConstrainedSystem(ukjax.Forced(m.system, lambda t, q, qd: torque), m.constraints)

    def violation(sensors, qpos):
        tips = sensors.reshape(sensors.shape[:-1] + (3, 3))[..., :2]
        return np.max(np.abs(tips[..., 1:, :] - tips[..., :1, :]))

    return "parallel robot [1]", system, m.q0, xml, qpos, np.array(TORQUES), violation


def from_file():
    """`models.PARALLEL_2DOF_MJCF` read by both: `ukjax.models.from_mjcf` (exact `connect`
    constraints) and `mujoco.MjModel` (soft ones), same keyframe, same motor inputs."""
    path = models.PARALLEL_2DOF_MJCF
    m = models.from_mjcf(path, keyframe="start")
    torque = m.actuation @ jnp.array(TORQUES)
    system = ukjax.ConstrainedSystem(ukjax.Forced(m.system, lambda t, q, qd: torque), m.constraints)
    *_, violation = parallel()
    # the rows are 3D: the planar tips' z rows are identically zero
    return (
        "parallel robot, one MJCF file",
        system,
        m.q0,
        path.read_text(),
        np.asarray(m.q0),
        np.array(TORQUES),
        violation,
    )


FOURBAR = examples.path("fourbar.xml")
GRIPPER = examples.path("gripper.xml")
GRIP = 0.3  # the gripper's command (its actuator's `ctrlrange` is ±0.6)
CASSIE = Path(__file__).resolve().parents[3] / "shared" / "robots" / "cassie.xml"


def _equality_violation(mjm):
    """MuJoCo's violation of a model's equality constraints (`efc_pos` of its equality rows),
    the largest at every 10th step of up to 32 members."""
    import mujoco

    d = mujoco.MjData(mjm)

    def violation(sensors, qpos):
        worst = 0.0
        for x in qpos[:32, ::10].reshape(-1, mjm.nq):
            d.qpos[:] = x
            mujoco.mj_forward(mjm, d)
            worst = max(worst, float(np.max(np.abs(d.efc_pos[: d.ne]))))
        return worst

    return violation


def fourbar():
    """`examples/fourbar.xml` read by both, from its `qpos0` (the loop closed), passive under
    gravity: ukjax's loop exact, MuJoCo's soft."""
    import mujoco

    m = models.from_mjcf(FOURBAR)
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    xml = FOURBAR.read_text().replace(
        '<option gravity="0 0 -9.81">', f'<option gravity="0 0 -9.81" timestep="{DT}" integrator="RK4">'
    )
    violation = _equality_violation(mujoco.MjModel.from_xml_string(xml))
    return "four-bar, one MJCF file", system, m.q0, xml, np.asarray(m.q0), np.zeros(0), violation


def gripper():
    """`examples/gripper.xml` read by both, from its `qpos0` (loops closed) at rest, its
    actuator held at `GRIP`: ukjax's loops and mirror exact, MuJoCo's soft."""
    import mujoco

    m = models.from_mjcf(GRIPPER)
    system = ukjax.ConstrainedSystem(m.controlled(lambda t, q, qd: jnp.array([GRIP])), m.constraints)
    xml = GRIPPER.read_text().replace(
        '<option gravity="0 0 -9.81">', f'<option gravity="0 0 -9.81" timestep="{DT}" integrator="RK4">'
    )
    violation = _equality_violation(mujoco.MjModel.from_xml_string(xml))
    return "gripper, one MJCF file", system, m.q0, xml, np.asarray(m.q0), np.array([GRIP]), violation


def cassie():
    """Agility's Cassie (MuJoCo Menagerie, meshes stripped: a free pelvis, two ball joints, four
    `connect` loops) read from the one file by both, falling from its home keyframe under
    gravity: ukjax's loops exact (start projected onto them), MuJoCo's soft; the joint limits
    that ukjax does not model are disabled in MuJoCo too (the file has no geoms to collide)."""
    import mujoco

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits and clamps named; the keyframe projected
        m = models.from_mjcf(CASSIE, keyframe="home")
    xml = CASSIE.read_text().replace(
        '<option timestep="0.0005"/>', f'<option timestep="{DT}" integrator="RK4"><flag limit="disable"/></option>'
    )
    violation = _equality_violation(mujoco.MjModel.from_xml_string(xml))
    qpos = np.asarray(m.state_to_mujoco(m.q0, m.qd0)[0])
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    return "Cassie, one MJCF file", system, m.q0, xml, qpos, np.zeros(0), violation


def compiled_and_timed(run, repeats: int = 3):
    """`run()` once to compile, then `repeats` times more, each waited for: the last call's
    result, the best of the timed calls' wall times (as MuJoCo's C step is timed, best of
    three: the first runs after a compile are slower by up to a third, measured, on the
    heap's first growth), and the first call's time beyond that (what compiling took: the
    first call also ran it all)."""
    start = time.perf_counter()
    jax.block_until_ready(run())
    first = time.perf_counter() - start
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = jax.block_until_ready(run())
        walls.append(time.perf_counter() - start)
    return result, min(walls), first - min(walls)


def run_ukjax(system, q0, batch, steps, backend=None):
    q0 = jnp.broadcast_to(q0, (batch, q0.shape[0]))
    kwargs = dict(
        backend=ukjax.AutoBackend() if backend is None else backend,
        solver=ukjax.RK4(),
        adaptive=False,
        dt0=DT,
        max_steps=steps,
        ts=jnp.linspace(0, steps * DT, steps // 10 + 1),
    )

    sol, elapsed, compile_s = compiled_and_timed(
        lambda: ukjax.simulate_batch(system, q0, jnp.zeros_like(q0), 0.0, steps * DT, **kwargs)
    )
    status = np.asarray(sol.status)
    failed = {s.name: int(np.sum(status == s)) for s in ukjax.Status if s and np.any(status == s)}
    # the closure of the members that finished: a failed member is counted, not averaged in
    ok = status == ukjax.Status.SUCCESS
    worst = float(np.max(np.abs(np.asarray(sol.phi)[ok]))) if ok.any() else float("nan")
    return batch * steps / elapsed, worst, compile_s, failed


def run_mujoco(xml, qpos, ctrl, batch, steps, violation):
    import mujoco
    from mujoco import rollout

    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    initial = np.tile(state, (batch, 1))
    control = np.tile(ctrl, (batch, steps, 1)) if ctrl.size else None
    datas = [mujoco.MjData(model) for _ in range(CORES)]
    rollout.rollout(model, datas, initial[:CORES], None if control is None else control[:CORES], nstep=steps)
    start = time.perf_counter()
    states, sensors = rollout.rollout(model, datas, initial, control, nstep=steps)
    elapsed = time.perf_counter() - start
    return batch * steps / elapsed, violation(sensors, states[..., 1 : 1 + model.nq])


def run_mjx(xml, qpos, ctrl, batch, steps, violation):
    import mujoco
    from mujoco import mjx

    model = mujoco.MjModel.from_xml_string(xml)
    mx = mjx.put_model(model)
    dx = mjx.make_data(mx).replace(qpos=jnp.asarray(qpos), ctrl=jnp.asarray(ctrl))
    dx = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), dx)

    @jax.jit
    @jax.vmap
    def simulate(d):
        def step(d, _):
            d = mjx.step(mx, d)
            return d, (d.sensordata, d.qpos)

        return jax.lax.scan(step, d, None, length=steps)[1]

    jax.block_until_ready(simulate(dx))
    start = time.perf_counter()
    sensors, qpos = jax.block_until_ready(simulate(dx))
    elapsed = time.perf_counter() - start
    return batch * steps / elapsed, violation(np.asarray(sensors), np.asarray(qpos))


def mujoco_warp(model, qpos, qvel, ctrl, steps: int, record):
    """MuJoCo Warp (float32, its only precision) on Warp's default device: `model` (an
    `MjModel`) from the states `qpos`, `qvel`, shapes (batch, nq) and (batch, nv), as its worlds,
    the controls `ctrl` (nu,) held, `steps` steps of its own time step, each one launch of a
    captured graph where the device is a GPU.

    **Returns:**

    The best wall time of three runs from the start; the time from the model's transfer to the
    end of a first run beyond it (compiling and loading its kernels); `record(d)` after each
    step of a further run (a list), `d` its data; and that run's last `qpos` (float64).
    """
    import mujoco
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING  # before MuJoCo Warp starts it: no banner, no line a kernel
    import mujoco_warp as mjw

    data = mujoco.MjData(model)
    if ctrl.size:
        data.ctrl[:] = ctrl
    began = time.perf_counter()
    m, d = mjw.put_model(model), mjw.put_data(model, data, nworld=qpos.shape[0])
    step = lambda: mjw.step(m, d)  # noqa: E731
    if wp.get_device().is_cuda:
        with wp.ScopedCapture() as capture:  # loads the kernels, records without running
            mjw.step(m, d)
        step = lambda: wp.capture_launch(capture.graph)  # noqa: E731

    def run(record=None):
        d.qpos.assign(qpos.astype(np.float32)), d.qvel.assign(qvel.astype(np.float32))
        d.time.zero_()
        records = []
        start = time.perf_counter()
        for _ in range(steps):
            step()
            if record is not None:
                records.append(record(d))
        wp.synchronize()
        return time.perf_counter() - start, records

    run()
    first = time.perf_counter() - began
    best = min(run()[0] for _ in range(3))
    records = run(record)[1]
    return best, first - best, records, d.qpos.numpy().astype(np.float64)


def run_mujoco_warp(xml, qpos, ctrl, batch, steps, violation):
    """MuJoCo Warp (`mujoco_warp`) on a case from its start at rest, the batch as its worlds:
    member-steps per second, the violation over a further run (its first 32 members' states at
    every step) and its compile time."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(xml)
    starts = np.tile(qpos, (batch, 1)), np.zeros((batch, model.nv))
    best, compile_s, records, _ = mujoco_warp(
        model, *starts, ctrl, steps, lambda d: (d.sensordata.numpy()[:32], d.qpos.numpy()[:32])
    )
    sensors, states = (np.stack(x, axis=1).astype(np.float64) for x in zip(*records))
    return batch * steps / best, violation(sensors, states), compile_s


def main(
    argv: list[str] | None = None, *, batch: int = 2048, steps: int = 1000, mjx_batch: int = 256, cache: bool = True
) -> None:
    """Run the comparison and print its table and last line (`argv`: command-line arguments;
    `cache`: turn on JAX's persistent compilation cache, as `ukjax` does unless `--no-cache`)."""
    import mujoco

    parser = argparse.ArgumentParser(
        prog="ukjax bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--batch", type=int, default=batch, help="members of each batch, every simulator")
    parser.add_argument("--steps", type=int, default=steps, help=f"RK4 steps of {DT:g} s per member")
    parser.add_argument(
        "--mjx-batch", type=int, default=mjx_batch, help="members of MJX's batch; 0 leaves MJX out (needs mujoco-mjx)"
    )
    parser.add_argument("--plot", type=Path, default=None, help="draw the throughput and the violations into this file")
    args = parser.parse_args(argv)
    if cache:
        compilation_cache()
    # one JAX device per core, before any computation initialises the backend
    jax.config.update("jax_num_cpu_devices", CORES)
    jax.config.update("jax_enable_x64", True)
    print(
        f"{CORES} CPU cores; jax {jax.__version__} on {len(jax.devices())} {jax.default_backend()} devices, "
        f"mujoco {mujoco.__version__}; float64; RK4, dt {DT} s, {args.steps} steps, batch {args.batch} "
        f"(MJX {args.mjx_batch})"
    )
    print(f"{'mechanism':30s} {'simulator':8s} {'M steps/s':>10s} {'ratio':>7s} {'violation':>10s}")
    results, failures, drawn = [], {}, []
    cases = [coordinated(), parallel(), from_file(), fourbar()]
    for path, case in ((GRIPPER, gripper), (CASSIE, cassie)):
        if path.is_file():
            cases.append(case())
        else:
            print(f"({case.__name__} left out: no {path})")
    for name, system, q0, xml, qpos, ctrl, violation in cases:
        print(f"{name}: compiling and running ukjax, then MuJoCo ...", flush=True)
        uk_rate, uk_violation, compile_s, failed = run_ukjax(system, q0, args.batch, args.steps)
        mj_rate, mj_violation = run_mujoco(xml, qpos, ctrl, args.batch, args.steps, violation)
        rows = [("ukjax", uk_rate, uk_violation), ("mujoco", mj_rate, mj_violation)]
        if args.mjx_batch:
            mjx = peer(name, "mjx", run_mjx, xml, qpos, ctrl, args.mjx_batch, args.steps, violation)
            rows += [] if mjx is None else [("mjx", *mjx)]
        for simulator, rate, v in rows:
            print(f"{name:30s} {simulator:8s} {rate / 1e6:10.3f} {rate / mj_rate:7.2f} {v:10.1e}")
        outcome = ", ".join(f"{n} {k}" for n, k in failed.items()) or "all SUCCESS"
        print(f"{'':30s} (ukjax compile {compile_s:.1f} s; members not finished: {outcome})")
        failures.update({f"{name}: {n}": k for n, k in failed.items()})
        results.append((name, uk_rate / mj_rate, uk_violation, mj_violation))
        drawn.append((name, rows))
    print(summary(results, failures))
    if args.plot:
        plot(drawn, f"{CORES} CPU cores, batch {args.batch}, {args.steps} RK4 steps of {DT:g} s, float64", args.plot)


def plot(cases: list[tuple[str, list[tuple[str, float, float]]]], title: str, path: Path) -> None:
    """Each case's throughput and loop-closure violation, one bar per simulator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    simulators = list(dict.fromkeys(simulator for _, rows in cases for simulator, *_ in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(simulators)
    for column, (ax, label) in enumerate(zip(axes, ("M steps/s", "largest loop-closure violation (m)"))):
        for i, simulator in enumerate(simulators):
            values = [next((row[1 + column] for row in rows if row[0] == simulator), np.nan) for _, rows in cases]
            scale = 1e-6 if column == 0 else 1.0
            ax.bar(np.arange(len(cases)) + i * width, np.asarray(values) * scale, width, label=simulator)
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.set_xticks(np.arange(len(cases)) + width * (len(simulators) - 1) / 2)
        labels = [textwrap.fill(name.replace(", one MJCF file", " (MJCF)"), 12) for name, _ in cases]
        ax.set_xticklabels(labels, fontsize=7)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def peer(case: str, simulator: str, run, *args):
    """`run(*args)`, or None with a line that says why the peer could not run the case."""
    try:
        return run(*args)
    except ImportError as error:
        print(f"{case:30s} ({simulator} left out: {error}; pip install -e '.[bench]')")
    except Exception as error:  # noqa: BLE001 (the peer's own failure leaves the comparison standing)
        reason = (str(error).strip().splitlines() or [""])[0][:160]
        print(f"{case:30s} ({simulator} left out: it failed on this model, {type(error).__name__}: {reason})")
    return None


def summary(results: list[tuple[str, float, float, float]], failures: dict[str, int]) -> str:
    """The last line from `(case, ratio, ukjax's violation, MuJoCo's violation)` per case:
    the smallest ratio and its case, and both violations from one case, the one where ukjax's
    loops open most."""
    slowest = min(results, key=lambda r: r[1])
    worst = max(results, key=lambda r: (r[2], r[3]))
    return (
        f"throughput ratio ukjax/mujoco {slowest[1]:.2f} ({slowest[0]}) violation ukjax {worst[2]:.1e} "
        f"mujoco {worst[3]:.1e} ({worst[0]}) ukjax failed members {sum(failures.values())}"
        + "".join(f" ({n} {k})" for n, k in failures.items())
    )
