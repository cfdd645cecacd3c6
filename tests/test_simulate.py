"""Simulation against independent references: scipy's DOP853 on the angle ODE, closed-form
solutions (knife edge on an incline, Baumgarte error dynamics, viscous sliding), finite
differences for gradients, and seed 001's SCARA result."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import ukjax

G = 9.81
TOL = dict(rtol=1e-11, atol=1e-11)


class CartesianPendulum(ukjax.AbstractUnconstrainedSystem):
    """A point mass in the plane with gravity and a constant horizontal push."""

    m: jax.Array
    push: float = 0.0

    def mass_matrix(self, t, q):
        return self.m * jnp.eye(2)

    def forces(self, t, q, qd):
        return jnp.array([self.push, -self.m * G])


def pendulum(m=1.0, length=1.0, stabilization=None, push=0.0, method="svd"):
    rod = ukjax.Holonomic(lambda t, q: q @ q - length**2)
    return ukjax.ConstrainedSystem(CartesianPendulum(jnp.asarray(m), push), rod, stabilization, method=method)


@pytest.mark.parametrize("method", ["svd", "cholesky"])
def test_pendulum_against_dop853_and_energy(method):
    length, th0, thd0, t1 = 1.2, 1.0, 0.5, 5.0
    ts = np.linspace(0, t1, 51)
    ref = solve_ivp(
        lambda t, y: [y[1], -G / length * np.sin(y[0])],
        (0, t1),
        [th0, thd0],
        "DOP853",
        t_eval=ts,
        rtol=1e-13,
        atol=1e-13,
    )
    q0 = length * jnp.array([np.sin(th0), -np.cos(th0)])
    qd0 = length * thd0 * jnp.array([np.cos(th0), np.sin(th0)])
    system = pendulum(length=length, method=method)
    sol = ukjax.simulate(system, q0, qd0, 0.0, t1, ts=ts, **TOL)
    np.testing.assert_allclose(sol.q[:, 0], length * np.sin(ref.y[0]), atol=1e-8)
    np.testing.assert_allclose(sol.q[:, 1], -length * np.cos(ref.y[0]), atol=1e-8)
    energy = 0.5 * jnp.sum(sol.qd**2, axis=1) + G * sol.q[:, 1]
    assert jnp.max(jnp.abs(energy - energy[0])) < 1e-8 * G * length
    assert jnp.max(jnp.abs(sol.phi)) < 1e-8
    # backwards in time from the end, the same motion; an empty interval, no motion
    back = ukjax.simulate(system, sol.q[-1], sol.qd[-1], t1, 0.0, ts=ts[::-1], **TOL)
    np.testing.assert_allclose(back.q[::-1], sol.q, atol=1e-8)
    still = ukjax.simulate(system, q0, qd0, 2.0, 2.0, ts=np.full_like(ts, 2.0), **TOL)
    assert bool(jnp.all(still.q == q0)) and bool(still.success)


def test_knife_edge_on_incline_closed_form():
    """x = (g sinα/2ω²) sin²ωt, y = (g sinα/2ω²)(ωt − ½ sin 2ωt), θ = ωt (Neimark–Fufaev)."""
    m, inertia, slope, w = 2.0, 0.3, 0.4, 1.7
    gs = G * np.sin(slope)
    system = ukjax.ExplicitSystem(
        lambda t, q: jnp.diag(jnp.array([m, m, inertia])), lambda t, q, qd: jnp.array([m * gs, 0.0, 0.0])
    )
    blade = ukjax.Nonholonomic(lambda t, q, qd: qd[0] * jnp.sin(q[2]) - qd[1] * jnp.cos(q[2]))
    ts = np.linspace(0, 4, 41)
    sol = ukjax.simulate(
        ukjax.ConstrainedSystem(system, blade), jnp.zeros(3), jnp.array([0, 0, w]), 0.0, 4.0, ts=ts, **TOL
    )
    k = gs / (2 * w**2)
    np.testing.assert_allclose(sol.q[:, 0], k * np.sin(w * ts) ** 2, atol=1e-8)
    np.testing.assert_allclose(sol.q[:, 1], k * (w * ts - 0.5 * np.sin(2 * w * ts)), atol=1e-8)
    np.testing.assert_allclose(sol.q[:, 2], w * ts, atol=1e-8)
    assert jnp.max(jnp.abs(sol.phid)) < 1e-9


def test_baumgarte_violation_follows_linear_error_dynamics():
    alpha, beta = 2.0, 25.0  # Φ̈ + 2Φ̇ + 25Φ = 0
    q0, qd0 = jnp.array([0.5, -1.0]), jnp.array([0.4, 0.3])  # off the circle, moving across it
    ts = np.linspace(0, 4, 81)
    sol = ukjax.simulate(
        pendulum(stabilization=ukjax.Baumgarte(alpha, beta)), q0, qd0, 0.0, 4.0, ts=ts, **TOL
    )
    phi0, phid0 = float(q0 @ q0 - 1.0), float(2 * q0 @ qd0)
    wd = np.sqrt(beta - alpha**2 / 4)
    expected = np.exp(-alpha * ts / 2) * (
        phi0 * np.cos(wd * ts) + (phid0 + alpha / 2 * phi0) / wd * np.sin(wd * ts)
    )
    np.testing.assert_allclose(sol.phi[:, 0], expected, atol=1e-9)
    assert abs(phi0) > 0.2  # the start really is inconsistent


def test_nonideal_viscous_friction_on_incline():
    """A bead on a straight wire at angle a with viscous friction c = −k q̇:
    s̈ = −g sin a − (k/m) ṡ, whose solution is closed form; the normal force is m g cos a."""
    m, k, a, v0 = 1.5, 0.8, 0.3, 2.0
    u = jnp.array([np.cos(a), np.sin(a)])
    wire = ukjax.Holonomic(lambda t, q: -np.sin(a) * q[0] + np.cos(a) * q[1])
    csys = ukjax.ConstrainedSystem(CartesianPendulum(jnp.asarray(m)), wire, nonideal=lambda t, q, qd: -k * qd)
    ts = np.linspace(0, 3, 31)
    sol = ukjax.simulate(csys, jnp.zeros(2), v0 * u, 0.0, 3.0, ts=ts, **TOL)
    v_inf = m * G * np.sin(a) / k
    s = -v_inf * ts + (v0 + v_inf) * m / k * (1 - np.exp(-k * ts / m))
    np.testing.assert_allclose(sol.q @ u, s, atol=1e-8)
    assert jnp.max(jnp.abs(sol.phi)) < 1e-9
    force = jax.jit(jax.vmap(csys.constraint_force))(sol.ts, sol.q, sol.qd)
    normal = jnp.array([-np.sin(a), np.cos(a)])
    np.testing.assert_allclose(force @ normal, m * G * np.cos(a), rtol=1e-9)
    np.testing.assert_allclose(force @ u, -k * (sol.qd @ u), rtol=1e-9, atol=1e-12)


def test_gradients_match_finite_differences():
    """d x(T) / d(mass, Baumgarte β, q0[0]) through the whole trajectory."""

    def final_x(params):
        m, beta, x0 = params
        csys = pendulum(m=m, stabilization=ukjax.Baumgarte(2.0, beta), push=0.7)
        q0 = jnp.stack([x0, -1.0])
        return ukjax.simulate(csys, q0, jnp.array([0.3, 0.0]), 0.0, 2.0, rtol=1e-12, atol=1e-12).q[-1, 0]

    final_x = jax.jit(final_x)  # compiled once: every call builds the system anew
    params = jnp.array([1.3, 30.0, 0.4])
    grad = jax.jit(jax.grad(final_x))(params)
    for i, h in enumerate([1e-5, 1e-3, 1e-6]):
        e = jnp.zeros(3).at[i].set(h)
        fd = (final_x(params + e) - final_x(params - e)) / (2 * h)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-5)
        assert abs(grad[i]) > 1e-4


@pytest.mark.long
def test_gradient_equal_masses_double_pendulum():
    def final(m1):
        M = jnp.diag(jnp.array([m1, m1, 1.0, 1.0]))  # at m1 = 1 all four eigenvalues coincide
        system = ukjax.ExplicitSystem(lambda t, q: M, lambda t, q, qd: jnp.array([0.0, -m1 * G, 0.0, -G]))
        rods = ukjax.Holonomic(
            lambda t, q: jnp.stack([q[:2] @ q[:2] - 1.0, (q[2:] - q[:2]) @ (q[2:] - q[:2]) - 1.0])
        )
        q0 = jnp.array([1.0, 0.0, 2.0, 0.0])
        return ukjax.simulate(
            ukjax.ConstrainedSystem(system, rods), q0, jnp.zeros(4), 0.0, 1.0, rtol=1e-12, atol=1e-12
        ).q[-1, 2]

    final = jax.jit(final)  # compiled once: every call builds the system anew
    g = jax.jit(jax.grad(final))(1.0)
    h = 1e-5
    fd = (final(1.0 + h) - final(1.0 - h)) / (2 * h)
    assert jnp.isfinite(g)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


@pytest.mark.long
def test_batch_keeps_good_members_and_marks_bad_ones():
    csys = pendulum(stabilization=ukjax.Baumgarte(2.0, 25.0))
    q0s = jnp.array([[0.6, -0.8], [jnp.nan, -1.0], [-0.8, -0.6]])
    qd0s = jnp.zeros((3, 2))
    ts = jnp.linspace(0, 1, 5)
    batch = jax.vmap(lambda q0, qd0: ukjax.simulate(csys, q0, qd0, 0.0, 1.0, ts=ts, throw=False))(q0s, qd0s)
    assert batch.status.tolist() == [ukjax.Status.SUCCESS, ukjax.Status.NONFINITE_STATE, ukjax.Status.SUCCESS]
    for k in (0, 2):
        single = ukjax.simulate(csys, q0s[k], qd0s[k], 0.0, 1.0, ts=ts)
        np.testing.assert_allclose(batch.q[k], single.q, rtol=1e-12, atol=1e-12)
    with pytest.raises(Exception, match="non-finite"):
        ukjax.simulate(csys, q0s[1], qd0s[1], 0.0, 1.0)


def test_batch_over_parameters():
    """vmap over a mass inside the system: each member equals its own run."""
    masses = jnp.array([0.5, 1.0, 2.0])

    def final_state(m):
        csys = pendulum(m=m, stabilization=ukjax.Baumgarte(2.0, 25.0), push=0.7)
        return ukjax.simulate(csys, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 1.0, **TOL).q[-1]

    final_state = jax.jit(final_state)  # compiled once: every call builds the system anew
    batch = jax.jit(jax.vmap(final_state))(masses)
    for k, m in enumerate(masses):
        np.testing.assert_allclose(batch[k], final_state(m), rtol=1e-10, atol=1e-12)
    assert jnp.linalg.norm(batch[0] - batch[2]) > 1e-2  # the push acts differently on each mass


def test_failure_statuses():
    csys = pendulum()
    out = ukjax.simulate(csys, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 5.0, max_steps=4, throw=False)
    assert out.status == ukjax.Status.MAX_STEPS_REACHED
    with pytest.raises(Exception, match="ran out of steps"):
        ukjax.simulate(csys, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 5.0, max_steps=4)

    contradiction = ukjax.AccelerationConstraint(
        lambda t, q, qd: (jnp.array([[1.0, 0.0], [1.0, 0.0]]), jnp.array([1.0, 2.0]))
    )
    bad = ukjax.ConstrainedSystem(CartesianPendulum(jnp.asarray(1.0)), contradiction)
    out = ukjax.simulate(bad, jnp.zeros(2), jnp.zeros(2), 0.0, 1.0, throw=False)
    assert out.status == ukjax.Status.INCONSISTENT_CONSTRAINTS
    with pytest.raises(Exception, match="inconsistent"):
        ukjax.simulate(bad, jnp.zeros(2), jnp.zeros(2), 0.0, 1.0)

    with pytest.raises(ValueError, match="needs a step size dt0"):
        ukjax.simulate(csys, jnp.zeros(2), jnp.zeros(2), 0.0, 1.0, adaptive=False)
    for t1, dt0 in ((1.0, -0.1), (1.0, 0.0), (-1.0, 0.1)):
        with pytest.raises(ValueError, match="dt0 must point from t0 = 0.0 towards t1"):
            ukjax.simulate(csys, jnp.zeros(2), jnp.zeros(2), 0.0, t1, dt0=dt0)
    # known save times are checked inside a caller's jit too, where they become traced
    with pytest.raises(ValueError, match="ts must lie between t0 = 0.0 and t1 = 1.0"):
        jax.jit(lambda q0: ukjax.simulate(csys, q0, jnp.zeros(2), 0.0, 1.0, ts=np.linspace(0, 2, 5)).q)(jnp.zeros(2))
    with pytest.raises(NotImplementedError, match="not BacksolveAdjoint"):
        ukjax.simulate(csys, jnp.zeros(2), jnp.zeros(2), 0.0, 1.0, adjoint=diffrax.BacksolveAdjoint())
    with pytest.raises(ValueError, match="q0 and qd0 must both have shape"):
        ukjax.simulate(csys, jnp.zeros(2), jnp.zeros(3), 0.0, 1.0)
    with pytest.raises(ValueError, match="mass matrix has shape"):
        ukjax.simulate(csys, jnp.zeros(3), jnp.zeros(3), 0.0, 1.0)
    # plain lists of integers, as the README writes them (were refused as not floating-point)
    listed = ukjax.simulate(csys, [1, 0], [0, 0], 0, 1)
    np.testing.assert_array_equal(listed.q, ukjax.simulate(csys, jnp.array([1.0, 0.0]), jnp.zeros(2), 0.0, 1.0).q)
    with pytest.raises(TypeError, match="real numbers"):
        ukjax.simulate(csys, jnp.array([1j, 0]), jnp.zeros(2), 0.0, 1.0)
    # traced, the check goes into the caller's program, and still raises
    traced = jax.jit(lambda q0: ukjax.simulate(csys, q0, jnp.zeros(2), 0.0, 5.0, max_steps=4).q)
    with pytest.raises(RuntimeError, match="ran out of steps"):
        traced(jnp.array([0.6, -0.8]))


def test_fixed_step_and_stiff_solver_agree_with_default():
    csys = pendulum(stabilization=ukjax.Baumgarte(2e3, 1e6))  # stiff error dynamics
    q0, qd0, ts = jnp.array([0.6, -0.8]), jnp.array([1.0, 0.75]), jnp.linspace(0, 1, 11)
    ref = ukjax.simulate(csys, q0, qd0, 0.0, 1.0, ts=ts, **TOL)
    fixed = ukjax.simulate(csys, q0, qd0, 0.0, 1.0, ts=ts, dt0=2e-4, adaptive=False)
    stiff = ukjax.simulate(csys, q0, qd0, 0.0, 1.0, ts=ts, solver=ukjax.stiff_solver(), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(fixed.q, ref.q, atol=1e-7)
    np.testing.assert_allclose(stiff.q, ref.q, atol=1e-5)
    assert int(stiff.stats["num_steps"]) < int(ref.stats["num_steps"])


def test_no_recompilation_on_second_call():
    traces = []

    def mass(t, q):
        traces.append(None)
        return jnp.eye(2)

    system = ukjax.ExplicitSystem(mass, lambda t, q, qd: jnp.array([0.0, -G]))
    csys = ukjax.ConstrainedSystem(system, ukjax.Holonomic(lambda t, q: q @ q - 1.0))
    ukjax.simulate(csys, jnp.array([0.6, -0.8]), jnp.zeros(2), 0.0, 1.0)
    count = len(traces)
    out = ukjax.simulate(csys, jnp.array([0.8, -0.6]), jnp.array([0.3, 0.4]), 0.0, 1.0)
    assert len(traces) == count and count > 0
    assert out.success


def test_float32_warns():
    with pytest.warns(UserWarning, match="float32"):
        ukjax.simulate(pendulum(), jnp.array([0.6, -0.8], jnp.float32), jnp.zeros(2, jnp.float32), 0.0, 0.1)


def test_forward_mode_through_the_default_adjoint_names_the_fix():
    """`jax.jacfwd` through `simulate` with the default (reverse-only) adjoint: a TypeError
    that names `adjoint=diffrax.ForwardMode()`, not JAX's raw custom_vjp message; with it the
    derivative is that of the closed form `x(t) = x₀ cos(√k t)`."""

    def final(k, adjoint=None):
        spring = ukjax.ExplicitSystem(lambda t, q: jnp.eye(1), lambda t, q, qd: -k * q)
        sol = ukjax.simulate(spring, jnp.ones(1), jnp.zeros(1), 0.0, 1.0, rtol=1e-10, atol=1e-10, adjoint=adjoint)
        return sol.q[-1, 0]

    with pytest.raises(TypeError, match=r"adjoint=diffrax\.ForwardMode\(\)"):
        jax.jacfwd(final)(2.0)
    derivative = jax.jacfwd(lambda k: final(k, diffrax.ForwardMode()))(2.0)
    assert abs(float(derivative) - (-jnp.sin(jnp.sqrt(2.0)) / (2 * jnp.sqrt(2.0)))) < 1e-7


def test_a_progress_meter_reports_and_changes_nothing(capfd):
    """diffrax's progress meters run in ukjax's stepping loop: a text meter prints its lines
    up to 100 % and the run is the one without it."""
    ts = jnp.linspace(0.0, 1.0, 5)
    q0, qd0 = jnp.array([0.6, -0.8]), jnp.zeros(2)
    quiet = ukjax.simulate(pendulum(), q0, qd0, 0.0, 1.0, ts=ts)
    shown = ukjax.simulate(pendulum(), q0, qd0, 0.0, 1.0, ts=ts, progress_meter=diffrax.TextProgressMeter())
    out, err = capfd.readouterr()
    assert "100.00%" in out + err
    np.testing.assert_array_equal(shown.q, quiet.q)


class _Falling(ukjax.AbstractUnconstrainedSystem):
    """A body falling along one axis: `y(t) = y₀ + v₀ t − g t²/2`."""

    def mass_matrix(self, t, q):
        return jnp.eye(1, dtype=q.dtype)

    def forces(self, t, q, qd):
        return jnp.full(1, -G, q.dtype)


def test_saved_states_derivatives_in_both_modes_against_the_closed_form():
    """∂y(tⱼ)/∂v₀ = tⱼ at every save, in reverse and forward mode. The saves are written in
    blocks per step; a save's row written again by a later block had its reverse-mode
    derivative counted once per write (4× at the first of 7 saves)."""
    ts = jnp.linspace(0.0, 1.0, 7)

    def saved(v0, adjoint):
        sol = ukjax.simulate(_Falling(), jnp.ones(1), v0, 0.0, 1.0, ts=ts, adjoint=adjoint, **TOL)
        return sol.q[:, 0]

    reverse = jax.jacrev(lambda v0: saved(v0, diffrax.RecursiveCheckpointAdjoint()))(jnp.full(1, 2.0))
    forward = jax.jacfwd(lambda v0: saved(v0, diffrax.ForwardMode()))(jnp.full(1, 2.0))
    for jacobian in (reverse, forward):
        np.testing.assert_allclose(np.asarray(jacobian[:, 0]), np.asarray(ts), rtol=1e-12, atol=1e-12)
