"""What a least-squares fit determines: the result of `fit_least_squares` and its statistics
(singular values of the scaled Jacobian, rank, unidentifiable directions, standard errors from
`σ² (JᵀJ)⁺`)."""

from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike


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


def _relative_scale(values: np.ndarray) -> np.ndarray:
    """What the `unidentifiable` directions divide a change by: `|θ|`, or 1 where `θ = 0`."""
    return np.where(values != 0, np.abs(values), 1.0)


def statistics(J, values, positive, r, noise_std, rank_rtol):
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


