"""The linear algebra of one contact solve at fixed modes (`_unilateral.solve_modes`), in
jax.numpy: the XLA route, the reference of the compiled one (`_backends/native/contact_solve.h`)
and the source of its derivatives."""

from jaxtyping import Array, Float
import jax.numpy as jnp

from . import _linalg as la
from ._core import mass_check


def dense_solve(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    rows: Float[Array, "P n"],
    b: Float[Array, " P"],
    closing: Float[Array, " P"],
    K: Float[Array, "n k"],
    slide: Float[Array, " k"],
    p: int,
):
    """The linear algebra of `solve_modes` (its docstring): `M x = Q + Aᵀλ + K λₛ` with
    `A x = b` over the rows that `closing` selects (`b` zero elsewhere), `λₛ` the normal
    forces of the sliding contacts (`slide`), whose normal rows start at row `p`.

    **Returns:**

    `(x, force, λ, λₛ, mobility, free, health)`: `force = M x − Q`; per contact the inverse
    effective mass of its normal row and its rate `Aₙ M⁻¹ Q`; `health` the inconsistency,
    1.0 where `M` is a mass matrix (0.0 elsewhere) and the sliding coupling's smallest pivot.
    """
    M, Q = jnp.asarray(M), jnp.asarray(Q)  # arrays given as NumPy's are indexed by traced loops
    k = slide.shape[0]
    # Loops, not the unrolled kernels: a simulation with contacts holds this solve in seven
    # places (the rates, the event values, the impacts and the modes' search at each level),
    # and unrolled they doubled its compile time.
    # One forward and one backward substitution for every right-hand side: each is a loop.
    unroll = False
    L = la.cholesky(M, unroll)
    W = la.solve_lower(L, jnp.concatenate([Q[:, None], rows.T, K], axis=1), unroll=unroll)
    c, every, Y = W[:, 0], W[:, 1 : 1 + rows.shape[0]].T, W[:, 1 + rows.shape[0] :]  # L⁻¹ Q, A L⁻ᵀ, L⁻¹ K
    B = jnp.where(closing[:, None] > 0, every, 0)
    e = b - B @ c  # b − A M⁻¹ Q
    Z, Lam = la.pinv_solve_multipliers(B, jnp.concatenate([e[:, None], B @ Y], axis=1), unroll)
    coupling = jnp.eye(k, dtype=Q.dtype) - slide[:, None] * Lam[p : p + k, 1:] * slide[None, :]
    lam_slide, pivot = la.solve_square(coupling, slide * Lam[p : p + k, 0])
    z = Z[:, 0] + Z[:, 1:] @ lam_slide
    v = z - Y @ lam_slide
    # as `uk_solve` measures it: B z = e with the sliding friction's share in e
    target = e + B @ Y @ lam_slide
    scale = jnp.linalg.norm(target) + jnp.linalg.norm(B) * jnp.linalg.norm(z)
    inconsistency = jnp.linalg.norm(B @ z - target) / jnp.where(scale > 0, scale, 1)
    normal = every[p : p + k]  # Aₙ L⁻ᵀ
    return (
        la.solve_lower(L, c + v, transpose=True, unroll=unroll),
        L @ v,
        Lam[:, 0] + Lam[:, 1:] @ lam_slide,
        lam_slide,
        jnp.sum(normal**2, axis=1),
        normal @ c,
        jnp.stack([inconsistency, mass_check(M, L).astype(Q.dtype), pivot]),
    )
