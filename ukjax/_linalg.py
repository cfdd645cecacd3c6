"""Small dense linear algebra written for batches.

On CPU, XLA runs each LAPACK call (`potrf`, `trsm`, `gesdd`) once per matrix of a batch, in a
loop, and never fuses it with the code around it. The matrices of mechanisms are small (a
dozen rows), so up to `UNROLL_MAX` rows the factorizations here are unrolled into scalar
operations at trace time: under `vmap` each becomes one elementwise operation over the batch,
and XLA fuses the whole solve into a few loops. Above it, LAPACK, so that compile time stays
bounded.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, Bool, Float

# Largest matrix side that is unrolled. Measured on the parallel robot (n = 12, p = 10): unrolled,
# 5.0 µs per vmapped solve and 8.2 s to compile; LAPACK, 18 µs and 2.5 s. The compile time
# across the suite decided for 8 for now.
UNROLL_MAX = 8
# The one-sided Jacobi SVD converges quadratically, in 5–10 sweeps at these sizes; the cap
# only bounds a NaN input's loop.
_MAX_SWEEPS = 30
# Smallest squared pivot of the row-normalised Gram factor for which `pinv` takes the
# Cholesky route: every row then makes an angle of at least 6° with the span of the others,
# the rows' condition number is below about 10 p, and squaring it costs at most two of the
# sixteen digits. Anything closer to dependent goes to the Jacobi SVD.
_WELL_CONDITIONED = 1e-2



def rank_tolerance(p: int, dtype) -> float:
    """Smallest admissible squared pivot of the row-normalised Gram matrix `B̂ B̂ᵀ` for the
    `method="cholesky"` route.

    Each pivot is the sine of the angle between a row of `B` and the span of the rows before
    it. Rounding leaves a squared pivot of a dependent row at a few `p ε` (or makes it
    negative), so `100 p ε` separates dependent rows from independent ones whatever the
    machine; rows independent but closer than about `10 √(p ε)` radians are refused too,
    where the squared-condition Cholesky route has lost most of its digits.
    """
    return 100 * p * float(jnp.finfo(dtype).eps)


Scalars = list  # a vector as a list of scalar arrays
Matrix = list  # a matrix as a list of rows of scalar arrays


def unrolled(*sizes: int) -> bool:
    """Whether matrices of these sides are handled by the unrolled kernels."""
    return max(sizes) <= UNROLL_MAX


def _entries(X: Array) -> Matrix:
    return [[X[i, j] for j in range(X.shape[1])] for i in range(X.shape[0])]


def _array(X: Matrix) -> Array:
    return jnp.stack([jnp.stack(row) for row in X])


def _dot(x: Scalars, y: Scalars):
    return sum((a * b for a, b in zip(x, y)), start=0.0)


def _cholesky(M: Matrix, floor=None) -> tuple[Matrix, Scalars]:
    """The factor and its squared pivots. With `floor`, a pivot at or below it is replaced by
    1 in the factor, so that a dependent row yields finite numbers rather than a 0/0 that a
    later `where` would have to discard (a NaN discarded by `where` survives only until XLA
    picks another code path: batches of 700 members went NaN)."""
    n = len(M)
    L = [[0.0 * M[0][0]] * n for _ in range(n)]
    pivots = []
    for j in range(n):
        pivot = M[j][j] - _dot(L[j][:j], L[j][:j])
        pivots.append(pivot)
        L[j][j] = jnp.sqrt(pivot if floor is None else jnp.where(pivot > floor, pivot, 1.0))
        for i in range(j + 1, n):
            L[i][j] = (M[i][j] - _dot(L[i][:j], L[j][:j])) / L[j][j]
    return L, pivots


def _forward(L: Matrix, b: Scalars) -> Scalars:
    x = []
    for i in range(len(L)):
        x.append((b[i] - _dot(L[i][:i], x)) / L[i][i])
    return x


def _backward(L: Matrix, b: Scalars) -> Scalars:
    n = len(L)
    x = [None] * n
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - _dot([L[k][i] for k in range(i + 1, n)], x[i + 1 :])) / L[i][i]
    return x


def cholesky(M: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """Lower Cholesky factor `L` of `M = L Lᵀ` from `M`'s lower triangle; NaN where `M` is not
    positive definite (as LAPACK's)."""
    if not unrolled(M.shape[0]):
        return jnp.linalg.cholesky(M)
    return _array(_cholesky(_entries(M))[0])


def solve_lower(
    L: Float[Array, "n n"], B: Float[Array, "n *k"], *, transpose: bool = False
) -> Float[Array, "n *k"]:
    """`L⁻¹ B`, or `L⁻ᵀ B` with `transpose=True`, for lower triangular `L`."""
    if not unrolled(L.shape[0]):
        return jsl.solve_triangular(L, B, lower=True, trans=1 if transpose else 0)
    solve = _backward if transpose else _forward
    Ls = _entries(L)
    if B.ndim == 1:
        return jnp.stack(solve(Ls, [B[i] for i in range(B.shape[0])]))
    return jnp.stack(
        [jnp.stack(solve(Ls, [B[i, j] for i in range(B.shape[0])])) for j in range(B.shape[1])], axis=1
    )


def cho_solve(L: Float[Array, "n n"], B: Float[Array, "n *k"]) -> Float[Array, "n *k"]:
    """`M⁻¹ B` from the Cholesky factor `L` of `M`."""
    return solve_lower(L, solve_lower(L, B), transpose=True)


class GramFactor(NamedTuple):
    """`B Bᵀ = D G Gᵀ D` with `D` the rows' norms: `G` is the Cholesky factor of the
    row-normalised Gram matrix, whose pivots are the sines of the angles between each row and
    the span of the rows before it."""

    norms: Float[Array, " p"]
    # `D⁻¹ B`, rows below the cutoff set to zero
    unit: Float[Array, "p n"]
    G: Float[Array, "p p"]
    # True where every squared pivot is above the floor: the rows are independent, and `G`
    # is their factor (elsewhere `G` is finite but meaningless).
    independent: Bool[Array, ""]


def gram_factor(B: Float[Array, "p n"], floor: float) -> GramFactor:
    """The Cholesky factor of `B`'s row-normalised Gram matrix.

    Rows shorter than `jnp.linalg.pinv`'s cutoff relative to the longest row count as zero,
    and zero rows as dependent: normalising a row at round-off scale would otherwise invert it
    in full. No intermediate is non-finite for finite `B`.

    **Arguments:**

    - `B`: a `(p, n)` matrix.
    - `floor`: the smallest squared pivot (sine² of the angle between a row and the span of
      the rows before it) for which the rows count as independent.

    **Returns:**

    A `GramFactor`.
    """
    p, n = B.shape
    norms = jnp.sqrt(jnp.sum(B * B, axis=1))
    cutoff = 10 * max(p, n) * jnp.finfo(B.dtype).eps * jnp.max(norms)
    nonzero = norms > cutoff
    norms = jnp.where(nonzero, norms, 1)
    unit = jnp.where(nonzero[:, None], B, 0) / norms[:, None]
    if not unrolled(p, n):
        # Only the `method="cholesky"` route comes here (the robust one takes `_library_pinv`);
        # LAPACK fills a failed factor with NaN, which `all(… > floor)` reads as dependent.
        G = jnp.linalg.cholesky(unit @ unit.T)
        return GramFactor(norms, unit, G, jnp.all(jnp.diagonal(G) ** 2 > floor))
    rows = _entries(unit)
    gram = [[_dot(rows[i], rows[j]) for j in range(p)] for i in range(p)]
    G, pivots = _cholesky(gram, floor)
    return GramFactor(norms, unit, _array(G), jnp.all(jnp.stack(pivots) > floor))


def _jacobi(B: Float[Array, "p n"], skip: Bool[Array, ""]) -> tuple[Array, Array, Array]:
    """One-sided (Hestenes) Jacobi SVD: rotate the columns of `Bᵀ` until they are orthogonal,
    `Bᵀ V = W`, so that `B⁺ = W diag(σ⁻²) Vᵀ` with `σᵢ = ‖wᵢ‖`. Working on `B` itself, not on
    `B Bᵀ`, keeps the accuracy of an SVD (the condition number is not squared).

    Returns `W` (p, n) (rows wᵢ), `V` (p, p) (rows vᵢ) and `σ⁻²` (p,), zero at and below
    `jnp.linalg.pinv`'s cutoff. A member with `skip` set costs no sweep: under `vmap` the loop
    runs only while some member of the batch is unfinished.
    """
    p, n = B.shape
    eps = jnp.finfo(B.dtype).eps

    pairs = jnp.array(
        np.array([(i, j) for i in range(p) for j in range(i + 1, p)], dtype=np.int32).reshape(-1, 2)
    )

    def rotate_pair(k, carry):
        # One pair at a time in a loop (not unrolled): this is the rare path, and unrolling
        # p²/2 rotations would dominate compile time.
        xv, worst = carry
        i, j = pairs[k, 0], pairs[k, 1]
        x, y = xv[i], xv[j]
        alpha, beta, gamma = x[:n] @ x[:n], y[:n] @ y[:n], x[:n] @ y[:n]
        off = jnp.abs(gamma) / jnp.where(alpha * beta > 0, jnp.sqrt(alpha * beta), 1)
        rotate = off > eps
        zeta = (beta - alpha) / (2 * jnp.where(rotate, gamma, 1))
        t = jnp.where(zeta >= 0, 1.0, -1.0) / (jnp.abs(zeta) + jnp.hypot(1.0, zeta))
        c = jnp.where(rotate, 1 / jnp.hypot(1.0, t), 1.0)
        s = jnp.where(rotate, c * t, 0.0)
        xv = xv.at[i].set(c * x - s * y).at[j].set(s * x + c * y)
        return xv, jnp.maximum(worst, off)

    def sweep(state):
        # Row i of the state: the column x_i of Bᵀ followed by the column v_i of V.
        xv, _, count = state
        if p == 1:  # a single row is its own singular vector
            return xv, jnp.zeros((), B.dtype), count + 1
        xv, worst = jax.lax.fori_loop(0, len(pairs), rotate_pair, (xv, jnp.zeros((), B.dtype)))
        return xv, worst, count + 1

    def unfinished(state):
        return (state[1] > eps) & (state[2] < _MAX_SWEEPS)

    # `worst` starts above eps (a cosine is at most 1) for members that need sweeps.
    start = (jnp.concatenate([B, jnp.eye(p, dtype=B.dtype)], axis=1), jnp.where(skip, 0.0, 2.0), 0)
    xv, _, _ = jax.lax.while_loop(unfinished, sweep, start)
    w, v = xv[:, :n], xv[:, n:]
    sigma2 = jnp.sum(w * w, axis=1)
    cutoff = (10 * max(p, n) * eps) ** 2 * jnp.max(sigma2)
    return w, v, jnp.where(sigma2 > cutoff, 1 / jnp.where(sigma2 > 0, sigma2, 1), 0)


def _library_pinv(B: Float[Array, "p n"]) -> Float[Array, "n p"]:
    """`jnp.linalg.pinv(B)`, with a wide `B` (fewer rows than columns) taken through the QR
    factorization `Bᵀ = Q R` as `Q (Rᵀ)⁺`: `Rᵀ` has `B`'s singular values (same cutoff, no
    squared condition number) and the SVD is of a p × p matrix only. On GPUs cuSOLVER's
    batched SVD takes matrices up to 32 × 32: a batch of 2 × 33 matrices ran 250× slower than
    one of 2 × 32 (H100, `benchmarks/README.md`)."""
    p, n = B.shape
    if p >= n:
        return jnp.linalg.pinv(B)
    Q, R = jnp.linalg.qr(B.T)
    return Q @ jnp.linalg.pinv(R.T, rtol=10 * n * jnp.finfo(B.dtype).eps)


def _operator(B: Float[Array, "p n"], robust: bool):
    """`X ↦ B⁺ X` and `Y ↦ B⁺ᵀ Y`, for `X` (p, k) and `Y` (n, k)."""
    if not unrolled(*B.shape):
        if robust:
            P = _library_pinv(B)
        else:
            factor = gram_factor(B, rank_tolerance(B.shape[0], B.dtype))
            P = factor.unit.T @ jsl.cho_solve((factor.G, True), jnp.diag(1 / factor.norms))
        return (lambda X: P @ X), (lambda Y: P.T @ Y)
    p, n = B.shape
    # The robust route factors only well separated rows (the SVD takes the rest); the fast one
    # is only ever given independent rows (`uk_solve` checks them with the same factor).
    factor = gram_factor(B, _WELL_CONDITIONED if robust else rank_tolerance(p, B.dtype))
    well = factor.independent
    G, d = _entries(factor.G), factor.norms
    rows = _entries(factor.unit)  # B̂ = D⁻¹ B, B⁺ = B̂ᵀ (B̂ B̂ᵀ)⁻¹ D⁻¹ for independent rows

    def gram_solve(u):
        return _backward(G, _forward(G, u))

    def fast(X):
        y = gram_solve([X[i] / d[i] for i in range(p)])
        return jnp.stack([_dot([rows[i][k] for i in range(p)], y) for k in range(n)])

    def fast_T(Y):
        y = gram_solve([_dot(rows[i], [Y[k] for k in range(n)]) for i in range(p)])
        return jnp.stack([y[i] / d[i] for i in range(p)])

    if not robust:
        return jax.vmap(fast, 1, 1), jax.vmap(fast_T, 1, 1)
    w, v, inverse = _jacobi(B, well)

    def apply(X):
        return jnp.where(well, jax.vmap(fast, 1, 1)(X), w.T @ (inverse[:, None] * (v @ X)))

    def apply_T(Y):
        return jnp.where(well, jax.vmap(fast_T, 1, 1)(Y), v.T @ (inverse[:, None] * (w @ Y)))

    return apply, apply_T


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def pinv_solve(B: Float[Array, "p n"], X: Float[Array, "p k"], robust: bool = True) -> Float[Array, "n k"]:
    """`B⁺ X`, the Moore–Penrose pseudo-inverse applied to the columns of `X`, with
    `jnp.linalg.pinv`'s cutoff and its derivative (exact where the rank does not change).

    Rows that are independent and well separated (`_WELL_CONDITIONED`) take the Cholesky
    route `B̂ᵀ (B̂ B̂ᵀ)⁻¹` on the row-normalised `B̂`; anything else a one-sided Jacobi SVD.
    With `robust=False` only the Cholesky route, right for linearly independent rows only.

    **Arguments:**

    - `B`: a `(p, n)` matrix of any rank.
    - `X`: right-hand sides, shape `(p, k)`.
    - `robust`: fall back to the SVD where the rows are dependent or nearly so.

    **Returns:**

    `B⁺ X`, shape `(n, k)`.
    """
    return _operator(B, robust)[0](X)


@pinv_solve.defjvp
def _pinv_solve_jvp(robust, primals, tangents):
    (B, X), (dB, dX) = primals, tangents
    apply, apply_T = _operator(B, robust)
    Z = apply(X)
    # Golub & Pereyra (1973): dB⁺ = −B⁺ dB B⁺ + B⁺B⁺ᵀ dBᵀ (I − B B⁺) + (I − B⁺B) dBᵀ B⁺ᵀ B⁺,
    # applied to X with B⁺ only ever applied to vectors.
    S = dB.T @ apply_T(Z)
    dZ = apply(dX - dB @ Z + apply_T(dB.T @ (X - B @ Z)) - B @ S) + S
    return Z, dZ
