"""Model builders against independent references: Pinocchio (CRBA/RNEA), the same model
through LagrangianSystem, and the closed forms the seeds print (seed 002 appendix A2–A4).
The seeds' own mechanisms are checked claim by claim in test_seeds.py."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import ukjax
from benchmarks.references import pinocchio_planar, pinocchio_scara, seed002_appendix
from ukjax import models
from ukjax.models import PlanarChain

# Jitted model evaluations: evaluated op by op, the unrolled kernels dispatch thousands of
# scalar operations.
mass = eqx.filter_jit(lambda system, q: system.mass_matrix(0.0, q))
forces = eqx.filter_jit(lambda system, q, qd: system.forces(0.0, q, qd))


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


def to_pinocchio_order(chain, x):
    """ukjax orders a floating chain (angles, x, y); Pinocchio (x, y, angles)."""
    return np.concatenate([x[chain.num_links :], x[: chain.num_links]]) if chain.floating_base else x


@pytest.mark.parametrize(
    "k,floating", [(1, False), (3, False), (6, False), (2, True), (4, True), (12, False), (9, True)]
)
def test_planar_chain_matches_pinocchio(k, floating):
    chain = random_chain(k, floating_base=floating)
    n = chain.num_coordinates
    q, qd = RNG.normal(size=n), RNG.normal(size=n)
    M_pin, bias_pin = pinocchio_planar(chain)(to_pinocchio_order(chain, q), to_pinocchio_order(chain, qd))
    M = to_pinocchio_order(
        chain, to_pinocchio_order(chain, np.asarray(mass(chain, jnp.asarray(q)))).T
    ).T
    Q = to_pinocchio_order(chain, np.asarray(forces(chain, jnp.asarray(q), jnp.asarray(qd))))
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
    np.testing.assert_allclose(mass(chain, q), mass(lag, q), atol=1e-12)
    np.testing.assert_allclose(forces(chain, q, qd), forces(lag, q, qd), atol=1e-12)


def test_planar_chain_matches_seed002_appendix():
    """Seed 002 A2–A4 (5 links, absolute angles, centres of mass at mid-link) with random
    parameters; reproduce_seeds.py checks the seed's own ones."""
    m, l, I, g = RNG.uniform(0.5, 2, 5), RNG.uniform(0.5, 2, 5), RNG.uniform(0.1, 1, 5), 9.8
    chain = PlanarChain(l, m, l / 2, I, gravity=(0.0, -g), absolute=True)
    th, thd = RNG.normal(size=5), RNG.normal(size=5)
    M, Cqd, G = seed002_appendix(m, l, I, g, th, thd)
    np.testing.assert_allclose(mass(chain, jnp.asarray(th)), M, atol=1e-12)
    np.testing.assert_allclose(-forces(chain, jnp.asarray(th), jnp.asarray(thd)), Cqd + G, atol=1e-12)


def test_scara_chain_forces_match_pinocchio():
    """The PoE builder's and the closed form's `C q̇ + G` against RNEA (the mass matrices are
    a claim of reproduce_seeds.py)."""
    arm = models.ScaraArm()
    chain, pinocchio = models.scara_chain(arm), pinocchio_scara(arm)
    for q, qd in RNG.normal(size=(3, 2, 4)):
        bias = pinocchio(q, qd)[1]
        np.testing.assert_allclose(-forces(chain, jnp.asarray(q), jnp.asarray(qd)), bias, atol=1e-12)
        np.testing.assert_allclose(-forces(arm, jnp.asarray(q), jnp.asarray(qd)), bias, atol=1e-12)


def test_scara_chain_forward_kinematics_is_seed001_eq39():
    arm = models.ScaraArm()
    chain = models.scara_chain(arm)
    tool_at_zero = jnp.eye(4).at[:3, 3].set(jnp.stack([0.0, arm.l1 + arm.l2, arm.l0]))  # eq. 32
    for q in RNG.normal(size=(3, 4)):
        g = chain.transform(jnp.asarray(q), tool_at_zero)
        np.testing.assert_allclose(g[:3, 3], arm.end_effector(jnp.asarray(q)), atol=1e-14)
        c, s = np.cos(q[:3].sum()), np.sin(q[:3].sum())
        np.testing.assert_allclose(g[:3, :3], [[c, -s, 0], [s, c, 0], [0, 0, 1]], atol=1e-14)


def test_composed_system_and_projection():
    a, b = random_chain(2, floating_base=True), random_chain(3)
    system = ukjax.ComposedSystem({"a": a, "b": b})
    q, qd = jnp.asarray(RNG.normal(size=7)), jnp.asarray(RNG.normal(size=7))
    M = mass(system, q)
    np.testing.assert_allclose(M[:4, :4], mass(a, q[:4]))
    np.testing.assert_allclose(M[4:, 4:], mass(b, q[4:]))
    np.testing.assert_allclose(M[:4, 4:], 0.0)
    np.testing.assert_allclose(forces(system, q, qd)[4:], forces(b, q[4:], qd[4:]))
    assert system.slice("b") == slice(4, 7)
    with pytest.raises(KeyError, match="No part 'c'"):
        system.slice("c")
    with pytest.raises(ValueError, match="sizes"):
        ukjax.ComposedSystem({"x": ukjax.ExplicitSystem(lambda t, q: jnp.eye(2), lambda t, q, qd: q)})

    tip_on_base = models.PointConstraint(system, models.JointPoint(2, "a"), models.JointPoint(0, "b"))
    csys = ukjax.ConstrainedSystem(system, tip_on_base)
    projected = csys.project(0.0, q, qd)
    q1, qd1 = projected.q, projected.qd
    # one program (op by op, every operation compiles on its own)
    violation = jax.jit(lambda t, q, qd: csys.violation(t, q, qd))
    phi, phid = violation(0.0, q1, qd1)
    assert jnp.max(jnp.abs(phi)) < 1e-12 and jnp.max(jnp.abs(phid)) < 1e-12
    assert jnp.max(jnp.abs(violation(0.0, q, qd)[0])) > 1e-2


def test_log_cholesky_against_pinocchio():
    """Any θ is a consistent body whose dynamic parameters are Pinocchio's; the map inverts."""
    rng = np.random.default_rng(11)
    for _ in range(5):
        theta = rng.normal(size=10)
        mass, com, inertia = models.from_log_cholesky(theta)
        about_origin = inertia + mass * (com @ com * np.eye(3) - np.outer(com, com))
        ours = [
            mass,
            *(mass * com),
            *(about_origin[i, j] for i, j in [(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]),
        ]
        np.testing.assert_allclose(
            ours, pin.LogCholeskyParameters(theta).toDynamicParameters(), rtol=1e-12, atol=1e-12
        )
        principal = np.linalg.eigvalsh(np.asarray(inertia))
        assert mass > 0 and principal[0] > 0 and principal[0] + principal[1] >= principal[2] * (1 - 1e-12)
        np.testing.assert_allclose(models.log_cholesky(mass, com, inertia), theta, atol=1e-12)


def test_log_cholesky_chain_is_the_chain():
    """A spatial 3-joint arm of boxes: the same dynamics through its log-Cholesky parameters;
    the SCARA model's z-only inertias are no physical body and are refused."""
    joints = [
        models.revolute((0, 0, 1), (0, 0, 0)),
        models.revolute((0, 1, 0), (0, 0, 0.3)),
        models.prismatic((1, 0, 0)),
    ]
    frames = np.broadcast_to(np.eye(4), (3, 4, 4)).copy()
    frames[:, :3, 3] = [[0, 0, 0.15], [0.2, 0, 0.3], [0.5, 0, 0.3]]
    sides = RNG.uniform(0.05, 0.4, (3, 3))
    masses = RNG.uniform(0.5, 2.0, 3)
    boxes = [m / 12 * np.diag([b**2 + c**2, a**2 + c**2, a**2 + b**2]) for m, (a, b, c) in zip(masses, sides)]
    chain = models.SerialChain(joints, frames, masses, np.stack(boxes))
    consistent = models.LogCholeskyChain(chain)
    q, qd = jnp.asarray(RNG.normal(size=3)), jnp.asarray(RNG.normal(size=3))
    dynamics = eqx.filter_jit(lambda s: (s.mass_matrix(0.0, q), s.forces(0.0, q, qd)))
    for ours, want in zip(dynamics(consistent), dynamics(chain)):
        np.testing.assert_allclose(ours, want, atol=1e-12)
    grad = eqx.filter_jit(jax.grad(lambda m: jnp.sum(m.mass_matrix(0.0, q))))(consistent).theta
    assert jnp.all(jnp.isfinite(grad))
    with pytest.raises(ValueError, match="not physically consistent"):
        models.LogCholeskyChain(models.scara_chain())
