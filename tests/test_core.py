"""The pure U-K functions against the Lagrange-multiplier (KKT) form, the papers' symmetric
square-root formula, and high-precision references."""

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
import scipy.linalg

import ukjax


def random_problem(rng, n, p):
    X = rng.normal(size=(n, n))
    M = X @ X.T + n * np.eye(n)
    return M, rng.normal(size=n), rng.normal(size=(p, n)), rng.normal(size=p)


def kkt(M, Q, A, b):
    n, p = len(Q), len(b)
    K = np.block([[M, -A.T], [A, np.zeros((p, p))]])
    x = np.linalg.solve(K, np.concatenate([Q, b]))
    return x[:n], A.T @ x[n:]


def paper_formula(M, Q, A, b, c):
    """Seed 002 eq. 11–13 with the symmetric square root, in NumPy/SciPy."""
    S = np.real(scipy.linalg.sqrtm(M))
    S_inv = np.linalg.inv(S)
    B = A @ S_inv
    Bp = np.linalg.pinv(B)
    a = np.linalg.solve(M, Q)
    Qc = S @ Bp @ (b - A @ a) + S @ (np.eye(len(Q)) - Bp @ B) @ S_inv @ c
    return a + np.linalg.solve(M, Qc), Qc


@pytest.mark.parametrize("method", ["svd", "cholesky"])
@pytest.mark.parametrize("n,p", [(2, 1), (5, 3), (12, 7), (30, 1), (30, 29)])
def test_matches_kkt(n, p, method):
    rng = np.random.default_rng(n * 100 + p)
    M, Q, A, b = random_problem(rng, n, p)
    qdd_ref, Qc_ref = kkt(M, Q, A, b)
    qdd = ukjax.udwadia_kalaba(M, Q, A, b, method=method)
    Qc = ukjax.constraint_force(M, Q, A, b, method=method)
    np.testing.assert_allclose(qdd, qdd_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(Qc, Qc_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A @ qdd, b, atol=1e-9)


def test_nonideal_and_redundant_match_paper_formula():
    rng = np.random.default_rng(1)
    M, Q, A, b = random_problem(rng, 6, 3)
    # rank 3 with 4 rows: a consistent redundant row
    A = np.vstack([A, A[0] + 2 * A[1]])
    b = np.append(b, b[0] + 2 * b[1])
    c = rng.normal(size=6)
    qdd_ref, Qc_ref = paper_formula(M, Q, A, b, c)
    np.testing.assert_allclose(ukjax.udwadia_kalaba(M, Q, A, b, c=c), qdd_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ukjax.constraint_force(M, Q, A, b, c=c), Qc_ref, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("n", [3, 10])  # the unrolled kernels and the loops
def test_no_rows_is_the_free_motion_with_the_nonideal_force_in_full(n):
    rng = np.random.default_rng(n)
    M, Q, A, b = random_problem(rng, n, 0)
    c = rng.normal(size=n)
    np.testing.assert_allclose(ukjax.udwadia_kalaba(M, Q, A, b), np.linalg.solve(M, Q), rtol=1e-12)
    np.testing.assert_allclose(ukjax.udwadia_kalaba(M, Q, A, b, c=c), np.linalg.solve(M, Q + c), rtol=1e-12)
    np.testing.assert_allclose(ukjax.constraint_force(M, Q, A, b, c=c), c, rtol=1e-15)
    np.testing.assert_array_equal(ukjax.constraint_force(M, Q, A, b), np.zeros(n))


def test_nonideal_force_does_the_prescribed_work():
    rng = np.random.default_rng(2)
    M, Q, A, b = random_problem(rng, 7, 3)
    c = rng.normal(size=7)
    Qc_ideal = ukjax.constraint_force(M, Q, A, b)
    Qc = ukjax.constraint_force(M, Q, A, b, c=c)
    qdd = ukjax.udwadia_kalaba(M, Q, A, b, c=c)
    np.testing.assert_allclose(A @ qdd, b, atol=1e-10)  # constraints still satisfied
    null = scipy.linalg.null_space(A)  # virtual displacements v with A v = 0
    # on every virtual displacement the non-ideal part does the work c prescribes ...
    np.testing.assert_allclose(null.T @ (Qc - Qc_ideal), null.T @ c, atol=1e-10)
    # ... and the ideal part none
    np.testing.assert_allclose(null.T @ Qc_ideal, 0, atol=1e-10)


def test_duplicated_rows_change_nothing_and_gradients_stay_finite():
    rng = np.random.default_rng(3)
    M, Q, A, b = random_problem(rng, 5, 2)
    A2, b2 = np.vstack([A, A[1], A[1]]), np.append(b, [b[1], b[1]])
    np.testing.assert_allclose(
        ukjax.udwadia_kalaba(M, Q, A2, b2), ukjax.udwadia_kalaba(M, Q, A, b), atol=1e-12
    )
    np.testing.assert_allclose(
        ukjax.constraint_force(M, Q, A2, b2), ukjax.constraint_force(M, Q, A, b), atol=1e-12
    )

    def loss(scale, A, b):
        return jnp.sum(jnp.sin(ukjax.udwadia_kalaba(M * scale, Q, A, b)))

    g_dup = jax.grad(loss, argnums=(0, 1))(1.3, jnp.asarray(A2), jnp.asarray(b2))
    g = jax.grad(loss)(1.3, A, b)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in g_dup)
    np.testing.assert_allclose(g_dup[0], g, rtol=1e-9)


def test_gradient_with_equal_masses_is_finite_and_correct():
    A = jnp.array([[1.0, -1.0, 0.0], [0.0, 1.0, 1.0]])
    b = jnp.array([0.3, -0.2])
    Q = jnp.array([0.0, -9.81, 1.0])

    def f(m1):
        M = jnp.diag(jnp.array([m1, 2.0, 2.0]))  # m2 == m3: repeated eigenvalues
        return ukjax.constraint_force(M, Q, A, b)[0]

    g = jax.grad(f)(2.0)  # at m1 == 2 all three masses are equal
    h = 1e-5
    fd = (f(2.0 + h) - f(2.0 - h)) / (2 * h)
    assert jnp.isfinite(g)
    np.testing.assert_allclose(g, fd, rtol=1e-8)


@pytest.mark.parametrize("eps,rtol", [(1e-2, 1e-10), (1e-4, 1e-6)])
def test_gradient_with_nearly_parallel_rows(eps, rtol):
    """Against a 60-digit finite difference of the full-rank formula `Bᵀ(BBᵀ)⁻¹e`."""
    rng = np.random.default_rng(4)
    n = 6
    A = rng.normal(size=(3, n))
    A[1] = A[0] + eps * rng.normal(size=n)
    b, dA = rng.normal(size=3), rng.normal(size=(3, n))
    M, Q = np.eye(n), np.zeros(n)

    def f(s):
        return jnp.sum(jnp.sin(ukjax.udwadia_kalaba(M, Q, A + s * dA, b)))

    mp.mp.dps = 60

    def f_mp(s):
        B = mp.matrix(A.tolist()) + s * mp.matrix(dA.tolist())
        x = B.T * mp.inverse(B * B.T) * mp.matrix(b.tolist())
        return sum(mp.sin(x[i]) for i in range(n))

    h = mp.mpf("1e-25")
    reference = float((f_mp(h) - f_mp(-h)) / (2 * h))
    np.testing.assert_allclose(jax.grad(f)(0.0), reference, rtol=rtol)


def test_jit_and_vmap():
    rng = np.random.default_rng(5)
    problems = [random_problem(rng, 4, 2) for _ in range(3)]
    stacked = [np.stack(x) for x in zip(*problems)]
    batched = jax.jit(jax.vmap(ukjax.udwadia_kalaba))(*stacked)
    for k, prob in enumerate(problems):
        np.testing.assert_allclose(batched[k], kkt(*prob)[0], rtol=1e-10)


def test_bad_input():
    rng = np.random.default_rng(6)
    M, Q, A, b = random_problem(rng, 4, 2)
    with pytest.raises(ValueError, match="M \\(mass matrix\\) must have shape"):
        ukjax.udwadia_kalaba(M[:3, :3], Q, A, b)
    with pytest.raises(ValueError, match="A \\(constraint matrix\\)"):
        ukjax.udwadia_kalaba(M, Q, A[:, :3], b)
    with pytest.raises(ValueError, match="b must have shape"):
        ukjax.udwadia_kalaba(M, Q, A, b[:1])
    with pytest.raises(ValueError, match="method must be one of"):
        ukjax.udwadia_kalaba(M, Q, A, b, method="qr")
    with pytest.raises(Exception, match="not symmetric positive definite"):
        ukjax.udwadia_kalaba(-M, Q, A, b)
    with pytest.raises(Exception, match="not symmetric positive definite"):
        ukjax.udwadia_kalaba(M + np.triu(np.ones((4, 4)), 1), Q, A, b)
    with pytest.raises(Exception, match="inconsistent"):
        ukjax.udwadia_kalaba(M, Q, np.vstack([A, A[0]]), np.append(b, b[0] + 1.0))


def dependent_rows(rng, n, gap):
    """Three rows, the third `A₀ + 2A₁` plus `gap` times a unit vector, with consistent `b`."""
    M, Q, A, b = random_problem(rng, n, 2)
    direction = rng.normal(size=n)
    A = np.vstack([A, A[0] + 2 * A[1] + gap * direction / np.linalg.norm(direction)])
    return M, Q, A, np.append(b, b[0] + 2 * b[1])


@pytest.mark.parametrize("gap", [0.0, 1e-14])
def test_cholesky_route_refuses_dependent_rows(gap):
    """Exactly or numerically dependent rows: the Cholesky route raises (whatever rounding
    makes of the singular pivot), the SVD route gives the minimum-norm answer."""
    M, Q, A, b = dependent_rows(np.random.default_rng(7), 6, gap)
    with pytest.raises(Exception, match="method='svd'"):
        ukjax.udwadia_kalaba(M, Q, A, b, method="cholesky")
    np.testing.assert_allclose(
        ukjax.udwadia_kalaba(M, Q, A, b), kkt(M, Q, A[:2], b[:2])[0], rtol=1e-9, atol=1e-9
    )


def test_cholesky_route_accepts_ill_conditioned_full_rank():
    """Rows 1e-4 apart (cond(B) about 1e5): still independent, so the Cholesky route answers,
    to the accuracy its squared condition number allows (against a 50-digit reference)."""
    M, Q, A, b = dependent_rows(np.random.default_rng(8), 6, 1e-4)
    mp.mp.dps = 50
    Mi, Am = mp.inverse(mp.matrix(M.tolist())), mp.matrix(A.tolist())
    a = Mi * mp.matrix(Q.tolist())
    x = a + Mi * Am.T * mp.inverse(Am * Mi * Am.T) * (mp.matrix(b.tolist()) - Am * a)
    reference = np.array([float(v) for v in x])
    np.testing.assert_allclose(
        ukjax.udwadia_kalaba(M, Q, A, b, method="cholesky"), reference, atol=1e-5 * np.linalg.norm(reference)
    )
    np.testing.assert_allclose(
        ukjax.udwadia_kalaba(M, Q, A, b), reference, atol=1e-9 * np.linalg.norm(reference)
    )


def test_cholesky_rank_check_per_batch_member():
    """Under vmap each member gets its own verdict: only the duplicated rows are refused."""

    def rank_ok(s):
        A = jnp.stack([jnp.array([1.0, 0.0, 0.0]), jnp.stack([1.0, s, 0.0])])
        system = ukjax.ExplicitSystem(lambda t, q: jnp.diag(jnp.array([1.0, 2.0, 3.0])), lambda t, q, qd: -q)
        csys = ukjax.ConstrainedSystem(
            system, ukjax.AccelerationConstraint(lambda t, q, qd: (A, jnp.zeros(2))), method="cholesky"
        )
        return csys.solve(0.0, jnp.ones(3), jnp.zeros(3)).rank_ok

    np.testing.assert_array_equal(jax.jit(jax.vmap(rank_ok))(jnp.array([1.0, 0.0, 1e-3])), [True, False, True])


def test_import_leaves_x64_alone():
    import subprocess
    import sys

    code = "import jax, ukjax, ukjax.models; assert not jax.config.jax_enable_x64"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
