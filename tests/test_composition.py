"""Composition keeps its promises: wrapped, composed and re-constrained systems against the
same mechanism written directly as one ConstrainedSystem, statuses over the whole run,
no recompilation and gradients that reach every parameter."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax import models

G = 9.81
TOL = dict(rtol=1e-10, atol=1e-10)


class PointMass(ukjax.AbstractUnconstrainedSystem):
    """A point mass in the plane under gravity."""

    m: jax.Array

    def mass_matrix(self, t, q):
        return self.m * jnp.eye(2)

    def forces(self, t, q, qd):
        return jnp.stack([0.0 * q[0], -self.m * G])


def rod(length, at=slice(0, 2)):
    return ukjax.Holonomic(lambda t, q: q[at] @ q[at] - length**2)


def push(t, q, qd):
    return jnp.stack([3.0 * jnp.cos(2 * t), 0.0 * t])


def chain(k, seed):
    rng = np.random.default_rng(seed)
    return models.PlanarChain(
        rng.uniform(0.5, 1.5, k), rng.uniform(0.5, 2, k), rng.uniform(0.2, 0.5, k), rng.uniform(0.05, 0.2, k)
    )


@pytest.mark.parametrize("sizes", [(2, 2), (3, 2)])
def test_composed_parts_in_any_name_order(sizes):
    """Names out of alphabetical order: the same dynamics eager, jitted, vmapped, under grad
    and in simulate, equal to each part on its own (block-diagonal M)."""
    right, left = chain(sizes[0], 1), chain(sizes[1], 2)
    system = ukjax.ComposedSystem({"right": right, "left": left})
    n0, n = sizes[0], sum(sizes)
    rng = np.random.default_rng(3)
    q, qd = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=n))

    @jax.jit  # the reference as one program (what is tested runs eagerly below)
    def expected(q, qd):
        return jnp.concatenate(
            [right.acceleration(0.0, q[:n0], qd[:n0]), left.acceleration(0.0, q[n0:], qd[n0:])]
        )

    def acceleration(system, q, qd):  # the system passes through each transform as a pytree
        return system.acceleration(0.0, q, qd)

    want = expected(q, qd)
    np.testing.assert_allclose(acceleration(system, q, qd), want, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(acceleration)(system, q, qd), want, rtol=1e-12)
    np.testing.assert_allclose(
        jax.vmap(acceleration, (None, 0, 0))(system, q[None], qd[None])[0], want, rtol=1e-12
    )
    grad = jax.grad(lambda q, system: jnp.sum(jnp.sin(acceleration(system, q, qd))))(q, system)
    np.testing.assert_allclose(grad, jax.jit(jax.grad(lambda q: jnp.sum(jnp.sin(expected(q, qd)))))(q), rtol=1e-10)
    end = ukjax.simulate(system, q, qd, 0.0, 0.5, **TOL).q[-1]
    np.testing.assert_allclose(
        end[:n0], ukjax.simulate(right, q[:n0], qd[:n0], 0.0, 0.5, **TOL).q[-1], atol=1e-9
    )
    np.testing.assert_allclose(
        end[n0:], ukjax.simulate(left, q[n0:], qd[n0:], 0.0, 0.5, **TOL).q[-1], atol=1e-9
    )
    assert system.slice("left") == slice(n0, n)


def test_forced_constrained_pendulum_keeps_its_rod():
    """A motor on a constrained pendulum = the pendulum built with the motor inside."""
    wrapped = ukjax.Forced(ukjax.ConstrainedSystem(PointMass(jnp.asarray(1.0)), rod(1.0)), push)
    direct = ukjax.ConstrainedSystem(ukjax.Forced(PointMass(jnp.asarray(1.0)), push), rod(1.0))
    q0, qd0, ts = jnp.array([0.6, -0.8]), jnp.zeros(2), jnp.linspace(0, 2, 21)
    got = ukjax.simulate(wrapped, q0, qd0, 0.0, 2.0, ts=ts, **TOL)
    want = ukjax.simulate(direct, q0, qd0, 0.0, 2.0, ts=ts, **TOL)
    np.testing.assert_allclose(got.q, want.q, atol=1e-9)
    assert got.phi is not None and jnp.max(jnp.abs(got.phi)) < 1e-8
    np.testing.assert_allclose(jnp.linalg.norm(got.q, axis=1), 1.0, atol=1e-8)


def test_composed_constrained_pendulums_with_a_coupling():
    """Two constrained pendulums composed and coupled by a rod between the masses: every
    constraint holds, all rows appear in `phi`, and the motion is that of one system with
    the three constraints."""
    lengths, link = (1.0, 1.3), 0.9
    p1 = ukjax.ConstrainedSystem(PointMass(jnp.asarray(1.0)), rod(lengths[0]))
    p2 = ukjax.ConstrainedSystem(PointMass(jnp.asarray(2.5)), rod(lengths[1]), ukjax.Baumgarte(1.0, 4.0))
    coupling = ukjax.Holonomic(lambda t, q: jnp.sum((q[:2] - q[2:]) ** 2) - link**2)
    composed = ukjax.ConstrainedSystem(
        ukjax.ComposedSystem({"second": p1, "first": p2}, {"second": 2, "first": 2}), coupling
    )
    free = ukjax.ComposedSystem(
        {"second": PointMass(jnp.asarray(1.0)), "first": PointMass(jnp.asarray(2.5))},
        {"second": 2, "first": 2},
    )
    direct = ukjax.ConstrainedSystem(
        ukjax.ConstrainedSystem(free, [rod(lengths[0], slice(0, 2))]),
        [rod(lengths[1], slice(2, 4))],
        ukjax.Baumgarte(1.0, 4.0),
    )
    direct = ukjax.ConstrainedSystem(direct, coupling)
    # a consistent start: both masses on their circles, the link at its length
    a = 0.7
    x1 = lengths[0] * jnp.array([jnp.sin(a), -jnp.cos(a)])
    start = direct.project(0.0, jnp.concatenate([x1, x1 + jnp.array([0.4, -0.8])]), jnp.zeros(4))
    q0, qd0 = start.q, start.qd
    ts = jnp.linspace(0, 2, 21)
    got = ukjax.simulate(composed, q0, qd0, 0.0, 2.0, ts=ts, **TOL)
    want = ukjax.simulate(direct, q0, qd0, 0.0, 2.0, ts=ts, **TOL)
    np.testing.assert_allclose(got.q, want.q, atol=1e-9)
    assert got.phi.shape == (21, 3)
    assert jnp.max(jnp.abs(got.phi)) < 1e-8
    np.testing.assert_allclose(jnp.linalg.norm(got.q[:, :2], axis=1), lengths[0], atol=1e-8)
    np.testing.assert_allclose(jnp.linalg.norm(got.q[:, 2:], axis=1), lengths[1], atol=1e-8)
    # the sequential cascade of the same coupling breaks the rods, as seed 000 §3 does
    literal = ukjax.ConstrainedSystem(composed.system, coupling, sequential=True)
    broken = ukjax.simulate(literal, q0, qd0, 0.0, 2.0, ts=ts, **TOL)
    assert jnp.max(jnp.abs(broken.phi[:, :2])) > 1e-2


def test_faults_are_reported_as_what_they_are_and_fast():
    def mass(t, q):
        return jnp.diag(jnp.stack([1.0 + 0 * t, 0.5 - t]))

    softening = ukjax.ExplicitSystem(mass, lambda t, q, qd: jnp.zeros(2))
    ts = jnp.linspace(0.0, 1.0, 11)
    out = ukjax.simulate(softening, jnp.zeros(2), jnp.ones(2), 0.0, 1.0, ts=ts, throw=False)
    assert out.status == ukjax.Status.SINGULAR_MASS_MATRIX
    assert int(out.stats["num_steps"]) < 200
    # q = t (no forces) before the mass matrix turns singular at t = 0.5; no motion after it
    np.testing.assert_allclose(out.q[:5], jnp.stack([ts[:5], ts[:5]], axis=1), rtol=0, atol=1e-12)
    assert bool(jnp.all(jnp.isinf(out.q[6:]))) and bool(jnp.all(jnp.isinf(out.qd[6:])))
    with pytest.raises(Exception, match="stopped being symmetric positive definite"):
        ukjax.simulate(softening, jnp.zeros(2), jnp.ones(2), 0.0, 1.0)

    twice = ukjax.ConstrainedSystem(PointMass(jnp.asarray(1.0)), [rod(1.0), rod(1.0)], method="cholesky")
    out = ukjax.simulate(twice, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 1.0, throw=False)
    assert out.status == ukjax.Status.REDUNDANT_CONSTRAINTS
    assert int(out.stats["num_steps"]) < 10
    with pytest.raises(Exception, match="method='svd'"):
        ukjax.simulate(twice, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 1.0)
    robust = ukjax.ConstrainedSystem(twice.system, twice.constraints)
    assert ukjax.simulate(robust, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 1.0, throw=False).success


def test_inconsistency_between_saves_is_caught():
    """Rows `ẍ = 0` and `ẍ = g(t)` contradict each other only for 0.4 < t < 0.6."""

    def rows(t, q, qd):
        g = 100 * jnp.maximum(0.01 - (t - 0.5) ** 2, 0.0)
        return jnp.array([[1.0, 0.0], [1.0, 0.0]]), jnp.stack([0.0 * t, g])

    csys = ukjax.ConstrainedSystem(PointMass(jnp.asarray(1.0)), ukjax.AccelerationConstraint(rows))
    for t in (0.0, 1.0):  # consistent at the default saves
        assert csys.inconsistency(t, jnp.zeros(2), jnp.zeros(2)) == 0
    out = ukjax.simulate(csys, jnp.zeros(2), jnp.zeros(2), 0.0, 1.0, throw=False)
    assert out.status == ukjax.Status.INCONSISTENT_CONSTRAINTS


def test_python_numbers_and_lists_do_not_recompile():
    traces = []

    def mass(t, q):
        traces.append(None)
        return jnp.eye(2)

    csys = ukjax.ConstrainedSystem(
        ukjax.ExplicitSystem(mass, lambda t, q, qd: jnp.array([0.0, -G])), rod(1.0)
    )
    ukjax.simulate(csys, [0.6, -0.8], [0.0, 0.0], 0.0, 1.0, rtol=1e-8)
    count = len(traces)
    out = ukjax.simulate(csys, [0.8, -0.6], [0.3, 0.4], 0.1, 1.3, rtol=1e-9)
    assert len(traces) == count and count > 0
    assert out.success


def test_every_parameter_is_a_float_leaf_gradients_reach():
    spring = models.TwoMassSpring()
    system = ukjax.ConstrainedSystem(spring, models.SpringLength(2.0), ukjax.Baumgarte(2, 25))
    q0, qd0 = jnp.array([0.0, 2.1]), jnp.array([0.0, 0.3])

    def loss(system):
        return ukjax.simulate(system, q0, qd0, 0.0, 1.0, **TOL).q[-1, 0]

    grads = eqx.filter_grad(loss)(system)
    leaves = (grads.system.m1, grads.system.m2, grads.system.k, grads.system.l, grads.constraints[0].length)
    leaves += (grads.stabilization.alpha, grads.stabilization.beta)
    assert all(leaf is not None for leaf in leaves)
    h = 1e-5
    for where, g in [
        (lambda s: s.stabilization.beta, grads.stabilization.beta),
        (lambda s: s.system.m1, grads.system.m1),
    ]:
        value = where(system)
        fd = (loss(eqx.tree_at(where, system, value + h)) - loss(eqx.tree_at(where, system, value - h))) / (
            2 * h
        )
        np.testing.assert_allclose(g, fd, rtol=1e-6)

    model = models.parallel_2dof()
    trajectory = model.servo[0]
    d_amplitude = eqx.filter_grad(lambda c: c.residual(0.3, model.q0)[0])(trajectory).amplitude
    np.testing.assert_allclose(d_amplitude, -np.cos(0.3), rtol=1e-12)


def test_lagrangian_mass_matrix_with_norms():
    m = 1.7
    # one program each (op by op, every operation of the Hessian compiles on its own)
    mass_matrix = eqx.filter_jit(lambda system, q: system.mass_matrix(0.0, q))
    speed = ukjax.LagrangianSystem(lambda t, q, qd: 0.5 * m * jnp.linalg.norm(qd) ** 2)
    np.testing.assert_allclose(mass_matrix(speed, jnp.zeros(3)), m * np.eye(3), atol=1e-14)
    # a relative velocity: T = ½ m ‖q̇₀ − q̇₁‖² + ½ m q̇₁²
    relative = ukjax.LagrangianSystem(
        lambda t, q, qd: 0.5 * m * (jnp.linalg.norm(qd[:1] - qd[1:]) ** 2 + qd[1] ** 2)
    )
    np.testing.assert_allclose(
        mass_matrix(relative, jnp.zeros(2)), m * np.array([[1.0, -1.0], [-1.0, 2.0]]), atol=1e-14
    )


def test_joint_axes_and_integer_input():
    for make in (lambda axis: models.revolute(axis, (0.3, -1.0, 2.0)), models.prismatic):
        np.testing.assert_allclose(make((0.0, 0.0, 2.5))[1], make((0.0, 0.0, 1.0))[1], rtol=1e-15)
        with pytest.raises(ValueError, match="non-zero"):
            make((0.0, 0.0, 0.0))
    qdd = ukjax.udwadia_kalaba(np.eye(2, dtype=int), [0, -10], [[1, 1]], [0])
    np.testing.assert_allclose(qdd, [5.0, -5.0], rtol=1e-15)


def test_nesting_evaluates_the_model_once():
    traces = []

    def mass(t, q):
        traces.append(None)
        return jnp.eye(2)

    system = ukjax.ExplicitSystem(mass, lambda t, q, qd: jnp.array([0.0, -G]))
    for _ in range(4):
        system = ukjax.Forced(ukjax.ConstrainedSystem(system, rod(1.0)), push)
    jax.make_jaxpr(system.acceleration)(0.0, jnp.array([0.6, -0.8]), jnp.zeros(2))
    assert len(traces) == 1
