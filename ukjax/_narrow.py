"""The contact solve narrowed to the contacts that can act: at fixed modes the closed ones,
in the modes' search the touching ones. An open contact's rows are zero in the solve, yet
every contact is a column of its multipliers, of the sliding contacts' coupling and of the
modes' search; a robot's self-collision pairs, thousands of them and none near contact, made
each solve cost their cube. Narrowed, a solve costs what its touching contacts cost; the
open ones' gaps are still watched, their rates still computed (`A x − b`), so nothing is
missed. Where more contacts touch than the narrowed solve holds, the search reports that it
did not converge (`Status.CONTACT_UNRESOLVED`), never a wrong answer."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._backends._contact_kernel import ContactKernel
from ._constraints import ConstraintRows
from ._unilateral import OPEN, ContactRows, ContactSolution, Modes, select_modes, solve_modes

# The narrowed solve holds this many contacts per coordinate, and at least `_LEAST`: a rigid
# body rests on at most six independent contacts, a box flat on four corners, so two per
# coordinate (14 per free body) leaves room for redundant ones; the padding is solved too, so
# no more (`tests/test_unprepared_robots.py`'s Go1 derivative). Scenes with fewer contacts than
# that are solved whole.
_PER_COORDINATE, _LEAST = 2, 32


def capacity(k: int, n: int) -> int:
    """How many contacts of `k` on `n` coordinates a narrowed solve holds (`k` where they all
    fit)."""
    return min(k, max(_LEAST, _PER_COORDINATE * n))


class _Narrowed(NamedTuple):
    contacts: ContactRows  # the selected contacts' rows, zero rows where padded
    index: Int[Array, " c"]  # each one's index among the k (k where padded)
    valid: Bool[Array, " c"]
    overflow: Bool[Array, ""]  # more were active than fit


def take(contacts: ContactRows, at: Int[Array, " c"], keep: Bool[Array, " c"], gap, rate) -> ContactRows:
    """The contacts at the indices `at` where `keep`; elsewhere open rows of zero whose gap is
    `gap` and normal rate `rate` (scalars or per row), no friction, never crossed."""

    def part(x, at, keep, fill):
        return jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 1)), x[at], fill)

    def rows(r: ConstraintRows, at, keep, phi, phid) -> ConstraintRows:
        fills = (0, 0, phi, phid)
        return ConstraintRows(*(part(x, at, keep, fill) for x, fill in zip((r.A, r.b, r.phi, r.phid), fills)))

    pairs = jnp.stack([2 * at, 2 * at + 1], axis=1).reshape(-1)
    return ContactRows(
        rows(contacts.normal, at, keep, gap, rate),
        rows(contacts.tangent, pairs, jnp.repeat(keep, 2), 0, 0),
        part(contacts.friction, at, keep, 0),
        part(contacts.restitution, at, keep, 0),
        None if contacts.crossing is None else part(contacts.crossing, at, keep, jnp.inf),
    )


def _narrow(contacts: ContactRows, active: Bool[Array, " k"], size: int) -> _Narrowed:
    k = contacts.size
    index = jnp.nonzero(active, size=size, fill_value=k)[0]
    valid = index < k
    # a padded contact is a zero row, far and leaving: open, and no candidate
    narrowed = take(contacts, jnp.where(valid, index, 0), valid, 1.0, 1.0)
    return _Narrowed(narrowed, index, valid, jnp.sum(active) > size)


def _widen_modes(modes: Modes, index: Int[Array, " c"], k: int) -> Modes:
    dtype = modes.direction.dtype
    full = Modes(jnp.full(k, OPEN, modes.mode.dtype), jnp.zeros((k, 2), dtype), jnp.ones(k, modes.weight.dtype))
    return jax.tree.map(lambda whole, part: whole.at[index].set(part, mode="drop"), full, modes)


def _widen(sol: ContactSolution, contacts: ContactRows, index: Int[Array, " c"]) -> ContactSolution:
    k = contacts.size
    zeros = jnp.zeros(k, sol.normal.dtype)
    return sol._replace(
        normal=zeros.at[index].set(sol.normal, mode="drop"),
        tangent=jnp.zeros((k, 2), sol.tangent.dtype).at[index].set(sol.tangent, mode="drop"),
        rate=contacts.normal.A @ sol.x - contacts.normal.b,
        # read for closed contacts only (the search's decisions, the events' values)
        scale=jnp.ones(k, sol.scale.dtype).at[index].set(sol.scale, mode="drop"),
    )


def _part(x: Array, index: Int[Array, " c"], valid: Bool[Array, " c"], fill) -> Array:
    return jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 1)), x[jnp.where(valid, index, 0)], fill)


def normal_rows(contacts: ContactRows, active: Bool[Array, " k"], n: int) -> tuple[ConstraintRows, Bool[Array, ""]]:
    """The normal rows of the `active` contacts, zero rows for the others, narrowed to
    `capacity` rows where they do not all fit (the projection onto `g = 0` at an event: a
    factor of thousands of rows, nearly all of them zero, cost their cube), and whether more
    were active than fit."""
    k = contacts.size
    size = capacity(k, n)
    if size == k:
        r = contacts.normal
        keep = lambda x: jnp.where(active.reshape(active.shape + (1,) * (x.ndim - 1)), x, 0)  # noqa: E731
        return ConstraintRows(keep(r.A), keep(r.b), keep(r.phi), keep(r.phid)), jnp.array(False)
    narrowed = _narrow(contacts, active, size)
    r, valid = narrowed.contacts.normal, narrowed.valid
    return ConstraintRows(r.A, r.b, jnp.where(valid, r.phi, 0), jnp.where(valid, r.phid, 0)), narrowed.overflow


def on_candidates(f, contacts: ContactRows, candidates: Bool[Array, " k"], n: int, fill) -> Array:
    """`f(contacts) -> (k,)` on the `candidates`' rows alone where they do not all fit in
    `capacity` (where they do, on all), `fill` for the others: what only a candidate's
    value decides (a self-collision pair's rows, far and zero, cost a dense pass over
    thousands of rows for nothing)."""
    k = contacts.size
    size = capacity(k, n)
    if size == k:
        return f(contacts)
    narrowed = _narrow(contacts, candidates, size)
    part = f(narrowed.contacts)
    return jnp.full(k, fill, part.dtype).at[narrowed.index].set(part, mode="drop")


def solve_in(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    equalities: ConstraintRows,
    contacts: ContactRows,
    modes: Modes,
    scales: bool = True,
    kernel: ContactKernel | None = None,
) -> ContactSolution:
    """`solve_modes` over the closed contacts alone (all of them where they fit in
    `capacity`): the same solution, the open contacts' rates included."""
    k, n = contacts.size, Q.shape[0]
    size = capacity(k, n)
    if size == k:
        return solve_modes(M, Q, equalities, contacts, modes, scales, kernel)
    narrowed = _narrow(contacts, modes.mode != OPEN, size)
    index, valid = narrowed.index, narrowed.valid
    part = Modes(
        _part(modes.mode, index, valid, OPEN),
        _part(modes.direction, index, valid, 0),
        _part(modes.weight, index, valid, 1),
    )
    sol = solve_modes(M, Q, equalities, narrowed.contacts, part, scales, kernel)
    return _widen(sol, contacts, index)._replace(solvable=sol.solvable & ~narrowed.overflow)


def select_in(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    equalities: ConstraintRows,
    contacts: ContactRows,
    candidates: Bool[Array, " k"],
    slipping: Float[Array, "k 2"],
    differentiable: bool = True,
    slack: Float[ArrayLike, "*k"] = 0.0,
    held: Bool[Array, " k"] | None = None,
    kernel: ContactKernel | None = None,
) -> tuple[Modes, ContactSolution, Bool[Array, ""]]:
    """`select_modes` over the candidates alone (all contacts where they fit in `capacity`):
    the others stay open. Not converged where more candidates touch than fit."""
    k, n = contacts.size, Q.shape[0]
    size = capacity(k, n)
    if size == k:
        return select_modes(M, Q, equalities, contacts, candidates, slipping, differentiable, slack, held, kernel)
    narrowed = _narrow(contacts, candidates, size)
    index, valid = narrowed.index, narrowed.valid
    held = jnp.zeros(k, bool) if held is None else held
    slack = jnp.broadcast_to(jnp.asarray(slack, Q.dtype), (k,))
    modes, sol, converged = select_modes(
        M,
        Q,
        equalities,
        narrowed.contacts,
        _part(candidates, index, valid, False),
        _part(slipping, index, valid, 0),
        differentiable,
        _part(slack, index, valid, 0),
        _part(held, index, valid, False),
        kernel,
    )
    return _widen_modes(modes, index, k), _widen(sol, contacts, index), converged & ~narrowed.overflow
