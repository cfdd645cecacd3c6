"""Ball and free joints (quaternion coordinates with their norm rows) against MuJoCo: dynamics
at random states, states in MuJoCo's terms, a free-flying arm's motion under RK4, the norm
held over a long run, derivatives at the identity quaternion."""


import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from ukjax import models

# A floating base (free joint, rotated frames, full inertia tensor), a ball joint off its body
# origin with damping and armature, and a sprung hinge; gravity off the axes.
XML = """<mujoco><option gravity="0.3 -0.2 -9.81" timestep="0.001" integrator="RK4">
  <flag contact="disable"/></option>
  <worldbody><body name="base" pos="0.1 0.2 1" quat="0.9 0.1 0.2 0.3"><freejoint name="root"/>
    <inertial pos="0.02 0.01 -0.03" mass="3" fullinertia="0.05 0.04 0.03 0.001 -0.002 0.003"/>
    <body name="arm" pos="0.2 0 0" euler="10 20 30">
      <joint name="ball" type="ball" pos="0.01 0.02 0" damping="0.3" armature="0.02"/>
      <inertial pos="0.1 0 0.02" mass="1.2" diaginertia="0.02 0.015 0.01"/>
      <body name="fore" pos="0.3 0 0">
        <joint name="h" axis="0 1 0.2" damping="0.1" stiffness="2" springref="0.3"/>
        <inertial pos="0.1 0 0" mass="0.7" diaginertia="0.01 0.01 0.002"/></body></body></body>
  </worldbody></mujoco>"""


def random_state(mjm, rng):
    qpos = mjm.qpos0.copy()
    qpos[:3] += rng.normal(size=3)
    for a in (3, 7):
        u = rng.normal(size=4)
        qpos[a : a + 4] = u / np.linalg.norm(u)
    qpos[11] = rng.normal()
    return qpos, rng.normal(size=mjm.nv)


@eqx.filter_jit
def evaluate(tree, q, qd):
    return tree.mass_matrix(0.0, q), tree.forces(0.0, q, qd), tree.acceleration(0.0, q, qd), tree.kinematics(q)


def test_dynamics_equal_mujocos_in_its_velocities():
    """`Gᵀ M_mj G`, `Gᵀ (qfrc_passive − qfrc_bias)` and `qacc = G q̈` (MuJoCo's velocities are
    `G q̇`), body frames, and the states' round trip, at three random states."""
    model = models.from_mjcf(XML)
    tree = model.system
    assert (tree.num_coordinates, tree.num_velocities) == (12, 10)
    assert tree.coordinate_names[:4] == ("root.x", "root.y", "root.z", "root.qw")
    assert tree.coordinate_names[7:] == ("ball.qw", "ball.qx", "ball.qy", "ball.qz", "h")
    mjm = mujoco.MjModel.from_xml_string(XML)
    d = mujoco.MjData(mjm)
    rng = np.random.default_rng(0)
    for _ in range(3):
        qpos, qvel = random_state(mjm, rng)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(mjm, d)
        M = np.zeros((mjm.nv, mjm.nv))
        mujoco.mj_fullM(mjm, d, M)
        q, qd = model.state_from_mujoco(qpos, qvel)
        for ours, theirs in zip(model.state_to_mujoco(q, qd), (qpos, qvel)):
            np.testing.assert_allclose(ours, theirs, atol=1e-15)
        G = np.asarray(tree.velocity_map(q))
        Mq, Qq, qdd, kin = evaluate(tree, q, qd)
        np.testing.assert_allclose(Mq, G.T @ M @ G, atol=1e-12)
        np.testing.assert_allclose(Qq, G.T @ (d.qfrc_passive - d.qfrc_bias), atol=1e-12)
        np.testing.assert_allclose(G @ qdd, d.qacc, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(kin.positions, d.xpos[1:], atol=1e-14)
        np.testing.assert_allclose(kin.rotations.reshape(-1, 9), d.xmat[1:], atol=1e-14)


def test_motion_equals_mujocos_rk4_and_the_norm_holds():
    """0.1 s of RK4 at 1 ms from a spinning start: every body where MuJoCo's own RK4 puts it
    (1e-9 m); then 20 s at the same step: the quaternions' norms stay within 1e-9 of 1."""
    model = models.from_mjcf(XML)
    mjm = mujoco.MjModel.from_xml_string(XML)
    d = mujoco.MjData(mjm)
    qpos, qvel = random_state(mjm, np.random.default_rng(1))
    qvel[3:6] = [4.0, -3.0, 5.0]  # the base spins
    q0, qd0 = model.state_from_mujoco(qpos, qvel)
    d.qpos[:], d.qvel[:] = qpos, qvel
    for _ in range(100):
        mujoco.mj_step(mjm, d)

    @jax.jit
    def run(t1):
        fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=1e-3, max_steps=20_000)
        return ukjax.simulate(model.system, q0, qd0, 0.0, t1, ts=jnp.linspace(0.0, t1, 101), **fixed)

    sol = run(0.1)
    positions = eqx.filter_jit(lambda tree, q: tree.kinematics(q).positions)(model.system, sol.q[-1])
    np.testing.assert_allclose(positions, d.xpos[1:], atol=1e-9)
    long = run(20.0)
    norms = jnp.stack([jnp.linalg.norm(long.q[:, c : c + 4], axis=1) for c in (3, 7)])
    assert bool(long.success) and float(jnp.max(jnp.abs(norms - 1))) < 1e-9


def test_derivatives_at_the_identity_quaternion():
    """No NaN where every quaternion is the identity (MuJoCo's `qpos0`): the acceleration's
    derivatives in the state and the masses equal central differences."""
    model = models.from_mjcf(XML)
    tree, q, qd = model.system, model.q0, jnp.linspace(-1.0, 1.0, 12)

    @jax.jit
    def acceleration(q, masses):
        return eqx.tree_at(lambda t: t.masses, tree, masses).acceleration(0.0, q, qd)

    dq, dm = jnp.sin(jnp.arange(12.0)), jnp.array([0.3, -0.2, 0.5])
    _, tangent = jax.jvp(acceleration, (q, tree.masses), (dq, dm))
    h = 1e-6
    fd = (acceleration(q + h * dq, tree.masses + h * dm) - acceleration(q - h * dq, tree.masses - h * dm)) / (2 * h)
    assert bool(jnp.all(jnp.isfinite(tangent)))
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-6)


# A planar four-bar on a floating, tumbling frame: its `connect` has one row (along the hinges'
# axis) that is zero whatever the state.
FLOATING_FOURBAR = """<mujoco><option gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody><body name="frame" pos="0 0 1"><freejoint/>
    <inertial pos="0.2 0 0" mass="2" diaginertia="0.02 0.05 0.04"/>
    <body name="crank"><joint name="a" axis="0 1 0"/><inertial pos="0.1 0 0" mass="0.3" diaginertia="1e-3 1e-3 1e-4"/>
      <body name="coupler" pos="0.2 0 0"><joint name="b" axis="0 1 0"/>
        <inertial pos="0.2 0 0.05" mass="0.4" diaginertia="2e-3 2e-3 1e-4"/></body></body>
    <body name="rocker" pos="0.4 0 0"><joint name="c" axis="0 1 0"/>
      <inertial pos="0 0 0.15" mass="0.3" diaginertia="1e-3 1e-3 1e-4"/></body></body>
  </worldbody>
  <equality><connect body1="coupler" body2="rocker" anchor="0.4 0 0.1"/></equality>
  <keyframe><key name="open" qpos="0 0 1 1 0 0 0 -0.5 0.4 0.2"/></keyframe></mujoco>"""


def test_a_planar_loop_on_a_tumbling_base():
    """`connect` rows are the derivatives of its residual (written in `body1`'s axes) off the
    loop with a spinning base; the row along the hinges' axis is zero there, right side
    included, so fixed-step RK4 of the tumbling four-bar keeps its loop with consistent
    constraints all the way (in world axes that row is zero only on the loop, and the drift
    of the fixed step made its right side contradict it)."""
    with pytest.warns(UserWarning, match="projected"):
        model = models.from_mjcf(FLOATING_FOURBAR, keyframe="open")
    tree, (connect,) = model.system, model.constraints
    rng = np.random.default_rng(0)
    qpos = np.array(model.state_to_mujoco(model.q0, model.qd0)[0])
    qpos[3:7] = rng.normal(size=4)
    qpos[3:7] /= np.linalg.norm(qpos[3:7])
    qvel = rng.normal(size=9)
    qvel[3:6] = [4.0, -3.0, 5.0]  # the frame tumbles
    q, qd = model.state_from_mujoco(qpos + np.r_[np.zeros(7), 0.1, -0.2, 0.3], qvel)  # off the loop
    # each compiled as one program (op by op, every operation compiles on its own)
    rows = eqx.filter_jit(connect.system_rows)(tree, 0.0, q, qd)
    derived = eqx.filter_jit(ukjax.Holonomic(lambda t, q: connect.residual(tree, t, q)).rows)(0.0, q, qd)  # by autodiff
    for field in ("A", "b", "phi", "phid"):
        np.testing.assert_allclose(getattr(rows, field), getattr(derived, field), atol=1e-12)
    assert float(jnp.max(jnp.abs(rows.A[1]))) < 1e-14 and abs(float(rows.b[1])) < 1e-13
    assert float(jnp.max(jnp.abs(rows.A[::2]))) > 0.1

    closed = ukjax.ConstrainedSystem(tree, model.constraints)
    start = closed.project(0.0, *model.state_from_mujoco(qpos, qvel))
    q0, qd0 = start.q, start.qd
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=1e-3, max_steps=2000, throw=False)
    sol = ukjax.simulate(closed, q0, qd0, 0.0, 2.0, ts=jnp.linspace(0.0, 2.0, 21), **fixed)
    assert ukjax.Status(int(sol.status)) == ukjax.Status.SUCCESS
    assert float(jnp.max(jnp.abs(sol.phi))) < 1e-6
