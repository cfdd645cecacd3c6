"""Free bodies tumbling onto a floor, exact (ukjax) against soft (MuJoCo at its default 2 ms).

Six free bodies (two boxes, two capsules, two spheres, 0.1-0.3 kg) dropped from 0.2-0.45 m
with a spin of their own onto a floor (friction 0.5, no restitution in either simulator), 2 s:
they bounce on their corners and ends, roll, slide and come to rest. Every member of a batch
drops them from its own heights. Each body is expected at rest on a face (a box at one of its
half sizes above the floor, a capsule or a sphere at its radius): the "rest error" column is
the largest distance of a body's centre from the nearest of those heights at the end. Other
columns: the largest penetration of the floor, the largest speed left at the end, throughput
in simulated seconds per wall-clock second for the whole batch (MuJoCo's: its C step,
`rollout` on one thread), and ukjax's events and compile time.

`--stepping H` runs ukjax's time-stepping route at the step `H` (`ukjax.TimeStepping`, MuJoCo's
own 0.002 for the same step) instead of its event-driven one, its applied forces as `--forces`
says (`implicit`: `ukjax.ImplicitForces()`, the default; `implicit-positions`: with the
positions' derivative; `explicit`: `ukjax.ExplicitForces()`).

    python benchmarks/tumbling.py [--batch 8] [--t1 2] [--stepping 0.002] [--forces implicit]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.references import mujoco_c_rate  # noqa: E402
from ukjax.cli.bench import compiled_and_timed  # noqa: E402

# (name, MJCF geom, rest heights of its centre, mass)
BODIES = [
    ("box1", 'type="box" size="0.05 0.08 0.03"', (0.05, 0.08, 0.03), 0.3),
    ("box2", 'type="box" size="0.04 0.04 0.06"', (0.04, 0.06), 0.2),
    ("capsule1", 'type="capsule" fromto="-0.08 0 0 0.08 0 0" size="0.03"', (0.03,), 0.15),
    ("capsule2", 'type="capsule" fromto="0 -0.06 0 0 0.06 0" size="0.04"', (0.04,), 0.2),
    ("sphere1", 'type="sphere" size="0.05"', (0.05,), 0.1),
    ("sphere2", 'type="sphere" size="0.07"', (0.07,), 0.25),
]


def scene() -> str:
    bodies = "\n".join(
        f'    <body name="{name}" pos="{0.4 * (i % 3) - 0.4} {0.5 * (i // 3) - 0.25} 0.5">'
        f'<freejoint/><geom name="{name}" {geom} mass="{mass}"/></body>'
        for i, (name, geom, _, mass) in enumerate(BODIES)
    )
    return f"""<mujoco model="tumbling">
  <default><geom contype="2" conaffinity="1" friction="0.5"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" contype="1" conaffinity="1" friction="0.5"/>
{bodies}
  </worldbody>
</mujoco>"""


def starts(mj, batch):
    """Each member's `(qpos, qvel)`: every body at its own height, tilted, and spinning."""
    rng = np.random.default_rng(0)
    members = []
    for _ in range(batch):
        qpos, qvel = mj.qpos0.copy(), np.zeros(mj.nv)
        for i in range(len(BODIES)):
            qpos[7 * i + 2] = rng.uniform(0.2, 0.45)
            axis = rng.normal(size=3)
            angle = rng.uniform(0.2, 1.0)
            qpos[7 * i + 3 : 7 * i + 7] = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis / np.linalg.norm(axis)])
            qvel[6 * i : 6 * i + 3] = rng.uniform(-0.3, 0.3, 3) * [1, 1, 0]
            qvel[6 * i + 3 : 6 * i + 6] = rng.uniform(-5, 5, 3)
        members.append((qpos, qvel))
    return members


def measures(positions, speeds, penetration):
    """Rest error (m), the largest speed left (m/s), and the penetration, from each body's
    final centre heights (batch, bodies) and speeds."""
    rest = max(np.abs(z[..., None] - np.array(h)).min(axis=-1).max() for z, h in zip(positions.T, (b[2] for b in BODIES)))
    return dict(rest=rest, speed=float(np.max(speeds)), penetration=penetration)


# the time-stepping route's treatments of the applied forces (`--forces`)
FORCES = {
    "implicit": ukjax.ImplicitForces(),
    "implicit-positions": ukjax.ImplicitForces(positions=True),
    "explicit": ukjax.ExplicitForces(),
}


def run_ukjax(xml, members, t1, stepping=None, forces=None):
    model = ukjax.models.from_mjcf(xml)
    system = ukjax.ConstrainedSystem(model.system, model.constraints + model.unilateral)
    q0, qd0 = (jnp.stack(x) for x in zip(*(model.state_from_mujoco(qpos, qvel) for qpos, qvel in members)))
    ts = jnp.linspace(0.0, t1, 101)
    route = {} if stepping is None else dict(solver=ukjax.TimeStepping(forces=FORCES[forces]), dt0=stepping)
    sol, wall, compile_s = compiled_and_timed(lambda: ukjax.simulate_batch(system, q0, qd0, 0.0, t1, ts=ts, **route))
    q, qd = np.asarray(sol.q[:, -1]), np.asarray(sol.qd[:, -1])
    heights = q[:, [7 * i + 2 for i in range(len(BODIES))]]
    speeds = np.linalg.norm(qd.reshape(len(members), len(BODIES), 7)[:, :, :3], axis=-1)
    result = measures(heights, speeds, float(np.max(sol.contacts.penetration)))
    statuses = sorted({ukjax.Status(int(s)).name for s in np.asarray(sol.status)})
    return result | dict(
        rate=len(members) * t1 / wall,
        compile=compile_s,
        events=int(np.max(sol.contacts.events)),
        statuses=statuses,
    )


def run_mujoco(xml, members, t1):
    mj = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(mj)
    heights, speeds, penetration = [], [], 0.0
    for qpos, qvel in members:
        mujoco.mj_resetData(mj, data)
        data.qpos[:], data.qvel[:] = qpos, qvel
        for _ in range(round(t1 / mj.opt.timestep)):
            mujoco.mj_step(mj, data)
            penetration = max(penetration, -data.contact.dist.min(initial=0))
        heights.append(data.qpos.reshape(len(BODIES), 7)[:, 2].copy())
        speeds.append(np.linalg.norm(data.qvel.reshape(len(BODIES), 6)[:, :3], axis=-1))
    return measures(np.array(heights), np.array(speeds), penetration) | dict(rate=mujoco_c_rate(mj, members, t1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--t1", type=float, default=2.0)
    parser.add_argument("--stepping", type=float, default=None, help="time-stepping at this step (s)")
    parser.add_argument("--forces", choices=sorted(FORCES), default="implicit", help="the step's forces (ukjax.TimeStepping's)")
    args = parser.parse_args()
    xml = scene()
    members = starts(mujoco.MjModel.from_xml_string(xml), args.batch)
    uk = run_ukjax(xml, members, args.t1, args.stepping, args.forces)
    mj = run_mujoco(xml, members, args.t1)
    print(f"{len(BODIES)} bodies tumbling onto a floor, batch {args.batch}, {args.t1:g} s each; distances in m")
    print(f"{'':36s} {'penetration':>11s} {'rest error':>10s} {'speed left':>10s} {'sim s / s':>10s}")
    route = "exact, Tsit5 rtol = atol = 1e-8" if args.stepping is None else f"time-stepping, {args.stepping * 1e3:g} ms, {args.forces}"
    for name, r in ((f"ukjax ({route})", uk), ("MuJoCo, defaults (2 ms)", mj)):
        print(f"{name:36s} {r['penetration']:11.1e} {r['rest']:10.1e} {r['speed']:10.1e} {r['rate']:10.2f}")
    print(
        f"ukjax: compile {uk['compile']:.1f} s, at most {uk['events']} events a member, statuses {', '.join(uk['statuses'])}; "
        f"throughput ratio ukjax / MuJoCo's C step {uk['rate'] / mj['rate']:.3f}"
    )


if __name__ == "__main__":
    main()
