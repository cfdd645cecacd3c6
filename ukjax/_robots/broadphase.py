"""A broadphase for the contacts between a tree's bodies: where there are more pairs than the
narrowed contact solve holds (`_narrow.capacity`), only the pairs nearest contact by a
cheap lower bound of their gaps (bounding spheres) have their rows built; the others are
open rows of zero whose gap is that bound. A pair near contact has a bound near zero or below
and is always among the nearest, so no contact is met unseen; a quadruped's thousands of
self-collision pairs, none near contact, then cost what their bounds cost."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .._narrow import capacity, take
from .._unilateral import ContactRows
from . import algorithms
from .joints import Kinematics
from .spatial import mv


def points(tree, kin: Kinematics, bodies: tuple[str, ...], local: Float[Array, "k 3"]) -> Float[Array, "k 3"]:
    """Body-fixed points in the world (positions only: what a bound needs)."""
    dtype = kin.positions.dtype
    index = algorithms.body_indices(tree, bodies)
    rotations = jnp.concatenate([kin.rotations, jnp.eye(3, dtype=dtype)[None]])[index]
    origins = jnp.concatenate([kin.positions, jnp.zeros((1, 3), dtype)])[index]
    return origins + mv(rotations, local.astype(dtype))


def _widen(part: ContactRows, index: Int[Array, " c"], bound: Float[Array, " k"]) -> ContactRows:
    """The rows of all `k` pairs from those of the `index`ed ones: the others open, zero rows
    whose gap is their bound, gathered by each pair's slot among the kept ones (a repeated
    index keeps one slot: the same rows)."""
    k, c = bound.shape[0], index.shape[0]
    slot = jnp.full(k, c, index.dtype).at[index].set(jnp.arange(c, dtype=index.dtype))
    kept = slot < c
    at = jnp.where(kept, slot, 0)
    return take(part, at, kept, jax.lax.stop_gradient(bound), 0.0)


def rows(
    tree,
    kin: Kinematics,
    qd: Float[Array, " n"],
    bodies: tuple[tuple[str, ...], tuple[str, ...]],
    bounds: Callable,
    build: Callable,
) -> ContactRows:
    """The rows of `k` pairs between `bodies` (each pair's two bodies): all of them by
    `build(None)` where they fit in the narrowed solve, else those of the pairs with the least
    `bounds(tree, kin)` by `build(index)`, the others widened as open rows (`_widen`).

    **Returns:**

    A `ContactRows` of the `k` pairs, in their order.
    """
    k, n = len(bodies[0]), qd.shape[0]
    size = capacity(k, n)
    if size == k:
        return build(None)
    bound = bounds(tree, kin)
    index = _nearest(bound, size)
    return _widen(build(index), index, bound)


def _nearest(bound: Float[Array, " k"], size: int) -> Int[Array, " c"]:
    """The indices of at most `size` pairs of least `bound`, in index order: those below a
    threshold bisected to hold at most `size` of them, each pass linear in `k` (`lax.top_k`
    sorted them, in twice the time of the rows it saved)."""
    # which pairs are kept is no function to differentiate
    bound = jax.lax.stop_gradient(bound)
    finite = jnp.where(jnp.isfinite(bound), bound, 0)
    lo, hi = jnp.min(finite) - 1, jnp.max(finite) + 1

    def halve(_, ends):
        lo, hi = ends
        mid = 0.5 * (lo + hi)
        fits = jnp.sum(bound < mid) <= size
        return jnp.where(fits, mid, lo), jnp.where(fits, hi, mid)

    # 40 halvings: the threshold to 1e-12 of the bounds' spread
    lo, _ = jax.lax.fori_loop(0, 40, halve, (lo, hi))
    # the slots left over repeat the first pair (built twice, kept once)
    return jnp.nonzero(bound < lo, size=size, fill_value=0)[0]

