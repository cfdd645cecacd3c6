"""Cassie standing, exact contacts (ukjax) against soft (MuJoCo), on one scene.

`../shared/robots/cassie.xml` (MuJoCo Menagerie, meshes and geoms stripped) with a floor and
two spheres per foot (toe and heel, 1 cm radius) placed so that all four touch the floor at
the `home` keyframe; its joint ranges as limits; a PD law on its ten motors holding `home`
(`ctrl = (kp (q* − q) − kd q̇) / gear`, clamped to `ctrlrange` as MuJoCo clamps it). Both
simulators run 2 s from `home` at rest. Columns: the pelvis's drift (how far it moves), the
largest penetration of the floor, the feet's creep (how far the contact spheres slide), the
largest loop-closure error, how far any joint passes its range, and the wall time.

    python benchmarks/cassie_standing.py [--t1 0.2] [--gif cassie_standing.gif]

Measured 2026-11-25 (2 cores), 0.2 s: Cassie does not stand under this PD law in either
simulator (the pelvis sinks 8.6 cm in ukjax, 9.4 cm in MuJoCo); ukjax's run ends in SUCCESS
with its loops closed to 4e-13, no joint past its range and no penetration (1e-12 m), its feet
going through 18 events (stick, slip, lift-off, impact) in 0.2 s, in 116 s (37 s compiling;
another job shared the cores),
where MuJoCo's loops open by 2.5e-3 m and its feet creep 3 mm. (A first run, before the event
fixes of the same day, took 142 events and 6 minutes.) Standing needs a balancing
controller and a faster event loop: the default horizon is 0.2 s until it has them.
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402

CASSIE = Path(__file__).resolve().parent.parent.parent / "shared" / "robots" / "cassie.xml"
RADIUS, TOE, HEEL, MU = 0.01, 0.09, -0.05, 1.0
KP, KD = 300.0, 10.0  # N m/rad and N m s/rad at the joints


def scene() -> str:
    """Cassie with a floor and toe and heel spheres touching it at `home`, as MJCF."""
    spec = mujoco.MjSpec.from_file(str(CASSIE))
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    mujoco.mj_kinematics(model, data)
    points = {}
    for side in ("left", "right"):
        foot = model.body(f"{side}-foot").id
        R, x = data.xmat[foot].reshape(3, 3), data.xpos[foot]
        # the foot's own axis closest to the world's forward direction
        axis = R[:, np.argmax(np.abs(R[0]))] * np.sign(R[0, np.argmax(np.abs(R[0]))])
        points[side] = [x + TOE * axis, x + HEEL * axis]
    floor = min(p[2] for ps in points.values() for p in ps) - 0.02
    for side, ps in points.items():
        foot = model.body(f"{side}-foot").id
        R, x = data.xmat[foot].reshape(3, 3), data.xpos[foot]
        body = spec.body(f"{side}-foot")
        for name, p in zip(("toe", "heel"), ps):
            p = np.array([p[0], p[1], floor + RADIUS])
            body.add_geom(
                name=f"{side}-{name}", type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[RADIUS, 0, 0],
                pos=R.T @ (p - x), friction=[MU, 0.005, 0.0001], mass=0, contype=2, conaffinity=1,
            )
    # the feet touch the floor, not each other
    spec.worldbody.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[5, 5, 0.1], pos=[0, 0, floor],
        friction=[MU, 0.005, 0.0001], contype=1, conaffinity=2,
    )
    return spec.to_xml()


def pd(model_mj, home):
    """The PD law on the motors, as MuJoCo `ctrl` from joint positions and velocities."""
    joints = model_mj.actuator_trnid[:, 0]
    qadr, dadr = model_mj.jnt_qposadr[joints], model_mj.jnt_dofadr[joints]
    gear = model_mj.actuator_gear[:, 0]
    return qadr, dadr, gear, home[qadr]


def run_ukjax(xml, t1, gif):
    model = ukjax.models.from_mjcf(xml, keyframe="home")
    mj = mujoco.MjModel.from_xml_string(xml)
    qadr, dadr, gear, target = pd(mj, mj.key_qpos[mj.key("home").id])
    tree = model.system
    # ukjax's q follows MuJoCo's qpos; its q̇ is the rate of q (quaternion rates): the joints'
    # rates sit at the same places as their positions
    index = jnp.asarray(qadr)

    def control(t, q, qd):
        return (KP * (target - q[index]) - KD * qd[index]) / gear

    system = ukjax.ConstrainedSystem(model.controlled(control), model.constraints + model.unilateral)
    ts = jnp.linspace(0.0, t1, 101)
    start = time.perf_counter()
    sol = ukjax.simulate(system, model.q0, model.qd0, 0.0, t1, ts=ts, throw=False)
    jax.block_until_ready(sol.q)
    wall = time.perf_counter() - start
    q = np.asarray(sol.q)
    limits = model.unilateral[0]
    lower, upper = np.asarray(limits.lower), np.asarray(limits.upper)
    joints = np.array([tree.joint_index(n) for n in limits.joints])
    past = float(np.max(np.maximum(lower - q[:, joints], q[:, joints] - upper)))
    loops = len(model.constraints) * 3
    contacts = model.unilateral[1]
    feet = np.asarray(sol.contacts.gap[:, len(limits.joints) * 2 :])
    if gif:
        ukjax.animate(system, sol.ts, sol.q, gif)
    return dict(
        status=ukjax.Status(int(sol.status)).name,
        drift=float(np.max(np.linalg.norm(q[:, :3] - q[:1, :3], axis=1))),
        penetration=float(sol.contacts.penetration),
        creep=float(np.max(np.abs(np.asarray(sol.contacts.mode[:, len(limits.joints) * 2 :]) != 2))),
        loops=float(np.max(np.abs(np.asarray(sol.phi[:, :loops])))),
        past=max(past, 0.0),
        wall=wall,
        events=int(sol.contacts.events),
        touching=int(np.sum(feet[-1] <= 1e-9)),
        names=contacts.names,
    )


def run_mujoco(xml, t1):
    mj = mujoco.MjModel.from_xml_string(xml)
    mj.opt.timestep = 1e-4
    data = mujoco.MjData(mj)
    mujoco.mj_resetDataKeyframe(mj, data, mj.key("home").id)
    qadr, dadr, gear, target = pd(mj, data.qpos.copy())
    feet = [mj.geom(f"{s}-{n}").id for s in ("left", "right") for n in ("toe", "heel")]
    mujoco.mj_forward(mj, data)
    start_feet = data.geom_xpos[feet].copy()
    pelvis = data.qpos[:3].copy()
    penetration = creep = loops = past = drift = 0.0
    limited = np.flatnonzero(mj.jnt_limited & (mj.jnt_type == mujoco.mjtJoint.mjJNT_HINGE))
    start = time.perf_counter()
    for _ in range(round(t1 / mj.opt.timestep)):
        data.ctrl[:] = (KP * (target - data.qpos[qadr]) - KD * data.qvel[dadr]) / gear
        mujoco.mj_step(mj, data)
        penetration = max(penetration, -data.contact.dist.min(initial=0))
        creep = max(creep, np.abs(data.geom_xpos[feet][:, :2] - start_feet[:, :2]).max())
        eq = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        loops = max(loops, np.abs(data.efc_pos[eq]).max(initial=0))
        q = data.qpos[mj.jnt_qposadr[limited]]
        past = max(past, np.max(np.maximum(mj.jnt_range[limited, 0] - q, q - mj.jnt_range[limited, 1])))
        drift = max(drift, np.linalg.norm(data.qpos[:3] - pelvis))
    wall = time.perf_counter() - start
    return dict(drift=drift, penetration=penetration, creep=creep, loops=loops, past=max(past, 0.0), wall=wall)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--t1", type=float, default=0.2)
    parser.add_argument("--gif", default=None)
    args = parser.parse_args()
    xml = scene()
    uk = run_ukjax(xml, args.t1, args.gif)
    mj = run_mujoco(xml, args.t1)
    print(f"Cassie standing from home, {args.t1:g} s; ukjax status {uk['status']}, {uk['events']} events, "
          f"{uk['touching']} of 4 foot spheres on the floor at the end")
    print(f"{'':28s} {'pelvis drift':>12s} {'penetration':>11s} {'loop error':>10s} {'past limit':>10s} {'wall s':>7s}")
    for name, r in (("ukjax (exact)", uk), ("MuJoCo (0.1 ms, defaults)", mj)):
        print(f"{name:28s} {r['drift']:12.2e} {r['penetration']:11.1e} {r['loops']:10.1e} {r['past']:10.1e} {r['wall']:7.1f}")
    print(f"MuJoCo's feet crept by up to {mj['creep']:.1e} m; ukjax's stuck throughout: {uk['creep'] == 0}")


if __name__ == "__main__":
    main()
