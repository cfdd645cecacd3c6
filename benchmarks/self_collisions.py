"""A quadruped's self-collision pairs: what they cost (the narrowed contact solve and the
broadphase), against the same robot with its floor alone and against MuJoCo's C step.

MuJoCo Menagerie's Go1 (tests/data/go1.xml, meshes left out) dropped 5 cm under its servos at
its keyframe's controls onto the floor, 1 s, one run: ukjax with the floor and the joint
limits only, ukjax with the file's whole system (its 2 255 self-collision rows besides), and
MuJoCo's C step (`rollout`, one thread) at the file's 2 ms with its own contacts; ukjax by the
event-driven route, or with `--stepping H` by time-stepping at the step `H`. Each ukjax
time is the median of three runs after the compile, with their range; the ratios are taken
against MuJoCo measured in the same run. The trajectories of the two ukjax runs are compared
(none of the pairs comes near contact: they must agree to round-off).

    python benchmarks/self_collisions.py [--t1 1] [--stepping 0.002]
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


def systems():
    """The Go1 driven at its keyframe's controls: with its limits and floor, and whole."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what ukjax leaves out of the file: said in the tests
        model = ukjax.models.from_mjcf(FILE, keyframe="home")
    ctrl = jnp.asarray(model.ctrl)
    driven = model.controlled(lambda t, q, qd: ctrl)
    floor = ukjax.ConstrainedSystem(driven, model.constraints + model.unilateral[:2])
    return model, floor, model.full_system()


def timed(run, repeats=3):
    """The result, the compile (the first call's time beyond the median) and the median and
    range of `repeats` timed calls."""
    start = time.perf_counter()
    jax.block_until_ready(run())
    first = time.perf_counter() - start
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = jax.block_until_ready(run())
        walls.append(time.perf_counter() - start)
    median = statistics.median(walls)
    return result, first - median, median, (min(walls), max(walls))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--t1", type=float, default=1.0)
    parser.add_argument("--stepping", type=float, default=None, help="time-stepping at this step (s)")
    args = parser.parse_args()
    route = {} if args.stepping is None else dict(solver=ukjax.TimeStepping(), dt0=args.stepping)
    model, floor, full = systems()
    q0 = model.q0.at[2].add(0.05)
    ts = jnp.linspace(0.0, args.t1, 11)
    rows = {name: jax.eval_shape(s.contact_rows, 0.0, q0, model.qd0).normal.b.shape[0] for name, s in (("floor", floor), ("whole", full))}
    results = {}
    for name, system in (("floor", floor), ("whole", full)):
        results[name] = timed(lambda: ukjax.simulate(system, q0, model.qd0, 0.0, args.t1, ts=ts, throw=False, **route))
    mj = mujoco.MjModel.from_xml_path(str(FILE))
    qpos = mj.key_qpos[0].copy()
    qpos[2] += 0.05
    baseline = mujoco_c_rate(mj, [(qpos, np.zeros(mj.nv))], args.t1, ctrl=mj.key_ctrl[0])
    (alone, *_), (whole, *_) = results["floor"], results["whole"]
    agree = float(np.max(np.abs(np.asarray(alone.q) - np.asarray(whole.q))))
    how = "event-driven" if args.stepping is None else f"time-stepping at {args.stepping:g} s"
    print(f"Go1 dropped 5 cm under its servos, {args.t1:g} s, ukjax {how}; MuJoCo's C step at 2 ms: {baseline:.2f} sim s / s")
    print(f"{'':34s} {'rows':>6s} {'compile s':>9s} {'run s (median, range)':>24s} {'events':>6s} {'penetration':>11s} {'/ MuJoCo':>9s}")
    for name, label in (("floor", "ukjax, limits and floor"), ("whole", "ukjax, the whole file")):
        sol, compile_s, median, (low, high) = results[name]
        events = int(sol.contacts.events)
        status = ukjax.Status(int(sol.status)).name
        print(
            f"{label:34s} {rows[name]:6d} {compile_s:9.1f} {median:10.3f} ({low:.3f}-{high:.3f}) {events:6d} "
            f"{float(jnp.max(sol.contacts.penetration)):11.1e} {args.t1 / median / baseline:9.3f}  {status}"
        )
    print(f"the two ukjax runs' largest difference in q: {agree:.1e}")


if __name__ == "__main__":
    main()
