"""Cassie standing, exact contacts (ukjax) against soft (MuJoCo), on one scene.

`../shared/robots/cassie.xml` (MuJoCo Menagerie, meshes and geoms stripped) with a floor and
two spheres per foot (toe and heel, 1 cm radius) placed so that all four touch the floor at
`home` (the file's `home` with its leg loops closed: `scene`); its joint ranges as limits; a
PD law on its ten motors holding `home`, the feet's targets leaning against the pelvis's
forward drift (the ankle strategy: `law`), clamped to `ctrlrange` as MuJoCo clamps it. Both
simulators run from `home` at rest. Columns: how far the run got, the pelvis's height at the
end and its largest displacement, the largest penetration of the floor, the largest
loop-closure error, how far any joint passes its range, and the wall time.

    python benchmarks/cassie_standing.py [--t1 2] [--gif cassie_standing.gif]

Measured 2026-11-25 (2 cores), `--t1 2`: MuJoCo's Cassie stands (its pelvis settles 4 cm lower,
on the leg springs, 7 cm from where it started at most), its feet 5.2 mm into the floor, its
loops open by 3.3 mm, its feet creeping 2.4 mm. ukjax's run stops at 0.164 s,
CONTACT_UNRESOLVED after 67 events (an event the root finder could not locate), with its loops
closed to 6e-14, no joint past its range and no penetration (1e-12 m), in 57 s: its rigid feet
rock from heels to toes ever faster (the ankle torque asks for a centre of pressure outside the
foot; MuJoCo's soft floor absorbs the same rocking), an accumulation of lift-offs and landings
that the impacts' Zeno truncation does not end, because the lift-offs are smooth ones at the
acceleration level. Without the ankle strategy (joint PD only), MuJoCo's Cassie falls forward
within 2 s. Standing in ukjax needs a controller that keeps each foot's centre of pressure
inside it, or an accumulation rule for lift-offs as well as for impacts.
"""

import argparse
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402

CASSIE = Path(__file__).resolve().parent.parent.parent / "shared" / "robots" / "cassie.xml"
RADIUS, TOE, HEEL, MU = 0.01, 0.09, -0.05, 1.0
KP, KD = 1000.0, 30.0  # N m/rad and N m s/rad at the joints
# The ankle strategy: the feet's targets lean against the pelvis's forward drift (rad/m and
# rad s/m). Without it MuJoCo's Cassie stands for half a second, then falls forward.
KX, KV = -10.0, -2.0


def scene() -> str:
    """Cassie with a floor and toe and heel spheres touching it at `home`, as MJCF. The file's
    `home` opens the leg loops by 2 mm; here it is the configuration ukjax projects it to,
    loops closed, so that both simulators start from the same state with all four spheres
    on the floor."""
    spec = mujoco.MjSpec.from_file(str(CASSIE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the projection's, which is the point here
        spec.key("home").qpos = np.asarray(ukjax.models.from_mjcf(str(CASSIE), keyframe="home").q0)
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
    """The motors' joints (their `qpos` and `qvel` addresses), gears, targets, and a mask of the
    feet's motors."""
    joints = model_mj.actuator_trnid[:, 0]
    qadr, dadr = model_mj.jnt_qposadr[joints], model_mj.jnt_dofadr[joints]
    gear = model_mj.actuator_gear[:, 0]
    feet = np.array([model_mj.joint(j).name.endswith("foot") for j in joints], float)
    return qadr, dadr, gear, home[qadr], feet


def law(target, feet, gear, q, qd, x, xd):
    """`ctrl` from the motors' joint positions and rates `q`, `qd` and the pelvis's forward
    displacement `x` and speed `xd` (numpy or jax arrays alike)."""
    return (KP * (target + feet * (KX * x + KV * xd) - q) - KD * qd) / gear


def run_ukjax(xml, t1, gif):
    model = ukjax.models.from_mjcf(xml, keyframe="home")
    mj = mujoco.MjModel.from_xml_string(xml)
    qadr, dadr, gear, target, feet_mask = pd(mj, mj.key_qpos[mj.key("home").id])
    tree = model.system
    # ukjax's q follows MuJoCo's qpos; its q̇ is the rate of q (quaternion rates): the joints'
    # rates sit at the same places as their positions
    index = jnp.asarray(qadr)

    def control(t, q, qd):
        return law(target, feet_mask, gear, q[index], qd[index], q[0] - model.q0[0], qd[0])

    system = ukjax.ConstrainedSystem(model.controlled(control), model.constraints + model.unilateral)
    ts = jnp.linspace(0.0, t1, 101)
    start = time.perf_counter()
    sol = ukjax.simulate(system, model.q0, model.qd0, 0.0, t1, ts=ts, throw=False)
    jax.block_until_ready(sol.q)
    wall = time.perf_counter() - start
    # the saves the run reached (a run that stops early leaves the rest non-finite)
    reached = np.all(np.isfinite(np.asarray(sol.q)), axis=1)
    q = np.asarray(sol.q)[reached]
    limits = model.unilateral[0]
    lower, upper = np.asarray(limits.lower), np.asarray(limits.upper)
    joints = np.array([tree.joint_index(n) for n in limits.joints])
    past = float(np.max(np.maximum(lower - q[:, joints], q[:, joints] - upper)))
    loops = len(model.constraints) * 3
    feet = np.asarray(sol.contacts.gap)[reached, len(limits.joints) * 2 :]
    if gif:
        ukjax.animate(system, sol.ts[reached], q, gif)
    return dict(
        status=ukjax.Status(int(sol.status)).name,
        drift=float(np.max(np.linalg.norm(q[:, :3] - q[:1, :3], axis=1))),
        height=float(q[-1, 2]),
        reached=float(np.asarray(sol.ts)[reached][-1]),
        penetration=float(sol.contacts.penetration),
        loops=float(np.max(np.abs(np.asarray(sol.phi)[reached, :loops]))),
        past=max(past, 0.0),
        wall=wall,
        events=int(sol.contacts.events),
        touching=int(np.sum(feet[-1] <= 1e-9)),
    )


def run_mujoco(xml, t1):
    mj = mujoco.MjModel.from_xml_string(xml)
    mj.opt.timestep = 1e-4
    data = mujoco.MjData(mj)
    mujoco.mj_resetDataKeyframe(mj, data, mj.key("home").id)
    qadr, dadr, gear, target, feet_mask = pd(mj, data.qpos.copy())
    feet = [mj.geom(f"{s}-{n}").id for s in ("left", "right") for n in ("toe", "heel")]
    mujoco.mj_forward(mj, data)
    start_feet = data.geom_xpos[feet].copy()
    pelvis = data.qpos[:3].copy()
    penetration = creep = loops = past = drift = 0.0
    limited = np.flatnonzero(mj.jnt_limited & (mj.jnt_type == mujoco.mjtJoint.mjJNT_HINGE))
    start = time.perf_counter()
    for _ in range(round(t1 / mj.opt.timestep)):
        data.ctrl[:] = law(target, feet_mask, gear, data.qpos[qadr], data.qvel[dadr], data.qpos[0] - pelvis[0], data.qvel[0])
        mujoco.mj_step(mj, data)
        penetration = max(penetration, -data.contact.dist.min(initial=0))
        creep = max(creep, np.abs(data.geom_xpos[feet][:, :2] - start_feet[:, :2]).max())
        eq = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        loops = max(loops, np.abs(data.efc_pos[eq]).max(initial=0))
        q = data.qpos[mj.jnt_qposadr[limited]]
        past = max(past, np.max(np.maximum(mj.jnt_range[limited, 0] - q, q - mj.jnt_range[limited, 1])))
        drift = max(drift, np.linalg.norm(data.qpos[:3] - pelvis))
    wall = time.perf_counter() - start
    return dict(
        drift=drift, height=float(data.qpos[2]), reached=t1, penetration=penetration, creep=creep, loops=loops,
        past=max(past, 0.0), wall=wall,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--t1", type=float, default=2.0)
    parser.add_argument("--gif", default=None)
    args = parser.parse_args()
    xml = scene()
    uk = run_ukjax(xml, args.t1, args.gif)
    mj = run_mujoco(xml, args.t1)
    print(f"Cassie standing from home, {args.t1:g} s; ukjax status {uk['status']}, {uk['events']} events, "
          f"{uk['touching']} of 4 foot spheres on the floor at the last save reached")
    print(f"{'':28s} {'reached s':>9s} {'pelvis z':>8s} {'pelvis drift':>12s} {'penetration':>11s} {'loop error':>10s} "
          f"{'past limit':>10s} {'wall s':>7s}")
    for name, r in (("ukjax (exact)", uk), ("MuJoCo (0.1 ms, defaults)", mj)):
        print(f"{name:28s} {r['reached']:9.3f} {r['height']:8.3f} {r['drift']:12.2e} {r['penetration']:11.1e} "
              f"{r['loops']:10.1e} {r['past']:10.1e} {r['wall']:7.1f}")
    print(f"MuJoCo's feet crept by up to {mj['creep']:.1e} m")


if __name__ == "__main__":
    main()
