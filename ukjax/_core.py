"""Pure Udwadia–Kalaba functions on arrays.

Every `M^{±1/2}` of the textbook form is replaced by the Cholesky factor `M = L Lᵀ`: any
`W` with `W Wᵀ = M⁻¹` gives the same answer, and `W = L⁻ᵀ` differentiates cleanly where a
symmetric square root (through `eigh`) gives NaN gradients at repeated eigenvalues.
With `B = A L⁻ᵀ` and `e = b − A a`:

    q̈ = a + L⁻ᵀ z,    Qᶜ = L z,    z = B⁺ e + (I − B⁺B) L⁻¹ c.
"""

from typing import Literal, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from . import _linalg as la
from ._jit import jit

Method = Literal["svd", "cholesky"]
METHODS = ("svd", "cholesky")


class UKSolution(NamedTuple):
    """Everything one U-K solve produces (`ConstrainedSystem.solve`)."""

    acceleration: Float[Array, " n"]
    constraint_force: Float[Array, " n"]
    # `A q̈ − b` relative to the size of its terms: non-zero only for inconsistent constraints.
    inconsistency: Float[Array, ""]
    # False where `M` is not symmetric positive definite.
    mass_ok: Bool[Array, ""]
    # False where `method="cholesky"` met linearly dependent rows (always True for "svd").
    rank_ok: Bool[Array, ""]


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")


def check_shapes(M, Q, A, b, c=None) -> None:
    """Raise a ValueError naming the first pair of arguments whose shapes disagree."""
    if jnp.ndim(Q) != 1:
        raise ValueError(f"Q (generalized forces) must have shape (n,), got {jnp.shape(Q)}.")
    n = jnp.shape(Q)[0]
    if jnp.shape(M) != (n, n):
        raise ValueError(
            f"M (mass matrix) must have shape (n, n) = ({n}, {n}) to match Q, got {jnp.shape(M)}."
        )
    if jnp.ndim(A) != 2 or jnp.shape(A)[1] != n:
        raise ValueError(f"A (constraint matrix) must have shape (p, {n}), got {jnp.shape(A)}.")
    p = jnp.shape(A)[0]
    if jnp.shape(b) != (p,):
        raise ValueError(f"b must have shape (p,) = ({p},) to match A, got {jnp.shape(b)}.")
    if c is not None and jnp.shape(c) != (n,):
        raise ValueError(f"c (non-ideal force) must have shape ({n},) to match Q, got {jnp.shape(c)}.")


def mass_check(M: Float[Array, "n n"], L: Float[Array, "n n"]) -> Bool[Array, ""]:
    """True where `M` is symmetric (to √ε) and its Cholesky factor `L` is finite with a
    positive diagonal (a zero pivot in the last column leaves `L` finite)."""
    symmetric = jnp.max(jnp.abs(M - M.T), initial=0) <= sqrt_eps(M) * jnp.max(jnp.abs(M), initial=0)
    return symmetric & jnp.all(jnp.isfinite(L)) & jnp.all(jnp.diagonal(L) > 0)


def free_solve(M: Float[Array, "n n"], Q: Float[Array, " n"]) -> UKSolution:
    """`q̈ = M⁻¹Q` for a system without constraints, with the same diagnostics as `uk_solve`."""
    L = la.cholesky(M)
    true = jnp.array(True)
    return UKSolution(la.cho_solve(L, Q), jnp.zeros_like(Q), jnp.zeros((), Q.dtype), mass_check(M, L), true)


def projected_solve(B, e, y, robust: bool):
    """`(B⁺ e, B⁺ e + (I − B⁺B) y)`: the minimum-norm solution of `B z = e`, and the one
    closest to `y` (the second is the first when `y` is None)."""
    if y is None:
        z = la.pinv_solve(B, e[:, None], robust)[:, 0]
        return z, z
    Z = la.pinv_solve(B, jnp.stack([e, B @ y], axis=1), robust)
    return Z[:, 0], Z[:, 0] + y - Z[:, 1]


def uk_solve(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    A: Float[Array, "p n"],
    b: Float[Array, " p"],
    c: Float[Array, " n"] | None,
    method: Method,
) -> UKSolution:
    """The U-K solve without runtime checks (its failures are reported in the result)."""
    if not A.shape[0]:
        # no rows: nothing to project, and a non-ideal force acts in full
        sol = free_solve(M, Q if c is None else Q + c)
        return sol if c is None else sol._replace(constraint_force=c)
    # All kernels of one solve alike: mixing unrolled ones with loops compiles slowest.
    unroll = la.unrolled(*A.T.shape)
    L = la.cholesky(M, unroll)
    a = la.cho_solve(L, Q, unroll)
    B = la.solve_lower(L, A.T, unroll=unroll).T  # A L⁻ᵀ
    e = b - A @ a
    if method == "svd":
        rank_ok = jnp.array(True)
    else:
        # (B Bᵀ)⁻¹ exists only for full row rank; its condition number is that of B squared.
        # Normalising the rows first makes the pivots angles, so that rank deficiency is
        # decided by a tolerance rather than by whether rounding leaves a pivot positive.
        rank_ok = la.gram_factor(B, la.rank_tolerance(A.shape[0], B.dtype)).independent
    y = None if c is None else la.solve_lower(L, c, unroll=unroll)
    z_ideal, z = projected_solve(B, e, y, method == "svd")
    qdd = a + la.solve_lower(L, z, transpose=True, unroll=unroll)
    residual = B @ z_ideal - e
    scale = jnp.linalg.norm(e) + jnp.linalg.norm(B) * jnp.linalg.norm(z_ideal)
    inconsistency = jnp.linalg.norm(residual) / jnp.where(scale > 0, scale, 1)
    return UKSolution(qdd, L @ z, inconsistency, mass_check(M, L), rank_ok)


def sqrt_eps(x) -> float:
    """√ε of `x`'s dtype: the relative tolerance of the consistency checks."""
    return float(jnp.finfo(jnp.result_type(x)).eps) ** 0.5


@jit  # called eagerly, the unrolled kernels would compile operation by operation
def _checked_solve(M, Q, A, b, c, method) -> UKSolution:
    arrays = [jnp.asarray(x) for x in (M, Q, A, b) + (() if c is None else (c,))]
    for name, x in zip(("M", "Q", "A", "b", "c"), arrays):
        if not jnp.issubdtype(x.dtype, jnp.number) or jnp.issubdtype(x.dtype, jnp.complexfloating):
            raise TypeError(f"{name} must be a real array, got dtype {x.dtype}.")
    # Integer input (jnp.eye(2, dtype=int), [[1, 0]]) is promoted like NumPy would.
    dtype = jnp.result_type(*arrays, float)
    M, Q, A, b, *rest = (x.astype(dtype) for x in arrays)
    c = rest[0] if rest else None
    check_shapes(M, Q, A, b, c)
    check_method(method)
    sol = uk_solve(M, Q, A, b, c, method)
    sol = eqx.error_if(
        sol,
        ~sol.mass_ok,
        "M is not symmetric positive definite; a mass matrix must be (check the model's "
        "inertias and that M is evaluated at a valid configuration).",
    )
    sol = eqx.error_if(
        sol,
        ~sol.rank_ok,
        "method='cholesky' needs linearly independent constraint rows, and these are dependent "
        "(redundant constraints) or nearly so: use method='svd', which handles any rank.",
    )
    sol = eqx.error_if(
        sol,
        ~jnp.all(jnp.isfinite(sol.acceleration)),
        "The U-K solve produced non-finite values: check M, Q, A, b for NaN/inf.",
    )
    return eqx.error_if(
        sol,
        sol.inconsistency > sqrt_eps(sol.inconsistency),
        "The constraints are inconsistent (A A⁺ b ≠ b): no acceleration satisfies A q̈ = b. "
        "Check for contradictory constraint rows.",
    )


def udwadia_kalaba(
    M: Float[ArrayLike, "n n"],
    Q: Float[ArrayLike, " n"],
    A: Float[ArrayLike, "p n"],
    b: Float[ArrayLike, " p"],
    *,
    c: Float[ArrayLike, " n"] | None = None,
    method: Method = "svd",
) -> Float[Array, " n"]:
    """Constrained acceleration from the Udwadia–Kalaba equation.

    `q̈ = a + M^{-1/2} B⁺ (b − A a)` with `a = M⁻¹Q`, `B = A M^{-1/2}`, plus the non-ideal term
    `M^{-1/2} (I − B⁺B) M^{-1/2} c` when `c` is given.

    **Arguments:**

    - `M`: symmetric positive definite mass matrix.
    - `Q`: generalized forces of the unconstrained system.
    - `A`, `b`: constraints in second-order form `A q̈ = b`; `A` may be rank deficient.
    - `c`: optional non-ideal constraint force specification (the servo-control paper [3] eq. 12).
    - `method`: `"svd"` (Moore–Penrose inverse, any rank) or `"cholesky"` (Cholesky of
      `A M⁻¹ Aᵀ`; faster, only for linearly independent rows: dependent rows raise).

    **Returns:**

    The acceleration `q̈`, shape `(n,)`. Raises at run time if `M` is not symmetric positive
    definite, the constraints are inconsistent, or `method="cholesky"` meets dependent rows.
    """
    return _checked_solve(M, Q, A, b, c, method).acceleration


def constraint_force(
    M: Float[ArrayLike, "n n"],
    Q: Float[ArrayLike, " n"],
    A: Float[ArrayLike, "p n"],
    b: Float[ArrayLike, " p"],
    *,
    c: Float[ArrayLike, " n"] | None = None,
    method: Method = "svd",
) -> Float[Array, " n"]:
    """Constraint force `Qᶜ = M^{1/2} B⁺ (b − A a)` (+ the non-ideal term if `c` is given).

    **Arguments:** as for [`ukjax.udwadia_kalaba`][].

    **Returns:**

    `Qᶜ`, shape `(n,)`, such that `M q̈ = Q + Qᶜ`.
    """
    return _checked_solve(M, Q, A, b, c, method).constraint_force
