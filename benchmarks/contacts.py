"""Contacts and joint limits, exact (ukjax) against soft (MuJoCo), on one file:
`ukjax/examples/contacts.xml` (a pendulum released onto its joint limit, a sphere and a box
launched along a floor, a rod standing on its end), every member of a batch launched at its
own speed.

For each simulator, the same run: 1 s of every member, MuJoCo at a 0.1 ms step with its
default `solref` (0.02 s) and with a tight one (0.002 s). Columns: the largest penetration
of the floor, how far the pendulum passes its limit, how far the rod creeps (it should stand
still), how far the sphere and box end from the closed forms (sliding then rolling at 5/7 of
the launch speed; sliding to rest at v²/(2 μ g)), and throughput in simulated seconds per
wall-clock second for the whole batch (MuJoCo's: its C step, `rollout` on one thread, no
Python in its loop). ukjax's compile time is printed apart.

    python benchmarks/contacts.py [--batch 16]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.references import mujoco_c_rate  # noqa: E402
from ukjax.cli.bench import compiled_and_timed, mujoco_warp  # noqa: E402

G, MU, LIMIT, START = 9.81, 0.4, np.deg2rad(-30), np.deg2rad(75)
SCENE = ukjax.examples.path("contacts.xml")


def closed_forms(speeds):
    """The sphere's and the box's x after 1 s for each launch speed."""
    switch = 2 * speeds / (7 * MU * G)
    sphere = speeds * switch - 0.5 * MU * G * switch**2 + 5 / 7 * speeds * (1 - switch)
    return sphere, speeds**2 / (2 * MU * G)


def scene():
    """The scene as ukjax models it: its tree under its equality and unilateral constraints."""
    model = ukjax.models.from_mjcf(SCENE)
    return model, ukjax.ConstrainedSystem(model.system, model.constraints + model.unilateral)


def run_ukjax(speeds):
    model, system = scene()
    mj = mujoco.MjModel.from_xml_path(str(SCENE))
    starts = []
    for v in speeds:
        qpos, qvel = mj.qpos0.copy(), np.zeros(mj.nv)
        qpos[0], qvel[1], qvel[7] = START, v, v
        starts.append(model.state_from_mujoco(qpos, qvel))
    q0, qd0 = (jnp.stack(x) for x in zip(*starts))
    ts = jnp.linspace(0.0, 1.0, 101)
    sol, wall, compile_s = compiled_and_timed(lambda: ukjax.simulate_batch(system, q0, qd0, 0.0, 1.0, ts=ts))
    q = np.asarray(sol.q)
    return dict(
        penetration=float(np.max(sol.contacts.penetration)),
        past_limit=max(0.0, float(LIMIT - q[:, :, 0].min())),
        creep=float(np.max(np.abs(q[:, :, 15:18] - q[:, :1, 15:18]))),
        final=(q[:, -1, 1], q[:, -1, 8]),
        rate=len(speeds) / wall,
        compile=compile_s,
        events=int(np.max(sol.contacts.events)),
        success=bool(np.all(np.asarray(sol.success))),
    )


def run_mujoco(speeds, solref):
    mj = mujoco.MjModel.from_xml_path(str(SCENE))
    if solref is not None:
        mj.geom_solref[:] = solref
        mj.jnt_solref[:] = solref
    penetration, past, creep, finals, starts = 0.0, 0.0, 0.0, [], list(zip(*mujoco_starts(mj, speeds)))
    for qpos, qvel in starts:
        data = mujoco.MjData(mj)
        data.qpos[:], data.qvel[:] = qpos, qvel
        rod = data.qpos[15:18].copy()
        for _ in range(round(1.0 / mj.opt.timestep)):
            mujoco.mj_step(mj, data)
            penetration = max(penetration, -data.contact.dist.min(initial=0))
            past = max(past, LIMIT - data.qpos[0])
            creep = max(creep, np.abs(data.qpos[15:18] - rod).max())
        finals.append((data.qpos[1], data.qpos[8]))
    sphere, box = np.array(finals).T
    # the measurements above step in Python; the speed is the C step's, the same runs
    rate = mujoco_c_rate(mj, starts, 1.0)
    return dict(penetration=penetration, past_limit=past, creep=creep, final=(sphere, box), rate=rate)


def mujoco_starts(mj, speeds):
    """MuJoCo's `qpos` and `qvel` of every member, (batch, nq) and (batch, nv): the pendulum
    released from `START`, the sphere and the box launched at its speed."""
    qpos, qvel = np.tile(mj.qpos0, (len(speeds), 1)), np.zeros((len(speeds), mj.nv))
    qpos[:, 0], qvel[:, 1], qvel[:, 7] = START, speeds, speeds
    return qpos, qvel


def run_mujoco_warp(speeds):
    """MuJoCo Warp (float32) on the scene at its own 0.1 ms step with its default `solref`, 1 s
    of every member, the batch as its worlds (`ukjax.cli.bench.mujoco_warp`): the largest
    penetration of the floor over the run, the sphere's and the box's x at its end, the batch's
    simulated seconds per wall-clock second and its compile time."""
    mj = mujoco.MjModel.from_xml_path(str(SCENE))

    def penetration(d):
        touching = d.contact.dist.numpy()[: int(d.nacon.numpy()[0])]
        return max(0.0, -float(touching.min(initial=0)))

    steps = round(1.0 / mj.opt.timestep)
    wall, compile_s, penetrations, final = mujoco_warp(mj, *mujoco_starts(mj, speeds), np.zeros(0), steps, penetration)
    return dict(penetration=max(penetrations), final=(final[:, 1], final[:, 8]), rate=len(speeds) / wall, compile=compile_s)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    speeds = np.linspace(0.5, 1.5, args.batch)
    exact = closed_forms(speeds)
    rows = [("ukjax (exact, Tsit5 rtol = atol = 1e-8)", run_ukjax(speeds))]
    rows.append(("MuJoCo, solref 0.02 (default), 0.1 ms", run_mujoco(speeds, None)))
    rows.append(("MuJoCo, solref 0.002, 0.1 ms", run_mujoco(speeds, (0.002, 1.0))))
    print(f"batch {args.batch}, 1 s each; distances in m (limit in rad)")
    print(f"{'':42s} {'penetration':>11s} {'past limit':>10s} {'rod creep':>10s} {'sphere err':>10s} {'box err':>10s} {'sim s / s':>10s}")
    for name, r in rows:
        errors = [np.max(np.abs(r["final"][i] - exact[i])) for i in range(2)]
        print(
            f"{name:42s} {r['penetration']:11.1e} {r['past_limit']:10.1e} {r['creep']:10.1e} "
            f"{errors[0]:10.1e} {errors[1]:10.1e} {r['rate']:10.2f}"
        )
    uk = rows[0][1]
    print(
        f"ukjax: compile {uk['compile']:.1f} s, at most {uk['events']} events a member, all SUCCESS: {uk['success']}; "
        f"throughput ratio ukjax / MuJoCo's C step (default solref) {uk['rate'] / rows[1][1]['rate']:.2f}"
    )


if __name__ == "__main__":
    main()
