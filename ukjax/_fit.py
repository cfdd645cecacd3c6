"""Parameter identification by gradient, through whole simulations.

Fitted leaves are flattened into one vector `θ` (their logarithms with `positive=True`);
`fit` runs an optax optimiser on a scalar loss, `fit_least_squares` runs an optimistix
least-squares solver on residuals and then reports what the data determine: the singular
values of the Jacobian in relative parameter changes, its rank, the directions it cannot see,
and standard errors from `σ² (JᵀJ)⁺`.
"""

import abc
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
from jaxtyping import Array, Float, PyTree, Real

from ._constraints import value_and_jacfwd
from ._jit import jit
from ._statistics import LeastSquaresResult, statistics

Jac = Literal["fwd", "bwd"]
# `fit_least_squares`' default solver
_LEVENBERG_MARQUARDT = optx.LevenbergMarquardt(rtol=1e-10, atol=1e-10)


class AbstractParameters(eqx.Module):
    """Parameters chosen within leaves, by name, for `where=` of [`ukjax.fit`][] and
    [`ukjax.fit_least_squares`][] ([`ukjax.models.FileParameters`][]: masses, damping, gains
    of a file by their bodies', joints' and actuators' names). Each parameter is one scalar
    that sets one or more entries of the leaves (an inertia's product in both places, a
    position servo's gain and its bias), reported by its name."""

    @abc.abstractmethod
    def __call__(self, model) -> tuple[Array, ...]:
        """The leaves holding the parameters (as `where` gives them to `eqx.tree_at`)."""

    @abc.abstractmethod
    def entries(self, model) -> tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]], ...]:
        """Per leaf, the flat indices of the entries set, the parameter that sets each, and its
        coefficient (the entry is coefficient × parameter)."""

    @abc.abstractmethod
    def names(self, model) -> tuple[str, ...]:
        """Each parameter's name, in the order of `θ`."""


class _Parameters(eqx.Module):
    """The leaves `where(model)` selects (or the entries an `AbstractParameters` names), as
    one flat vector `θ` and back. A pytree: the same `where` on a model of the same structure
    reuses compiled fits."""

    model0: PyTree
    where: Callable = eqx.field(static=True)
    positive: bool = eqx.field(static=True)
    single: bool = eqx.field(static=True)
    shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    entries: tuple | None = eqx.field(static=True, default=None)

    def values(self, theta: Float[Array, " p"]) -> Float[Array, " p"]:
        return jnp.exp(theta) if self.positive else theta

    def model(self, theta: Float[Array, " p"]):
        values = self.values(theta)
        if self.entries is not None:
            leaves = []
            for leaf, (flat, which, coefficient) in zip(self._selected(self.model0), self.entries):
                scale = np.asarray(coefficient, dtype=np.float64)
                entries = jnp.ravel(leaf).at[np.asarray(flat, int)].set((scale * values[np.asarray(which, int)]).astype(leaf.dtype))
                leaves.append(entries.reshape(leaf.shape))
            return eqx.tree_at(self._selected, self.model0, leaves)
        sizes = [math.prod(shape) for shape in self.shapes]
        parts = jnp.split(values, np.cumsum(sizes)[:-1])
        leaves = [part.reshape(shape) for part, shape in zip(parts, self.shapes)]
        return eqx.tree_at(self._selected, self.model0, leaves)

    def _selected(self, model) -> tuple:
        return (self.where(model),) if self.single else tuple(self.where(model))


def _parameters(
    model, where: Callable, positive: bool
) -> tuple[_Parameters, Float[Array, " p"], tuple[str, ...]]:
    """`_Parameters`, the starting `θ` and the names of its entries, with the checks."""
    if isinstance(where, AbstractParameters):
        return _named(model, where, positive)
    selected = where(model)
    single = not isinstance(selected, (tuple, list))
    leaves = (selected,) if single else tuple(selected)
    for k, leaf in enumerate(leaves):
        if not (eqx.is_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.inexact)):
            raise TypeError(
                f"where selected a {type(leaf).__name__} (leaf {k}); the parameters to fit must be "
                "floating-point arrays (give the model's parameters as jnp arrays of floats)."
            )
    # strongly typed: a weakly typed start (`jnp.array(0.3)`) is not the type of the strongly
    # typed iterates that the solver's loop carries, and `fit`'s jitted step would compile twice
    values = jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])
    values = jnp.asarray(values, dtype=values.dtype)
    if positive and not bool(jnp.all(values > 0)):
        raise ValueError("positive=True fits logarithms, but some selected parameters are not positive.")
    params = _Parameters(model, where, positive, single, tuple(leaf.shape for leaf in leaves))
    return params, jnp.log(values) if positive else values, _names(model, leaves)


def _named(model, where: AbstractParameters, positive: bool) -> tuple[_Parameters, Float[Array, " p"], tuple[str, ...]]:
    """`_parameters` for parameters chosen by name: each one's value read from its first
    entry."""
    leaves, entries, names = tuple(where(model)), where.entries(model), where.names(model)
    if not names:
        raise ValueError(f"{type(where).__name__} names no parameters: give at least one.")
    first = {}
    for k, (flat, which, coefficient) in enumerate(entries):
        for i, j, c in zip(flat, which, coefficient):
            first.setdefault(j, (k, i, c))
    values = jnp.stack([jnp.ravel(leaves[k])[i] / c for k, i, c in (first[j] for j in range(len(names)))])
    values = jnp.asarray(values, dtype=values.dtype)
    if positive and not bool(jnp.all(values > 0)):
        bad = [name for name, v in zip(names, np.asarray(values)) if not v > 0]
        raise ValueError(f"positive=True fits logarithms, but these parameters are not positive: {', '.join(bad)}.")
    params = _Parameters(model, where, positive, False, tuple(leaf.shape for leaf in leaves), entries)
    return params, jnp.log(values) if positive else values, names


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


class _Residuals(eqx.Module):
    """`θ ↦ (flattened residuals, no aux)` in optimistix's form; a pytree, so that fits of the
    same `residuals` and `where` on new data or starts compile once.

    With `jac="fwd"` the Jacobian is computed beside the residuals, in one forward pass, and
    the derivative is that matrix: optimistix linearises `fn` at every step and keeps the
    linearisation, so materialising the final Jacobian for the statistics is then a product
    with a stored matrix, not the simulation's tangent program compiled a second time.
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


# the meters of the fits running in this process, for `_least_squares`' host callback (a
# function of its own, not a closure over the meter, so that fits compile once)
_METERS: list[_Progress] = []


def _report(step, cost) -> None:
    _METERS[-1].update(int(step), float(cost))


@jit
def _least_squares(solver, fn: _Residuals, theta, options: dict, max_steps: int, progress: bool) -> dict:
    """The solver's steps from `theta` in one program, until it terminates, its cost is not
    finite or it has taken `max_steps`; then the residuals and their Jacobian at the last
    point. Returns a dict of arrays (`theta`, `costs` (max_steps,), `steps`, `done`, `solved`,
    `residual`, `jacobian`) and the solver's `result`; `progress`: report each step to the
    innermost of `_METERS`."""
    f_struct = jax.eval_shape(lambda theta: fn(theta)[0], theta)
    gauss_newton = isinstance(solver, optx.AbstractGaussNewton)
    # the loop carries the state's arrays; the rest (its linearisation's jaxprs) is the same
    # at every step, as optimistix's own loop has it
    state, static = eqx.partition(solver.init(fn, theta, None, options, f_struct, None, frozenset()), eqx.is_array)

    def step(carry):
        theta, state, k, _, _, costs, _ = carry
        theta, state, _ = solver.step(fn, theta, None, options, eqx.combine(state, static), frozenset())
        # Gauss–Newton-type solvers carry the residual of the last accepted point (their first
        # step evaluates the start)
        r = state.f_info.residual if gauss_newton else fn(theta)[0]
        cost = 0.5 * jnp.sum(r**2)
        if progress:
            jax.debug.callback(_report, k + 1, cost, ordered=True)
        done, result = solver.terminate(fn, theta, None, options, state, frozenset())
        state = eqx.filter(state, eqx.is_array)
        return theta, state, k + 1, done, result, costs.at[k].set(cost), jnp.isfinite(cost)

    yes, no = jnp.array(True), jnp.array(False)
    carry = (theta, state, jnp.array(0), no, optx.RESULTS.successful, jnp.zeros(max_steps, theta.dtype), yes)
    theta, state, steps, done, result, costs, _ = jax.lax.while_loop(
        lambda carry: (carry[2] < max_steps) & ~carry[3] & carry[6], step, carry
    )
    state = eqx.combine(state, static)
    if max_steps and gauss_newton and isinstance(state.f_info.jac, lx.AbstractLinearOperator):
        # The solver linearised at the accepted point already (with jac="fwd", a stored
        # matrix): materialise that rather than differentiate the simulation once more.
        r, jacobian = state.f_info.residual, state.f_info.jac.as_matrix()
    else:
        r = fn(theta)[0]
        jacobian = (jax.jacfwd if options["jac"] == "fwd" else jax.jacrev)(lambda theta: fn(theta)[0])(theta)
    return dict(
        theta=theta,
        costs=costs,
        steps=steps,
        done=done,
        solved=result == optx.RESULTS.successful,
        residual=r,
        jacobian=jacobian,
        result=result,
    )


def _result(params: _Parameters, names, found: dict, positive, noise_std, rank_rtol, max_steps) -> LeastSquaresResult:
    """`fit_least_squares`' result from `_least_squares`' (without its `result` where a kept
    program returned it), with the warnings; a start whose residuals are not finite refused."""
    steps = int(found["steps"])
    costs = np.asarray(found["costs"])[:steps]
    if steps and not math.isfinite(costs[0]):
        raise ValueError("The residuals are not finite at the starting parameters; check the start and the data.")
    success = bool(found["done"]) and bool(found["solved"])
    r = np.asarray(found["residual"])
    values = np.asarray(params.values(found["theta"]))
    stats = statistics(np.asarray(found["jacobian"]), values, positive, r, noise_std, rank_rtol)
    res = LeastSquaresResult(params.model(found["theta"]), 0.5 * float(r @ r), costs, steps, success, names, *stats, values)
    if not success:
        if steps >= max_steps:
            why = f"max_steps = {max_steps} reached"
        elif not math.isfinite(costs[-1]):
            why = "the cost is not finite"
        else:
            why = f"the solver reports {found.get('result', 'no success')}"
        warnings.warn(
            f"fit_least_squares did not converge ({why}): the model, standard errors and rank are "
            "those of an unconverged point (res.success is False). Raise max_steps or start closer.",
            stacklevel=3,
        )
    if res.rank < len(res.names):
        directions = "; ".join(res.describe(v) for v in res.unidentifiable)
        warnings.warn(
            f"The data determine {res.rank} of {len(res.names)} parameter directions; not determined "
            f"(relative changes that leave the residuals unchanged): {directions}. Their standard "
            "errors are inf: fix some of these parameters, or add experiments that excite them.",
            stacklevel=3,
        )
    return res


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
    solver = _LEVENBERG_MARQUARDT if solver is None else solver
    meter = _Progress(max_steps, "least squares", progress)
    _METERS.append(meter)
    try:
        found = _least_squares(solver, _Residuals(params, residuals, jac), theta, {"jac": jac}, max_steps, progress)
    except (TypeError, ValueError) as error:
        raise _explain_mode(error, jac) from error
    finally:
        _METERS.remove(meter)
    res = _result(params, names, found, positive, noise_std, rank_rtol, max_steps)
    meter.close(res.steps, res.cost, "converged" if res.success else "stopped")
    return res


