"""The small-matrix kernels against LAPACK, a 50-digit reference and finite differences."""

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import ukjax
from ukjax import _linalg as la


def spd(n, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, n))
    return X @ X.T + n * np.eye(n)


@pytest.mark.parametrize("n", [1, 3, 7, la.UNROLL_MAX, la.UNROLL_MAX + 4])
def test_factorizations_equal_lapack(n):
    M = spd(n)
    R = np.random.default_rng(1).normal(size=(n, 3))
    L = np.asarray(la.cholesky(jnp.asarray(M)))
    np.testing.assert_allclose(L, np.linalg.cholesky(M), rtol=0, atol=1e-13 * np.abs(L).max())
    np.testing.assert_allclose(
        la.solve_lower(jnp.asarray(L), jnp.asarray(R)), np.linalg.solve(L, R), rtol=1e-12, atol=1e-13
    )
    np.testing.assert_allclose(
        la.solve_lower(jnp.asarray(L), jnp.asarray(R[:, 0]), transpose=True),
        np.linalg.solve(L.T, R[:, 0]),
        rtol=1e-12,
        atol=1e-13,
    )
    np.testing.assert_allclose(
        la.cho_solve(jnp.asarray(L), jnp.asarray(R)), np.linalg.solve(M, R), rtol=1e-11, atol=1e-13
    )
    # Not positive definite: NaN, as LAPACK.
    assert not np.all(
        np.isfinite(np.asarray(la.cholesky(jnp.asarray(M - 2 * np.linalg.eigvalsh(M).max() * np.eye(n)))))
    )


def cases():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(4, 7))
    yield "full rank", A
    yield "duplicated row", np.vstack([A, A[1]])
    yield "dependent row", np.vstack([A, A[0] - 2 * A[2]])
    yield "zero row", np.vstack([A, np.zeros(7)])
    yield "rows 1e-6 apart", np.vstack([A, A[0] + 1e-6 * rng.normal(size=7)])
    # Above the unrolled kernels: the library route (QR of Bᵀ, then an SVD of R)
    wide = rng.normal(size=(3, la.UNROLL_MAX + 4))
    yield "wide, full rank", wide
    yield "wide, duplicated row", np.vstack([wide, wide[1]])
    yield "wide, rows 1e-6 apart", np.vstack([wide, wide[0] + 1e-6 * rng.normal(size=wide.shape[1])])
    # More rows than columns, of rank 5: the SVD of Bᵀ, whose four dependent columns shrink
    # to round-off during the sweeps (Cassie's feet and loops: 123 rows of rank 23)
    tall = rng.normal(size=(14, 5)) @ rng.normal(size=(5, 9))
    yield "tall, rank 5", tall
    # The lengths of dependent rows weigh their multipliers: (D B)⁺ is not B⁺ D⁻¹
    yield "tall, rank 5, rows 1e-3 to 1e3 long", np.logspace(-3, 3, 14)[:, None] * tall
    # A row this close to the span of the others is one of its own for the SVD's cut-off;
    # the squared pivots of the Gram matrix cannot tell it from a dependent one
    yield "tall, rows 3e-7 apart", np.vstack([tall[:5], tall[0] + 3e-7 * rng.normal(size=9), tall[5:]])


def reference(B, X):
    """B⁺ X in 50 digits, with numpy's rank decision."""
    with mp.workdps(50):
        U, s, V = mp.svd_r(mp.matrix(B.tolist()))
        cutoff = 10 * max(B.shape) * np.finfo(float).eps * s[0]
        S = mp.diag([1 / x if x > cutoff else 0 for x in s])
        return np.array((V.T * S * U.T * mp.matrix(X.tolist())).tolist(), dtype=float)


@pytest.mark.parametrize("name, B", list(cases()))
def test_pseudo_inverse_is_svd_grade(name, B):
    X = np.random.default_rng(3).normal(size=(B.shape[0], 2))
    X = B @ np.random.default_rng(4).normal(size=(B.shape[1], 2)) + 0.1 * X  # not all consistent
    # one program (op by op, each operation of the kernels compiles on its own)
    Z = np.asarray(jax.jit(la.pinv_solve)(jnp.asarray(B), jnp.asarray(X)))
    ref = reference(B, X)
    # cond(B) ≤ 1e7 here (2e7 for the rows 3e-7 apart): an SVD keeps about 16 − 7 digits
    # (LAPACK's error on the rows 3e-7 apart: 1.0e-8), the squared route none.
    tolerance = 5e-8 if "3e-7" in name else 1e-8
    assert np.max(np.abs(Z - ref)) <= tolerance * np.max(np.abs(ref)), name


@pytest.mark.parametrize("name, B", [c for c in cases() if "apart" not in c[0]])
def test_pseudo_inverse_derivatives(name, B):
    """Forward and reverse mode equal jnp.linalg.pinv's (the same formula, its SVD) at any
    constant rank, and central differences where perturbations keep the rank."""
    X = jnp.asarray(np.random.default_rng(5).normal(size=(B.shape[0], 2)))
    B = jnp.asarray(B)
    dB = jnp.asarray(np.random.default_rng(6).normal(size=B.shape))

    def ours(B):
        return jnp.sum(jnp.sin(la.pinv_solve(B, X)))

    def lapack(B):
        return jnp.sum(jnp.sin(jnp.linalg.pinv(B) @ X))

    @jax.jit  # one program (op by op, each operation of the kernels compiles on its own)
    def derivatives(B, dB):
        h = 1e-6
        return (
            jax.grad(ours)(B),
            jax.grad(lapack)(B),
            jax.jvp(ours, (B,), (dB,))[1],
            jax.jvp(lapack, (B,), (dB,))[1],
            (ours(B + h * dB) - ours(B - h * dB)) / (2 * h),
        )

    grad_ours, grad_lapack, jvp_ours, jvp_lapack, fd = derivatives(B, dB)
    np.testing.assert_allclose(grad_ours, grad_lapack, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(jvp_ours, jvp_lapack, rtol=1e-9, atol=1e-11)
    if "full rank" in name:
        np.testing.assert_allclose(jvp_ours, fd, rtol=1e-7)


def test_batch_members_keep_their_own_route():
    """Under vmap a rank-deficient member runs the SVD sweeps; its neighbours' answers are
    those they get alone."""
    Bs = np.stack(
        [B[:4] if B.shape[0] > 4 else B for _, B in list(cases())[:5]]
        + [np.vstack([B[:3], B[1]]) for _, B in list(cases())[:1]]
    )
    X = np.random.default_rng(7).normal(size=(len(Bs), 4, 1))
    batched = np.asarray(jax.jit(jax.vmap(la.pinv_solve))(jnp.asarray(Bs), jnp.asarray(X)))
    alone = jax.jit(la.pinv_solve)
    for B, x, z in zip(Bs, X, batched):
        np.testing.assert_allclose(z, alone(jnp.asarray(B), jnp.asarray(x)), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(z, reference(B, x), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("route", ["svd", "cholesky"])
def test_large_batches_stay_finite(route):
    """Batches of 4096 (XLA picks other code paths above a few hundred members: a 6 × 6 `B`
    with two zero rows went NaN for every member from batch 700 on) with zero, duplicated and
    nearly dependent rows, through the checked U-K solve's own kernels."""
    rng = np.random.default_rng(8)
    B = rng.normal(size=(6, 6))
    zero = B.copy()
    zero[[2, 5]] = 0  # a planar loop written in 3D: the rows along the normal
    duplicated = np.vstack([B[:5], B[1]])
    near = np.vstack([B[:5], B[0] + 1e-4 * rng.normal(size=6)])
    kinds = np.stack([zero, duplicated, near, B])
    X = rng.normal(size=(4, 6, 1))
    Bs, Xs = np.tile(kinds, (1024, 1, 1)), np.tile(X, (1024, 1, 1))
    robust = route == "svd"
    Z = np.asarray(jax.jit(jax.vmap(lambda B, X: la.pinv_solve(B, X, robust)))(Bs, Xs))
    assert np.all(np.isfinite(Z))
    # the Cholesky route is defined for independent rows only, and must say which those are
    independent = jax.jit(jax.vmap(lambda B: la.gram_factor(B, la.rank_tolerance(6, B.dtype)).independent))
    assert np.array_equal(np.asarray(independent(Bs)), np.tile([False, False, True, True], 1024))
    # cond(near) ≈ 1e4: the SVD keeps 12 digits, the squared route about 8
    for k in range(4) if robust else (2, 3):
        ref = reference(kinds[k], X[k])
        assert np.max(np.abs(Z[k::4] - ref)) <= (1e-10 if robust else 1e-6) * np.max(np.abs(ref)), k


def test_structural_rank_deficiency_takes_no_svd():
    """Above the unrolled sizes, dependent rows are left out of a basis of the rows, and the
    SVD runs only where that basis cannot be trusted."""
    basis = jax.jit(lambda B: la._basis_pinv(B, jnp.array(False))[1])
    routes = {name: bool(basis(jnp.asarray(B))) for name, B in cases() if B.shape[0] > la.UNROLL_MAX}
    assert routes == {"tall, rank 5": True, "tall, rank 5, rows 1e-3 to 1e3 long": True, "tall, rows 3e-7 apart": False}


def test_rows_below_the_cutoff_count_as_zero():
    """A row at round-off scale relative to the longest is cut off as `jnp.linalg.pinv` cuts
    it, not normalised and inverted in full (the fast route gave [0, 10, 0] here)."""
    A = jnp.array([[1.0, 0, 0], [1e-17, 1e-17, 0]])
    z = la.pinv_solve(A, jnp.array([[0.0], [1e-16]]))
    np.testing.assert_allclose(z, jnp.linalg.pinv(A) @ jnp.array([[0.0], [1e-16]]), atol=1e-30)
    # consistent to round-off: the constrained solve is pinv's answer, not [1, 1, 0]
    qdd = ukjax.udwadia_kalaba(jnp.eye(3), jnp.zeros(3), A, jnp.array([1.0, 2e-17]))
    np.testing.assert_allclose(qdd, [1.0, 0.0, 0.0], atol=1e-15)


def test_square_solve_without_lapack():
    """`solve_square` (the sliding contacts' coupling): NumPy's answer and derivative on random
    systems that need pivoting, and a singular system flagged by its pivot."""
    rng = np.random.default_rng(11)
    for k in (2, 3, 6):
        A = rng.normal(size=(k, k))
        A[0, 0] = 0.0  # the first step must pivot
        b = rng.normal(size=k)
        x, pivot = jax.jit(la.solve_square)(A, b)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-12, atol=1e-13)
        assert float(pivot) > 0
        grad = jax.grad(lambda A: jnp.sum(la.solve_square(A, b)[0] ** 2))(jnp.asarray(A))
        inverse = np.linalg.inv(A)
        np.testing.assert_allclose(np.asarray(grad), -inverse.T @ (2 * inverse @ b)[:, None] @ (inverse @ b)[None], rtol=1e-10)
    x, pivot = la.solve_square(jnp.array([[1.0, 2.0], [2.0, 4.0]]), jnp.ones(2))
    assert not float(pivot) > 1e-8 and not np.all(np.isfinite(np.asarray(x)))
