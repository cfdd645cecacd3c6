"""Servo-constraint control against independent references: seed 002's closed-form force
(eq. 47), the Lagrange-multiplier (KKT) form of the passively constrained dynamics, the
null-space structure of eq. 35, and DOP853 on a bead with Coulomb friction (non-ideal
constraint, seed 002 eq. 12–13)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from scipy.integrate import solve_ivp

import ukjax
from ukjax import models

# Evaluations compiled as one program each (op by op, every operation compiles on its own).
call = eqx.filter_jit(lambda f, *args: f(*args))

TOL = dict(rtol=1e-11, atol=1e-11)


def test_two_mass_spring_force_is_seed002_eq47():
    model = models.two_mass_spring(m1=1.5, m2=0.7, k=12.0, l=0.8)
    s = model.system
    ctrl = ukjax.ServoControl(s, model.servo, model.actuation)
    ts = jnp.linspace(0, 5, 51)
    qd0 = jnp.array([0.3, 0.3])  # consistent with x2 − x1 = 2l
    sol = ukjax.simulate(ctrl.closed_loop(), model.q0, qd0, 0.0, 5.0, ts=ts, **TOL)
    u = jax.jit(jax.vmap(ctrl))(sol.ts, sol.q, sol.qd)[:, 0]
    F = -(1 + s.m1 / s.m2) * s.k * (sol.q[:, 1] - sol.q[:, 0] - s.l)
    np.testing.assert_allclose(u, F, atol=1e-10)
    np.testing.assert_allclose(sol.q[:, 1] - sol.q[:, 0], 2 * s.l, atol=1e-9)
    assert jnp.max(jnp.abs(sol.phi)) < 1e-9
    assert jnp.min(jnp.abs(F)) > 1.0  # the spring really is stretched: a real force is needed


def random_closed_chain(rng, n=6, p=2):
    X = rng.normal(size=(n, n))
    M = jnp.asarray(X @ X.T + n * np.eye(n))
    W = jnp.asarray(rng.normal(size=(p, n)))
    system = ukjax.ExplicitSystem(lambda t, q: M, lambda t, q, qd: -jnp.sin(q) - 0.1 * qd)
    passive = ukjax.Holonomic(lambda t, q: W @ q + 0.1 * jnp.sin(q[:p]))
    return M, system, passive


def test_exact_control_against_kkt():
    """u from the constrained input map makes the KKT solution of the passively constrained
    dynamics under Q + B u obey the servo constraints; the seed's formula does not."""
    rng = np.random.default_rng(0)
    M, system, passive = random_closed_chain(rng)
    servo = ukjax.Holonomic(lambda t, q: jnp.stack([q[3] - jnp.sin(t), q[4] * q[5] - 0.2]))
    B = jnp.asarray(rng.normal(size=(6, 3)))
    csys = ukjax.ConstrainedSystem(system, passive)
    t, q, qd = 0.4, jnp.asarray(rng.normal(size=6)), jnp.asarray(rng.normal(size=6))
    rows_p, rows_s = call(csys.rows, t, q, qd), call(ukjax.ConstrainedSystem(system, servo).rows, t, q, qd)

    def kkt_acceleration(u):
        K = np.block([[np.asarray(M), -np.asarray(rows_p.A).T], [np.asarray(rows_p.A), np.zeros((2, 2))]])
        rhs = np.concatenate([np.asarray(call(system.forces, t, q, qd) + B @ u), np.asarray(rows_p.b)])
        return np.linalg.solve(K, rhs)[:6]

    for exact, expect_tracking in [(True, True), (False, False)]:
        sol = call(ukjax.ServoControl(csys, servo, B, exact=exact).solution, t, q, qd)
        qdd = kkt_acceleration(sol.u)
        np.testing.assert_allclose(sol.acceleration, qdd, atol=1e-10)  # the closed loop's physics
        servo_residual = np.abs(np.asarray(rows_s.A) @ qdd - np.asarray(rows_s.b)).max()
        assert (servo_residual < 1e-10) == expect_tracking


def test_minimum_norm_and_nullspace_term():
    rng = np.random.default_rng(1)
    M, system, passive = random_closed_chain(rng)
    servo = ukjax.Holonomic(lambda t, q: q[3] - jnp.cos(t))
    B = jnp.asarray(rng.normal(size=(6, 4)))  # redundantly actuated: 4 inputs, 1 servo row
    csys = ukjax.ConstrainedSystem(system, passive)
    t, q, qd = 0.1, jnp.asarray(rng.normal(size=6)), jnp.asarray(rng.normal(size=6))
    s_vec = jnp.array([1.0, -2.0, 0.5, 3.0])
    plain = call(ukjax.ServoControl(csys, servo, B).solution, t, q, qd)
    shaped = call(ukjax.ServoControl(csys, servo, B, nullspace=lambda t, q, qd: s_vec).solution, t, q, qd)
    rows = call(ukjax.ConstrainedSystem(system, servo).rows, t, q, qd)
    for sol in (plain, shaped):
        np.testing.assert_allclose(rows.A @ sol.acceleration, rows.b, atol=1e-10)
    # the difference lies in the null space of A_s P B, and the plain input is orthogonal to it
    G = np.asarray(rows.A) @ np.asarray((shaped.acceleration - plain.acceleration)[:, None])
    np.testing.assert_allclose(G, 0, atol=1e-10)
    assert np.linalg.norm(shaped.u - plain.u) > 1e-3
    assert abs(float(plain.u @ (shaped.u - plain.u))) < 1e-10


def test_seed_formula_equals_exact_without_passive_constraints():
    model = models.two_mass_spring()
    q, qd = jnp.array([0.1, 2.3]), jnp.array([0.2, -0.1])
    exact = call(ukjax.ServoControl(model.system, model.servo, model.actuation), 0.0, q, qd)
    seed = call(ukjax.ServoControl(model.system, model.servo, model.actuation, exact=False), 0.0, q, qd)
    np.testing.assert_allclose(exact, seed, rtol=1e-13)


def test_unachievable_servo_constraints_are_reported():
    model = models.two_mass_spring()
    # two servo rows (x1 and x2 each prescribed), one input: not achievable in general
    both = [ukjax.Holonomic(lambda t, q: q[0] - jnp.sin(t)), ukjax.Holonomic(lambda t, q: q[1] - 2.0)]
    ctrl = ukjax.ServoControl(model.system, both, model.actuation)
    assert not call(ctrl.achievable, 0.0, jnp.array([0.0, 2.5]), jnp.array([1.0, 0.0]))
    assert call(ukjax.ServoControl(model.system, model.servo, model.actuation).achievable, 0.0, model.q0, model.qd0)
    out = ukjax.simulate(
        ctrl.closed_loop(), jnp.array([0.0, 2.5]), jnp.array([1.0, 0.0]), 0.0, 1.0, throw=False
    )
    assert out.status == ukjax.Status.INCONSISTENT_CONSTRAINTS
    with pytest.raises(Exception, match="inputs cannot produce"):
        ukjax.simulate(ctrl.closed_loop(), jnp.array([0.0, 2.5]), jnp.array([1.0, 0.0]), 0.0, 1.0)


def test_bad_actuation():
    model = models.two_mass_spring()
    with pytest.raises(ValueError, match="actuation has 3 rows"):
        ukjax.ServoControl(model.system, model.servo, jnp.ones((3, 1)))(0.0, model.q0, model.qd0)
    with pytest.raises(ValueError, match="actuation must be an \\(n, m\\) matrix"):
        ukjax.ServoControl(model.system, model.servo, jnp.ones((2, 1, 1)))
    with pytest.raises(TypeError, match="wrap the function"):
        ukjax.ServoControl(model.system, [lambda t, q: q[0]], model.actuation)


def test_coulomb_friction_bead_on_vertical_circle():
    """Non-ideal constraint: friction μ|N| against the motion, N the (ideal) normal force
    from U-K, on a bead threaded on a vertical circle. Reference: the angle ODE
    R θ̈ = −g sin θ − μ |R θ̇² + g cos θ| sign(θ̇), by DOP853."""
    R, g, mu, mass = 1.0, 9.81, 0.1, 0.5
    system = ukjax.ExplicitSystem(
        lambda t, q: mass * jnp.eye(2), lambda t, q, qd: jnp.array([0.0, -mass * g])
    )
    hoop = ukjax.Holonomic(lambda t, q: q @ q - R**2)

    def friction(t, q, qd):
        rows = hoop.rows(t, q, qd)
        normal = ukjax.constraint_force(system.mass_matrix(t, q), system.forces(t, q, qd), rows.A, rows.b)
        return -mu * jnp.linalg.norm(normal) * qd / jnp.linalg.norm(qd)

    csys = ukjax.ConstrainedSystem(system, hoop, nonideal=friction)
    th0, thd0, t1 = 0.2, 6.0, 0.5
    ts = np.linspace(0, t1, 21)
    ref = solve_ivp(
        lambda t, y: [
            y[1],
            (-g * np.sin(y[0]) - mu * abs(R * y[1] ** 2 + g * np.cos(y[0])) * np.sign(y[1])) / R,
        ],
        (0, t1),
        [th0, thd0],
        "DOP853",
        t_eval=ts,
        rtol=1e-13,
        atol=1e-13,
    )
    assert np.all(ref.y[1] > 0.5)  # keeps moving one way: the sign never switches
    q0 = R * jnp.array([np.sin(th0), -np.cos(th0)])
    qd0 = R * thd0 * jnp.array([np.cos(th0), np.sin(th0)])
    sol = ukjax.simulate(csys, q0, qd0, 0.0, t1, ts=ts, **TOL)
    np.testing.assert_allclose(sol.q[:, 0], R * np.sin(ref.y[0]), atol=1e-8)
    np.testing.assert_allclose(sol.q[:, 1], -R * np.cos(ref.y[0]), atol=1e-8)
    # friction took energy out: the work lost equals ∫ μ N v dt (checked through the reference)
    energy = 0.5 * mass * jnp.sum(sol.qd**2, axis=1) + mass * g * sol.q[:, 1]
    assert energy[-1] < energy[0] - 0.1
    # one program (op by op, every operation compiles on its own)
    A, force, applied = jax.jit(
        lambda q, qd: (hoop.rows(0.0, q, qd).A, csys.constraint_force(0.0, q, qd), friction(0.0, q, qd))
    )(sol.q[-1], sol.qd[-1])
    null = scipy.linalg.null_space(np.asarray(A))
    np.testing.assert_allclose(null.T @ np.asarray(force), null.T @ np.asarray(applied), atol=1e-10)


def test_a_closed_loop_inside_contacts_is_its_control_as_a_force():
    """Servo control under unilateral constraints: a point mass whose actuator on x follows
    x = 0.2 sin 3t while it falls onto a floor with an impact (e = 0.5); the closed loop
    wrapped in the floor moves as the same inputs applied as a given force (`Forced`), and
    the floor holds it."""
    system = ukjax.ExplicitSystem(lambda t, q: jnp.diag(jnp.array([2.0, 2.0])), lambda t, q, qd: jnp.array([0.0, -19.62]))
    servo = ukjax.Holonomic(lambda t, q: q[0] - 0.2 * jnp.sin(3 * t))
    ctrl = ukjax.ServoControl(system, servo, jnp.array([[1.0], [0.0]]), stabilization=ukjax.Baumgarte(10.0, 25.0))
    floor = ukjax.Unilateral(lambda t, q: q[1], restitution=0.5)
    q0, qd0, ts = jnp.array([0.0, 0.3]), jnp.array([0.6, 0.0]), jnp.linspace(0.0, 1.0, 11)
    looped = ukjax.simulate(ukjax.ConstrainedSystem(ctrl.closed_loop(), floor), q0, qd0, 0.0, 1.0, ts=ts, **TOL)
    forced = ukjax.Forced(system, lambda t, q, qd: jnp.array([[1.0], [0.0]]) @ ctrl(t, q, qd))
    reference = ukjax.simulate(ukjax.ConstrainedSystem(forced, floor), q0, qd0, 0.0, 1.0, ts=ts, **TOL)
    assert looped.status == ukjax.Status.SUCCESS and int(looped.contacts.events) >= 2
    np.testing.assert_allclose(looped.q, reference.q, atol=1e-9)
    np.testing.assert_allclose(looped.q[:, 0], 0.2 * np.sin(3 * ts), atol=1e-6)
    assert float(jnp.min(looped.q[:, 1])) > -1e-9
