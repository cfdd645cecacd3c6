"""Small dense linear algebra written for batches.

On CPU, XLA runs each LAPACK call (`potrf`, `trsm`, `gesdd`) once per matrix of a batch, in a
loop, and never fuses it with the code around it. The matrices of mechanisms are small (a
dozen rows), so below `UNROLL_MAX` rows the factorizations here are unrolled into scalar
operations at trace time: under `vmap` each becomes one elementwise operation over the batch,
and XLA fuses the whole solve into a few loops. Above it, LAPACK, so that compile time stays
bounded.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, Float

# Largest matrix side that is unrolled; chosen by measurement (benchmarks/kernels.py).
UNROLL_MAX = 16
# Sweeps of the one-sided Jacobi SVD: it converges quadratically, in 5–10 sweeps for these
# sizes; the cap only bounds a NaN input's loop.
_MAX_SWEEPS = 30


def _unrolled(*sizes: int) -> bool:
    return max(sizes) <= UNROLL_MAX


def _columns(X: Array) -> list[Array]:
    return [X[..., j] for j in range(X.shape[-1])]


def cholesky(M: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """Lower Cholesky factor `L` of `M = L Lᵀ` from `M`'s lower triangle; NaN where `M` is not
    positive definite (as LAPACK's)."""
    n = M.shape[-1]
    if not _unrolled(n):
        return jnp.linalg.cholesky(M)
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        diagonal = jnp.sqrt(M[j, j] - sum((L[j][k] ** 2 for k in range(j)), start=0.0))
        L[j][j] = diagonal
        for i in range(j + 1, n):
            L[i][j] = (M[i, j] - sum((L[i][k] * L[j][k] for k in range(j)), start=0.0)) / diagonal
    zero = jnp.zeros_like(M[0, 0])
    return jnp.stack([jnp.stack([zero if x is None else x for x in row]) for row in L])


def solve_lower(L: Float[Array, "n n"], B: Float[Array, "n *k"], *, transpose: bool = False) -> Float[Array, "n *k"]:
    """`L⁻¹ B`, or `L⁻ᵀ B` with `transpose=True`, for lower triangular `L`."""
    n = L.shape[-1]
    if not _unrolled(n):
        return jsl.solve_triangular(L, B, lower=True, trans=1 if transpose else 0)
    x = [None] * n
    order = range(n - 1, -1, -1) if transpose else range(n)
    for i in order:
        done = range(i + 1, n) if transpose else range(i)
        coefficient = (lambda k: L[k, i]) if transpose else (lambda k: L[i, k])
        x[i] = (B[i] - sum((coefficient(k) * x[k] for k in done), start=0.0)) / L[i, i]
    return jnp.stack(x)


def cho_solve(L: Float[Array, "n n"], B: Float[Array, "n *k"]) -> Float[Array, "n *k"]:
    """`M⁻¹ B` from the Cholesky factor `L` of `M`."""
    return solve_lower(L, solve_lower(L, B), transpose=True)


def _jacobi_pinv(B: Float[Array, "p n"]) -> Float[Array, "n p"]:
    # One-sided (Hestenes) Jacobi: rotate the columns x_i of Bᵀ until they are orthogonal,
    # Bᵀ V = W. Then B⁺ = W diag(σ⁻²) Vᵀ with σᵢ = ‖wᵢ‖. Working on B itself, not B Bᵀ,
    # keeps the accuracy of an SVD (the condition number is not squared).
    p, n = B.shape
    eps = jnp.finfo(B.dtype).eps

    def sweep(state):
        x, v, _, count = state
        x, v = list(x), list(v)
        worst = jnp.zeros((), B.dtype)
        for i in range(p):
            for j in range(i + 1, p):
                alpha, beta, gamma = x[i] @ x[i], x[j] @ x[j], x[i] @ x[j]
                off = jnp.abs(gamma) / jnp.where(alpha * beta > 0, jnp.sqrt(alpha * beta), 1)
                worst = jnp.maximum(worst, off)
                rotate = off > eps
                zeta = (beta - alpha) / (2 * jnp.where(rotate, gamma, 1))
                t = jnp.where(zeta >= 0, 1.0, -1.0) / (jnp.abs(zeta) + jnp.hypot(1.0, zeta))
                c = jnp.where(rotate, 1 / jnp.hypot(1.0, t), 1.0)
                s = jnp.where(rotate, c * t, 0.0)
                x[i], x[j] = c * x[i] - s * x[j], s * x[i] + c * x[j]
                v[i], v[j] = c * v[i] - s * v[j], s * v[i] + c * v[j]
        return jnp.stack(x), jnp.stack(v), worst, count + 1

    def unfinished(state):
        return (state[2] > eps) & (state[3] < _MAX_SWEEPS)

    start = (B, jnp.eye(p, dtype=B.dtype), jnp.array(jnp.inf, B.dtype), 0)
    w, v, _, _ = jax.lax.while_loop(unfinished, sweep, start)
    sigma2 = jnp.sum(w * w, axis=1)
    # numpy's and jax's pinv cutoff: σ ≤ 10 max(p, n) ε σ_max is zero.
    cutoff = (10 * max(p, n) * eps) ** 2 * jnp.max(sigma2)
    inverse = jnp.where(sigma2 > cutoff, 1 / jnp.where(sigma2 > 0, sigma2, 1), 0)
    return (w.T * inverse) @ v


@jax.custom_jvp
def pinv(B: Float[Array, "p n"]) -> Float[Array, "n p"]:
    """Moore–Penrose pseudo-inverse, with the cutoff of `jnp.linalg.pinv` and its derivative
    (exact where the rank does not change).

    **Arguments:**

    - `B`: a `(p, n)` matrix of any rank.

    **Returns:**

    `B⁺`, shape `(n, p)`.
    """
    if not _unrolled(*B.shape):
        return jnp.linalg.pinv(B)
    return _jacobi_pinv(B)


@pinv.defjvp
def _pinv_jvp(primals, tangents):
    (B,), (dB,) = primals, tangents
    P = pinv(B)
    # Golub & Pereyra (1973): the derivative of B⁺ along dB at constant rank.
    dP = (
        -P @ dB @ P
        + (P @ P.T) @ dB.T @ (jnp.eye(B.shape[0], dtype=B.dtype) - B @ P)
        + (jnp.eye(B.shape[1], dtype=B.dtype) - P @ B) @ dB.T @ (P.T @ P)
    )
    return P, dP
