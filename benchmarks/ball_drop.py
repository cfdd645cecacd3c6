"""A ball dropped on a floor, exact impacts (ukjax) against soft contact (MuJoCo), one file.

A sphere (radius 0.1 m) dropped from rest, every member of a batch from its own height
between 0.5 and 1.5 m, for 2.5 s (all come to rest by 1.7 s). ukjax: Newton's restitution
`e = 0.5`, so that the ball bounces to `e²ⁿ h` after its n-th impact and rests once a bounce
is too small to see. MuJoCo has no restitution coefficient; its soft contact is a damped
spring (`solref` = time constant, damping ratio), whose restitution is
`exp(−ζπ / √(1 − ζ²))`: the damping ratio ζ = 0.2155 gives 0.5. It runs at a 0.1 ms step
with that damping and the default time constant (0.02 s), and with a tight one (0.002 s).
Columns: the largest penetration of the floor, the worst error of the first three apex
heights against `e²ⁿ h`, the ball's height at the end (at rest on the floor: its radius),
and throughput in simulated seconds per wall-clock second for the whole batch (MuJoCo's: its
C step, `rollout` on one thread, no Python in its loop). ukjax's compile time is printed apart.

    python benchmarks/ball_drop.py [--batch 16]

Its measured table: benchmarks/README.md.
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.references import mujoco_c_rate  # noqa: E402
from ukjax.cli.bench import compiled_and_timed  # noqa: E402

G, E, RADIUS, T1 = 9.81, 0.5, 0.1, 2.5
ZETA = -np.log(E) / np.hypot(np.pi, np.log(E))  # the damping ratio of a spring that keeps e
SCENE = f"""
<mujoco>
  <option timestep="0.0001"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="ball" pos="0 0 1">
      <freejoint/>
      <geom name="ball" type="sphere" size="{RADIUS}"/>
    </body>
  </worldbody>
</mujoco>
"""


def apexes(heights):
    """The first three apex heights of the ball's centre, for each drop height (of its
    lowest point), as Newton's law gives them."""
    return RADIUS + heights[:, None] * E ** (2 * np.arange(1, 4))


def measured_apexes(z):
    """The first three apexes of each member's height `z`, shape (batch, T): local maxima
    more than 1 mm above rest; a bounce that never comes counts as an apex at rest."""
    found = np.full((len(z), 3), RADIUS)
    for member, row in zip(z, found):
        inner = member[1:-1]
        peaks = np.flatnonzero((inner > member[:-2]) & (inner >= member[2:]) & (inner > RADIUS + 1e-3)) + 1
        row[: min(3, len(peaks))] = member[peaks[:3]]
    return found


def run_ukjax(heights):
    model = ukjax.models.from_mjcf(SCENE)
    contacts = eqx.tree_at(lambda c: c.restitution, model.unilateral[-1], jnp.asarray(E))
    system = ukjax.ConstrainedSystem(model.system, (*model.constraints, *model.unilateral[:-1], contacts))
    q0 = jnp.stack([model.q0.at[2].set(RADIUS + h) for h in heights])
    qd0 = jnp.zeros_like(q0)
    # the apexes fall between saves: a dense grid, as MuJoCo's steps are
    ts = jnp.linspace(0.0, T1, 25001)
    sol, wall, compile_s = compiled_and_timed(lambda: ukjax.simulate_batch(system, q0, qd0, 0.0, T1, ts=ts))
    z = np.asarray(sol.q[:, :, 2])
    return {
        "penetration": float(np.max(sol.contacts.penetration)),
        "apexes": measured_apexes(z),
        "end": z[:, -1],
        "rate": len(heights) * T1 / wall,
        "compile": compile_s,
        "events": int(np.max(sol.contacts.events)),
        "success": bool(np.all(np.asarray(sol.success))),
    }


def run_mujoco(heights, timeconst):
    mj = mujoco.MjModel.from_xml_string(SCENE)
    mj.geom_solref[:] = (timeconst, ZETA)
    data = mujoco.MjData(mj)
    penetration, z, starts = 0.0, [], []
    steps = round(T1 / mj.opt.timestep)
    for h in heights:
        mujoco.mj_resetData(mj, data)
        data.qpos[2] = RADIUS + h
        starts.append((data.qpos.copy(), data.qvel.copy()))
        member = np.empty(steps + 1)
        member[0] = data.qpos[2]
        for i in range(steps):
            mujoco.mj_step(mj, data)
            member[i + 1] = data.qpos[2]
        # penetration from the heights: the floor is z = 0
        penetration = max(penetration, float(RADIUS - member.min()))
        z.append(member)
    z = np.array(z)
    # the heights above are read in Python; the speed is the C step's, the same runs
    rate = mujoco_c_rate(mj, starts, T1)
    return {"penetration": penetration, "apexes": measured_apexes(z), "end": z[:, -1], "rate": rate}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    heights = np.linspace(0.5, 1.5, args.batch)
    exact = apexes(heights)
    rows = [(f"ukjax (exact, e = {E})", run_ukjax(heights))]
    rows.append((f"MuJoCo, solref (0.02, {ZETA:.4f})", run_mujoco(heights, 0.02)))
    rows.append((f"MuJoCo, solref (0.002, {ZETA:.4f})", run_mujoco(heights, 0.002)))
    print(f"batch {args.batch}, dropped from 0.5 to 1.5 m, {T1} s each; distances in m")
    print(f"{'':36s} {'penetration':>11s} {'apex error':>10s} {'end height':>21s} {'sim s / s':>10s}")
    for name, r in rows:
        error = np.max(np.abs(r["apexes"] - exact))
        end = f"{r['end'].min():.6f}–{r['end'].max():.6f}"
        print(f"{name:36s} {r['penetration']:11.1e} {error:10.1e} {end:>21s} {r['rate']:10.2f}")
    uk = rows[0][1]
    print(
        f"ukjax: compile {uk['compile']:.1f} s, at most {uk['events']} events a member, all SUCCESS: {uk['success']}; "
        f"throughput ratio ukjax / MuJoCo's C step (default time constant) {uk['rate'] / rows[1][1]['rate']:.2f}"
    )


if __name__ == "__main__":
    main()
