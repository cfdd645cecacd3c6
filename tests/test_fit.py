"""Fitting: gradients of both routes against finite differences, small versions of every
case of benchmarks/identify.py (recovered parameters, rank, undetermined directions, noise,
inverse dynamics against linear least squares) and Baumgarte tuning against a grid."""

import math
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import ukjax
from benchmarks import identify
from ukjax import models

FIXED = dict(solver=ukjax.RK4(), adaptive=False, dt0=2e-3)


def constrained_arm(lengths, masses, inertias, alpha, beta):
    """A two-link arm whose tip slides on the vertical line x = 1.2, under a joint torque."""
    chain = models.PlanarChain(lengths, masses, 0.5 * lengths, inertias)
    forced = ukjax.Forced(chain, lambda t, q, qd: jnp.stack([2.0 * jnp.sin(3 * t), 0.0 * t]))
    line = ukjax.Holonomic(lambda t, q: chain.joint_positions(q)[-1, 0] - 1.2)
    return ukjax.ConstrainedSystem(forced, line, ukjax.Baumgarte(alpha, beta))


@pytest.mark.long
@pytest.mark.parametrize("jac", ["fwd", "bwd"])
def test_gradients_match_finite_differences(jac):
    """d loss / d (a mass, a length, an inertia, α, β) through a constrained simulation, both
    routes, against central differences (fixed steps: the discrete map is smooth)."""
    theta = jnp.array([1.3, 0.9, 0.07, 4.0, 9.0])  # masses[0], lengths[1], inertias[1], α, β
    q0 = jnp.array([0.3, 1.2])  # off the line: the gains act

    def loss(theta):
        system = constrained_arm(
            jnp.stack([1.0, theta[1]]),
            jnp.stack([theta[0], 0.8]),
            jnp.stack([0.1, theta[2]]),
            theta[3],
            theta[4],
        )
        adjoint = diffrax.ForwardMode() if jac == "fwd" else diffrax.RecursiveCheckpointAdjoint()
        sol = ukjax.simulate(system, q0, jnp.zeros(2), 0.0, 0.5, adjoint=adjoint, **FIXED)
        return jnp.sum(jnp.sin(sol.q[-1])) + jnp.sum(sol.qd[-1] ** 2)

    # One compiled loss for all eleven calls (each call builds a new system with a new lambda).
    loss = jax.jit(loss)
    grad = jax.jit(jax.jacfwd(loss) if jac == "fwd" else jax.grad(loss))(theta)
    h = 1e-5 * theta
    fd = [(loss(theta.at[i].add(h[i])) - loss(theta.at[i].add(-h[i]))) / (2 * h[i]) for i in range(5)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6)
    assert np.min(np.abs(fd)) > 1e-3  # every parameter matters


def test_open_chain_recovered_exactly():
    result = identify.open_chain(1.0, 1)
    assert result["error"] < 1e-6 and result["rank"] == result["parameters"] == 4


@pytest.mark.long
def test_multiple_shooting_recovers_where_single_shooting_fails():
    assert identify.open_chain(3.0, 1, amplitude=6.0, max_steps=30)["error"] > 0.1
    result = identify.open_chain(3.0, 6, amplitude=6.0)
    assert result["error"] < 1e-6 and result["rank"] == result["parameters"]


def test_undetermined_direction_is_named_and_warned():
    """Residuals that see only a + 2b: one direction undetermined, warned about, named, its
    standard errors infinite; `determined` removes exactly that direction. (The closed chain of
    seed 002, rank 9/10, is checked through `ukjax fit` in test_cli.)"""

    class Pair(eqx.Module):
        a: jax.Array
        b: jax.Array

    def residuals(m):
        return jnp.stack([m.a + 2 * m.b - 5.0, 2 * (m.a + 2 * m.b) - 10.0])

    with pytest.warns(UserWarning, match="determine 1 of 2"):
        res = ukjax.fit_least_squares(residuals, Pair(jnp.array(1.0), jnp.array(1.0)), where=lambda m: (m.a, m.b), progress=False)
    assert res.rank == 1 and res.unidentifiable.shape == (1, 2) and np.all(np.isinf(res.std))
    assert res.cost < 1e-20 and abs(res.values[0] + 2 * res.values[1] - 5.0) < 1e-10
    # relative directions: δa/a, δb/b with a·(δa/a) + 2b·(δb/b) = 0
    v = res.unidentifiable[0]
    assert abs(res.values[0] * v[0] + 2 * res.values[1] * v[1]) < 1e-10
    # a change along (2, −1) leaves a + 2b unchanged: nothing of it is determined
    np.testing.assert_allclose(res.determined(np.array([2.0, -1.0])), 0.0, atol=1e-12)
    np.testing.assert_allclose(res.determined(np.array([1.0, 2.0])), [1.0, 2.0], atol=1e-12)
    # residuals that are NaN at the start are refused, not iterated on
    with pytest.raises(ValueError, match="not finite at the starting parameters"):
        ukjax.fit_least_squares(
            lambda m: jnp.log(m.a - 2.0) + m.b, Pair(jnp.array(1.0), jnp.array(1.0)), where=lambda m: (m.a, m.b), progress=False
        )


@pytest.mark.long
def test_inverse_dynamics_fit_agrees_with_regressor_least_squares():
    result = identify.inverse_dynamics(1.0)
    assert result["rank"] < result["parameters"]
    assert result["agreement"] < 1e-8 and result["error"] < 1e-6


class Record(eqx.Module):
    chain: models.PlanarChain
    torques: jax.Array


def test_predicted_standard_errors_match_the_spread():
    """Inverse dynamics of a free two-link arm from torques with Gaussian noise: the spread of
    the estimates over 20 draws against the predicted standard errors."""
    chain = models.PlanarChain([1.0, 0.8], [1.5, 1.0], [0.5, 0.4], [0.12, 0.06])
    ts = jnp.linspace(0.0, 2.0, 41)

    def motion(t):
        return jnp.stack([jnp.sin(1.3 * t), 0.5 * jnp.cos(2.1 * t)])

    q, qd, qdd = (jax.vmap(f)(ts) for f in (motion, jax.jacfwd(motion), jax.jacfwd(jax.jacfwd(motion))))
    tau = jax.vmap(lambda t, q, qd, qdd: chain.mass_matrix(t, q) @ qdd - chain.forces(t, q, qd))(
        ts, q, qd, qdd
    )
    sigma, rng = 0.05, np.random.default_rng(1)

    def residuals(record):  # one function and one `where` for every draw: compiled once
        return ukjax.torque_residuals(record.chain, ts, q, qd, qdd, record.torques)

    def where(record):
        return record.chain.masses, record.chain.inertias

    estimates, predicted = [], []
    for _ in range(20):
        res = ukjax.fit_least_squares(
            residuals, Record(chain, tau + sigma * rng.normal(size=tau.shape)), where=where, progress=False
        )
        estimates.append(np.concatenate(where(res.model)))
        predicted.append(res.std)
    ratio = np.std(estimates, axis=0, ddof=1) / np.mean(predicted, axis=0)
    assert np.all((0.6 < ratio) & (ratio < 1.5)), ratio


def test_tuned_gains_beat_the_grid_without_leaving_the_stability_region():
    """A Cartesian pendulum started off its rod, RK4 at a fixed step: the tuned gains do at
    least as well as the best critically damped grid point inside the stability region."""
    system = ukjax.ExplicitSystem(lambda t, q: jnp.eye(2), lambda t, q, qd: jnp.array([0.0, -9.81]))
    rod = ukjax.Holonomic(lambda t, q: q @ q - 1.0)
    q0, qd0, h, horizon = jnp.array([0.65, -0.8]), jnp.array([1.0, 0.5]), 0.05, 3.0
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=h)
    ts = h * jnp.arange(round(horizon / h) + 1)

    def drift(gains):
        sol = ukjax.simulate(
            ukjax.ConstrainedSystem(system, rod, gains), q0, qd0, 0.0, horizon, ts=ts, throw=False, **fixed
        )
        return float(jnp.trapezoid(jnp.linalg.norm(sol.phi, axis=1), ts)) if bool(sol.success) else math.inf

    bound = ukjax.real_stability_limit(ukjax.RK4()) / h
    grid = min(drift(ukjax.Baumgarte(2 * w, w * w)) for w in np.linspace(0.05, 0.9, 18) * bound)
    gains = ukjax.tune_baumgarte(
        ukjax.ConstrainedSystem(system, rod, ukjax.Baumgarte(1.0, 4.0)),
        q0,
        qd0,
        horizon,
        progress=False,
        **fixed,
    )
    # Real roots: the discriminant is (ω₁ − ω₂)² ≥ 0, up to rounding when the roots coincide
    # (which np.roots would turn into a tiny imaginary part).
    alpha, beta = float(gains.alpha), float(gains.beta)
    discriminant = alpha**2 - 4 * beta
    assert discriminant >= -1e-9 * alpha**2
    largest = (alpha + math.sqrt(max(discriminant, 0.0))) / 2
    assert largest * h <= 0.9 * ukjax.real_stability_limit(ukjax.RK4()) + 1e-9
    assert drift(gains) <= 1.05 * grid
    assert drift(gains) < 0.1 * drift(ukjax.Baumgarte(1.0, 4.0))


class Quadratic(eqx.Module):
    x: jax.Array
    label: str = "not a parameter"


def test_fit_with_optax_optimizers_and_options():
    target = jnp.array([3.0, 0.5])

    def loss(m):
        return jnp.sum((jnp.log(m.x) - jnp.log(target)) ** 2)

    lbfgs = ukjax.fit(
        loss,
        Quadratic(jnp.array([1.0, 1.0])),
        where=lambda m: m.x,
        positive=True,
        steps=50,
        tol=1e-12,
        progress=False,
    )
    np.testing.assert_allclose(lbfgs.model.x, target, rtol=1e-8)
    assert lbfgs.steps < 50 and lbfgs.losses.shape == (lbfgs.steps + 1,)
    adam = ukjax.fit(
        loss,
        Quadratic(jnp.array([1.0, 1.0])),
        where=lambda m: m.x,
        positive=True,
        optimizer=optax.adam(0.1),
        steps=300,
        progress=False,
    )
    np.testing.assert_allclose(adam.model.x, target, rtol=1e-3)
    forward = ukjax.fit(
        loss,
        Quadratic(jnp.array([1.0, 1.0])),
        where=lambda m: m.x,
        positive=True,
        steps=50,
        jac="fwd",
        progress=False,
    )
    np.testing.assert_allclose(forward.model.x, target, rtol=1e-8)
    with pytest.raises(TypeError, match="floating-point arrays"):
        ukjax.fit(loss, Quadratic(jnp.array([1.0, 1.0])), where=lambda m: m.label, progress=False)
    with pytest.raises(ValueError, match="not positive"):
        ukjax.fit(loss, Quadratic(jnp.array([-1.0, 1.0])), where=lambda m: m.x, positive=True, progress=False)


def test_least_squares_reports_each_step_in_order(capfd):
    """`fit_least_squares` runs its steps in one compiled loop; its progress meter (a host
    callback from the loop) prints each step's cost in order in a pipe, the costs the result
    holds, and the fit is the one without the meter. The residuals' root: a = 3, b = √2."""

    class Pair(eqx.Module):
        a: jax.Array
        b: jax.Array

    def residuals(m):
        return jnp.stack([m.a - 3.0, m.b**2 - 2.0, m.a * m.b - 3.0 * math.sqrt(2.0)])

    start = Pair(jnp.array(1.0), jnp.array(1.0))
    quiet = ukjax.fit_least_squares(residuals, start, where=lambda m: (m.a, m.b), max_steps=10, progress=False)
    capfd.readouterr()
    res = ukjax.fit_least_squares(residuals, start, where=lambda m: (m.a, m.b), max_steps=10)
    lines = capfd.readouterr().out.splitlines()
    assert res.success and res.steps == quiet.steps < 10
    np.testing.assert_allclose(res.values, [3.0, math.sqrt(2.0)], rtol=1e-12)
    np.testing.assert_array_equal(res.values, quiet.values)
    assert lines[0] == "least squares: up to 10 steps"
    assert lines[1:-1] == [f"least squares: step {k + 1}, loss {c:.6e}" for k, c in enumerate(res.costs)]
    assert lines[-1] == f"least squares: converged after {res.steps} steps, loss {res.cost:.6e}"


def test_wrong_differentiation_mode_is_explained():
    system = ukjax.ExplicitSystem(lambda t, q: jnp.eye(1), lambda t, q, qd: -q)
    model = Quadratic(jnp.array([1.0]))

    def reverse_only(m):  # the default adjoint of simulate is reverse mode
        return ukjax.simulate(system, m.x, jnp.zeros(1), 0.0, 1.0).q[-1] - 0.5

    with pytest.raises(ValueError, match="jac='bwd'"):
        ukjax.fit_least_squares(reverse_only, model, where=lambda m: m.x, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = ukjax.fit_least_squares(reverse_only, model, where=lambda m: m.x, jac="bwd", progress=False)
    np.testing.assert_allclose(res.model.x, [0.5 / np.cos(1.0)], rtol=1e-7)


@pytest.mark.long
def test_several_experiments_fitted_together():
    """Two starts at once: the batched residuals are the single ones stacked, zero at the
    truth, and the fit recovers the parameters from both."""
    true = identify.double_pendulum(3.0)
    q0s, qd0 = jnp.array([[1.2, -0.4], [-0.5, 0.9]]), jnp.zeros((2, 2))
    ts = jnp.linspace(0.0, 0.5, 11)
    tol = dict(rtol=1e-12, atol=1e-12)
    measured = jnp.stack([ukjax.simulate(true, q0, jnp.zeros(2), 0.0, 0.5, ts=ts, **tol).q for q0 in q0s])
    both = ukjax.trajectory_residuals(true, q0s, qd0, ts, measured, **tol)
    first = ukjax.trajectory_residuals(true, q0s[0], qd0[0], ts, measured[0], **tol)
    assert both.shape == (2 * first.size,) and jnp.max(jnp.abs(both)) < 1e-12
    start = identify.off_by(true)
    np.testing.assert_allclose(
        ukjax.trajectory_residuals(start, q0s, qd0, ts, measured, **tol)[: first.size],
        ukjax.trajectory_residuals(start, q0s[0], qd0[0], ts, measured[0], **tol),
        atol=1e-14,
    )
    # one set of weights per experiment weighs that experiment only (it gave E× the residuals)
    weights = jnp.stack([jnp.full((11, 2), 2.0), jnp.full((11, 2), 3.0)])
    weighted = ukjax.trajectory_residuals(start, q0s, qd0, ts, measured, weights=weights, **tol)
    plain = ukjax.trajectory_residuals(start, q0s, qd0, ts, measured, **tol)
    np.testing.assert_allclose(weighted, jnp.repeat(jnp.array([2.0, 3.0]), first.size) * plain, atol=1e-14)
    with pytest.raises(ValueError, match="weights must broadcast"):
        ukjax.trajectory_residuals(start, q0s, qd0, ts, measured, weights=jnp.ones((3, 11, 2)), **tol)
    res = ukjax.fit_least_squares(
        lambda m: ukjax.trajectory_residuals(m, q0s, qd0, ts, measured, **tol),
        start,
        where=identify.inertial,
        positive=True,
        progress=False,
    )
    assert np.max(np.abs(identify.relative_errors(res.model, true))) < 1e-6


def test_fit_never_returns_a_non_finite_model_as_success():
    """At its minimum `‖x − x*‖` has a NaN gradient: L-BFGS's cached value stayed finite, the
    `tol` test read "no decrease" as convergence and the model came back NaN."""
    start = Quadratic(jnp.array([1.0, 2.0]))
    loss = lambda m: jnp.linalg.norm(m.x - jnp.array([1.0, 2.0])) + jnp.sum(m.x**2)
    with pytest.warns(UserWarning, match="not finite"):
        res = ukjax.fit(loss, start, where=lambda m: m.x, tol=1e-8, progress=False)
    assert res.stop == "non-finite loss or gradient"
    np.testing.assert_array_equal(res.model.x, start.x)
    assert np.all(np.isfinite(res.losses)) and res.losses[-1] == 5.0


@pytest.mark.long
def test_tuning_from_a_consistent_start():
    """A spherical pendulum held in a plane, started on its rod (Φ = 0 exactly: the derivative
    of ‖Φ‖ there was NaN, and so were the gains), with per-row starting gains tuned to one pair
    (`per_row=False` failed to broadcast them)."""
    system = ukjax.ExplicitSystem(lambda t, q: jnp.eye(3), lambda t, q, qd: jnp.array([0.0, -9.81, 0.0]))
    rows = [ukjax.Holonomic(lambda t, q: q @ q - 1.0), ukjax.Holonomic(lambda t, q: q[2])]
    q0, qd0, fixed = jnp.array([0.6, -0.8, 0.0]), jnp.zeros(3), dict(solver=ukjax.RK4(), adaptive=False, dt0=0.05)
    ts = 0.05 * jnp.arange(21)

    def drift(gains):
        sol = ukjax.simulate(ukjax.ConstrainedSystem(system, rows, gains), q0, qd0, 0.0, 1.0, ts=ts, **fixed)
        return float(jnp.trapezoid(jnp.linalg.norm(sol.phi, axis=1), ts))

    start = ukjax.Baumgarte(jnp.array([2.0, 3.0]), jnp.array([25.0, 16.0]))
    gains = ukjax.tune_baumgarte(ukjax.ConstrainedSystem(system, rows, start), q0, qd0, 1.0, progress=False, **fixed)
    assert gains.alpha.shape == () and np.isfinite(float(gains.alpha)) and np.isfinite(float(gains.beta))
    assert drift(gains) < 0.1 * drift(start)
