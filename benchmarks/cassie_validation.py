"""Cassie (`shared/robots/cassie.xml`) against MuJoCo over trajectories: the checks of the
real-robots issue that each need a Cassie simulation compiled (about 30 s apiece on 2 cores),
kept out of the test suite until the speed issue brings that down. Prints one line per check.

- open tree: every body's world position after 0.1 s of RK4 (1 ms) from random states with a
  spinning pelvis and ball joints, against MuJoCo's own RK4 with its equalities off;
- closed loops (no damping): the same against a reference written on MuJoCo's functions only
  (a KKT solve on `mj_fullM`, `qfrc_passive − qfrc_bias` and the equality rows of `efc_J`,
  RK4 on the configuration manifold with `mj_integratePos`), from projected states;
- energy: no damping, Tsit5 at 1e-10 for 1 s, MuJoCo's `mj_energyPos + mj_energyVel` of
  `state_to_mujoco` along the run;
- a batch of 8 projected random states through `simulate_batch` (damped, Tsit5): statuses
  and closure;
- forward-mode derivatives of a foot's position after 0.2 s in a link mass and in the inertia
  of a body hung from a ball joint, against central differences.

    python benchmarks/cassie_validation.py
"""

import warnings
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import ukjax
from ukjax import models

CASSIE = Path(__file__).resolve().parents[2] / "shared" / "robots" / "cassie.xml"
H, STEPS = 1e-3, 100


def mujoco_model(equality: bool, damping: bool = True):
    mjm = mujoco.MjModel.from_xml_path(str(CASSIE))
    mjm.opt.timestep, mjm.opt.integrator = H, int(mujoco.mjtIntegrator.mjINT_RK4)
    off = ["LIMIT", "CONTACT"] + ([] if equality else ["EQUALITY"])
    for flag in off:
        mjm.opt.disableflags |= int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{flag}"))
    mjm.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    if not damping:
        mjm.dof_damping[:] = 0
    return mjm


def random_states(model, mjm, count, seed, scale=1.0):
    """Random states about `home`: ball joints turned by ~0.2 scale, joint rates ~0.5 scale
    rad/s, the pelvis spinning at ~3 scale rad/s."""
    rng = np.random.default_rng(seed)
    balls = [3] + [int(mjm.jnt_qposadr[j]) for j in range(mjm.njnt) if mjm.jnt_type[j] == 1]
    out = []
    for _ in range(count):
        qpos = np.asarray(model.state_to_mujoco(model.q0, model.qd0)[0]).copy()
        for a in balls:
            u = qpos[a : a + 4] + 0.2 * scale * rng.normal(size=4)
            qpos[a : a + 4] = u / np.linalg.norm(u)
        qvel = 0.5 * scale * rng.normal(size=mjm.nv)
        qvel[3:6] = rng.normal(scale=3.0 * scale, size=3)  # the pelvis spins
        out.append(model.state_from_mujoco(qpos, qvel))
    return out


def kkt_acceleration(mjm, d, qpos, qvel, h=1e-6):
    """MuJoCo's own terms only: M v̇ = f + Jᵀλ, J v̇ = −J̇v (J̇v by central differences)."""

    def terms(qpos):
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(mjm, d)
        M = np.zeros((mjm.nv, mjm.nv))
        mujoco.mj_fullM(mjm, d, M)
        return M, d.qfrc_passive - d.qfrc_bias, d.efc_J.reshape(d.nefc, mjm.nv).copy()

    M, f, J = terms(qpos)
    rates = []
    for sign in (1, -1):
        moved = qpos.copy()
        mujoco.mj_integratePos(mjm, moved, qvel, sign * h)
        rates.append(terms(moved)[2] @ qvel)
    p = J.shape[0]
    K = np.block([[M, J.T], [J, np.zeros((p, p))]])
    rhs = np.concatenate([f, -(rates[0] - rates[1]) / (2 * h)])
    return np.linalg.lstsq(K, rhs, rcond=1e-12)[0][: mjm.nv]


def kkt_rk4(mjm, qpos, qvel, steps, H):
    d = mujoco.MjData(mjm)

    def moved(qpos, v, t):
        x = qpos.copy()
        mujoco.mj_integratePos(mjm, x, v, t)
        return x

    for _ in range(steps):
        a1 = kkt_acceleration(mjm, d, qpos, qvel)
        v2 = qvel + H / 2 * a1
        a2 = kkt_acceleration(mjm, d, moved(qpos, qvel, H / 2), v2)
        v3 = qvel + H / 2 * a2
        a3 = kkt_acceleration(mjm, d, moved(qpos, v2, H / 2), v3)
        v4 = qvel + H * a3
        a4 = kkt_acceleration(mjm, d, moved(qpos, v3, H), v4)
        qpos = moved(qpos, (qvel + 2 * v2 + 2 * v3 + v4) / 6, H)
        qvel = qvel + H * (a1 + 2 * a2 + 2 * a3 + a4) / 6
    return qpos, qvel


def body_positions(mjm, qpos):
    d = mujoco.MjData(mjm)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(mjm, d)
    return d.xpos[1:].copy()


def main():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits named; the keyframe projected onto the loops
        model = models.from_mjcf(CASSIE, keyframe="home")
    tree = model.system
    closed = ukjax.ConstrainedSystem(tree, model.constraints)

    # open tree against MuJoCo's RK4, at two steps, and both against ukjax's Tsit5 at 1e-12
    # (MuJoCo's RK4 moves quaternions on the manifold with the stages' combined velocity,
    # ukjax's in their four coordinates: the two schemes need not agree to RK4's own order)
    starts = random_states(model, mujoco_model(equality=False), 3, seed=0)
    q0s, qd0s = (jnp.stack(x) for x in zip(*starts))
    tight = jax.jit(jax.vmap(lambda q, qd: ukjax.simulate(tree, q, qd, 0.0, STEPS * H, rtol=1e-12, atol=1e-12).q[-1]))
    reference = [np.asarray(tree.kinematics(q).positions) for q in tight(q0s, qd0s)]
    for h in (H, H / 2):
        mjm = mujoco_model(equality=False)
        mjm.opt.timestep = h
        steps = round(STEPS * H / h)
        fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=h, max_steps=steps, ts=jnp.array([0.0, STEPS * H]))
        run = jax.jit(jax.vmap(lambda q, qd: ukjax.simulate(tree, q, qd, 0.0, STEPS * H, **fixed).q[-1]))
        gap = ours_off = theirs_off = 0.0
        for (q0, qd0), q1, ref in zip(starts, run(q0s, qd0s), reference):
            d = mujoco.MjData(mjm)
            d.qpos[:], d.qvel[:] = model.state_to_mujoco(q0, qd0)
            for _ in range(steps):
                mujoco.mj_step(mjm, d)
            ours = np.asarray(tree.kinematics(q1).positions)
            gap = max(gap, float(np.max(np.abs(ours - d.xpos[1:]))))
            ours_off = max(ours_off, float(np.max(np.abs(ours - ref))))
            theirs_off = max(theirs_off, float(np.max(np.abs(d.xpos[1:] - ref))))
        print(
            f"open tree, 0.1 s RK4 at h = {h:g} s from 3 spinning states: bodies within {gap:.1e} m of MuJoCo's "
            f"RK4; from ukjax's Tsit5 at 1e-12: ukjax's RK4 {ours_off:.1e} m, MuJoCo's RK4 {theirs_off:.1e} m"
        )

    # closed loops against a KKT integration on MuJoCo's functions
    # (without damping: the ball joints' damping on the achilles rods' spin, whose inertia is
    # 1.5e-5 kg m², decays at ~10³/s and makes fixed-step RK4 at 1 ms unstable from projected
    # states; Tsit5 takes 2340 steps for 0.1 s there)
    mjm = mujoco_model(equality=True, damping=False)
    undamped = ukjax.ConstrainedSystem(eqx.tree_at(lambda t: t.damping, tree, 0 * tree.damping), model.constraints)
    # (smaller turns than above: projected from ~0.2 rad turns of the rods, the loops land near
    # configurations where Tsit5 needs 10× the steps, too stiff for RK4 at 1 ms)
    starts = random_states(model, mjm, 3, seed=0, scale=0.3)
    project = eqx.filter_jit(closed.project)
    projected = [project(0.0, q, qd) for q, qd in starts]
    q0s, qd0s = (jnp.stack(x) for x in zip(*projected))
    # (the loops' springs need steps of ~0.25 ms: Tsit5 takes ~470 for 0.1 s from these states)
    h = H / 4
    fine = dict(
        solver=ukjax.RK4(), adaptive=False, dt0=h, max_steps=4 * STEPS, ts=jnp.array([0.0, STEPS * H]), throw=False
    )
    run = jax.jit(jax.vmap(lambda q, qd: ukjax.simulate(undamped, q, qd, 0.0, STEPS * H, **fine)))
    sols = run(q0s, qd0s)
    statuses = [ukjax.Status(int(x)).name for x in sols.status]
    worst = 0.0
    for (q0, qd0), q1, ok in zip(projected, sols.q[:, -1], sols.success):
        if not ok:
            continue
        ref, _ = kkt_rk4(mjm, *map(np.asarray, model.state_to_mujoco(q0, qd0)), 4 * STEPS, h)
        ours = np.asarray(tree.kinematics(q1).positions)
        worst = max(worst, float(np.max(np.abs(ours - body_positions(mjm, ref)))))
    closure = float(jnp.max(jnp.abs(sols.phi[sols.success]))) if any(sols.success) else float("nan")
    print(
        f"closed loops, no damping, 0.1 s RK4 at h = {h:g} s from 3 projected spinning states: {statuses}; "
        f"the finished ones' bodies within {worst:.1e} m of the KKT reference on MuJoCo's functions, "
        f"closure (quaternion norms included) {closure:.1e}"
    )

    # energy without damping
    q0, qd0 = projected[0]
    sol = ukjax.simulate(undamped, q0, qd0, 0.0, 1.0, ts=jnp.linspace(0, 1, 101), rtol=1e-10, atol=1e-10, throw=False)
    d = mujoco.MjData(mjm)
    energies = []
    for q, qd in zip(sol.q, sol.qd):
        if not bool(jnp.all(jnp.isfinite(q))):
            break
        d.qpos[:], d.qvel[:] = model.state_to_mujoco(q, qd)
        mujoco.mj_forward(mjm, d)
        energies.append(d.energy[0] + d.energy[1])
    energies = np.array(energies)
    kinetic = max(float(np.max(np.abs(energies - energies[0]))), 0.0)
    print(
        f"energy, no damping, 1 s Tsit5 at 1e-10: status {ukjax.Status(int(sol.status)).name}, "
        f"E(0) = {energies[0]:.6f} J, largest change {kinetic:.1e} J "
        f"({kinetic / abs(energies[0]):.1e} relative), closure {float(jnp.max(jnp.abs(sol.phi))):.1e}"
    )

    # a batch of 8 projected random states
    starts = random_states(model, mjm, 8, seed=1, scale=0.3)
    projected = [project(0.0, q, qd) for q, qd in starts]
    q0s, qd0s = (jnp.stack(x) for x in zip(*projected))
    sol = ukjax.simulate_batch(
        closed, q0s, qd0s, 0.0, STEPS * H, devices=jax.devices()[:1], rtol=1e-10, atol=1e-10,
        ts=jnp.array([0.0, STEPS * H]),
    )
    statuses = [ukjax.Status(int(s)).name for s in sol.status]
    print(
        f"simulate_batch of 8 projected random states (damped), 0.1 s Tsit5 at 1e-10: {statuses.count('SUCCESS')}/8 SUCCESS, "
        f"closure of the finished ones {float(jnp.max(jnp.abs(sol.phi[sol.success]))) if any(sol.success) else float('nan'):.1e}"
    )

    # forward-mode derivative of a body's position after 0.2 s, in a link's mass and in the
    # inertia of the body hung from a ball joint, against central differences
    foot, shin = tree.body_names.index("left-foot"), tree.body_names.index("left-shin")
    rod = tree.body_names.index("left-achilles-rod")  # hung from the left ball joint
    q0, qd0 = projected[0]

    @jax.jit
    def foot_position(delta):
        edited = eqx.tree_at(
            lambda t: (t.masses, t.inertias),
            tree,
            (tree.masses.at[shin].add(delta[0]), tree.inertias.at[rod].add(delta[1] * jnp.eye(3))),
        )
        system = ukjax.ConstrainedSystem(edited, model.constraints)
        # fixed steps: both derivatives are of the same discrete map
        sol = ukjax.simulate(
            system, q0, qd0, 0.0, 2 * STEPS * H, ts=jnp.array([2 * STEPS * H]), solver=ukjax.RK4(),
            adaptive=False, dt0=H / 4, max_steps=8 * STEPS, adjoint=diffrax.ForwardMode(),
        )
        return edited.kinematics(sol.q[-1]).positions[foot]

    zero = jnp.zeros(2)
    tangents = jnp.stack([jax.jvp(foot_position, (zero,), (e,))[1] for e in jnp.eye(2)])
    # against the shin's 0.58 kg and the rod's 3.8e-6 kg m²: smaller steps for the inertia
    # drown the difference in round-off (1e-10: 3e-4 off, 1e-9: 4e-5, 1e-8: 2e-6, 1e-7: 6e-7)
    steps = jnp.array([1e-5, 1e-7])
    differences = jnp.stack(
        [(foot_position(h * e) - foot_position(-h * e)) / (2 * h) for h, e in zip(steps, jnp.eye(2))]
    )
    relative = jnp.linalg.norm(tangents - differences, axis=1) / jnp.linalg.norm(differences, axis=1)
    print(
        "forward-mode d(left foot position after 0.2 s of RK4 at 0.25 ms) in the shin's mass and the "
        "achilles rod's inertia "
        f"against central differences: relative differences {float(relative[0]):.1e}, {float(relative[1]):.1e}"
    )


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    main()
