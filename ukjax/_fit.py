"""Parameter identification and Baumgarte-gain tuning by gradient, through whole simulations.

Fitted leaves are flattened into one vector `θ` (their logarithms with `positive=True`);
`fit` runs an optax optimiser on a scalar loss, `fit_least_squares` runs an optimistix
least-squares solver on residuals and then reports what the data determine: the singular
values of the Jacobian in relative parameter changes, its rank, the directions it cannot see,
and standard errors from `σ² (JᵀJ)⁺`.
"""

import math
import sys
import warnings
from collections.abc import Callable
from typing import Any, Literal

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float, PyTree, Real

from ._constraints import Baumgarte, value_and_jacfwd
from ._control import ServoControl
from ._jit import jit
from ._simulate import Status, simulate
from ._systems import AbstractSystem, ConstrainedSystem

Jac = Literal["fwd", "bwd"]


class _Parameters(eqx.Module):
    """The leaves `where(model)` selects, as one flat vector `θ` and back. A pytree: the same
    `where` on a model of the same structure reuses compiled fits."""

    model0: PyTree
    where: Callable = eqx.field(static=True)
    positive: bool = eqx.field(static=True)
    single: bool = eqx.field(static=True)
    shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)

    def values(self, theta: Float[Array, " p"]) -> Float[Array, " p"]:
        return jnp.exp(theta) if self.positive else theta

    def model(self, theta: Float[Array, " p"]):
        sizes = [math.prod(shape) for shape in self.shapes]
        parts = jnp.split(self.values(theta), np.cumsum(sizes)[:-1])
        leaves = [part.reshape(shape) for part, shape in zip(parts, self.shapes)]
        return eqx.tree_at(self._selected, self.model0, leaves)

    def _selected(self, model) -> tuple:
        return (self.where(model),) if self.single else tuple(self.where(model))


def _parameters(
    model, where: Callable, positive: bool
) -> tuple[_Parameters, Float[Array, " p"], tuple[str, ...]]:
    """`_Parameters`, the starting `θ` and the names of its entries, with the checks."""
    selected = where(model)
    single = not isinstance(selected, (tuple, list))
    leaves = (selected,) if single else tuple(selected)
    for k, leaf in enumerate(leaves):
        if not (eqx.is_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.inexact)):
            raise TypeError(
                f"where selected a {type(leaf).__name__} (leaf {k}); the parameters to fit must be "
                "floating-point arrays (give the model's parameters as jnp arrays of floats)."
            )
    # strongly typed: a weakly typed start (`jnp.array(0.3)`) traces other programs than the
    # strongly typed iterates, which optimistix's separately compiled steps cannot combine
    values = jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])
    values = jnp.asarray(values, dtype=values.dtype)
    if positive and not bool(jnp.all(values > 0)):
        raise ValueError("positive=True fits logarithms, but some selected parameters are not positive.")
    params = _Parameters(model, where, positive, single, tuple(leaf.shape for leaf in leaves))
    return params, jnp.log(values) if positive else values, _names(model, leaves)


def _names(model, leaves) -> tuple[str, ...]:
    """`system.masses[1]`-style names of the selected scalars, found by identity in `model`."""
    paths = {
        id(leaf): jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_flatten_with_path(model)[0]
    }
    names = []
    for k, leaf in enumerate(leaves):
        base = paths.get(id(leaf), f"<parameter {k}>").lstrip(".")
        names += [base] if leaf.ndim == 0 else [f"{base}{list(i)}" for i in np.ndindex(leaf.shape)]
    return tuple(names)


class _Progress:
    """A live bar where a person watches a terminal, a line per stage in a pipe or log."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.total, self.label, self.enabled = total, label, enabled
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, leave=False)
        elif enabled:
            print(f"{label}: up to {total} steps", flush=True)
        self.stage = 0

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.3e}")
        elif self.enabled and 10 * step >= (self.stage + 1) * self.total:
            self.stage = 10 * step // self.total
            print(f"{self.label}: step {step}, loss {loss:.6e}", flush=True)

    def close(self, step: int, loss: float, why: str) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.enabled:
            print(f"{self.label}: {why} after {step} steps, loss {loss:.6e}", flush=True)


def _forward_gradient(f: Callable) -> Callable:
    """`f` made reverse-differentiable through forward-mode derivatives: the gradient costs one
    JVP per parameter and no checkpoint memory (simulations with `diffrax.ForwardMode`)."""

    @jax.custom_vjp
    def g(theta):
        return f(theta)

    def g_fwd(theta):
        return value_and_jacfwd(f, theta)

    def g_bwd(grad, cotangent):
        return (cotangent * grad,)

    g.defvjp(g_fwd, g_bwd)
    return g


_MODE_HINT = {
    "fwd": "the function is not forward-differentiable (a simulate with the default reverse-mode "
    "adjoint?): pass jac='bwd', or simulate with adjoint=diffrax.ForwardMode() "
    "(trajectory_residuals' default).",
    "bwd": "the function is not reverse-differentiable (a simulate with adjoint=diffrax.ForwardMode(), "
    "trajectory_residuals' default?): pass jac='fwd', or simulate with the default adjoint.",
}


def _explain_mode(error: Exception, jac: Jac) -> Exception:
    text = str(error)
    if any(s in text for s in ("jvp", "Reverse-mode", "reverse-mode", "custom_vjp", "while_loop")):
        return ValueError(f"{_MODE_HINT[jac]} ({type(error).__name__}: {text.splitlines()[0]})")
    return error


class FitResult(eqx.Module):
    """The result of [`ukjax.fit`][].

    **Attributes:**

    - `model`: the model with the fitted leaves: the last one whose loss and gradient were
      finite.
    - `losses`: the loss before each step and after the last one, shape (steps + 1,).
    - `steps`: optimiser steps taken.
    - `stop`: why it stopped: `"converged"` (the `tol` test), `"step limit"`, or
      `"non-finite loss or gradient"` (then `model` is the last finite one and a warning says
      so).
    """

    model: Any
    losses: np.ndarray
    steps: int
    stop: str


def fit(
    loss: Callable[[Any], Real[Array, ""]],
    model: PyTree,
    *,
    where: Callable,
    optimizer: optax.GradientTransformation | None = None,
    steps: int = 200,
    positive: bool = False,
    tol: float | None = None,
    progress: bool = True,
    jac: Jac = "bwd",
) -> FitResult:
    """Minimise a scalar loss of an equinox model (a system, a constraint, a controller…)
    over selected leaves with an optax optimiser, one jitted step at a time.

    **Arguments:**

    - `loss`: `loss(model) -> scalar`.
    - `model`: the starting model.
    - `where`: `where(model) -> leaf or tuple of leaves` to fit, as for `eqx.tree_at`.
    - `optimizer`: an optax optimiser (default `optax.lbfgs()`; line-search methods reuse the
      values and gradients they computed).
    - `steps`: the most optimiser steps.
    - `positive`: fit the logarithms, so that the fitted leaves stay positive.
    - `tol`: stop once a step lowers the loss by less than `tol` times its value. A loss or
      gradient that is not finite stops the fit too (with a warning), at the last finite model.
    - `progress`: a progress bar (a terminal) or a line per tenth of the run (a pipe).
    - `jac`: `"bwd"` (reverse mode: one backward pass, whatever the number of parameters) or
      `"fwd"` (one forward-mode pass per parameter: cheaper for a handful of parameters,
      no checkpoint memory, and needed when the loss simulates with `diffrax.ForwardMode`).

    **Returns:**

    A [`ukjax.FitResult`][].
    """
    params, theta0, _ = _parameters(model, where, positive)

    def objective(theta):
        return loss(params.model(theta))

    if jac == "fwd":
        objective = _forward_gradient(objective)
    opt = optax.with_extra_args_support(optax.lbfgs() if optimizer is None else optimizer)
    # Strong types throughout: some optimisers (L-BFGS's line-search record) start with
    # weakly typed scalars that their first update makes strong, which would compile `step`
    # a second time.
    state = jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype) if eqx.is_array(x) else x, opt.init(theta0))
    try:
        cached = optax.tree.get(state, "value") is not None
    except (KeyError, ValueError):
        cached = False
    value_and_grad = optax.value_and_grad_from_state(objective) if cached else jax.value_and_grad(objective)

    @jit
    def step(theta, state):
        value, grad = value_and_grad(theta, state=state) if cached else value_and_grad(theta)
        updates, state = opt.update(grad, state, theta, value=value, grad=grad, value_fn=objective)
        new = optax.apply_updates(theta, updates)
        # a line search's cached value can stay finite while the gradient or the step is not
        finite = jnp.isfinite(value) & jnp.all(jnp.isfinite(grad)) & jnp.all(jnp.isfinite(new))
        return new, state, value, finite

    theta, previous, losses = theta0, theta0, []
    meter = _Progress(steps, "fit", progress)
    why = "step limit"
    try:
        for k in range(steps):
            candidate, state, value, finite = step(theta, state)
            if not bool(finite):
                why = "non-finite loss or gradient"
                break
            previous, theta = theta, candidate
            losses.append(float(value))
            meter.update(k + 1, losses[-1])
            if tol is not None and k > 0 and losses[-2] - losses[-1] <= tol * abs(losses[-2]):
                why = "converged"
                break
    except (TypeError, ValueError) as error:
        raise _explain_mode(error, jac) from error
    final = float(jit(objective)(theta))
    if not math.isfinite(final):  # the last step left the finite region: step back
        why, theta = "non-finite loss or gradient", previous
        final = losses.pop() if losses else final
    losses.append(final)
    meter.close(len(losses) - 1, final, why)
    if why == "non-finite loss or gradient":
        warnings.warn(
            f"fit stopped after {len(losses) - 1} steps: the loss or its gradient is not finite there "
            f"(loss {final:.6e} at the last finite model, which is returned). Check the loss for NaN "
            "(a norm or square root at zero, a failed simulation).",
            stacklevel=2,
        )
    return FitResult(params.model(theta), np.asarray(losses), len(losses) - 1, why)


class LeastSquaresResult(eqx.Module):
    """The result of [`ukjax.fit_least_squares`][], with what the data determine.

    **Attributes:**

    - `model`: the model with the fitted leaves.
    - `cost`: `½‖r‖²` at the solution.
    - `costs`: `½‖r‖²` at the accepted point after each step (the first step evaluates the
      start, so `costs[0]` is the starting cost).
    - `steps`: solver steps taken.
    - `success`: whether the solver converged within `max_steps`.
    - `names`: the fitted scalars, in the order of `std` (`"system.masses[1]"`).
    - `std`: the standard error of each fitted scalar, in its own units (also with
      `positive=True`); `inf` for scalars the data do not determine.
    - `covariance`: `σ² (JᵀJ)⁺` in those units (the pseudo-inverse leaves out the
      undetermined directions).
    - `singular_values`: of the Jacobian with its columns scaled to unit norm, largest first:
      invariant to the parameters' values and units.
    - `rank`: the number of singular values above `rank_rtol` times the largest (so the
      verdict does not depend on a parameter's size or unit, nor fail at a value of zero).
    - `unidentifiable`: one row per direction the data do not determine, in relative
      parameter changes `δθ/θ` (`δθ` for a parameter at zero; orthonormal rows); shape
      (0, p) when every parameter is determined.
    - `noise_std`: the `σ` used (given, or `√(2 cost / (m − rank))` from `m` residuals).
    - `values`: the fitted scalars, in the order of `names`.
    """

    model: Any
    cost: float
    costs: np.ndarray
    steps: int
    success: bool
    names: tuple[str, ...]
    std: np.ndarray
    covariance: np.ndarray
    singular_values: np.ndarray
    rank: int
    unidentifiable: np.ndarray
    noise_std: float
    values: np.ndarray

    def describe(self, direction: np.ndarray) -> str:
        """A direction of `unidentifiable` in words: `+0.71·a −0.71·b` for relative changes
        `δa/a = 0.71 s`, `δb/b = −0.71 s` that leave the residuals unchanged (terms under 0.01
        left out)."""
        order = np.argsort(-np.abs(direction))
        return " ".join(f"{direction[j]:+.3f}·{self.names[j]}" for j in order if abs(direction[j]) >= 0.01)

    def determined(self, change: ArrayLike) -> np.ndarray:
        """The part of a change of the fitted scalars (in their units, in the order of `names`)
        that the data determine: `change` less its components along the `unidentifiable`
        directions. With synthetic data, `determined(values − truth)` is the error of what the
        fit could recover."""
        change = np.asarray(change, dtype=float)
        if not self.unidentifiable.size:
            return change
        # back to the scalars' units
        lines = np.linalg.qr((self.unidentifiable * _relative_scale(self.values)).T)[0]
        return change - lines @ (lines.T @ change)


class _Residuals(eqx.Module):
    """`θ ↦ (flattened residuals, no aux)` in optimistix's form; a pytree, so that fits of the
    same `residuals` and `where` on new data or starts compile once.

    With `jac="fwd"` the Jacobian is computed beside the residuals, in one forward pass, and
    the derivative is that matrix: optimistix linearises `fn` at every step and keeps the
    linearisation, so materialising the final Jacobian for the statistics is then a product
    with a stored matrix, not the simulation's tangent program compiled a second time
    (measured on `ukjax fit`'s closed chain: 9.4 s of XLA compile saved).
    """

    params: _Parameters
    residuals: Callable = eqx.field(static=True)
    jac: Jac = eqx.field(static=True)

    def _flat(self, theta):
        return jnp.ravel(self.residuals(self.params.model(theta)))

    def __call__(self, theta, args=None):
        if self.jac == "bwd":
            return self._flat(theta), None

        @jax.custom_jvp
        def flat(theta):
            return self._flat(theta)

        @flat.defjvp
        def flat_jvp(primals, tangents):
            (theta,), (dtheta,) = primals, tangents
            r, jacobian = value_and_jacfwd(self._flat, theta)
            return r, jacobian @ dtheta

        return flat(theta), None


@jit
def _evaluate(fn, theta):
    return fn(theta)[0]


@jit
def _init(solver, fn, theta, options, f_struct):
    return solver.init(fn, theta, None, options, f_struct, None, frozenset())


@jit
def _step(solver, fn, theta, state, options):
    return solver.step(fn, theta, None, options, state, frozenset())


@jit
def _terminate(solver, fn, theta, state, options):
    return solver.terminate(fn, theta, None, options, state, frozenset())


@jit
def _jacobian(fn, theta, jac):
    return (jax.jacfwd if jac == "fwd" else jax.jacrev)(lambda theta: fn(theta)[0])(theta)


@jit
def _linearisation(state):
    return state.f_info.residual, state.f_info.jac.as_matrix()


def fit_least_squares(
    residuals: Callable[[Any], Float[Array, "..."]],
    model: PyTree,
    *,
    where: Callable,
    positive: bool = False,
    noise_std: float | None = None,
    solver: optx.AbstractLeastSquaresSolver | None = None,
    max_steps: int = 200,
    progress: bool = True,
    jac: Jac = "fwd",
    rank_rtol: float = 1e-6,
) -> LeastSquaresResult:
    """Minimise `½‖residuals(model)‖²` over selected leaves, then report the statistics of the
    fit: standard errors, covariance, the singular values of the Jacobian, its rank and the
    parameter directions the data do not determine (with a warning naming them).

    **Arguments:**

    - `residuals`: `residuals(model) -> array` of any shape (e.g. from
      [`ukjax.trajectory_residuals`][] or [`ukjax.torque_residuals`][]).
    - `model`, `where`, `positive`: as for [`ukjax.fit`][].
    - `noise_std`: the standard deviation of the residuals' noise; estimated from the
      residuals at the solution when None.
    - `solver`: an optimistix least-squares solver (default Levenberg–Marquardt with
      `rtol = atol = 1e-10`).
    - `max_steps`: the most solver steps.
    - `progress`: as for `fit`.
    - `jac`: `"fwd"` (default): a Jacobian with one column per parameter and many rows is
      cheapest in forward mode, one JVP per parameter, with no checkpoint memory; residuals
      must then be forward-differentiable (`trajectory_residuals` simulates with
      `diffrax.ForwardMode` for this reason). `"bwd"` for many parameters and few residuals.
    - `rank_rtol`: singular values below this fraction of the largest count as zero.

    **Returns:**

    A [`ukjax.LeastSquaresResult`][].
    """
    params, theta, names = _parameters(model, where, positive)
    fn = _Residuals(params, residuals, jac)
    solver = optx.LevenbergMarquardt(rtol=1e-10, atol=1e-10) if solver is None else solver
    options = {"jac": jac}
    meter = _Progress(max_steps, "least squares", progress)
    costs = []
    try:
        f_struct = eqx.filter_eval_shape(_evaluate, fn, theta)
        state = _init(solver, fn, theta, options, f_struct)
        done, k, result = False, 0, optx.RESULTS.successful
        while k < max_steps:
            if k > 0:
                done, result = _terminate(solver, fn, theta, state, options)
                if bool(done):
                    break
            theta, state, _ = _step(solver, fn, theta, state, options)
            k += 1
            # Gauss–Newton-type solvers carry the residual of the last accepted point (their first
            # step evaluates the start).
            r = state.f_info.residual if hasattr(state, "f_info") else _evaluate(fn, theta)
            costs.append(0.5 * float(jnp.sum(r**2)))
            if k == 1 and not math.isfinite(costs[0]):
                raise ValueError(
                    "The residuals are not finite at the starting parameters; check the start and the data."
                )
            meter.update(k, costs[-1])
        if k > 0 and isinstance(getattr(getattr(state, "f_info", None), "jac", None), lx.AbstractLinearOperator):
            # The solver linearised at the accepted point already (with jac="fwd", a stored
            # matrix): materialise that rather than differentiate the simulation once more.
            r, jacobian = _linearisation(state)
        else:
            r, jacobian = _evaluate(fn, theta), _jacobian(fn, theta, jac)
    except (TypeError, ValueError) as error:
        raise _explain_mode(error, jac) from error
    success = bool(done) and result == optx.RESULTS.successful
    r = np.asarray(r)
    cost = 0.5 * float(r @ r)
    meter.close(k, cost, "converged" if success else "stopped")
    values = np.asarray(params.values(theta))
    stats = _statistics(np.asarray(jacobian), values, positive, r, noise_std, rank_rtol)
    res = LeastSquaresResult(params.model(theta), cost, np.asarray(costs), k, success, names, *stats, values)
    if not success:
        why = f"max_steps = {max_steps} reached" if k >= max_steps else f"the solver reports {result}"
        warnings.warn(
            f"fit_least_squares did not converge ({why}): the model, standard errors and rank are "
            "those of an unconverged point (res.success is False). Raise max_steps or start closer.",
            stacklevel=2,
        )
    if res.rank < len(res.names):
        directions = "; ".join(res.describe(v) for v in res.unidentifiable)
        warnings.warn(
            f"The data determine {res.rank} of {len(res.names)} parameter directions; not determined "
            f"(relative changes that leave the residuals unchanged): {directions}. Their standard "
            "errors are inf: fix some of these parameters, or add experiments that excite them.",
            stacklevel=2,
        )
    return res


def _relative_scale(values: np.ndarray) -> np.ndarray:
    """What the `unidentifiable` directions divide a change by: `|θ|`, or 1 where `θ = 0`."""
    return np.where(values != 0, np.abs(values), 1.0)


def _statistics(J, values, positive, r, noise_std, rank_rtol):
    """Standard errors, covariance, singular values, rank and null directions.

    The rank is decided on the Jacobian with its columns scaled to unit norm: invariant to the
    parameters' values and units, and defined for a parameter whose value is zero (scaling by
    `|θ|` made a well-determined parameter near zero look undetermined). The null directions
    are reported in relative changes `δθ/θ` (`δθ` where `θ = 0`).
    """
    norms = np.linalg.norm(J, axis=0)
    norms = np.where(norms > 0, norms, 1.0)
    _, s, Vt = np.linalg.svd(J / norms, full_matrices=False)
    rank = int(np.sum(s > rank_rtol * s[0])) if s.size and s[0] > 0 else 0
    null = Vt[rank:]
    m = r.size
    if noise_std is None:
        noise_std = float(np.sqrt(r @ r / (m - rank))) if m > rank else float("nan")
    # in the fitted coordinates (θ, or log θ with positive=True), then in θ's own units
    covariance = noise_std**2 * ((Vt[:rank].T / s[:rank] ** 2) @ Vt[:rank]) / np.outer(norms, norms)
    if positive:
        covariance = covariance * np.outer(values, values)
    std = np.sqrt(np.diag(covariance))
    undetermined = np.linalg.norm(null, axis=0) > 1e-3 if null.size else np.zeros(len(values), bool)
    std = np.where(undetermined, np.inf, std)
    directions = null / norms
    if not positive:
        directions = directions / _relative_scale(values)
    if directions.size:
        directions = np.linalg.qr(directions.T)[0].T
    return std, covariance, s, rank, directions, noise_std


class MultipleShooting(eqx.Module):
    """A system with the starts of the later shooting segments as fitted unknowns: the
    model to give [`ukjax.trajectory_residuals`][] for multiple shooting.

    Single shooting from a poor start only converges on short records: on a long one the
    simulated and measured motions part ways and the residuals have many local minima. Cutting
    the record into segments, each simulated from its own start (fitted alongside the
    parameters, tied to the previous segment's end by continuity residuals), keeps every
    segment short. Fit the starts too: `where=lambda m: (m.system.masses, m.q_starts,
    m.qd_starts)`.

    **Arguments:**

    - `system`: the system.
    - `q_starts`, `qd_starts`: states at the start of segments 2…S, shape (S − 1, n) (or
      (E, S − 1, n) for E experiments).
    """

    system: AbstractSystem
    q_starts: Float[Array, "*e s n"]
    qd_starts: Float[Array, "*e s n"]

    @classmethod
    def from_measurements(
        cls,
        system: AbstractSystem,
        ts: Real[ArrayLike, " k"],
        q_measured: Float[ArrayLike, "*e k n"],
        segments: int,
        qd_measured: Float[ArrayLike, "*e k n"] | None = None,
    ) -> "MultipleShooting":
        """Segment starts read off the measurements (velocities by central differences of
        the positions where none were measured)."""
        ts, q = jnp.asarray(ts), jnp.asarray(q_measured)
        K = _segment_length(ts.shape[0], segments)
        qd = jnp.gradient(q, ts, axis=-2) if qd_measured is None else jnp.asarray(qd_measured)
        index = K * jnp.arange(1, segments)
        return cls(system, q[..., index, :], qd[..., index, :])


def _segment_length(k: int, segments: int) -> int:
    if segments < 1 or (k - 1) % segments:
        raise ValueError(
            f"{k} saved times cannot be cut into {segments} segments of equal length: need (k − 1) % segments == 0."
        )
    return (k - 1) // segments


def trajectory_residuals(
    model: AbstractSystem | MultipleShooting,
    q0: Float[ArrayLike, "*e n"],
    qd0: Float[ArrayLike, "*e n"],
    ts: Real[ArrayLike, " k"],
    q_measured: Float[ArrayLike, "*e k n"],
    *,
    qd_measured: Float[ArrayLike, "*e k n"] | None = None,
    weights: Float[ArrayLike, "..."] | None = None,
    continuity_weight: float = 1.0,
    **simulate_kwargs,
) -> Float[Array, " m"]:
    """Simulated minus measured motion at the saved times, for one experiment or a batch.

    **Arguments:**

    - `model`: the system, or a [`ukjax.MultipleShooting`][] for multiple shooting.
    - `q0`, `qd0`: the start, shape (n,), or (E, n) for E experiments fitted together.
    - `ts`: the measurement times, shape (k,), `ts[0]` the start time.
    - `q_measured`: measured coordinates, shape (k, n) or (E, k, n).
    - `qd_measured`: measured velocities, same shape, if any.
    - `weights`: multiplies the residuals, broadcast against `q_measured` ((k, n), or
      (E, k, n) for one set of weights per experiment).
    - `continuity_weight`: multiplies the continuity residuals of multiple shooting.
    - `simulate_kwargs`: passed to [`ukjax.simulate`][]. By default `adjoint` is
      `diffrax.ForwardMode()` (the Jacobian of `fit_least_squares` has few columns) and
      `throw` is False (a failed trial gives non-finite residuals, which the solver rejects).

    **Returns:**

    All residuals in one vector: per experiment, positions (then velocities) at `ts`, then the
    continuity residuals of the segment joints.
    """
    simulate_kwargs = {"adjoint": diffrax.ForwardMode(), "throw": False} | simulate_kwargs
    ts = jnp.asarray(ts)
    q0, qd0, qm = jnp.asarray(q0), jnp.asarray(qd0), jnp.asarray(q_measured)
    qdm = None if qd_measured is None else jnp.asarray(qd_measured)
    shooting = isinstance(model, MultipleShooting)
    system = model.system if shooting else model
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"model must be a ukjax system or a MultipleShooting, got {type(model).__name__}.")
    if qm.shape[-2:] != (ts.shape[0], q0.shape[-1]) or qm.shape[:-2] != q0.shape[:-1]:
        raise ValueError(
            f"q_measured must have shape {q0.shape[:-1] + (ts.shape[0], q0.shape[-1])} to match q0 and ts, got {qm.shape}."
        )
    if qdm is not None and qdm.shape != qm.shape:
        raise ValueError(f"qd_measured must have the shape of q_measured {qm.shape}, got {qdm.shape}.")
    weights = jnp.ones(()) if weights is None else jnp.asarray(weights)
    try:
        weights = jnp.broadcast_to(weights, qm.shape)
    except ValueError:
        raise ValueError(
            f"weights must broadcast against q_measured's shape {qm.shape} (one weight per experiment, "
            f"time and coordinate at most), got {weights.shape}."
        ) from None
    segments = model.q_starts.shape[-2] + 1 if shooting else 1
    K = _segment_length(ts.shape[0], segments)
    seg_ts = jnp.stack([ts[i * K : i * K + K + 1] for i in range(segments)])

    def one(q0, qd0, qm, qdm, weights, q_starts, qd_starts):
        starts_q = jnp.concatenate([q0[None], q_starts])
        starts_qd = jnp.concatenate([qd0[None], qd_starts])
        sol = jax.vmap(lambda q, qd, st: simulate(system, q, qd, st[0], st[-1], ts=st, **simulate_kwargs))(
            starts_q, starts_qd, seg_ts
        )

        def at_ts(x):  # (S, K + 1, n) segment saves -> (k, n), each shared time once
            return jnp.concatenate([x[:, :-1].reshape(-1, x.shape[-1]), x[-1, -1:]])

        parts = [weights * (at_ts(sol.q) - qm)]
        if qdm is not None:
            parts.append(weights * (at_ts(sol.qd) - qdm))
        gaps = jnp.concatenate([sol.q[:-1, -1] - starts_q[1:], sol.qd[:-1, -1] - starts_qd[1:]], axis=-1)
        return jnp.concatenate([jnp.ravel(p) for p in parts] + [continuity_weight * jnp.ravel(gaps)])

    n = q0.shape[-1]
    empty = jnp.zeros(q0.shape[:-1] + (0, n), q0.dtype)
    q_starts = model.q_starts if shooting else empty
    qd_starts = model.qd_starts if shooting else empty
    qdm_or_q = qm if qdm is None else qdm
    run = one if qdm is not None else (lambda q0, qd0, qm, _, w, qs, qds: one(q0, qd0, qm, None, w, qs, qds))
    if q0.ndim == 1:
        return run(q0, qd0, qm, qdm_or_q, weights, q_starts, qd_starts)
    return jnp.ravel(jax.vmap(run)(q0, qd0, qm, qdm_or_q, weights, q_starts, qd_starts))


def _constrained_forces(system: AbstractSystem, t, q, qd, qdd):
    """`N` and `M q̈ − Q`, with `N = I − A⁺A` over every constraint row (I without any): `N`
    removes the forces that ideal constraints could supply."""
    d = system.dynamics(t, q, qd)
    f = d.M @ qdd - d.Q
    if not d.levels:
        return jnp.eye(q.shape[0], dtype=f.dtype), f
    A = jnp.concatenate([level.rows.A for level in d.levels])
    return jnp.eye(q.shape[0], dtype=f.dtype) - jnp.linalg.pinv(A) @ A, f


def torque_residuals(
    controller_or_system: ServoControl | AbstractSystem,
    ts: Real[ArrayLike, " k"],
    q: Float[ArrayLike, "k n"],
    qd: Float[ArrayLike, "k n"],
    qdd: Float[ArrayLike, "k n"],
    u_measured: Float[ArrayLike, "k m"],
) -> Float[Array, "k m"]:
    """Inverse-dynamics residuals: the inputs the model needs for the measured motion minus
    the measured inputs, at each time.

    With a [`ukjax.ServoControl`][], its system (passive constraints included) and actuation
    matrix `B` give the minimum-norm inputs `u = (N B)⁺ N (M q̈ − Q)`, where `N = I − A⁺A`
    projects out what the constraint forces supply; `u_measured` has shape (k, m). With a
    system, `u_measured` are generalized forces (k, n) and the residual is
    `N (M q̈ − Q − u)`. Both are linear in the inertial parameters (`N`, `B` do not depend on
    them), so a regressor is one `jax.jacfwd` away.

    **Returns:**

    The residuals, shape (k, m) or (k, n).
    """
    ts, q, qd, qdd, u = (jnp.asarray(x) for x in (ts, q, qd, qdd, u_measured))
    control = isinstance(controller_or_system, ServoControl)
    system = controller_or_system.system if control else controller_or_system

    def one(t, q, qd, qdd, u):
        N, f = _constrained_forces(system, t, q, qd, qdd)
        if control:
            return jnp.linalg.pinv(N @ controller_or_system.actuation) @ (N @ f) - u
        return N @ (f - u)

    return jax.vmap(one)(ts, q, qd, qdd, u)


def _stability_function(solver: diffrax.AbstractSolver) -> Callable[[complex], complex] | None:
    """`R(z) = 1 + z bᵀ(I − zA)⁻¹𝟙` of an explicit Runge–Kutta solver (None for others)."""
    tableau = getattr(solver, "tableau", None)
    if not isinstance(solver, diffrax.AbstractERK) or tableau is None:
        return None
    rows = [np.zeros(0)] + [np.asarray(a) for a in tableau.a_lower]
    b = np.asarray(tableau.b_sol)

    def R(z):
        stages = []
        for a in rows:
            stages.append(1 + z * sum(a_j * y_j for a_j, y_j in zip(a, stages)))
        return 1 + z * sum(b_i * y_i for b_i, y_i in zip(b, stages))

    return R


def real_stability_limit(solver: diffrax.AbstractSolver) -> float:
    """The largest `x` with `|R(−s)| ≤ 1` for every `s ∈ (0, x]`: an explicit Runge–Kutta
    solver is stable on `ẏ = −ωy` at step `h` while `ωh ≤ x` (2.785 for RK4). `inf` for
    implicit solvers, which have no such bound.

    **Arguments:**

    - `solver`: a diffrax solver.

    **Returns:**

    The bound `x`, a float.
    """
    R = _stability_function(solver)
    if R is None:
        return math.inf
    s = np.arange(1, 200_001) * 1e-4
    unstable = np.abs(R(-s)) > 1
    return float(s[np.argmax(unstable)] - 1e-4) if unstable.any() else math.inf


class _Gains(eqx.Module):
    """Real-root Baumgarte gains: `α = ω₁ + ω₂`, `β = ω₁ω₂` with `ωᵢ = ω_max σ(uᵢ)`, so that
    every trial stays inside the integrator's stability region."""

    u: Float[Array, "2 *p"]
    omega_max: Float[Array, ""]

    def baumgarte(self) -> Baumgarte:
        w = self.omega_max * jax.nn.sigmoid(self.u)
        return Baumgarte(w[0] + w[1], w[0] * w[1])


def tune_baumgarte(
    csys: ConstrainedSystem,
    q0: Float[ArrayLike, " n"],
    qd0: Float[ArrayLike, " n"],
    t1: Real[ArrayLike, ""],
    *,
    t0: Real[ArrayLike, ""] = 0.0,
    solver: diffrax.AbstractSolver | None = None,
    dt0: Real[ArrayLike, ""] | None = None,
    adaptive: bool = True,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    per_row: bool = False,
    max_steps: int | None = None,
    steps: int = 100,
    saves: int = 401,
    margin: float = 0.1,
    progress: bool = True,
) -> Baumgarte:
    """Baumgarte gains that minimise the constraint drift `∫‖Φ‖dt` of one simulation, found
    by gradient (forward mode, a handful of parameters) through the whole run.

    The search keeps the error dynamics `Φ̈ + αΦ̇ + βΦ = 0` where the integrator can follow
    them: their roots are real (`α = ω₁ + ω₂`, `β = ω₁ω₂`, critically or over-damped) and
    `ωᵢ h ≤ (1 − margin) x`, with `x` the real stability limit of the solver's Runge–Kutta
    stability function and `h` the fixed step, or with adaptive steps the mean step of the run
    under the starting gains, so that tuning does not buy drift with a stiff, slow solve.
    Adaptive runs are also capped at `max_steps` (default twice the starting run's steps); a
    trial that fails counts as an infinite loss. The start is critically damped at the
    system's current `β` (`ω = √β`), or at a tenth of the bound without stabilization.

    **Arguments:**

    - `csys`: the constrained system; its own rows get the gains.
    - `q0`, `qd0`, `t1`, `t0`: the run to tune for.
    - `solver`, `dt0`, `adaptive`, `rtol`, `atol`: the integrator, as for `simulate` (default
      `Tsit5`).
    - `per_row`: one pair of gains per constraint row instead of one for all.
    - `max_steps`: the step cap of adaptive trials.
    - `steps`: the most optimiser (L-BFGS) steps.
    - `saves`: points of the violation integral with adaptive steps (fixed steps use every
      step).
    - `margin`: how far inside the stability limit to stay.
    - `progress`: as for [`ukjax.fit`][].

    **Returns:**

    The tuned [`ukjax.Baumgarte`][] gains.
    """
    if not isinstance(csys, ConstrainedSystem):
        raise TypeError(f"tune_baumgarte needs a ukjax.ConstrainedSystem, got {type(csys).__name__}.")
    if not adaptive and dt0 is None:
        raise ValueError("Fixed-step tuning (adaptive=False) needs the step size dt0.")
    solver = diffrax.Tsit5() if solver is None else solver
    q0 = jnp.asarray(q0)
    qd0 = jnp.asarray(qd0, q0.dtype)
    t0, t1 = float(t0), float(t1)
    p = csys.rows(t0, q0, qd0).b.shape[0]
    run = dict(solver=solver, dt0=dt0, adaptive=adaptive, rtol=rtol, atol=atol, throw=False)
    if adaptive:
        ts = jnp.linspace(t0, t1, saves)
        reference = simulate(csys, q0, qd0, t0, t1, ts=ts, **run)
        if not bool(reference.success):
            raise ValueError(
                f"The run with the starting gains fails (status {Status(int(reference.status)).name}); tune from gains that work."
            )
        h = (t1 - t0) / int(reference.stats["num_accepted_steps"])
        cap = 2 * int(reference.stats["num_steps"]) if max_steps is None else max_steps
    else:
        count = round((t1 - t0) / float(dt0))
        ts = t0 + float(dt0) * jnp.arange(count + 1)
        h, cap = float(dt0), count + 1 if max_steps is None else max_steps
    omega_max = (1 - margin) * real_stability_limit(solver) / h
    if not math.isfinite(omega_max):
        raise ValueError(
            "tune_baumgarte bounds the gains by an explicit Runge–Kutta solver's stability region; pass one."
        )
    current = csys.stabilization
    omega0 = jnp.sqrt(current.beta) if current is not None else jnp.asarray(0.1 * omega_max)
    if not per_row:  # one pair for all rows: start from the rows' mean frequency
        omega0 = jnp.mean(omega0)
    omega0 = jnp.clip(jnp.broadcast_to(omega0, (p,) if per_row else ()), 1e-3 * omega_max, 0.5 * omega_max)
    # slightly apart, so that the search can leave critical damping
    u0 = jax.scipy.special.logit(jnp.stack([0.9 * omega0, omega0 / 0.9]) / omega_max)

    def with_gains(gains: _Gains) -> ConstrainedSystem:
        return ConstrainedSystem(
            csys.system,
            csys.constraints,
            gains.baumgarte(),
            nonideal=csys.nonideal,
            method=csys.method,
            sequential=csys.sequential,
        )

    def loss(gains: _Gains):
        sol = simulate(
            with_gains(gains), q0, qd0, t0, t1, ts=ts, max_steps=cap, adjoint=diffrax.ForwardMode(), **run
        )
        # ‖Φ‖ has no derivative where Φ = 0 (a consistent start): the square root is taken
        # only where the sum is positive, so that no NaN tangent is formed at all
        squares = jnp.sum(sol.phi**2, axis=1)
        positive = squares > 0
        drift = jnp.trapezoid(jnp.where(positive, jnp.sqrt(jnp.where(positive, squares, 1)), 0), ts)
        return jnp.where(sol.success, jnp.log(drift), jnp.inf)

    start = _Gains(u0, jnp.asarray(omega_max, q0.dtype))
    res = fit(loss, start, where=lambda g: g.u, steps=steps, tol=1e-8, progress=progress, jac="fwd")
    return res.model.baumgarte()
