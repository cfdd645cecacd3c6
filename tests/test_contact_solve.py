"""The compiled contact solve (`ukjax/_contact_solve.h`) against the XLA route
(`_unilateral._dense_solve`, which the contact tests check against closed forms, MuJoCo and
DOP853), on every route of its pseudo-inverse, under `vmap`, and differentiated."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ukjax import _linalg as la
from ukjax._backends._build import built
from ukjax._backends._contact_kernel import native_solve as _native_solve
from ukjax._contact_algebra import dense_solve as _dense_solve

pytestmark = pytest.mark.xdist_group("kernels")

N, EQUALITIES, CONTACTS = 12, 2, 4
P = EQUALITIES + 3 * CONTACTS


def problem(kind: str, seed: int = 0):
    """`(M, Q, rows, b, closing, K, slide)`: two equality rows and four contacts (normal rows,
    then two tangent rows each), contacts 0-2 closed, 0 and 1 sticking, 2 sliding, 3 open (all
    sticking for "more rows than coordinates")."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, N))
    M = X @ X.T + N * np.eye(N)
    rows = rng.normal(size=(P, N))
    if kind == "dependent":
        # contact 1's normal row in the span of the equality rows and contact 0's: a rank
        # deficiency of the structure, as two sticking points on one body
        rows[EQUALITIES + 1] = 0.5 * rows[0] - 2.0 * rows[EQUALITIES]
    if kind == "nearly dependent":
        rows[EQUALITIES + 1] = rows[EQUALITIES] + 1e-5 * rng.normal(size=N)
    if kind == "zero rows":
        rows[EQUALITIES + CONTACTS : EQUALITIES + CONTACTS + 2] = 0  # contact 0 without friction directions
    if kind == "no mass matrix":
        M = M - 2 * np.linalg.eigvalsh(M).max() * np.eye(N)
    closed = np.array([1, 1, 1, 0], bool)
    stick = np.array([1, 1, 0, 0], bool)
    if kind == "more rows than coordinates":
        # every contact sticking: 14 closed rows on 12 coordinates, some dependent (the basis
        # and its factors narrower than the rows)
        closed[:], stick[:] = True, True
    closing = np.concatenate([np.ones(EQUALITIES, bool), closed, np.repeat(stick, 2)])
    b = np.where(closing, rng.normal(size=P), 0)
    slide = np.where(stick, 0.0, [0, 0, 1, 0])
    direction = rng.normal(size=(CONTACTS, 2))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    tangents = rows[EQUALITIES + CONTACTS :].reshape(CONTACTS, 2, N)
    K = np.einsum("kdn,kd->nk", tangents, direction) * slide * 0.6
    Q = rng.normal(size=N)
    return tuple(jnp.asarray(x) for x in (M, Q, rows, b, closing.astype(float), K, slide))


KINDS = ["independent", "dependent", "nearly dependent", "zero rows", "no mass matrix", "more rows than coordinates"]


@pytest.fixture(scope="module", autouse=True)
def kernel():
    if not built():
        pytest.skip("no C++ compiler: the contact solve runs on the XLA route")


# one program for both routes, compiled once for every kind (op by op, every operation of the
# XLA route compiles apart)
both_routes = jax.jit(lambda *a: (_native_solve(*a, EQUALITIES, True), _dense_solve(*a, EQUALITIES)))


@pytest.mark.parametrize("kind", KINDS)
def test_kernel_matches_the_xla_route(kind):
    args = problem(kind)
    native, dense = both_routes(*args)
    names = ["x", "force", "lambda", "sliding lambda", "mobility", "free rate", "health"]
    if kind == "no mass matrix":
        assert float(native[-1][1]) == float(dense[-1][1]) == 0.0
        assert not np.any(np.isfinite(native[0]))
        return
    if kind != "nearly dependent":
        # the rows' route: no SVD in either
        B = np.where(np.asarray(args[4])[:, None] > 0, np.asarray(args[2]) @ np.linalg.inv(np.linalg.cholesky(args[0])).T, 0)
        assert bool(la._basis_pinv(jnp.asarray(B), jnp.array(False))[1])
    for name, a, b in zip(names, native, dense):
        scale = max(1.0, float(np.max(np.abs(b))))
        np.testing.assert_allclose(a, b, rtol=0, atol=(1e-9 if kind == "nearly dependent" else 1e-12) * scale, err_msg=name)
    # without the contacts' scales (the solve at given modes): the same solve, no scales
    without = jax.jit(lambda *a: _native_solve(*a, EQUALITIES, False))(*args)
    for name, a, b in zip(names, without, native):
        if name in ("mobility", "free rate"):
            assert np.all(np.isnan(a)), name
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_batches_are_the_single_solves():
    args = [jnp.stack(x) for x in zip(*(problem(kind, seed) for seed, kind in enumerate(KINDS[:4] * 2)))]
    batched = jax.jit(jax.vmap(lambda *a: _native_solve(*a, EQUALITIES, True)))(*args)
    single = jax.jit(lambda *a: _native_solve(*a, EQUALITIES, True))
    for i in range(args[0].shape[0]):
        for a, b in zip(batched, single(*(x[i] for x in args))):
            np.testing.assert_array_equal(a[i], b)
    # a constant argument broadcast over the batch
    shared = jax.jit(jax.vmap(lambda Q: _native_solve(args[0][0], Q, *(x[0] for x in args[2:]), EQUALITIES, True)))(args[1])
    np.testing.assert_array_equal(shared[0][0], batched[0][0])


@pytest.mark.parametrize("kind", ["independent", "dependent"])
def test_derivatives_forward_and_reverse_against_differences(kind):
    """The kernel's values with the XLA route's derivatives: both modes against central
    differences of the kernel itself, in the mass matrix, the forces and the rows."""
    M, Q, rows, b, closing, K, slide = problem(kind)
    rng = np.random.default_rng(1)
    dM = jnp.asarray(rng.normal(size=(N, N)))
    dM = dM + dM.T
    dQ, drows = jnp.asarray(rng.normal(size=N)), jnp.asarray(rng.normal(size=(P, N)))
    if kind == "dependent":
        drows = drows.at[EQUALITIES + 1].set(0.5 * drows[0] - 2.0 * drows[EQUALITIES])  # keep the rank
    w = jnp.asarray(rng.normal(size=N))

    def f(h):
        x, force, lam, *_ = _native_solve(M + h * dM, Q + h * dQ, rows + h * drows, b, closing, K, slide, EQUALITIES, True)
        return jnp.dot(w, x) + jnp.sum(jnp.sin(lam))

    @jax.jit
    def derivatives():
        step = 1e-6
        return jax.jvp(f, (0.0,), (1.0,))[1], jax.grad(f)(0.0), (f(step) - f(-step)) / (2 * step)

    forward, reverse, difference = derivatives()
    np.testing.assert_allclose(forward, difference, rtol=1e-6)
    np.testing.assert_allclose(reverse, difference, rtol=1e-6)
