"""Agility's Cassie (`shared/robots/cassie.xml`: a free pelvis, two ball joints, four `connect`
loops) against MuJoCo: its dynamics at a state, its motion with the loops open against MuJoCo's
own RK4, with the loops closed against a KKT integration written on MuJoCo's functions alone,
its energy, a batch, and forward-mode derivatives in its inertial parameters."""

import warnings
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from benchmarks.references import high_precision_acceleration, mujoco_kkt_acceleration
from ukjax import models
from ukjax._backends import _tree_kernel as kernels

CASSIE = Path(__file__).parent.parent.parent / "shared" / "robots" / "cassie.xml"
# Cassie's springs (1250 and 1500 N m/rad on light rods) want steps of ~0.25 ms: there both
# RK4s are within ~6e-8 m of a Tsit5 reference at 1e-13 after 0.1 s (at 1 ms, 1.3e-5 m).
H = 2.5e-4

# Every test here reads the same file into the same structures: one worker compiles them
# (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("cassie")


@pytest.fixture(scope="module")
def model():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits named; the keyframe projected onto the loops
        return models.from_mjcf(CASSIE, keyframe="home")


def mujoco_model(equality: bool, damping: bool = True) -> mujoco.MjModel:
    """The file as MuJoCo reads it, with RK4 at `H`, without limits and contacts (ukjax models
    neither), with or without its equalities and its joints' damping."""
    mjm = mujoco.MjModel.from_xml_path(str(CASSIE))
    mjm.opt.timestep, mjm.opt.integrator = H, int(mujoco.mjtIntegrator.mjINT_RK4)
    for flag in ["LIMIT", "CONTACT"] + ([] if equality else ["EQUALITY"]):
        mjm.opt.disableflags |= int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{flag}"))
    mjm.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    if not damping:
        mjm.dof_damping[:] = 0
    return mjm


def random_states(model, mjm, count, seed, scale):
    """MuJoCo states about `home`: the pelvis and ball joints turned by ~0.2 `scale`, joint rates
    of ~0.5 `scale` rad/s, the pelvis spinning at ~3 `scale` rad/s."""
    rng = np.random.default_rng(seed)
    balls = [3] + [int(mjm.jnt_qposadr[j]) for j in range(mjm.njnt) if mjm.jnt_type[j] == 1]
    home = np.asarray(model.state_to_mujoco(model.q0, model.qd0)[0])
    states = []
    for _ in range(count):
        qpos = home.copy()
        for a in balls:
            u = qpos[a : a + 4] + 0.2 * scale * rng.normal(size=4)
            qpos[a : a + 4] = u / np.linalg.norm(u)
        qvel = 0.5 * scale * rng.normal(size=mjm.nv)
        qvel[3:6] = rng.normal(scale=3.0 * scale, size=3)
        states.append((qpos, qvel))
    return states


def body_positions(mjm, qpos):
    d = mujoco.MjData(mjm)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(mjm, d)
    return d.xpos[1:].copy()


def mujoco_kkt_rk4(mjm, qpos, qvel, steps):
    """RK4 on the configuration manifold (`mj_integratePos`, as MuJoCo's own RK4) of the KKT
    acceleration above."""
    d = mujoco.MjData(mjm)

    def moved(qpos, v, t):
        x = qpos.copy()
        mujoco.mj_integratePos(mjm, x, v, t)
        return x

    for _ in range(steps):
        a1 = mujoco_kkt_acceleration(mjm, d, qpos, qvel)
        v2 = qvel + H / 2 * a1
        a2 = mujoco_kkt_acceleration(mjm, d, moved(qpos, qvel, H / 2), v2)
        v3 = qvel + H / 2 * a2
        a3 = mujoco_kkt_acceleration(mjm, d, moved(qpos, v2, H / 2), v3)
        v4 = qvel + H * a3
        a4 = mujoco_kkt_acceleration(mjm, d, moved(qpos, v3, H), v4)
        qpos = moved(qpos, (qvel + 2 * v2 + 2 * v3 + v4) / 6, H)
        qvel = qvel + H * (a1 + 2 * a2 + 2 * a3 + a4) / 6
    return qpos


@eqx.filter_jit  # one program for the tests below: the open tree's terms, the closed loops'
# acceleration and the dynamics it is solved from
def terms(closed, q, qd):
    tree = closed.system
    open_terms = tree.mass_matrix(0.0, q), tree.forces(0.0, q, qd), tree.acceleration(0.0, q, qd)
    return *open_terms, closed.acceleration(0.0, q, qd), closed.dynamics(0.0, q, qd)


def test_dynamics_against_mujocos_own_functions(model):
    """The keyframe loads through `state_from_mujoco` and is projected onto the loops; at a
    random state with a spinning pelvis and ball joints, the open tree's `M`, forces and `qacc`
    equal MuJoCo's; on the loops (the projected keyframe, the pelvis turned, every joint moving
    along them), the closed loops' acceleration equals the KKT solve on MuJoCo's functions;
    the motors' forces equal `qfrc_actuator`."""
    tree = model.system
    assert (tree.num_coordinates, tree.num_velocities, len(model.constraints)) == (35, 32, 4)
    open_tree, loops = mujoco_model(equality=False), mujoco_model(equality=True)
    d = mujoco.MjData(open_tree)
    rng = np.random.default_rng(3)
    qpos = open_tree.key_qpos[0].copy()
    for a in [3] + [
        int(open_tree.jnt_qposadr[j]) for j in range(open_tree.njnt) if open_tree.jnt_type[j] == 1
    ]:
        u = qpos[a : a + 4] + 0.3 * rng.normal(size=4)
        qpos[a : a + 4] = u / np.linalg.norm(u)
    qvel = rng.normal(size=open_tree.nv)
    qvel[3:6] = [3.0, -2.0, 4.0]
    q, qd = model.state_from_mujoco(qpos, qvel)
    for ours, theirs in zip(model.state_to_mujoco(q, qd), (qpos, qvel)):
        np.testing.assert_allclose(ours, theirs, atol=1e-15)

    d.qpos[:], d.qvel[:] = qpos, qvel
    # the ten motors, commanded beyond their ctrlrange at both ends, through `controlled`
    d.ctrl[:] = ctrl = np.linspace(-20.0, 20.0, open_tree.nu)
    mujoco.mj_forward(open_tree, d)
    M = np.zeros((open_tree.nv, open_tree.nv))
    mujoco.mj_fullM(open_tree, d, M)
    G = np.asarray(tree.velocity_map(q))
    np.testing.assert_allclose(
        model.actuators.forces(tree, q, qd, jnp.asarray(ctrl)), G.T @ d.qfrc_actuator, atol=1e-12
    )
    d.ctrl[:] = 0.0
    mujoco.mj_forward(open_tree, d)
    closed = ukjax.ConstrainedSystem(tree, model.constraints)
    Mq, Qq, qdd, _, _ = terms(closed, q, qd)
    np.testing.assert_allclose(Mq, G.T @ M @ G, atol=1e-12)
    np.testing.assert_allclose(Qq, G.T @ (d.qfrc_passive - d.qfrc_bias), atol=1e-10)
    np.testing.assert_allclose(G @ qdd, d.qacc, rtol=1e-8, atol=1e-8)

    # the closed loops where they hold (the body-axes and world-axes forms of a `connect` agree
    # only there): the projected keyframe with the pelvis turned and spinning, the rates moved
    # onto MuJoCo's own rows, J v = 0
    qpos = np.array(model.state_to_mujoco(model.q0, model.qd0)[0])
    qpos[3:7] = rng.normal(size=4)
    qpos[3:7] /= np.linalg.norm(qpos[3:7])
    d = mujoco.MjData(loops)
    d.qpos[:] = qpos
    mujoco.mj_forward(loops, d)
    J = d.efc_J.reshape(d.nefc, loops.nv)
    assert J.shape == (12, loops.nv)
    qvel = qvel - np.linalg.lstsq(J, J @ qvel, rcond=1e-12)[0]
    expected = mujoco_kkt_acceleration(loops, d, qpos, qvel)
    q, qd = model.state_from_mujoco(qpos, qvel)
    G = np.asarray(tree.velocity_map(q))
    np.testing.assert_allclose(
        G @ terms(closed, q, qd)[3], expected, rtol=1e-6, atol=1e-6 * np.max(np.abs(expected))
    )


def test_rank_decisions_near_qpos0_against_a_40_digit_solve(model):
    """Near MuJoCo's `qpos0` (off the loops, joints turned by ~0.3 rad) Cassie's loop rows are
    dependent (each plantar-rod loop is planar: a combination of its three rows vanishes), so
    that the answer depends on where the solve cuts. The 40-digit SVD of `B = A L⁻ᵀ` from the
    same double-precision `M, Q, A, b` shows a gap of more than ten orders between the rows'
    singular values and round-off; the acceleration with every cut-off inside it is the
    reference, which ukjax's meets to 1e-10. Inverting the round-off as well (no cut) moves
    `q̈` by more than 1e-3 of its size: the decision matters here, and ukjax makes it where
    exact arithmetic on the same data does."""
    mjm = mujoco_model(equality=True)
    closed = ukjax.ConstrainedSystem(model.system, model.constraints)
    rng = np.random.default_rng(4)
    qpos = mjm.qpos0 + 0.3 * rng.normal(size=mjm.nq)
    for a in [3] + [int(mjm.jnt_qposadr[j]) for j in range(mjm.njnt) if mjm.jnt_type[j] == 1]:
        qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
    q, qd = model.state_from_mujoco(qpos, 0.5 * rng.normal(size=mjm.nv))
    *_, qdd, d = terms(closed, q, qd)
    (level,) = d.levels
    sigma, kept, reference, uncut = high_precision_acceleration(d.M, d.Q, level.rows.A, level.rows.b)
    assert sigma[kept].min() > 1e-5 and sigma[~kept].max() < 1e-15  # no cut-off is borderline
    scale = np.max(np.abs(reference))
    assert np.max(np.abs(uncut - reference)) > 1e-3 * scale
    np.testing.assert_allclose(qdd, reference, rtol=0, atol=1e-10 * scale)
    # and the compiled kernel (`simulate`'s route), which cuts by the Gram matrix's pivots
    if kernels.can_run(closed, q.dtype, jax.default_backend()):
        bound = ukjax.TreeKernel().bind(closed, q.dtype, jax.default_backend())
        assert kernels.runs(bound) is not None
        kernel = eqx.filter_jit(kernels.solve)(bound, 0.0, q, qd).acceleration
        np.testing.assert_allclose(kernel, reference, rtol=0, atol=1e-10 * scale)


def test_open_tree_moves_as_mujocos_rk4(model):
    """Equalities off: every body's world position after 0.1 s of RK4 from three random states
    with a spinning pelvis and ball joints, against MuJoCo's RK4 at the same step."""
    tree, mjm = model.system, mujoco_model(equality=False)
    starts = random_states(model, mjm, 3, seed=0, scale=1.0)
    q0, qd0 = (jnp.stack(x) for x in zip(*(model.state_from_mujoco(*s) for s in starts)))
    steps = 400
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=H, max_steps=steps)
    sol = ukjax.simulate_batch(tree, q0, qd0, 0.0, steps * H, devices=jax.devices()[:1], **fixed)
    assert bool(jnp.all(sol.success))
    for (qpos, qvel), q1 in zip(starts, sol.q[:, -1]):
        d = mujoco.MjData(mjm)
        d.qpos[:], d.qvel[:] = qpos, qvel
        for _ in range(steps):
            mujoco.mj_step(mjm, d)
        ours = np.asarray(eqx.filter_jit(tree.kinematics)(q1).positions)
        np.testing.assert_allclose(ours, d.xpos[1:], atol=1e-7)
        assert float(np.max(np.abs(d.xpos[1:] - body_positions(mjm, qpos)))) > 1e-2  # it moved


@pytest.fixture(scope="module")
def undamped(model):
    """The loops closed, the joints' damping off (so that energy is conserved)."""
    tree = model.system
    return ukjax.ConstrainedSystem(
        eqx.tree_at(lambda t: t.damping, tree, 0 * tree.damping), model.constraints
    )


@pytest.fixture(scope="module")
def starts(model, undamped):
    """Eight random states projected onto the loops (turns of ~0.06 rad: from ~0.2 rad turns of
    the rods, projection lands the loops near configurations too stiff for RK4 at `H`)."""
    states = random_states(model, mujoco_model(equality=True), 8, seed=1, scale=0.3)
    # one by one: the program `from_mjcf` compiled to project the keyframe serves again
    projected = [undamped.project(0.0, *model.state_from_mujoco(*s)) for s in states]
    return jnp.stack([p.q for p in projected]), jnp.stack([p.qd for p in projected])


def test_closed_loops_against_mujocos_functions_in_a_batch(model, undamped, starts):
    """Loops closed, no damping: one `simulate_batch` of 0.1 s of RK4 from the eight projected
    states ends SUCCESS for every member with the loops (and quaternion norms) held to 1e-9,
    and three members' bodies are within 1e-6 m of the KKT integration on MuJoCo's
    functions."""
    q0, qd0 = starts
    steps = 400
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=H, max_steps=steps)
    sol = ukjax.simulate_batch(undamped, q0, qd0, 0.0, steps * H, devices=jax.devices()[:1], **fixed)
    assert [ukjax.Status(int(s)).name for s in sol.status] == ["SUCCESS"] * 8
    assert float(jnp.max(jnp.abs(sol.phi))) < 1e-9

    mjm = mujoco_model(equality=True, damping=False)
    kinematics = eqx.filter_jit(model.system.kinematics)
    for member in range(3):
        qpos, qvel = model.state_to_mujoco(q0[member], qd0[member])
        reference = mujoco_kkt_rk4(mjm, np.asarray(qpos), np.asarray(qvel), steps)
        ours = np.asarray(kinematics(sol.q[member, -1]).positions)
        np.testing.assert_allclose(ours, body_positions(mjm, reference), atol=1e-6)
        assert float(np.max(np.abs(ours - body_positions(mjm, qpos)))) > 1e-3  # it moved


def test_energy_is_conserved_over_a_second(model, undamped, starts):
    """Loops closed, no damping, 1 s from the first projected state (Tsit5 at 1e-10): MuJoCo's
    `mj_energyPos + mj_energyVel` of `state_to_mujoco` constant to 1e-6 relative."""
    q0, qd0 = (x[0] for x in starts)
    sol = ukjax.simulate(undamped, q0, qd0, 0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 11), rtol=1e-10, atol=1e-10)
    mjm = mujoco_model(equality=True, damping=False)
    d = mujoco.MjData(mjm)
    energies = []
    for q, qd in zip(sol.q, sol.qd):
        d.qpos[:], d.qvel[:] = model.state_to_mujoco(q, qd)
        mujoco.mj_forward(mjm, d)
        energies.append(d.energy[0] + d.energy[1])
    np.testing.assert_allclose(energies, energies[0], rtol=1e-6)
    assert float(jnp.max(jnp.abs(sol.phi))) < 1e-9


def test_forward_mode_derivatives_in_inertial_parameters(model, starts):
    """d(the left foot's position after 0.05 s of RK4, loops closed) in the shin's mass and in the
    transverse inertia of the achilles rod (the body hung from the left ball joint: the one it
    swings with), damping on, by `ForwardMode`, against central differences of the same
    discrete map, to 1e-6 relative."""
    tree = model.system
    foot, shin = tree.body_names.index("left-foot"), tree.body_names.index("left-shin")
    rod = tree.body_names.index("left-achilles-rod")
    q0, qd0 = (x[0] for x in starts)  # on the loops (damping moves no state)

    def foot_position(delta):
        edited = eqx.tree_at(
            lambda t: (t.masses, t.inertias),
            tree,
            (
                tree.masses.at[shin].add(delta[0]),
                tree.inertias.at[rod].add(delta[1] * jnp.diag(jnp.array([0.0, 1.0, 1.0]))),
            ),
        )
        system = ukjax.ConstrainedSystem(edited, model.constraints)
        fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=H, max_steps=200, adjoint=diffrax.ForwardMode())
        sol = ukjax.simulate(system, q0, qd0, 0.0, 200 * H, ts=jnp.array([200 * H]), **fixed)
        return edited.kinematics(sol.q[-1]).positions[foot]

    # steps against the shin's 0.58 kg and the rod's 4.5e-3 kg m² (the rod's axial 3.8e-6 is
    # left out: no difference step resolves it, 2e-6 relative at best between truncation
    # and round-off)
    e, h = jnp.eye(2), jnp.array([1e-4, 1e-5])[:, None]
    # one batch, one program: the tangents at 0 and the values at ±h for the differences
    deltas = jnp.concatenate([0 * e, h * e, -h * e])
    values, tangents = jax.jit(jax.vmap(lambda d, t: jax.jvp(foot_position, (d,), (t,))))(
        deltas, jnp.tile(e, (3, 1))
    )
    differences = (values[2:4] - values[4:6]) / (2 * h)
    assert bool(jnp.all(jnp.linalg.norm(differences, axis=1) > 1e-4))
    relative = jnp.linalg.norm(tangents[:2] - differences, axis=1) / jnp.linalg.norm(differences, axis=1)
    assert float(jnp.max(relative)) < 1e-6
