"""A quadruped under its servos by time-stepping, against MuJoCo at the same step.

MuJoCo Menagerie's Go1 (tests/data/go1.xml, meshes left out) at its `home` keyframe's controls,
with its joint limits and the floor (its self-collision pairs left out, as in
`self_collisions.py`), a batch of members dropped from 0 to `--drop` m above `home` (member 0
stands), `--t1` s each: ukjax's time-stepping route at the file's 2 ms (`ukjax.TimeStepping`,
its default implicit forces: the servos' velocity gains and the joints' damping) against
MuJoCo's C step (`rollout`, one thread, its own soft contacts at its defaults) on the same
starts. Printed: the statuses, the largest penetration, the trunk's height at the end (ukjax's
starts from `home` projected out of the floor, which `home` puts the feet 1.9 cm into), the
compile time, the run's wall time (median of `--runs`, with their range) and the throughput
ratio against MuJoCo's in the same run.

    python benchmarks/quadruped.py [--batch 64] [--t1 5] [--drop 0.15] [--runs 3]
"""

import argparse
import statistics
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.references import mujoco_c_rate  # noqa: E402

FILE = Path(__file__).parents[1] / "tests" / "data" / "go1.xml"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--t1", type=float, default=5.0)
    parser.add_argument("--drop", type=float, default=0.15)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what ukjax leaves out of the file: said in the tests
        model = ukjax.models.from_mjcf(FILE, keyframe="home")
    ctrl = jnp.asarray(model.ctrl)
    system = ukjax.ConstrainedSystem(model.controlled(lambda t, q, qd: ctrl), model.constraints + model.unilateral[:2])
    drops = np.linspace(0.0, args.drop, args.batch)
    q0 = jnp.stack([model.q0.at[2].add(d) for d in drops])
    qd0 = jnp.zeros_like(q0)
    ts = jnp.linspace(0.0, args.t1, 11)

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the start inside the floor, warned of in the tests
            return ukjax.simulate_batch(
                system, q0, qd0, 0.0, args.t1, ts=ts, solver=ukjax.TimeStepping(), dt0=model.timestep
            )

    start = time.perf_counter()
    sol = jax.block_until_ready(run())
    first = time.perf_counter() - start
    walls = []
    for _ in range(args.runs):
        start = time.perf_counter()
        sol = jax.block_until_ready(run())
        walls.append(time.perf_counter() - start)
    wall = statistics.median(walls)

    mj = mujoco.MjModel.from_xml_path(str(FILE))
    starts = []
    for d in drops:
        qpos = mj.key_qpos[0].copy()
        qpos[2] += d
        starts.append((qpos, np.zeros(mj.nv)))
    baseline = mujoco_c_rate(mj, starts, args.t1, ctrl=mj.key_ctrl[0])
    data = mujoco.MjData(mj)
    heights, deepest = [], 0.0
    for qpos, qvel in starts:
        mujoco.mj_resetData(mj, data)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, mj.key_ctrl[0]
        for _ in range(round(args.t1 / mj.opt.timestep)):
            mujoco.mj_step(mj, data)
            deepest = max(deepest, -data.contact.dist.min(initial=0))
        heights.append(data.qpos[2])

    statuses = sorted({ukjax.Status(int(s)).name for s in np.asarray(sol.status)})
    z = np.asarray(sol.q[:, -1, 2])
    rate = args.batch * args.t1 / wall
    print(
        f"Go1 under its servos, {args.batch} members dropped from 0-{args.drop:g} m, {args.t1:g} s each, "
        f"at the file's {model.timestep * 1e3:g} ms"
    )
    print(f"{'':30s} {'penetration m':>13s} {'trunk z m (min-max)':>20s} {'sim s / s':>10s}")
    print(f"{'ukjax (time-stepping)':30s} {float(jnp.max(sol.contacts.penetration)):13.1e} "
          f"{z.min():9.4f}-{z.max():.4f} {rate:10.2f}")
    print(f"{'MuJoCo (C step, defaults)':30s} {deepest:13.1e} {min(heights):9.4f}-{max(heights):.4f} {baseline:10.2f}")
    print(
        f"ukjax: statuses {', '.join(statuses)}, compile {first - wall:.1f} s, run {wall:.2f} s "
        f"({min(walls):.2f}-{max(walls):.2f}, {args.runs} runs); throughput ratio ukjax / MuJoCo's C step "
        f"{rate / baseline:.3f}"
    )


if __name__ == "__main__":
    main()
