"""Systems: Lagrangian by automatic differentiation against closed forms (seed 001 eq. 34–36,
a pendulum on a moving support), and cascading of constrained systems."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax.models import ScaraArm


def scara_lagrangian(arm: ScaraArm) -> ukjax.LagrangianSystem:
    """SCARA energies written from the links' kinematics (not from eq. 34)."""
    m1, m2, m3, m4 = arm.m

    def planar(q, d):
        return jnp.stack(
            [
                -arm.l1 * jnp.sin(q[0]) - d * jnp.sin(q[0] + q[1]),
                arm.l1 * jnp.cos(q[0]) + d * jnp.cos(q[0] + q[1]),
            ]
        )

    def T(t, q, qd):
        v1 = jax.jvp(lambda q: arm.r1 * jnp.stack([-jnp.sin(q[0]), jnp.cos(q[0])]), (q,), (qd,))[1]
        v2 = jax.jvp(lambda q: planar(q, arm.r2), (q,), (qd,))[1]
        v34 = jax.jvp(lambda q: planar(q, arm.l2), (q,), (qd,))[1]  # links 3 and 4 sit at the elbow end
        w1, w2, w3 = qd[0], qd[0] + qd[1], qd[0] + qd[1] + qd[2]
        translational = m1 * v1 @ v1 + m2 * v2 @ v2 + (m3 + m4) * v34 @ v34 + m4 * qd[3] ** 2
        rotational = arm.Iz[0] * w1**2 + arm.Iz[1] * w2**2 + (arm.Iz[2] + arm.Iz[3]) * w3**2
        return 0.5 * (translational + rotational)

    return ukjax.LagrangianSystem(T, lambda t, q: m4 * arm.g * (arm.l0 + q[3]))


@pytest.mark.parametrize("seed", range(3))
def test_lagrangian_scara_matches_seed001_closed_form(seed):
    rng = np.random.default_rng(seed)
    arm = ScaraArm()
    lag = scara_lagrangian(arm)
    q, qd = jnp.asarray(rng.normal(size=4)), jnp.asarray(rng.normal(size=4))

    @jax.jit  # one program: evaluated eagerly, the unrolled solve compiles operation by operation
    def both(q, qd):
        return [(s.mass_matrix(0.0, q), s.forces(0.0, q, qd), s.acceleration(0.0, q, qd)) for s in (lag, arm)]

    (M, Q, qdd), (M_arm, Q_arm, qdd_arm) = both(q, qd)
    np.testing.assert_allclose(M, M_arm, atol=1e-12)
    np.testing.assert_allclose(Q, Q_arm, atol=1e-12)
    np.testing.assert_allclose(qdd, qdd_arm, atol=1e-11)


def test_lagrangian_time_dependent_support():
    """Pendulum hung from a support moving as x_s = a sin(ωt): θ̈ = −(g/l) sin θ − (ẍ_s/l) cos θ."""
    m, l, g, a, w = 1.3, 0.7, 9.81, 0.2, 3.0

    def T(t, q, qd):
        xs_dot = a * w * jnp.cos(w * t)
        return 0.5 * m * ((xs_dot + l * qd[0] * jnp.cos(q[0])) ** 2 + (l * qd[0] * jnp.sin(q[0])) ** 2)

    lag = ukjax.LagrangianSystem(
        T, lambda t, q: -m * g * l * jnp.cos(q[0]), lambda t, q, qd: jnp.array([-0.1 * qd[0]])
    )
    t, th, thd = 0.4, 0.9, -1.1
    xs_ddot = -a * w**2 * np.sin(w * t)
    expected = -(g / l) * np.sin(th) - xs_ddot / l * np.cos(th) - 0.1 * thd / (m * l**2)
    qdd = jax.jit(lag.acceleration)(t, jnp.array([th]), jnp.array([thd]))  # one program
    np.testing.assert_allclose(qdd, [expected], rtol=1e-13)


def test_constraining_again_solves_jointly_and_sequential_is_the_literal_cascade():
    """Constraining a constrained system again solves all rows at once (= one system with
    C1 ∪ C2, itself checked against KKT in test_core). The literal cascade of seed 000 §3
    (`sequential=True`): imposing C1 ∪ C2 on top gives the same motion (nested projections in
    the mass metric), while imposing only C2 on top does not keep C1, since the outer level
    sees the inner one only as a force."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(5, 5))
    M = jnp.asarray(X @ X.T + 5 * np.eye(5))
    system = ukjax.ExplicitSystem(lambda t, q: M, lambda t, q, qd: jnp.sin(q) + qd**2)
    c1 = ukjax.Holonomic(lambda t, q: jnp.stack([q[0] * q[1] - 0.3, q[2] + jnp.sin(t)]))
    c2 = ukjax.Nonholonomic(lambda t, q, qd: qd[3] - q[4] * qd[0])
    q, qd = jnp.asarray(rng.normal(size=5)), jnp.asarray(rng.normal(size=5))
    inner = ukjax.ConstrainedSystem(system, c1)
    direct = ukjax.ConstrainedSystem(system, [c1, c2])
    joint = ukjax.ConstrainedSystem(inner, c2)
    nested = ukjax.ConstrainedSystem(inner, [c1, c2], sequential=True)
    only_c2 = ukjax.ConstrainedSystem(inner, c2, sequential=True)

    @jax.jit  # one program: evaluated eagerly, the unrolled solves compile operation by operation
    def evaluate(q, qd):
        solves = {
            name: (s.acceleration(0.3, q, qd), s.constraint_force(0.3, q, qd))
            for name, s in (("joint", joint), ("direct", direct), ("nested", nested))
        }
        violations = joint.violation(0.3, q, qd), direct.violation(0.3, q, qd), only_c2.violation(0.3, q, qd)
        forces = joint.forces(0.3, q, qd), system.forces(0.3, q, qd)
        return solves, violations, forces, inner.rows(0.3, q, qd), only_c2.acceleration(0.3, q, qd)

    solves, (joint_violation, direct_violation, only_c2_violation), (joint_forces, forces), rows1, only_c2_qdd = (
        evaluate(q, qd)
    )
    for got, want in zip(solves["joint"], solves["direct"]):
        np.testing.assert_allclose(got, want, atol=1e-12)
    for got, want in zip(joint_violation, direct_violation):  # the same rows, to rounding
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    np.testing.assert_allclose(joint_forces, forces)  # applied forces only
    for got, want in zip(solves["nested"], solves["direct"]):
        np.testing.assert_allclose(got, want, atol=1e-12)
    residual = rows1.A @ only_c2_qdd - rows1.b
    assert jnp.linalg.norm(residual) > 1e-3
    assert only_c2_violation[0].shape == (3,)  # both levels reported


def test_system_type_errors():
    with pytest.raises(TypeError, match="ukjax system"):
        ukjax.ConstrainedSystem(lambda t, q: q, ukjax.Holonomic(lambda t, q: q[0]))
    with pytest.raises(TypeError, match="Baumgarte"):
        ukjax.ConstrainedSystem(ScaraArm(), ukjax.Holonomic(lambda t, q: q[0]), (1.0, 2.0))
