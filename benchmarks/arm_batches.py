"""Small batches of arms under their servos: ukjax's `simulate_batch` against MuJoCo's C step
(`rollout`), both RK4 at 1 ms, per member.

Three arms: Menagerie's UR5e (`tests/data/ur5e.xml`: six joints under position servos),
Menagerie's Panda (`tests/data/panda.xml`: seven joints under affine servos, two fingers on
their upper limits coupled by a joint equality and driven through a tendon) and the two-link
`tests/data/servo_arm.xml`, from their keyframes with the arm's joints perturbed (the fingers
left on their equality), without limits and contacts (`full_system(unilateral=False)`;
MuJoCo's limits and contacts disabled, its soft equality kept), 1 s, for batches of 1, 16 and
256 members. ukjax runs over every core (one JAX device each),
MuJoCo's `rollout` on as many threads (one member runs on one). Each ratio is the median of
`--runs` timed samples of each, alternated (a sample: as many calls one after another as make
16 members, one call from 16 members on), with their range; the largest difference of the
two simulators' final joint angles says that they ran the same motion.

    python benchmarks/arm_batches.py [--batches 1 16 256] [--runs 5]
"""

import argparse
import os
import time
from pathlib import Path

import jax

CORES = os.cpu_count() or 1
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", CORES)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from mujoco import rollout  # noqa: E402

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402

DATA = Path(__file__).parents[1] / "tests" / "data"
# the file, its keyframe and how many of its first coordinates are perturbed (the arm's)
ARMS = (
    ("UR5e (Menagerie)", DATA / "ur5e.xml", "home", 6),
    ("Panda (Menagerie)", DATA / "panda.xml", "home", 7),
    ("two-link servo arm", DATA / "servo_arm.xml", "held", 2),
)
DT, STEPS = 1e-3, 1000


def waited(run, calls: int) -> float:
    """The time of `calls` calls of `run` one after another, each waited for."""
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(run())
    return time.perf_counter() - start


def arm(path: Path, key: str, joints: int, batch: int, runs: int, rng) -> tuple[list[float], float]:
    """The ratios of MuJoCo's time over ukjax's, one per run, and the largest difference of
    the final joint angles."""
    model = models.from_mjcf(path, keyframe=key)
    system = model.full_system(unilateral=False)
    q0 = np.tile(np.asarray(model.q0), (batch, 1))
    q0[:, :joints] += 0.1 * rng.standard_normal((batch, joints))

    def ours():
        return ukjax.simulate_batch(
            system,
            q0,
            np.zeros_like(q0),
            0.0,
            STEPS * DT,
            solver=ukjax.RK4(),
            adaptive=False,
            dt0=DT,
            max_steps=STEPS,
            ts=jnp.linspace(0.0, STEPS * DT, 11),
        )

    mjm = mujoco.MjModel.from_xml_path(str(path))
    mjm.opt.integrator, mjm.opt.timestep = mujoco.mjtIntegrator.mjINT_RK4, DT
    mjm.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_LIMIT | mujoco.mjtDisableBit.mjDSBL_CONTACT
    data = mujoco.MjData(mjm)
    mujoco.mj_resetDataKeyframe(mjm, data, mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_KEY, key))
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(mjm, spec))
    mujoco.mj_getState(mjm, data, state, spec)
    initial = np.tile(state, (batch, 1))
    initial[:, 1 : 1 + mjm.nq] = q0
    control = np.tile(data.ctrl, (batch, STEPS, 1))
    datas = [mujoco.MjData(mjm) for _ in range(min(CORES, batch))]

    def theirs():
        return rollout.rollout(mjm, datas, initial, control, nstep=STEPS)[0]

    solution, states = ours(), theirs()  # compiled, warmed
    assert np.all(np.asarray(solution.status) == ukjax.Status.SUCCESS)
    difference = float(np.max(np.abs(np.asarray(solution.q[:, -1]) - states[:, -1, 1 : 1 + mjm.nq])))
    ratios = []
    # a member's second takes some 10 ms, in which the machine's other work moves a single
    # call's time by a third: each sample times calls of at least 16 members' worth
    calls = max(1, 16 // batch)
    for _ in range(runs):
        mine = waited(ours, calls)
        other = waited(theirs, calls)
        ratios.append(other / mine)
    return ratios, difference


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256], help="members of each batch")
    parser.add_argument("--runs", type=int, default=5, help="timed calls of each simulator, alternated")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{CORES} cores; RK4 at {DT:g} s, {STEPS} steps; MuJoCo {mujoco.__version__}; float64")
    print(f"{'arm':22s} {'members':>7s} {'ukjax / MuJoCo, per member':>30s} {'|Δq| at 1 s':>12s}")
    for name, path, key, joints in ARMS:
        for batch in args.batches:
            ratios, difference = arm(path, key, joints, batch, args.runs, rng)
            spread = f"{np.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
            print(f"{name:22s} {batch:7d} {spread:>30s} {difference:12.1e}", flush=True)


if __name__ == "__main__":
    main()
