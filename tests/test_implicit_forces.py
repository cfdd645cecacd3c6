"""The time step's treatment of the applied forces (`ukjax.ExplicitForces`,
`ukjax.ImplicitForces`) against each scheme's closed form on a stiff oscillator, against
MuJoCo's `implicitfast` on Menagerie's UR5e under its servos, on a floor, and their
derivatives in both modes against central differences."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from ukjax import models

DATA = Path(__file__).parent / "data"


class Springs(ukjax.AbstractUnconstrainedSystem):
    """Masses `m` on springs and dampers: `M q̈ = f − K (q − rest) − C q̇`."""

    mass: jax.Array
    stiffness: jax.Array
    damping: jax.Array
    rest: jax.Array
    force: jax.Array

    def mass_matrix(self, t, q):
        return jnp.diag(self.mass)

    def forces(self, t, q, qd):
        return self.force - self.stiffness @ (q - self.rest) - self.damping @ qd


def _coupled(k=4e4, c=20.0):
    """Two unit masses, each on a spring to the wall and one between them (ω up to 346/s)."""
    K = jnp.array([[2 * k, -k], [-k, 2 * k]])
    C = jnp.array([[c, -c / 2], [-c / 2, c]])
    return Springs(jnp.array([1.0, 2.0]), K, C, jnp.zeros(2), jnp.zeros(2))


def _stepped(system, q, qd, h, steps, forces):
    def one(state, _):
        out = ukjax.step(system, 0.0, *state, h, forces=forces)
        return (out.q, out.qd), out.converged

    (q, qd), converged = jax.lax.scan(one, (q, qd), None, length=steps)
    return q, qd, jnp.all(converged)


def _closed_form(system, q, qd, h, steps, velocities, positions):
    """Each scheme by hand, from its own equations: `M (v⁺ − v) = h (−K x̂ − C v̂)` with `x̂`
    the start's or the end's position (`x⁺ = x + h v⁺`), `v̂` the start's or the end's speed."""
    M, K, C = (np.asarray(a) for a in (jnp.diag(system.mass), system.stiffness, system.damping))
    x, v = np.asarray(q), np.asarray(qd)
    for _ in range(steps):
        # M v⁺ + h C v̂ + h K x̂ = M v, x̂ = x + h v⁺ (implicit) or x; v̂ = v⁺ or v
        lhs = M + (h * C if velocities else 0) + (h * h * K if positions else 0)
        rhs = M @ v - h * K @ x - (0 if velocities else h * C @ v)
        v = np.linalg.solve(lhs, rhs)
        x = x + h * v
    return x, v


@pytest.mark.parametrize(
    "forces, velocities, positions",
    [
        (ukjax.ExplicitForces(), False, False),
        (ukjax.ImplicitForces(), True, False),
        (ukjax.ImplicitForces(positions=True), True, True),
    ],
)
def test_each_scheme_is_its_closed_form_on_a_stiff_oscillator(forces, velocities, positions):
    """100 steps of 10 ms (ω h = 3.5, past explicit Euler's limit 2) on two coupled masses:
    each treatment follows its own scheme's closed form to 1e-12; explicit grows, the
    implicit in both the state's parts decays."""
    system = _coupled()
    q0, qd0, h, steps = jnp.array([0.01, -0.02]), jnp.array([0.0, 0.5]), 1e-2, 100
    q, qd, converged = jax.jit(lambda: _stepped(system, q0, qd0, h, steps, forces))()
    x, v = _closed_form(system, q0, qd0, h, steps, velocities, positions)
    assert bool(converged) or not np.all(np.isfinite(x))
    scale = max(1.0, float(np.max(np.abs(x))))
    np.testing.assert_allclose(q, x, rtol=1e-10, atol=1e-12 * scale)
    np.testing.assert_allclose(qd, v, rtol=1e-10, atol=1e-12 * max(1.0, float(np.max(np.abs(v)))))
    start = float(np.max(np.abs(q0)))
    if positions:
        assert float(jnp.max(jnp.abs(q))) < 0.1 * start
    if not velocities:
        assert float(jnp.max(jnp.abs(q))) > 1e3 * start


def test_a_step_that_would_lose_the_mass_matrix_is_explicit():
    """A spring pushing away from its rest (negative stiffness) at a step where `M + h² K`
    is no longer positive definite: the implicit step is the explicit one."""
    system = Springs(jnp.ones(1), -jnp.eye(1) * 1e4, jnp.zeros((1, 1)), jnp.zeros(1), jnp.zeros(1))
    q, qd, h = jnp.array([0.01]), jnp.array([0.1]), 0.02
    implicit = ukjax.step(system, 0.0, q, qd, h, forces=ukjax.ImplicitForces(positions=True))
    explicit = ukjax.step(system, 0.0, q, qd, h, forces=ukjax.ExplicitForces())
    np.testing.assert_array_equal(implicit.qd, explicit.qd)
    smaller = ukjax.step(system, 0.0, q, qd, 1e-3, forces=ukjax.ImplicitForces(positions=True))
    x, v = _closed_form(system, q, qd, 1e-3, 1, True, True)
    np.testing.assert_allclose(smaller.qd, v, rtol=1e-12)


def test_a_stiff_spring_pressing_a_mass_onto_a_floor_settles_to_its_static_force():
    """A unit mass on a spring of 1e5 N/m whose rest lies 0.1 m below a floor, dropped from
    0.05 m, 20 ms steps (ω h = 6): it comes to rest on the floor and the normal force is the
    spring's and its weight's, `k 0.1 + m g`, to 1e-9."""
    k, g = 1e5, 9.81
    springs = Springs(
        jnp.ones(2),
        jnp.diag(jnp.array([0.0, k])),
        jnp.diag(jnp.array([0.0, 50.0])),
        jnp.array([0.0, -0.1]),
        jnp.array([0.0, -g]),
    )
    floor = ukjax.Unilateral(lambda t, q: q[1], friction=0.5, slip=lambda t, q, qd: qd[:1])
    system = ukjax.ConstrainedSystem(springs, [floor])
    h = 0.02
    q, qd = jnp.array([0.0, 0.05]), jnp.array([0.3, 0.0])
    run = jax.jit(
        lambda q, qd: ukjax.step(system, 0.0, q, qd, h, forces=ukjax.ImplicitForces(positions=True))
    )
    for _ in range(40):
        out = run(q, qd)
        assert bool(out.converged)
        q, qd = out.q, out.qd
    assert abs(float(q[1])) <= 1e-12 and float(jnp.max(jnp.abs(qd))) <= 1e-12
    np.testing.assert_allclose(out.normal[0] / h, k * 0.1 + g, rtol=1e-9)


def test_derivatives_through_implicit_steps_in_both_modes():
    """`∂x(T)/∂c` (a damper's constant) through 30 implicit steps of 10 ms on the coupled
    masses at k = 400 N/m, by `jax.jvp` and `jax.grad`, against central differences of the
    same map."""
    h, steps = 1e-2, 30

    def final(c):
        system = eqx.tree_at(lambda s: s.damping, _coupled(k=400.0), jnp.array([[c, -c / 2], [-c / 2, c]]))
        q, _, _ = _stepped(
            system,
            jnp.array([0.01, -0.02]),
            jnp.array([0.0, 0.5]),
            h,
            steps,
            ukjax.ImplicitForces(positions=True),
        )
        return q[1]

    c = jnp.asarray(2.0)
    run = jax.jit(final)
    forward = jax.jit(lambda c: jax.jvp(final, (c,), (jnp.ones_like(c),))[1])(c)
    reverse = jax.jit(jax.grad(final))(c)
    eps = 1e-4
    central = (run(c + eps) - run(c - eps)) / (2 * eps)
    assert abs(float(central)) > 1e-4
    np.testing.assert_allclose(forward, central, rtol=1e-7)
    np.testing.assert_allclose(reverse, central, rtol=1e-7)


@pytest.mark.xdist_group("ur5e")
def test_implicit_velocities_are_mujocos_implicitfast_on_a_ur5e():
    """Menagerie's UR5e under its six position servos (their velocity gains and the joints'
    damping), from `home` perturbed, 0.4 s: `ImplicitForces()` follows MuJoCo's
    `implicitfast` to 1e-8 rad at the file's 2 ms and at 8 ms; explicit steps at 8 ms diverge."""
    model = models.from_mjcf(DATA / "ur5e.xml", keyframe="home")
    system = model.full_system(unilateral=False)
    q0 = np.asarray(model.q0) + 0.1 * np.random.default_rng(0).standard_normal(model.q0.shape[0])
    mj = mujoco.MjModel.from_xml_path(str(DATA / "ur5e.xml"))
    mj.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    T = 0.4
    for h in (2e-3, 8e-3):
        mj.opt.timestep = h
        data = mujoco.MjData(mj)
        mujoco.mj_resetDataKeyframe(mj, data, mj.key("home").id)
        data.qpos[:], data.qvel[:] = q0, 0.0
        for _ in range(round(T / h)):
            mujoco.mj_step(mj, data)
        sol = ukjax.simulate(
            system, q0, np.zeros_like(q0), 0.0, T, ts=jnp.array([T]), solver=ukjax.TimeStepping(), dt0=h
        )
        assert float(np.max(np.abs(np.asarray(sol.q[-1]) - data.qpos))) <= 1e-8
        assert float(np.max(np.abs(data.qpos - q0))) > 0.05  # it moved
    explicit = ukjax.simulate(
        system,
        q0,
        np.zeros_like(q0),
        0.0,
        T,
        ts=jnp.array([T]),
        throw=False,
        solver=ukjax.TimeStepping(forces=ukjax.ExplicitForces()),
        dt0=8e-3,
    )
    assert explicit.status == ukjax.Status.NONFINITE_STATE
