"""Small dense linear algebra written for batches.

On CPU, XLA runs each LAPACK call (`potrf`, `trsm`, `gesdd`) once per matrix of a batch, in a
loop, and never fuses it with the code around it; with several CPU devices, or large batches
on one, programs mixing LAPACK calls with large fusions hung (jax 0.10.2). So nothing here
calls LAPACK. Up to `UNROLL_MAX` rows (and `UNROLL_COLUMNS` right-hand sides for a triangular
solve) the factorizations are unrolled into scalar operations at trace time: under `vmap` each
becomes one elementwise operation over the batch, and XLA fuses the whole solve into a few
loops. Above them, loops over columns whose steps are
matrix-vector products (`_loop_cholesky`, `_loop_solve`): the traced program stays the same
size whatever `n`, and each step is one operation over the whole batch.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

# Largest matrix side that is unrolled: unrolled solves run several times faster than LAPACK's
# under vmap and compile longer; the suite's compile time decided for 8 (`benchmarks/bench_core.py`).
UNROLL_MAX = 8
# Most right-hand sides (constraint rows, for `A L⁻ᵀ`) that the unrolled triangular kernels take:
# their operations grow with this count times n², and XLA's compile time with them, for no
# speed. The pseudo-inverse (`gram_factor`, `pinv_solve`) stays unrolled up to `UNROLL_MAX` on
# both sides: in loops its Cholesky route rounded nearly dependent rows worse
# (`tests/test_linalg.py`'s 6 × 6 case).
UNROLL_COLUMNS = 4
# The one-sided Jacobi SVD converges quadratically, in 5–10 sweeps at these sizes; the cap
# only bounds a NaN input's loop.
_MAX_SWEEPS = 30
# Smallest squared pivot of the row-normalised Gram factor for which `pinv` takes the
# Cholesky route: every row then makes an angle of at least 6° with the span of the others,
# the rows' condition number is below about 10 p, and squaring it costs at most two of the
# sixteen digits. Anything closer to dependent goes to the Jacobi SVD.
WELL_CONDITIONED = 1e-2



def negligible(p: int, n: int, dtype) -> float:
    """`jnp.linalg.pinv`'s relative cut-off for a `(p, n)` matrix, the one rank decision of
    every route: a row shorter than this times the longest counts as zero, and a direction
    whose singular value is below this times the largest as dependent. Round-off leaves an
    exactly dependent direction at a few `ε` of the largest, whatever the machine."""
    return 10 * max(p, n) * float(jnp.finfo(dtype).eps)


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


def unrolled(n: int, k: int = 1) -> bool:
    """Whether an `n × n` factor with `k` right-hand sides is handled by the unrolled kernels."""
    return n <= UNROLL_MAX and k <= UNROLL_COLUMNS


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


def _loop_cholesky(
    M: Float[Array, "n n"], floor=None, count=None
) -> tuple[Float[Array, "n n"], Float[Array, " n"]]:
    """`_cholesky` as a loop over columns, each one matrix-vector product (left-looking):
    the factor and its squared pivots, NaN where `M` is not positive definite unless `floor`
    is given (as `_cholesky`). With `count`, only the first `count` columns are factored (a
    loop of that many steps); the others stay zero."""
    n = M.shape[0]
    rows = jnp.arange(n)

    def column(j, state):
        L, pivots = state
        # L's columns from j on are still zero, so this subtracts the finished ones only
        c = M[:, j] - L @ L[j]
        pivot = c[j]
        d = jnp.sqrt(pivot if floor is None else jnp.where(pivot > floor, pivot, 1.0))
        L = L.at[:, j].set(jnp.where(rows > j, c / d, jnp.where(rows == j, d, 0.0)))
        return L, pivots.at[j].set(pivot)

    return jax.lax.fori_loop(0, n if count is None else count, column, (jnp.zeros_like(M), jnp.zeros(n, M.dtype)))


def _loop_solve(
    L: Float[Array, "n n"], B: Float[Array, "n *k"], transpose: bool, count=None
) -> Float[Array, "n *k"]:
    """`L⁻¹ B` (or `L⁻ᵀ B`) for lower triangular `L`, one row of the solution per step; with
    `count`, only the first `count` rows (`L` the identity and `B` zero below them)."""
    n = L.shape[0]
    count = n if count is None else count
    T = L.T if transpose else L

    def row(k, X):
        i = count - 1 - k if transpose else k
        # unsolved rows of X are still zero
        return X.at[i].set((B[i] - T[i] @ X) / T[i, i])

    return jax.lax.fori_loop(0, count, row, jnp.zeros_like(B))


def cholesky(M: Float[Array, "n n"], unroll: bool | None = None) -> Float[Array, "n n"]:
    """Lower Cholesky factor `L` of `M = L Lᵀ` from `M`'s lower triangle; NaN where `M` is not
    positive definite (as LAPACK's). `unroll` picks the kernels (default: `unrolled(n)`); a
    solve decides once for all of its kernels."""
    if not (unrolled(M.shape[0]) if unroll is None else unroll):
        return _loop_cholesky(M)[0]
    return _array(_cholesky(_entries(M))[0])


def solve_lower(
    L: Float[Array, "n n"], B: Float[Array, "n *k"], *, transpose: bool = False, unroll: bool | None = None
) -> Float[Array, "n *k"]:
    """`L⁻¹ B`, or `L⁻ᵀ B` with `transpose=True`, for lower triangular `L` (`unroll` as for
    `cholesky`, default `unrolled(*B.shape)`)."""
    if not (unrolled(*B.shape) if unroll is None else unroll):
        return _loop_solve(L, B, transpose)
    solve = _backward if transpose else _forward
    Ls = _entries(L)
    if B.ndim == 1:
        return jnp.stack(solve(Ls, [B[i] for i in range(B.shape[0])]))
    return jnp.stack(
        [jnp.stack(solve(Ls, [B[i, j] for i in range(B.shape[0])])) for j in range(B.shape[1])], axis=1
    )


def cho_solve(
    L: Float[Array, "n n"], B: Float[Array, "n *k"], unroll: bool | None = None
) -> Float[Array, "n *k"]:
    """`M⁻¹ B` from the Cholesky factor `L` of `M` (`unroll` as for `cholesky`)."""
    return solve_lower(L, solve_lower(L, B, unroll=unroll), transpose=True, unroll=unroll)


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


def gram_factor(
    B: Float[Array, "p n"], floor: float, *, drop_zero_rows: bool = False, unroll: bool | None = None
) -> GramFactor:
    """The Cholesky factor of `B`'s row-normalised Gram matrix.

    Rows shorter than `negligible` relative to the longest row count as zero:
    normalising a row at round-off scale would otherwise invert it in full. No intermediate
    is non-finite for finite `B`.

    **Arguments:**

    - `B`: a `(p, n)` matrix.
    - `floor`: the smallest squared pivot (sine² of the angle between a row and the span of
      the rows before it) for which the rows count as independent.
    - `drop_zero_rows`: False: a zero row is dependent (the rank test of
      `method="cholesky"`). True: it is left out (a unit pivot in `G`, zero in `unit`), as the
      pseudo-inverse leaves it out: `B⁺` has a zero column there. A planar loop written in
      3D has such a row at every state.
    - `unroll`: whether to use the unrolled kernels (default: by size, `unrolled`).

    **Returns:**

    A `GramFactor`.
    """
    p, n = B.shape
    norms = jnp.sqrt(jnp.sum(B * B, axis=1))
    cutoff = negligible(p, n, B.dtype) * jnp.max(norms)
    nonzero = norms > cutoff
    norms = jnp.where(nonzero, norms, 1)
    unit = jnp.where(nonzero[:, None], B, 0) / norms[:, None]
    absent = jnp.where(nonzero, 0.0, 1.0) if drop_zero_rows else jnp.zeros(p, B.dtype)
    if not (unrolled(max(p, n)) if unroll is None else unroll):
        G, pivots = _loop_cholesky(unit @ unit.T + jnp.diag(absent), floor)
        return GramFactor(norms, unit, G, jnp.all(pivots > floor))
    rows = _entries(unit)
    gram = [[_dot(rows[i], rows[j]) + (absent[i] if i == j else 0.0) for j in range(p)] for i in range(p)]
    G, pivots = _cholesky(gram, floor)
    return GramFactor(norms, unit, _array(G), jnp.all(jnp.stack(pivots) > floor))


def _jacobi(B: Float[Array, "p n"], skip: Bool[Array, ""]) -> tuple[Array, Array, Array]:
    """One-sided (Hestenes) Jacobi SVD: rotate the columns of `Bᵀ` until they are orthogonal,
    `Bᵀ V = W`, so that `B⁺ = W diag(σ⁻²) Vᵀ` with `σᵢ = ‖wᵢ‖`. Working on `B` itself, not on
    `B Bᵀ`, keeps the accuracy of an SVD (the condition number is not squared).

    Returns `W` (p, n) (rows wᵢ), `V` (p, p) (rows vᵢ) and `σ⁻²` (p,), zero at and below
    `negligible`. A member with `skip` set costs no sweep: under `vmap` the loop
    runs only while some member of the batch is unfinished.
    """
    p, n = B.shape
    eps = jnp.finfo(B.dtype).eps
    cut = negligible(p, n, B.dtype) ** 2
    # A sweep in p − 1 rounds of p/2 disjoint pairs (the circle method of a round-robin
    # tournament, p padded to even with a zero row, which no rotation touches), each round
    # rotated at once: a sweep of 22 rows is 21 vectorized steps instead of 231 scalar ones.
    # Row r is paired with row m − 1 − r; between rounds every row but the first moves one
    # place on, so that after m − 1 rounds all are back in place. Slices and reversals only:
    # a gather per round ran the 7 rows of the gripper 5x slower under vmap.
    m = p + p % 2
    half = m // 2
    # Columns shorter than the final cut-off (`cut`) relative to the longest column of `B`,
    # which is at most the largest singular value, end as zeros: they are not rotated. Their
    # cosines with the others are round-off, which never falls below eps, and a rank-deficient
    # `B` swept the full `_MAX_SWEEPS` (Cassie standing's rows).
    shortest = cut * jnp.max(jnp.sum(B * B, axis=1))

    def rotate_round(_, carry):
        xv, worst = carry
        x, y = xv[:half], xv[half:][::-1]
        alpha, beta = jnp.sum(x[:, :n] ** 2, axis=1), jnp.sum(y[:, :n] ** 2, axis=1)
        gamma = jnp.sum(x[:, :n] * y[:, :n], axis=1)
        off = jnp.abs(gamma) / jnp.where(alpha * beta > 0, jnp.sqrt(alpha * beta), 1)
        off = jnp.where((alpha > shortest) & (beta > shortest), off, 0.0)
        rotate = off > eps
        zeta = (beta - alpha) / (2 * jnp.where(rotate, gamma, 1))
        t = jnp.where(zeta >= 0, 1.0, -1.0) / (jnp.abs(zeta) + jnp.hypot(1.0, zeta))
        c = jnp.where(rotate, 1 / jnp.hypot(1.0, t), 1.0)[:, None]
        s = jnp.where(rotate, c[:, 0] * t, 0.0)[:, None]
        xv = jnp.concatenate([c * x - s * y, (s * x + c * y)[::-1]])
        xv = jnp.concatenate([xv[:1], xv[-1:], xv[1:-1]])
        return xv, jnp.maximum(worst, jnp.max(off))

    def sweep(state):
        # Row i of the state: the column x_i of Bᵀ followed by the column v_i of V.
        xv, _, count = state
        if p == 1:  # a single row is its own singular vector
            return xv, jnp.zeros((), B.dtype), count + 1
        xv, worst = jax.lax.fori_loop(0, m - 1, rotate_round, (xv, jnp.zeros((), B.dtype)))
        return xv, worst, count + 1

    def unfinished(state):
        return (state[1] > eps) & (state[2] < _MAX_SWEEPS)

    # `worst` starts above eps (a cosine is at most 1) for members that need sweeps.
    xv = jnp.concatenate([B, jnp.eye(p, dtype=B.dtype)], axis=1)
    start = (jnp.pad(xv, ((0, m - p), (0, 0))), jnp.where(skip, 0.0, 2.0), 0)
    xv, _, _ = jax.lax.while_loop(unfinished, sweep, start)
    w, v = xv[:p, :n], xv[:p, n:]
    sigma2 = jnp.sum(w * w, axis=1)
    return w, v, jnp.where(sigma2 > cut * jnp.max(sigma2), 1 / jnp.where(sigma2 > 0, sigma2, 1), 0)


def _pivoted_qr(
    U: Float[Array, "p n"], floor: float, count
) -> tuple[Float[Array, "p r"], Float[Array, "r n"], Int[Array, " p"], Int[Array, ""]]:
    """A QR factorization of the unit rows `U` (of `Uᵀ`, with column pivoting): at each step
    the row farthest from the span of those taken joins an orthonormal basis of them
    (Gram–Schmidt, twice, which is enough: Giraud et al. 2005), until none is farther than
    `floor` (squared), in at most `count` steps. At most `r = min(p, n)` rows can be taken;
    a step costs `O(p n)`.

    **Returns:**

    `(L, Q, perm, rank)`: `U = L Q` (to within `floor` for the rows not taken), `Q`'s first
    `rank` rows orthonormal and the others zero, and `L[perm]` lower trapezoidal: its first
    `rank` rows those taken, in the order taken, the others every other row's coordinates.
    """
    p, n = U.shape
    r = min(p, n)

    def step(j, state):
        Lt, Q, left, when = state
        taken = when < p
        i = jnp.argmax(jnp.where(taken, -jnp.inf, left))
        take = left[i] > floor
        v = U[i] - Q.T @ (Q @ U[i])
        v = v - Q.T @ (Q @ v)
        d = jnp.sqrt(jnp.sum(v * v))
        q = v / jnp.where(take, d, jnp.inf)
        column = jnp.where(taken, 0.0, U @ q).at[i].set(jnp.where(take, d, 0.0))
        return Lt.at[j].set(column), Q.at[j].set(q), left - column**2, when.at[i].set(jnp.where(take, j, p + i))

    start = (jnp.zeros((r, p), U.dtype), jnp.zeros((r, n), U.dtype), jnp.sum(U * U, axis=1), p + jnp.arange(p))
    Lt, Q, _, when = jax.lax.fori_loop(0, jnp.minimum(count, r), step, start)
    return Lt.T, Q, jnp.argsort(when), jnp.sum(when < p)


def _basis_pinv(B: Float[Array, "p n"], skip: Bool[Array, ""]) -> tuple[Float[Array, "n p"], Bool[Array, ""]]:
    """`B⁺` through a basis of `B`'s rows, for rows of any rank without an SVD; where `skip`
    is set its loops take no step (and its results mean nothing).

    The basis: the rows, normalised, taken by `_pivoted_qr` until every row left lies
    within `rank_tolerance` (squared) of their span. With `Q` its orthonormal rows and `Y`
    every row's coordinates in them (`B̂ = Y Q`, `B = D B̂` with `D` the rows' lengths),
    `B⁺ = Qᵀ (Yᵀ D² Y)⁻¹ Yᵀ D`: the minimum-norm solutions and multipliers of an SVD
    wherever the rows left out lie in the span, at the cost of the pivoted QR factorization
    and, where a row was left out, a Cholesky factorization of at most `min(p, n)` rows. A
    rank deficiency that the
    structure fixes (two sticking points on one body, a box on four corners) costs no more
    than full rank; zero rows cost no step.

    **Returns:**

    `(B⁺, exact)`: `exact` where the basis is well conditioned (every squared pivot above
    `WELL_CONDITIONED`) and every row left out is within `negligible` of its span, measured
    on the rows themselves (the Gram matrix cannot tell a sine of 1e-9 from 0).
    """
    p, n = B.shape
    r = min(p, n)
    dtype = B.dtype
    norms = jnp.sqrt(jnp.sum(B * B, axis=1))
    nonzero = norms > negligible(p, n, dtype) * jnp.max(norms)
    norms = jnp.where(nonzero, norms, 1)
    U = jnp.where(nonzero[:, None], B, 0) / norms[:, None]
    L, Q, perm, rank = _pivoted_qr(U, rank_tolerance(p, dtype), jnp.where(skip, 0, jnp.sum(nonzero)))
    Y, U, d = L[perm], U[perm], norms[perm][:, None]
    basis = jnp.arange(r) < rank
    G = jnp.where(basis[:, None], Y[:r], jnp.eye(r, dtype=dtype))
    left_out = jnp.sum((Y @ Q - U) ** 2, axis=1)
    exact = jnp.all(jnp.where(basis, jnp.diagonal(G) ** 2 > WELL_CONDITIONED, True)) & jnp.all(
        left_out <= negligible(p, n, dtype) ** 2
    )
    # B = (D Y) Q, so B⁺ = Qᵀ (Yᵀ D² Y)⁻¹ (D Y)ᵀ: the rows' lengths weigh the multipliers of
    # dependent rows. For independent ones they only scale them: B⁺ = Qᵀ G⁻¹ D⁻¹. Each
    # route's loops run only where it is taken.
    dependent = rank < jnp.sum(nonzero)
    steps = jnp.where(dependent, rank, 0)
    R, _ = _loop_cholesky((d * Y).T @ (d * Y) + jnp.diag(jnp.where(basis, 0.0, 1.0)), count=steps)
    reduced = d * Y @ _loop_solve(R, _loop_solve(R, Q, False, steps), True, steps)
    top = _loop_solve(G, Q, True, rank - steps) / d[:r]
    Pt = jnp.where(dependent, reduced, jnp.zeros((p, n), dtype).at[:r].set(top))
    return jnp.zeros_like(Pt).at[perm].set(Pt).T, exact


def _operator(B: Float[Array, "p n"], robust: bool, unroll: bool | None = None):
    """`X ↦ B⁺ X` and `Y ↦ B⁺ᵀ Y`, for `X` (p, k) and `Y` (n, k)."""
    p, n = B.shape
    unroll = unrolled(max(p, n)) if unroll is None else unroll
    # The robust route factors only well separated rows (others take a basis of the rows, or
    # the SVD); the fast one is only ever given independent rows (`uk_solve` checks them with
    # the same factor).
    factor = gram_factor(
        B, WELL_CONDITIONED if robust else rank_tolerance(p, B.dtype), drop_zero_rows=robust, unroll=unroll
    )
    well, d, U = factor.independent, factor.norms, factor.unit
    # B̂ = D⁻¹ B, B⁺ = B̂ᵀ (B̂ B̂ᵀ)⁻¹ D⁻¹ for independent rows
    if unroll:
        G, rows = _entries(factor.G), _entries(U)

        def column(X):
            y = _backward(G, _forward(G, [X[i] / d[i] for i in range(p)]))
            return jnp.stack([_dot([rows[i][k] for i in range(p)], y) for k in range(n)])

        def column_T(Y):
            u = [_dot(rows[i], [Y[k] for k in range(n)]) for i in range(p)]
            y = _backward(G, _forward(G, u))
            return jnp.stack([y[i] / d[i] for i in range(p)])

        fast, fast_T = jax.vmap(column, 1, 1), jax.vmap(column_T, 1, 1)
    else:

        def fast(X):
            return U.T @ cho_solve(factor.G, X / d[:, None])

        def fast_T(Y):
            return cho_solve(factor.G, U @ Y) / d[:, None]

    if robust and not unroll:
        # Above the unrolled sizes, rows that are not well separated (dependent ones) through a
        # basis of the rows (`_basis_pinv`, whose loops run only for them: on the hand-built
        # parallel robot's ten independent rows it halved the throughput when it ran for all);
        # the SVD only where that basis is ill-conditioned too.
        P, exact = _basis_pinv(B, skip=well)
        gram, gram_T, separated = fast, fast_T, well

        def fast(X):
            return jnp.where(separated, gram(X), P @ X)

        def fast_T(Y):
            return jnp.where(separated, gram_T(Y), P.T @ Y)

        well = separated | exact

    if not robust:
        return fast, fast_T
    if p > n:
        # More rows than columns: the SVD of Bᵀ, n²/2 rotations a sweep instead of p²/2 (a box
        # on four corners: 42 contact rows on 22 coordinates), with (Bᵀ)⁺ = B⁺ᵀ. Rows that
        # are zero (or a dependent few) still take the fast route above: the gripper's loops
        # written in 3D, 7 rows of which 2 vanish on 6 coordinates.
        w, v, inverse = _jacobi(B.T, well)

        def apply(X):
            return jnp.where(well, fast(X), v.T @ (inverse[:, None] * (w @ X)))

        def apply_T(Y):
            return jnp.where(well, fast_T(Y), w.T @ (inverse[:, None] * (v @ Y)))

        return apply, apply_T
    w, v, inverse = _jacobi(B, well)

    def apply(X):
        return jnp.where(well, fast(X), w.T @ (inverse[:, None] * (v @ X)))

    def apply_T(Y):
        return jnp.where(well, fast_T(Y), v.T @ (inverse[:, None] * (w @ Y)))

    return apply, apply_T


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def pinv_solve(B: Float[Array, "p n"], X: Float[Array, "p k"], robust: bool = True) -> Float[Array, "n k"]:
    """`B⁺ X`, the Moore–Penrose pseudo-inverse applied to the columns of `X`, with
    `jnp.linalg.pinv`'s cutoff and its derivative (exact where the rank does not change).

    Rows that are independent and well separated (`WELL_CONDITIONED`), zero rows left out,
    take the Cholesky route `B̂ᵀ (B̂ B̂ᵀ)⁻¹` on the row-normalised `B̂`; anything else a
    one-sided Jacobi SVD.
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


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def pinv_solve_multipliers(
    B: Float[Array, "p n"], X: Float[Array, "p k"], unroll: bool | None = None
) -> tuple[Float[Array, "n k"], Float[Array, "p k"]]:
    """`(Z, Λ) = (B⁺ X, B⁺ᵀ B⁺ X)` from one factorization: the minimum-norm solutions of
    `B z = x` and the minimum-norm multipliers `λ` with `Bᵀ λ = z` (what a constraint
    force `z` is made of, row by row), with the pseudo-inverse's derivative (exact where the
    rank does not change). Robust route, as `pinv_solve`.

    **Arguments:**

    - `B`: a `(p, n)` matrix of any rank.
    - `X`: right-hand sides, shape `(p, k)`.
    - `unroll`: whether to use the unrolled kernels (default: by size).

    **Returns:**

    `(Z, Λ)`, shapes `(n, k)` and `(p, k)`.
    """
    apply, apply_T = _operator(B, True, unroll)
    Z = apply(X)
    return Z, apply_T(Z)


@pinv_solve_multipliers.defjvp
def _pinv_solve_multipliers_jvp(unroll, primals, tangents):
    (B, X), (dB, dX) = primals, tangents
    apply, apply_T = _operator(B, True, unroll)
    Z = apply(X)
    Lam = apply_T(Z)
    # dZ as in `pinv_solve`; dΛ = (dB⁺)ᵀ Z + B⁺ᵀ dZ with Golub & Pereyra's dB⁺ transposed:
    # (dB⁺)ᵀ = −B⁺ᵀ dBᵀ B⁺ᵀ + (I − B B⁺) dB B⁺ B⁺ᵀ + B⁺ᵀ B⁺ dB (I − B⁺B).
    S = dB.T @ Lam
    dZ = apply(dX - dB @ Z + apply_T(dB.T @ (X - B @ Z)) - B @ S) + S
    u = dB @ apply(Lam)
    w = dB @ (Z - apply(B @ Z))
    dLam = -apply_T(S) + u - B @ apply(u) + apply_T(apply(w)) + apply_T(dZ)
    return (Z, Lam), (dZ, dLam)


def solve_square(A: Float[Array, "k k"], b: Float[Array, " k"]) -> tuple[Float[Array, " k"], Float[Array, ""]]:
    """`A⁻¹ b` for a small square `A` of no particular structure, by Gauss–Jordan elimination
    with partial pivoting in a loop of `k` steps (no LAPACK, as everything here).

    **Returns:**

    `(x, pivot)`: the solution and the smallest pivot's magnitude (zero or NaN, and `x` not
    finite, where `A` is singular).
    """
    k = A.shape[0]
    rows = jnp.arange(k)

    def step(i, carry):
        A, b = carry
        p = jnp.argmax(jnp.where(rows >= i, jnp.abs(A[:, i]), -1.0))
        swap = jnp.where(rows == i, p, jnp.where(rows == p, i, rows))
        A, b = A[swap], b[swap]
        factor = jnp.where(rows == i, 0.0, A[:, i] / A[i, i])
        return A - factor[:, None] * A[i][None, :], b - factor * b[i]

    A, b = jax.lax.fori_loop(0, k, step, (A, b))
    pivots = jnp.diagonal(A)
    return b / pivots, jnp.min(jnp.abs(pivots), initial=jnp.inf)
