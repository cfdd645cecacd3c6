"""Model builders against independent references: Pinocchio (CRBA/RNEA), the same model
through LagrangianSystem, and the closed forms the seeds print (seed 001 eq. 34, seed 002
appendix A2–A4, seed 000 eq. 14)."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import ukjax
from ukjax import models
from ukjax.models import PlanarChain

RNG = np.random.default_rng(42)


def random_chain(k, absolute=False, floating_base=False):
    return PlanarChain(
        RNG.uniform(0.3, 1.5, k),
        RNG.uniform(0.5, 3.0, k),
        RNG.uniform(-0.3, 0.8, (k, 2)),
        RNG.uniform(0.01, 0.5, k),
        gravity=RNG.normal(size=2),
        base=RNG.normal(size=2),
        absolute=absolute,
        floating_base=floating_base,
    )


def pinocchio_planar(chain: PlanarChain):
    """The same chain in Pinocchio: revolute-z joints (relative angles), after two prismatic
    joints for a floating base."""
    model = pin.Model()
    parent = 0
    if chain.floating_base:
        parent = model.addJoint(parent, pin.JointModelPX(), pin.SE3.Identity(), "x")
        parent = model.addJoint(parent, pin.JointModelPY(), pin.SE3.Identity(), "y")
        offset = np.zeros(3)
    else:
        offset = np.array([*np.asarray(chain.base), 0.0])
    lengths, com = np.asarray(chain.lengths), np.asarray(chain.com)
    for i in range(chain.num_links):
        placement = pin.SE3(np.eye(3), offset if i == 0 else np.array([lengths[i - 1], 0.0, 0.0]))
        parent = model.addJoint(parent, pin.JointModelRZ(), placement, f"joint{i}")
        inertia = pin.Inertia(float(chain.masses[i]), np.array([*com[i], 0.0]), np.diag([1e-3, 1e-3, float(chain.inertias[i])]))
        model.appendBodyToJoint(parent, inertia, pin.SE3.Identity())
    model.gravity.linear = np.array([*np.asarray(chain.gravity), 0.0])
    return model


def to_pinocchio_order(chain, x):
    """ukjax orders a floating chain (angles, x, y); Pinocchio (x, y, angles)."""
    return np.concatenate([x[chain.num_links :], x[: chain.num_links]]) if chain.floating_base else x


@pytest.mark.parametrize("k,floating", [(1, False), (3, False), (6, False), (2, True), (4, True)])
def test_planar_chain_matches_pinocchio(k, floating):
    chain = random_chain(k, floating_base=floating)
    model = pinocchio_planar(chain)
    data = model.createData()
    n = chain.num_coordinates
    q, qd = RNG.normal(size=n), RNG.normal(size=n)
    qp, vp = to_pinocchio_order(chain, q), to_pinocchio_order(chain, qd)
    M_pin = pin.crba(model, data, qp)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    bias_pin = pin.rnea(model, data, qp, vp, np.zeros(n))  # C q̇ + G
    M = to_pinocchio_order(chain, to_pinocchio_order(chain, np.asarray(chain.mass_matrix(0.0, jnp.asarray(q)))).T).T
    Q = to_pinocchio_order(chain, np.asarray(chain.forces(0.0, jnp.asarray(q), jnp.asarray(qd))))
    np.testing.assert_allclose(M, M_pin, atol=1e-12)
    np.testing.assert_allclose(-Q, bias_pin, atol=1e-12)


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("floating", [False, True])
def test_planar_chain_matches_lagrangian(absolute, floating):
    chain = random_chain(4, absolute=absolute, floating_base=floating)

    def T(t, q, qd):
        v = jax.jvp(chain.com_positions, (q,), (qd,))[1]
        w = jax.jvp(chain.absolute_angles, (q,), (qd,))[1]
        return 0.5 * jnp.sum(chain.masses * jnp.sum(v**2, axis=1)) + 0.5 * jnp.sum(chain.inertias * w**2)

    def V(t, q):
        return -jnp.sum(chain.masses * (chain.com_positions(q) @ chain.gravity))

    lag = ukjax.LagrangianSystem(T, V)
    n = chain.num_coordinates
    q, qd = jnp.asarray(RNG.normal(size=n)), jnp.asarray(RNG.normal(size=n))
    np.testing.assert_allclose(chain.mass_matrix(0.0, q), lag.mass_matrix(0.0, q), atol=1e-12)
    np.testing.assert_allclose(chain.forces(0.0, q, qd), lag.forces(0.0, q, qd), atol=1e-12)


def test_planar_chain_matches_seed002_appendix():
    """Seed 002 A2–A4: 5 links, absolute angles, centres of mass at mid-link, g = (0, −g)."""
    m, l, I, g = RNG.uniform(0.5, 2, 5), RNG.uniform(0.5, 2, 5), RNG.uniform(0.1, 1, 5), 9.8
    chain = PlanarChain(l, m, l / 2, I, gravity=(0.0, -g), absolute=True)
    th, thd = RNG.normal(size=5), RNG.normal(size=5)
    tail = lambda i: m[i + 1 :].sum()  # noqa: E731
    coef = lambda i, j: (m[max(i, j)] / 2 + tail(max(i, j))) * l[i] * l[j]  # noqa: E731
    M = np.array([[(m[i] / 4 + tail(i)) * l[i] ** 2 + I[i] if i == j else coef(i, j) * np.cos(th[i] - th[j]) for j in range(5)] for i in range(5)])
    C = np.array([[0.0 if i == j else coef(i, j) * np.sin(th[i] - th[j]) * thd[j] for j in range(5)] for i in range(5)])
    G = np.array([(m[i] / 2 + tail(i)) * g * l[i] * np.cos(th[i]) for i in range(5)])
    np.testing.assert_allclose(chain.mass_matrix(0.0, jnp.asarray(th)), M, atol=1e-12)
    np.testing.assert_allclose(-chain.forces(0.0, jnp.asarray(th), jnp.asarray(thd)), C @ thd + G, atol=1e-12)


def test_floating_chain_matches_seed000_eq14():
    """Seed 000 eq. 14: M_i and C_i of one subsystem, q_i = (qa, qb, xa, ya), no gravity."""
    (L, ra, ma, Ia), (_, rb, mb, Ib) = models._mechanisms.PARALLEL_2DOF_LINKS["chain1"]
    chain = PlanarChain([L, L], [ma, mb], [ra, rb], [Ia, Ib], gravity=(0.0, 0.0), floating_base=True)
    qa, qb, qad, qbd = RNG.normal(size=4)
    s, c, sab, cab = np.sin(qa), np.cos(qa), np.sin(qa + qb), np.cos(qa + qb)
    k = ma * ra + mb * L
    M = np.array(
        [
            [Ia + Ib + ma * ra**2 + mb * (L**2 + rb**2 + 2 * L * rb * np.cos(qb)), Ib + mb * (rb**2 + L * rb * np.cos(qb)), -(k * s + mb * rb * sab), k * c + mb * rb * cab],
            [Ib + mb * (rb**2 + L * rb * np.cos(qb)), Ib + mb * rb**2, -mb * rb * sab, mb * rb * cab],
            [-(k * s + mb * rb * sab), -mb * rb * sab, ma + mb, 0.0],
            [k * c + mb * rb * cab, mb * rb * cab, 0.0, ma + mb],
        ]
    )
    C = np.zeros((4, 4))
    C[0, 0] = -mb * L * rb * qbd * np.sin(qb)
    C[0, 1] = -mb * L * rb * (qad + qbd) * np.sin(qb)
    C[1, 0] = mb * L * rb * qad * np.sin(qb)
    C[2, 0] = -qad * (k * c + mb * rb * cab)
    C[2, 1] = -mb * rb * (2 * qad + qbd) * cab
    C[3, 0] = -qad * (k * s + mb * rb * sab)
    C[3, 1] = -mb * rb * (2 * qad + qbd) * sab
    q, qd = jnp.array([qa, qb, 0.3, -0.2]), jnp.array([qad, qbd, 0.5, 0.1])
    np.testing.assert_allclose(chain.mass_matrix(0.0, q), M, atol=1e-12)
    np.testing.assert_allclose(-chain.forces(0.0, q, qd), C @ np.asarray(qd), atol=1e-12)


def test_scara_chain_matches_seed001_eq34_and_pinocchio():
    arm = models.ScaraArm()
    chain = models.scara_chain(arm)
    model = pin.Model()
    parent = 0
    placements = [(0.0, 0.0, 0.0), (0.0, float(arm.l1), 0.0), (0.0, float(arm.l2), 0.0), (0.0, 0.0, 0.0)]
    centres = [(0.0, float(arm.r1), 0.0), (0.0, float(arm.r2), 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, float(arm.l0))]
    for i, joint in enumerate([pin.JointModelRZ(), pin.JointModelRZ(), pin.JointModelRZ(), pin.JointModelPZ()]):
        parent = model.addJoint(parent, joint, pin.SE3(np.eye(3), np.array(placements[i])), f"j{i}")
        model.appendBodyToJoint(parent, pin.Inertia(float(arm.m[i]), np.array(centres[i]), np.diag([1e-3, 1e-3, float(arm.Iz[i])])), pin.SE3.Identity())
    model.gravity.linear = np.array([0.0, 0.0, -float(arm.g)])
    data = model.createData()
    for _ in range(3):
        q, qd = RNG.normal(size=4), RNG.normal(size=4)
        M_pin = pin.crba(model, data, q)
        M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
        M_closed = arm.mass_matrix(0.0, jnp.asarray(q))
        np.testing.assert_allclose(chain.mass_matrix(0.0, jnp.asarray(q)), M_closed, atol=1e-12)
        np.testing.assert_allclose(M_closed, M_pin, atol=1e-12)
        bias = pin.rnea(model, data, q, qd, np.zeros(4))
        np.testing.assert_allclose(-chain.forces(0.0, jnp.asarray(q), jnp.asarray(qd)), bias, atol=1e-12)
        np.testing.assert_allclose(-arm.forces(0.0, jnp.asarray(q), jnp.asarray(qd)), bias, atol=1e-12)


def test_composed_system_and_projection():
    a, b = random_chain(2, floating_base=True), random_chain(3)
    system = ukjax.ComposedSystem({"a": a, "b": b})
    q, qd = jnp.asarray(RNG.normal(size=7)), jnp.asarray(RNG.normal(size=7))
    M = system.mass_matrix(0.0, q)
    np.testing.assert_allclose(M[:4, :4], a.mass_matrix(0.0, q[:4]))
    np.testing.assert_allclose(M[4:, 4:], b.mass_matrix(0.0, q[4:]))
    np.testing.assert_allclose(M[:4, 4:], 0.0)
    np.testing.assert_allclose(system.forces(0.0, q, qd)[4:], b.forces(0.0, q[4:], qd[4:]))
    assert system.slice("b") == slice(4, 7)
    with pytest.raises(KeyError, match="No part 'c'"):
        system.slice("c")
    with pytest.raises(ValueError, match="sizes"):
        ukjax.ComposedSystem({"x": ukjax.ExplicitSystem(lambda t, q: jnp.eye(2), lambda t, q, qd: q)})

    tip_on_base = models.PointConstraint(system, models.JointPoint(2, "a"), models.JointPoint(0, "b"))
    csys = ukjax.ConstrainedSystem(system, tip_on_base)
    q1, qd1 = csys.project(0.0, q, qd)
    phi, phid = csys.violation(0.0, q1, qd1)
    assert jnp.max(jnp.abs(phi)) < 1e-12 and jnp.max(jnp.abs(phid)) < 1e-12
    assert jnp.max(jnp.abs(csys.violation(0.0, q, qd)[0])) > 1e-2


def test_parallel_robot_seed000_verification():
    """Seed 000 §4.1: under τ = [0.1 cos(πt), 0, …] for 10 s the bases stay fixed and the
    three chain ends coincide."""
    model = models.parallel_2dof()
    torque = ukjax.Forced(model.system, lambda t, q, qd: jnp.zeros(12).at[0].set(0.1 * jnp.cos(jnp.pi * t)))
    csys = ukjax.ConstrainedSystem(torque, model.constraints)
    ts = jnp.linspace(0, 10, 51)
    sol = ukjax.simulate(csys, model.q0, model.qd0, 0.0, 10.0, ts=ts, rtol=1e-10, atol=1e-10)
    assert jnp.max(jnp.abs(sol.phi)) < 1e-8
    moved = jnp.max(jnp.abs(sol.q[:, 0] - sol.q[0, 0]))
    assert moved > 0.05  # the mechanism really moves


def test_coordinated_robots_stay_closed_under_gravity():
    model = models.coordinated_robots()
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    sol = ukjax.simulate(csys, model.q0, model.qd0, 0.0, 3.0, ts=jnp.linspace(0, 3, 31), rtol=1e-10, atol=1e-10)
    assert jnp.max(jnp.abs(sol.phi)) < 1e-8
    assert jnp.max(jnp.abs(sol.q - model.q0)) > 0.1
