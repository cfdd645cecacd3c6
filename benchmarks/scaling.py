"""How ukjax's batch simulation scales: with the batch size, with the size of the mechanism,
with the number of devices; compile time and memory per trajectory beside each.

    python benchmarks/scaling.py [--max-batch 100000] [--max-links 60] [--steps 100]
                                 [--plot docs/assets/scaling.png]

1. Batch: the servo-control paper's coordinated robots (n = 5, p = 2, passive under gravity), RK4 at 1 ms,
   `steps` steps, `simulate_batch` on every core, batch 1, 10, …, `max-batch`.
2. Size: a closed loop of k equal links (a `PlanarChain` hinged at the origin whose tip is
   pinned: n = k, p = 2), batch 256, k = 2 … `max-links`; per-evaluation time of the
   whole U-K acceleration beside the throughput (k > 8 takes the loop kernels).
3. Devices: the coordinated robots at the largest batch on one device against all of them.

Throughput is simulated steps per second (batch × steps / wall time) after compilation, same
run; compile time is the first call's extra time; memory per trajectory is XLA's own account
of the compiled simulation (arguments + outputs + temporaries) divided by the batch. `--plot`
draws parts 1 and 2 (the docs' Performance page shows that drawing).
"""

import argparse
import os
import time
from pathlib import Path

CORES = os.cpu_count() or 1
os.environ.setdefault("JAX_NUM_CPU_DEVICES", str(CORES))

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402
from ukjax.cli.bench import compiled_and_timed  # noqa: E402

DT = 1e-3


def loop(k: int):
    """A k-link planar chain hinged at the origin, its tip pinned where a zigzag start puts it."""
    chain = models.PlanarChain(np.ones(k), np.ones(k), 0.5 * np.ones(k), np.full(k, 1 / 12), absolute=True)
    q0 = jnp.asarray(np.where(np.arange(k) % 2 == 0, 0.6, -0.6))
    pin = models.PointConstraint(chain, models.JointPoint(k), chain.joint_positions(q0)[k])
    return ukjax.ConstrainedSystem(chain, pin), q0


def measure(system, q0, batch, steps, devices=None):
    q0 = jnp.broadcast_to(q0, (batch, q0.shape[0]))
    qd0 = jnp.zeros_like(q0)
    run = dict(solver=ukjax.RK4(), adaptive=False, dt0=DT, max_steps=steps, ts=jnp.array([steps * DT]))

    sol, elapsed, compile_s = compiled_and_timed(
        lambda: ukjax.simulate_batch(system, q0, qd0, 0.0, steps * DT, devices=devices, **run)
    )
    ok = int(jnp.sum(sol.status == ukjax.Status.SUCCESS))
    violation = float(jnp.max(jnp.abs(sol.phi)))
    return batch * steps / elapsed, compile_s, ok, violation


def memory_per_trajectory(system, q0, batch, steps):
    q0 = jnp.broadcast_to(q0, (batch, q0.shape[0]))
    run = dict(solver=ukjax.RK4(), adaptive=False, dt0=DT, max_steps=steps, ts=jnp.array([steps * DT]))
    arrays, static = eqx.partition(system, eqx.is_array)

    def simulate(arrays, q, qd):
        return ukjax.simulate(eqx.combine(arrays, static), q, qd, 0.0, steps * DT, **run)

    fn = jax.jit(jax.vmap(simulate, in_axes=(None, 0, 0)))
    stats = fn.lower(arrays, q0, jnp.zeros_like(q0)).compile().memory_analysis()
    if stats is None:
        return float("nan")
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes) / batch


def evaluation_time(system, q0, batch=2048):
    q = jnp.broadcast_to(q0, (batch, q0.shape[0])) + 1e-3
    fn = eqx.filter_jit(eqx.filter_vmap(lambda q: system.acceleration(0.0, q, jnp.zeros_like(q))))
    jax.block_until_ready(fn(q))
    start = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(fn(q))
    return (time.perf_counter() - start) / 10 / batch


def plot(batches, sizes, title, path):
    """Throughput against the batch, and the time of one acceleration against the mechanism's
    size with the slopes of n² and n³ beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    batch, rate = np.array(batches).T
    left.loglog(batch, rate / 1e6, "o-")
    left.set(xlabel="members in the batch", ylabel="M steps/s", title="coordinated robots [3], RK4 at 1 ms")
    n, micro = np.array(sizes).T
    right.loglog(n, micro, "o-", label="ukjax")
    for power, style in ((2, ":"), (3, "--")):
        right.loglog(n, micro[-1] * (n / n[-1]) ** power, "k" + style, lw=0.8, label=f"∝ n{'²' if power == 2 else '³'}")
    right.set(xlabel="coordinates n (k-link closed loop)", ylabel="µs per acceleration per member", title="batch 2048")
    right.set_xticks(n, [f"{k:.0f}" for k in n])
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    right.legend()
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-batch", type=int, default=100_000)
    parser.add_argument("--max-links", type=int, default=60)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--plot", type=Path, default=None, help="draw parts 1 and 2 into this file")
    args = parser.parse_args()
    batches, sizes = [], []
    print(
        f"{CORES} CPU cores; jax {jax.__version__}, {len(jax.devices())} {jax.default_backend()} devices; "
        f"float64; RK4 {DT} s, {args.steps} steps"
    )

    robots = models.coordinated_robots()
    coordinated = ukjax.ConstrainedSystem(robots.system, robots.constraints)
    print("\n1. batch size (coordinated robots, all devices)")
    print(
        f"{'batch':>8s} {'M steps/s':>10s} {'compile s':>10s} {'bytes/traj':>11s} {'ok':>8s} {'violation':>10s}"
    )
    batch = 1
    while batch <= args.max_batch:
        rate, compile_s, ok, violation = measure(coordinated, robots.q0, batch, args.steps)
        memory = memory_per_trajectory(coordinated, robots.q0, batch, args.steps)
        print(f"{batch:8d} {rate / 1e6:10.3f} {compile_s:10.1f} {memory:11.0f} {ok:8d} {violation:10.1e}")
        batches.append((batch, rate))
        batch *= 10

    print("\n2. mechanism size (k-link closed loop, batch 256)")
    print(f"{'n':>4s} {'M steps/s':>10s} {'compile s':>10s} {'µs/eval':>9s} {'violation':>10s}")
    for k in [k for k in (2, 4, 6, 8, 12, 16, 24, 32, 48, 60) if k <= args.max_links]:
        system, q0 = loop(k)
        rate, compile_s, ok, violation = measure(system, q0, 256, args.steps)
        sizes.append((k, evaluation_time(system, q0) * 1e6))
        print(f"{k:4d} {rate / 1e6:10.4f} {compile_s:10.1f} {sizes[-1][1]:9.2f} {violation:10.1e}")

    biggest = 10 ** int(np.log10(args.max_batch))
    print(f"\n3. devices (coordinated robots, batch {biggest})")
    one = measure(coordinated, robots.q0, biggest, args.steps, devices=jax.devices()[:1])[0]
    every = measure(coordinated, robots.q0, biggest, args.steps)[0]
    print(
        f"1 device {one / 1e6:.3f} M steps/s, {len(jax.devices())} devices {every / 1e6:.3f} M steps/s: {every / one:.2f}x"
    )
    if args.plot:
        plot(batches, sizes, f"{CORES} CPU cores, jax {jax.__version__}, float64", args.plot)


if __name__ == "__main__":
    main()
