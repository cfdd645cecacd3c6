"""A box held between two pads, exact (ukjax) against soft (MuJoCo), on one file:
`ukjax/examples/grasp.xml` from its "holding" keyframe (a parallel-jaw gripper squeezing a
0.1 kg box with 4 N, 9 mm above the floor), every member of a batch with its own friction
coefficient, from μ = 0.5 (friction 2.0x the weight) to μ = 2 (8.2x).

For each simulator, the same run: 1 s of every member, MuJoCo at the file's 0.5 ms step with
its default `solref` (0.02 s) and with a tight one (0.002 s). Columns: how far the box creeps
down (it should not move: MuJoCo's soft contacts slip while they stick, mujoco#3328), for
the member with the least and the most friction, the largest penetration (pads into the box),
and throughput in simulated seconds per wall-clock second for the whole batch (MuJoCo's: its
C step, `rollout` on one thread, no Python in its loop). ukjax's compile time is printed apart.

    python benchmarks/grasp.py [--batch 16]
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

SCENE = ukjax.examples.path("grasp.xml")
SQUEEZE, BOX_Z = 4.0, 4  # the motor's force (N); the box's height in qpos


def run_ukjax(mus):
    model = ukjax.models.from_mjcf(SCENE, keyframe="holding")
    system = ukjax.ConstrainedSystem(
        model.controlled(lambda t, q, qd: jnp.array([SQUEEZE])), model.constraints + model.unilateral
    )
    # every contact of the pads and of the floor takes the member's μ
    where = lambda s: (s.constraints[-2].friction, s.constraints[-1].friction)  # noqa: E731
    shapes = [x.shape[0] for x in where(system)]
    batched = eqx.tree_at(where, system, tuple(jnp.asarray(mus)[:, None] * jnp.ones(k) for k in shapes))
    axes = eqx.tree_at(where, jax.tree.map(lambda _: None, system), (0, 0), is_leaf=lambda x: x is None)
    q0 = jnp.broadcast_to(model.q0, (len(mus), model.q0.shape[0]))
    qd0 = jnp.zeros_like(q0)
    ts = jnp.linspace(0.0, 1.0, 101)
    sol, wall, compile_s = compiled_and_timed(
        lambda: ukjax.simulate_batch(batched, q0, qd0, 0.0, 1.0, ts=ts, system_axes=axes)
    )
    creep = np.max(np.abs(np.asarray(sol.q[:, :, BOX_Z]) - float(model.q0[BOX_Z])), axis=1)
    return dict(
        creep=(creep[0], creep[-1]),
        penetration=float(np.max(sol.contacts.penetration)),
        rate=len(mus) / wall,
        compile=compile_s,
        success=bool(np.all(np.asarray(sol.success))),
    )


def run_mujoco(mus, solref):
    key, creep, penetration, models, starts = None, [], 0.0, [], []
    for mu in mus:
        mj = mujoco.MjModel.from_xml_path(str(SCENE))
        if solref is not None:
            mj.geom_solref[:] = solref
        mj.geom_friction[:, 0] = mu
        key = mj.key("holding").id
        data = mujoco.MjData(mj)
        mujoco.mj_resetDataKeyframe(mj, data, key)
        models.append(mj)
        starts.append((data.qpos.copy(), data.qvel.copy()))
        z0 = data.qpos[BOX_Z]
        for _ in range(round(1.0 / mj.opt.timestep)):
            mujoco.mj_step(mj, data)
            penetration = max(penetration, -data.contact.dist.min(initial=0))
        creep.append(z0 - data.qpos[BOX_Z])
    # the measurements above step in Python; the speed is the C step's, the same runs
    rate = mujoco_c_rate(models, starts, 1.0, ctrl=models[0].key_ctrl[key])
    return dict(creep=(creep[0], creep[-1]), penetration=penetration, rate=rate)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    mus = np.linspace(0.5, 2.0, args.batch)
    rows = [("ukjax (exact, Tsit5 rtol = atol = 1e-8)", run_ukjax(mus))]
    rows.append(("MuJoCo, solref 0.02 (default), 0.5 ms", run_mujoco(mus, None)))
    rows.append(("MuJoCo, solref 0.002, 0.5 ms", run_mujoco(mus, (0.002, 1.0))))
    print(f"batch {args.batch}, 1 s each, μ from {mus[0]} to {mus[-1]}; distances in m")
    print(f"{'':42s} {'creep μ=' + str(mus[0]):>12s} {'creep μ=' + str(mus[-1]):>12s} {'penetration':>11s} {'sim s / s':>10s}")
    for name, r in rows:
        print(f"{name:42s} {r['creep'][0]:12.1e} {r['creep'][1]:12.1e} {r['penetration']:11.1e} {r['rate']:10.2f}")
    uk = rows[0][1]
    print(
        f"ukjax: compile {uk['compile']:.1f} s, all SUCCESS: {uk['success']}; "
        f"throughput ratio ukjax / MuJoCo's C step (default solref) {uk['rate'] / rows[1][1]['rate']:.2f}"
    )


if __name__ == "__main__":
    main()
