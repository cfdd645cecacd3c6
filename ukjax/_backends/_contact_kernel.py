"""The contact solve at fixed modes (`_contact_algebra.dense_solve`) by its compiled kernel
(`native/contact_solve.h`), one state after another on a CPU, a thread a state on an NVIDIA
GPU; its derivatives from the XLA route."""

import functools

import equinox as eqx
import jax
import numpy as np

from .. import _linalg as la
from .._contact_algebra import dense_solve
from . import _build


@functools.partial(jax.custom_jvp, nondiff_argnums=(7, 8))
def native_solve(M, Q, rows, b, closing, K, slide, p, scales):
    """`dense_solve` by the compiled kernel (`_contact_solve.h`), its derivatives from
    `dense_solve`."""
    n, P, k = Q.shape[-1], b.shape[-1], slide.shape[-1]
    batch = Q.shape[:-1]
    shape = lambda *s: jax.ShapeDtypeStruct((*batch, *s), Q.dtype)  # noqa: E731
    return jax.ffi.ffi_call(
        _build.CONTACT_SOLVE,
        (shape(n), shape(n), shape(P), shape(k), shape(k), shape(k), shape(3)),
        vmap_method="broadcast_all",
    )(
        M,
        Q,
        rows,
        b,
        closing,
        K,
        slide,
        p=np.int64(p),
        scales=np.int64(scales),
        floor=np.float64(la.rank_tolerance(P, Q.dtype)),
        cut=np.float64(la.negligible(P, n, Q.dtype)),
        well=np.float64(la.WELL_CONDITIONED),
        space=np.int64(_build.SPACE),
    )


@native_solve.defjvp
def native_solve_jvp(p, scales, primals, tangents):
    _, derivatives = jax.jvp(lambda *a: dense_solve(*a, p), primals, tangents)
    return native_solve(*primals, p, scales), derivatives


class ContactKernel(eqx.Module):
    """The contact solve at fixed modes on its compiled kernel: what a backend
    ([`ukjax.TreeKernel`][]'s `bind`) sets on a `ConstrainedSystem` with unilateral rows, and its
    levels hand `solve_modes`. Without it (None) the solve is `dense_solve`'s, in XLA."""

    def solve(self, M, Q, rows, b, closing, K, slide, p: int, scales: bool):
        """`dense_solve(M, Q, rows, b, closing, K, slide, p)`'s results by the kernel
        (`scales`: whether the contacts' free rates are wanted)."""
        return native_solve(M, Q, rows, b, closing, K, slide, p, scales)
