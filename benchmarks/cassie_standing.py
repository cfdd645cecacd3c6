"""Cassie standing, exact contacts (ukjax) against soft (MuJoCo), on one scene.

`../shared/robots/cassie.xml` (MuJoCo Menagerie, meshes and geoms stripped) with a floor and
two spheres per foot (toe and heel, 1 cm radius) placed so that all four touch the floor at
`home` (the file's `home` with its leg loops closed: `scene`); its joint ranges as limits; a
PD law on its ten motors holding `home`, the ankles on torque against the pelvis's forward
drift within what a foot bears, the hips' roll against its sideways drift (`law`). Both
simulators run from `home` at rest, ukjax with Tsit5 (its default) and with Bosh3 (rtol = atol
= 1e-8 both). Columns: how far the run got, the pelvis's height at the
end and its largest displacement, the largest penetration of the floor, the largest
loop-closure error, how far any joint passes its range, the compile time, the run's wall time
and the simulated seconds per second; then the throughput against MuJoCo's Python loop and
its C step.

    python benchmarks/cassie_standing.py [--t1 2] [--gif cassie_standing.gif] [--stepping 0.0005]

`--stepping H` runs ukjax by time-stepping at `H` (`ukjax.TimeStepping`, its default
implicit forces) in place of Tsit5 and Bosh3, and MuJoCo at the same step.

MuJoCo's C step is timed by `rollout` over the run's own states every 10 ms, the law's control
held over each (the law is Python); ukjax and the C step best of three. Its measured table:
benchmarks/README.md.
"""

import argparse
import time
import warnings
from pathlib import Path
from xml.etree import ElementTree

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402
from mujoco import rollout  # noqa: E402

import ukjax  # noqa: E402
from ukjax.cli.bench import compiled_and_timed  # noqa: E402

CASSIE = Path(__file__).resolve().parent.parent.parent / "shared" / "robots" / "cassie.xml"
RADIUS, TOE, HEEL, MU = 0.01, 0.09, -0.05, 1.0
SPHERES = [f"{side}-{end}" for side in ("left", "right") for end in ("toe", "heel")]
KP, KD = 1000.0, 30.0  # N m/rad and N m s/rad at the joints
# The ankles hold no position: a torque against the pelvis's forward drift (N m/m and N m s/m),
# bounded at half of what a foot loaded by half the robot's weight bears with its centre of
# pressure between its spheres (about 8 N m on the heel's side), and damping (N m s/rad). A
# position gain at the ankle, as at the other joints, turns the legs' sag on their springs into
# a torque that tips the feet onto their heels.
GX, GV, ANKLE, KD_FOOT = -1000.0, -300.0, 4.0, 1.0
# The hips' roll targets lean against its sideways drift (rad/m and rad s/m). Without it
# MuJoCo's Cassie falls sideways after 3 s.
HY, HV = 3.0, 0.3
# MuJoCo's C step is timed over segments of this many steps of the run (10 ms)
SEGMENT = 100


def scene() -> str:
    """Cassie with a floor and toe and heel spheres touching it at `home`, as MJCF. The file's
    `home` opens the leg loops by 2 mm; here it is the configuration ukjax projects it to,
    loops closed, so that both simulators start from the same state with all four spheres
    on the floor. The file's own text is kept and the additions are written in full
    precision: MuJoCo's writer rounds to six digits, which opens the loops by 0.5 µm and lifts
    the heels off the floor."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the projection's, which is the point here
        home = np.asarray(ukjax.models.from_mjcf(str(CASSIE), keyframe="home").q0)
    model = mujoco.MjModel.from_xml_path(str(CASSIE))
    data = mujoco.MjData(model)
    data.qpos[:] = home
    mujoco.mj_kinematics(model, data)
    full = lambda x: " ".join(repr(float(v)) for v in np.ravel(x))  # noqa: E731
    root = ElementTree.parse(CASSIE).getroot()
    root.find("keyframe/key[@name='home']").set("qpos", full(home))
    friction = full([MU, 0.005, 0.0001])
    points = {}
    for side in ("left", "right"):
        foot = model.body(f"{side}-foot").id
        R, x = data.xmat[foot].reshape(3, 3), data.xpos[foot]
        # the foot's own axis closest to the world's forward direction
        axis = R[:, np.argmax(np.abs(R[0]))] * np.sign(R[0, np.argmax(np.abs(R[0]))])
        points[side] = (R, x, [x + TOE * axis, x + HEEL * axis])
    floor = min(p[2] for _, _, ps in points.values() for p in ps) - 0.02
    for side, (R, x, ps) in points.items():
        body = root.find(f".//body[@name='{side}-foot']")
        for name, p in zip(("toe", "heel"), ps):
            p = np.array([p[0], p[1], floor + RADIUS])
            ElementTree.SubElement(
                body, "geom", name=f"{side}-{name}", type="sphere", size=repr(RADIUS), pos=full(R.T @ (p - x)),
                friction=friction, mass="0", contype="2", conaffinity="1",
            )
    # the feet touch the floor, not each other
    ElementTree.SubElement(
        root.find("worldbody"), "geom", name="floor", type="plane", size="5 5 0.1", pos=full([0, 0, floor]),
        friction=friction, contype="1", conaffinity="2",
    )
    return ElementTree.tostring(root, encoding="unicode")


def pd(model_mj, home):
    """The motors' joints (their `qpos` and `qvel` addresses), gears and targets, and masks of
    the feet's and the hips' roll motors."""
    joints = model_mj.actuator_trnid[:, 0]
    qadr, dadr = model_mj.jnt_qposadr[joints], model_mj.jnt_dofadr[joints]
    gear = model_mj.actuator_gear[:, 0]
    names = [model_mj.joint(j).name for j in joints]
    feet = np.array([n.endswith("foot") for n in names], float)
    roll = np.array([n.endswith("hip-roll") for n in names], float)
    return qadr, dadr, gear, home[qadr], feet, roll


def law(target, gear, feet, roll, q, qd, drift, speed, xp=np):
    """`ctrl` from the motors' joint positions and rates `q`, `qd` and the pelvis's
    displacement from `home` and velocity, forward and sideways (`drift`, `speed`, each
    `(x, y)`); `xp` is numpy, or jax.numpy where traced."""
    # the hips lean the legs against a sideways drift
    legs = KP * (target + roll * (HY * drift[1] + HV * speed[1]) - q) - KD * qd
    # the ankles push against a forward one, with a torque the feet can bear
    ankles = xp.clip(GX * drift[0] + GV * speed[0], -ANKLE, ANKLE) - KD_FOOT * qd
    return xp.where(feet > 0, ankles, legs) / gear


def run_ukjax(xml, t1, gif, solver, dt0=None):
    model = ukjax.models.from_mjcf(xml, keyframe="home")
    mj = mujoco.MjModel.from_xml_string(xml)
    qadr, dadr, gear, target, feet, roll = pd(mj, mj.key_qpos[mj.key("home").id])
    tree = model.system
    # ukjax's q follows MuJoCo's qpos; its q̇ is the rate of q (quaternion rates): the joints'
    # rates sit at the same places as their positions
    index = jnp.asarray(qadr)

    def control(t, q, qd):
        return law(target, gear, feet, roll, q[index], qd[index], q[:2] - model.q0[:2], qd[:2], jnp)

    system = ukjax.ConstrainedSystem(model.controlled(control), model.constraints + model.unilateral)
    # saves from linspace, whose end is the horizon exactly (a save past t1 is never reached)
    sol, wall, compile_time = compiled_and_timed(
        lambda: ukjax.simulate(
            system, model.q0, model.qd0, 0.0, t1, ts=jnp.linspace(0.0, t1, 101), solver=solver, throw=False,
            **({} if dt0 is None else dict(dt0=dt0, max_steps=round(t1 / dt0) + 10)),
        )
    )
    # the saves the run reached (a run that stops early leaves the rest non-finite)
    reached = np.all(np.isfinite(np.asarray(sol.q)), axis=1)
    q = np.asarray(sol.q)[reached]
    limits = model.unilateral[0]
    lower, upper = np.asarray(limits.lower), np.asarray(limits.upper)
    joints = np.array([tree.joint_index(n) for n in limits.joints])
    past = float(np.max(np.maximum(lower - q[:, joints], q[:, joints] - upper)))
    loops = len(model.constraints) * 3
    # the feet's contacts come last, after the limits' rows
    spheres = np.asarray(sol.contacts.gap)[reached, -len(SPHERES) :]
    if gif:
        ukjax.animate(system, sol, gif, fps=12, every=4, violation={"loop closure": (range(loops), "m")})
    # the spheres' creep over the floor, by MuJoCo's kinematics of the same file
    data = mujoco.MjData(mj)
    ids = [mj.geom(name).id for name in SPHERES]
    spheres_at = []
    for qk in q:
        data.qpos[:] = qk
        mujoco.mj_kinematics(mj, data)
        spheres_at.append(data.geom_xpos[ids, :2].copy())
    spheres_at = np.asarray(spheres_at)
    # the spheres' centres also move as the feet roll on them; the slip is the contact points'
    slip = jax.vmap(lambda t, q, qd: system.constraint_levels(t, q, qd)[-1].contacts.tangent.phid)(
        sol.ts[reached], sol.q[reached], sol.qd[reached]
    )
    slip = np.asarray(slip).reshape(len(q), -1, 2)[:, -len(SPHERES) :]
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
        touching=int(np.sum(spheres[-1] <= 1e-9)),
        foot_gap=float(np.max(np.abs(spheres))),
        compile=compile_time,
        creep=float(np.max(np.abs(spheres_at - spheres_at[:1]))),
        slip=float(np.max(np.linalg.norm(slip, axis=-1))),
        steps=int(sol.stats["num_steps"]),
        q=np.asarray(sol.q),
    )


def run_mujoco(xml, t1, h=1e-4):
    mj = mujoco.MjModel.from_xml_string(xml)
    mj.opt.timestep = h
    data = mujoco.MjData(mj)
    qadr, dadr, gear, target, feet_mask, roll = pd(mj, mj.key_qpos[mj.key("home").id])
    feet = [mj.geom(name).id for name in SPHERES]
    limited = np.flatnonzero(mj.jnt_limited & (mj.jnt_type == mujoco.mjtJoint.mjJNT_HINGE))

    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    segments = []  # the state and the control every SEGMENT steps, for the C step's timing

    def run(measure):
        mujoco.mj_resetDataKeyframe(mj, data, mj.key("home").id)
        mujoco.mj_forward(mj, data)
        start_feet, pelvis = data.geom_xpos[feet].copy(), data.qpos[:3].copy()
        worst = dict(penetration=0.0, creep=0.0, loops=0.0, past=0.0, drift=0.0)
        for step in range(round(t1 / mj.opt.timestep)):
            data.ctrl[:] = law(
                target, gear, feet_mask, roll, data.qpos[qadr], data.qvel[dadr], data.qpos[:2] - pelvis[:2],
                data.qvel[:2],
            )
            if measure and step % SEGMENT == 0:
                state = np.empty(mujoco.mj_stateSize(mj, spec))
                mujoco.mj_getState(mj, data, state, spec)
                segments.append((state, data.ctrl.copy()))
            mujoco.mj_step(mj, data)
            if measure:
                q = data.qpos[mj.jnt_qposadr[limited]]
                eq = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
                for key, value in (
                    ("penetration", -data.contact.dist.min(initial=0)),
                    ("creep", np.abs(data.geom_xpos[feet][:, :2] - start_feet[:, :2]).max()),
                    ("loops", np.abs(data.efc_pos[eq]).max(initial=0)),
                    ("past", np.max(np.maximum(mj.jnt_range[limited, 0] - q, q - mj.jnt_range[limited, 1]))),
                    ("drift", np.linalg.norm(data.qpos[:3] - pelvis)),
                ):
                    worst[key] = max(worst[key], float(value))
        return worst

    worst = run(measure=True)
    height = float(data.qpos[2])
    # timed without the measurements: the control law and the steps only
    start = time.perf_counter()
    run(measure=False)
    wall = time.perf_counter() - start
    # MuJoCo's C step along the same run: `rollout` from the run's states every SEGMENT steps,
    # each segment with the law's control at its start held (best of three)
    states = np.stack([state for state, _ in segments])
    controls = np.stack([np.repeat(u[None], SEGMENT, axis=0) for _, u in segments])
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        rollout.rollout(mj, data, states, controls, nstep=SEGMENT)
        walls.append(time.perf_counter() - start)
    c_rate = len(segments) * SEGMENT * mj.opt.timestep / min(walls)
    return dict(worst, height=height, reached=t1, wall=wall, compile=0.0, c_rate=c_rate)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--t1", type=float, default=2.0)
    parser.add_argument("--gif", default=None)
    parser.add_argument("--stepping", type=float, default=None, help="time-stepping at this step (s), MuJoCo too")
    args = parser.parse_args()
    xml = scene()
    if args.stepping is not None:
        uks = {"time-stepping": run_ukjax(xml, args.t1, args.gif, ukjax.TimeStepping(), args.stepping)}
        mj = run_mujoco(xml, args.t1, args.stepping)
        report(args, uks, mj, f"{args.stepping * 1e3:g} ms")
        return
    # Tsit5, the default, and Bosh3: on the feet and the legs' springs both step at their
    # stability limit, Bosh3 with half the stages a step
    uks = {name: run_ukjax(xml, args.t1, args.gif if name == "Tsit5" else None, solver)
           for name, solver in (("Tsit5", diffrax.Tsit5()), ("Bosh3", diffrax.Bosh3()))}
    mj = run_mujoco(xml, args.t1)
    report(args, uks, mj, "0.1 ms")


def report(args, uks, mj, mujoco_step):
    for name, uk in uks.items():
        print(f"Cassie standing from home, {args.t1:g} s; ukjax ({name}) status {uk['status']}, {uk['steps']} steps, "
              f"{uk['events']} events, {uk['touching']} of 4 foot spheres within 1e-9 m of the floor at the last save "
              f"reached (the largest |gap| of a foot sphere at a save: {uk['foot_gap']:.1e} m)")
    print(f"{'':28s} {'reached s':>9s} {'pelvis z':>8s} {'pelvis drift':>12s} {'penetration':>11s} {'loop error':>10s} "
          f"{'past limit':>10s} {'compile s':>9s} {'run s':>7s} {'sim s/s':>8s}")
    rows = [(f"ukjax ({name})", uk) for name, uk in uks.items()] + [(f"MuJoCo ({mujoco_step}, defaults)", mj)]
    for name, r in rows:
        print(f"{name:28s} {r['reached']:9.3f} {r['height']:8.3f} {r['drift']:12.2e} {r['penetration']:11.1e} "
              f"{r['loops']:10.1e} {r['past']:10.1e} {r['compile']:9.1f} {r['wall']:7.1f} {r['reached'] / r['wall']:8.3f}")
    for name, uk in uks.items():
        print(f"ukjax ({name}) / MuJoCo throughput: {(uk['reached'] / uk['wall']) / (mj['reached'] / mj['wall']):.3f}x "
              f"its Python loop, {(uk['reached'] / uk['wall']) / mj['c_rate']:.3f}x its C step")
    print(f"(MuJoCo's C step: {mj['c_rate']:.2f} sim s/s, `rollout` over the run's states every {SEGMENT} steps, "
          "the law's control held over each)")
    if "Tsit5" not in uks:
        return
    tsit5, bosh3 = uks["Tsit5"], uks["Bosh3"]
    print(f"Bosh3's saved coordinates differ from Tsit5's by up to {np.nanmax(np.abs(bosh3['q'] - tsit5['q'])):.1e} "
          "(m, rad; both at rtol = atol = 1e-8)")
    print(f"The spheres' centres moved over the floor by up to {tsit5['creep']:.1e} m (ukjax, Tsit5, its contact points "
          f"slipping at {tsit5['slip']:.1e} m/s at most), {mj['creep']:.1e} m (MuJoCo)")


if __name__ == "__main__":
    main()
