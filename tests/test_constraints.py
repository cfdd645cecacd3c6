"""Second-order reduction of constraints against hand-derived forms, including seed 001's
printed A and b (eq. 49) and its Baumgarte right-hand side (eq. 54)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from benchmarks.references import seed001_A_b, seed001_baumgarte_b
from ukjax.models import ScaraArm, ScaraTrajectory


@pytest.mark.parametrize("seed", range(3))
def test_holonomic_reduction_matches_seed001_eq49_and_eq54(seed):
    rng = np.random.default_rng(seed)
    t, q, qd = rng.uniform(0, 20), rng.normal(size=4), rng.normal(size=4)
    rows = ScaraTrajectory(ScaraArm()).rows(t, jnp.asarray(q), jnp.asarray(qd))
    A_ref, b_ref = seed001_A_b(t, q, qd)
    np.testing.assert_allclose(rows.A, A_ref, atol=1e-14)
    np.testing.assert_allclose(rows.b, b_ref, atol=1e-13)

    alpha, beta = rng.uniform(0, 5, 4), rng.uniform(0, 300, 4)
    csys = ukjax.ConstrainedSystem(ScaraArm(), ScaraTrajectory(ScaraArm()), ukjax.Baumgarte(alpha, beta))
    stabilized = csys.rows(t, jnp.asarray(q), jnp.asarray(qd)).b
    np.testing.assert_allclose(stabilized, seed001_baumgarte_b(t, q, qd, alpha, beta), atol=1e-11)


def test_nonholonomic_reduction_knife_edge():
    rng = np.random.default_rng(7)
    q, qd = rng.normal(size=3), rng.normal(size=3)
    con = ukjax.Nonholonomic(lambda t, q, qd: qd[0] * jnp.sin(q[2]) - qd[1] * jnp.cos(q[2]))
    rows = con.rows(0.0, jnp.asarray(q), jnp.asarray(qd))
    th, thd = q[2], qd[2]
    np.testing.assert_allclose(rows.A, [[np.sin(th), -np.cos(th), 0]], atol=1e-15)
    np.testing.assert_allclose(rows.b, [-(qd[0] * np.cos(th) + qd[1] * np.sin(th)) * thd], atol=1e-14)
    np.testing.assert_allclose(rows.phid, [qd[0] * np.sin(th) - qd[1] * np.cos(th)], atol=1e-15)
    np.testing.assert_allclose(rows.phi, [0.0])
    # Baumgarte on a first-order row: only ψ̇ + α ψ = 0 (β does not enter)
    stab = ukjax.Baumgarte(3.0, 100.0).apply(rows)
    np.testing.assert_allclose(stab, rows.b - 3.0 * rows.phid, atol=1e-15)


def test_time_dependent_holonomic():
    # φ = q0 − sin(t²): φ̈ = q̈0 − 2cos(t²) + 4t² sin(t²)
    con = ukjax.Holonomic(lambda t, q: q[0] - jnp.sin(t**2))
    t = 0.7
    rows = con.rows(t, jnp.array([0.1, 0.2]), jnp.array([0.3, 0.4]))
    np.testing.assert_allclose(rows.A, [[1.0, 0.0]])
    np.testing.assert_allclose(rows.b, [2 * np.cos(t**2) - 4 * t**2 * np.sin(t**2)], rtol=1e-14)
    np.testing.assert_allclose(rows.phid, [0.3 - 2 * t * np.cos(t**2)], rtol=1e-14)


def test_mixed_constraints_and_bad_input():
    system = ukjax.ExplicitSystem(lambda t, q: jnp.eye(3), lambda t, q, qd: jnp.zeros(3))
    accel = ukjax.AccelerationConstraint(lambda t, q, qd: (jnp.array([[0.0, 0.0, 1.0]]), jnp.array([2.0])))
    mixed = ukjax.ConstrainedSystem(
        system,
        [ukjax.Holonomic(lambda t, q: q[0] - t), ukjax.Nonholonomic(lambda t, q, qd: qd[1] - qd[0]), accel],
    )
    acceleration = jax.jit(lambda qd: mixed.acceleration(0.0, jnp.zeros(3), qd))  # one program
    qdd = acceleration(jnp.array([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(qdd, [0.0, 0.0, 2.0], atol=1e-15)

    with pytest.raises(TypeError, match="wrap the function"):
        ukjax.ConstrainedSystem(system, [lambda t, q: q[0]])
    with pytest.raises(ValueError, match="one entry per constraint row"):
        ukjax.ConstrainedSystem(system, [accel, accel], ukjax.Baumgarte(jnp.ones(3), 1.0)).acceleration(
            0.0, jnp.zeros(3), jnp.zeros(3)
        )

    class WrongWidth(ukjax.AbstractConstraint):
        def rows(self, t, q, qd):
            return ukjax.ConstraintRows(jnp.ones((1, 2)), jnp.ones(1), jnp.zeros(1), jnp.zeros(1))

    with pytest.raises(ValueError, match="gives A with 2 columns"):
        ukjax.ConstrainedSystem(system, WrongWidth()).acceleration(0.0, jnp.zeros(3), jnp.zeros(3))
    bad = ukjax.AccelerationConstraint(lambda t, q, qd: (jnp.ones((1, 2)), jnp.ones(1)))
    with pytest.raises(ValueError, match="AccelerationConstraint fn must return A"):
        ukjax.ConstrainedSystem(system, bad).acceleration(0.0, jnp.zeros(3), jnp.zeros(3))
