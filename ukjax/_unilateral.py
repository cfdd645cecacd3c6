"""Unilateral constraints `g(t, q) ≥ 0` (joint limits, contacts), with Coulomb friction, and
their exact solve at one state: Gauss's principle with inequalities.

A contact is *open* (`g > 0`, or moving apart), *sliding* or *sticking* (its tangential
velocity held at zero). For a given choice of these modes the contact rows are equality
rows of the U-K equation (an open contact's rows are zero, which the pseudo-inverse
ignores), and a sliding contact's friction `−μ λₙ t̂` is a force that depends linearly on its
own normal force: with `B = A L⁻ᵀ` (`M = L Lᵀ`) and `K` the friction directions,

    λ = λ₀ + (B Bᵀ)⁺ A M⁻¹ K μ λₛ,     λₛ = (I − S G S)⁻¹ S λ₀

(`S` selecting the sliding contacts, `G` the normal rows of the second term), so the U-K
answer for the modes is exact and its multipliers are the minimum-norm ones. The modes
themselves are the solution of the complementarity problem (`λₙ ≥ 0`, `g̈ ≥ 0`,
`λₙ g̈ = 0`; `‖λₜ‖ ≤ μ λₙ` while sticking), found by changing the worst-violated mode one at
a time (every contact outside its cone at once), a bounded number of times. The same solve
at the velocity level (`Q = 0`, targets `ġ⁺ = −e ġ⁻`) gives impacts by Newton's restitution
law.
"""

import abc
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from . import _linalg as la
from ._backends._contact_kernel import ContactKernel
from ._contact_algebra import dense_solve
from ._arrays import as_inexact
from ._constraints import AbstractConstraint, ConstraintRows, _as_rows, _jacobian, _time_derivative, holonomic_rows

# The modes of a contact.
OPEN, SLIDING, STICKING = 0, 1, 2
# Gaps and speeds (in the model's units) below which a contact counts as touching and resting.
TOUCH = 1e-9
# What the modes' search accepts, relative to each contact's own force scale
# (`ContactSolution.scale`): a closed contact pulling by PULL, a sticking one outside its cone
# by CONE.
PULL, CONE = 1e-9, 1e-6
# Each contact's force scale is kept this far above zero, relative to the largest, so that a
# contact with no load at all still has a finite scale.
_SCALE_FLOOR = 1e-12
# The sliding contacts' coupling `I − S G S` counts as singular (no mode solves the problem:
# Painlevé's paradox) where its smallest pivot is at or below this.
PIVOT_FLOOR = 1e-8


class ContactRows(eqx.Module):
    """The rows of `k` contacts at one state.

    **Attributes:**

    - `normal`: `k` rows: `A` = ∂g/∂q, `b` = −(ġ's terms without q̈), `phi` = g, `phid` = ġ.
    - `tangent`: `2k` rows, contact `i`'s at `2i` and `2i + 1`: the tangential velocity
      `v = A q̇` (`phid`), its rate without the q̈ term (`b`); zero rows where a contact has
      fewer than two tangent directions (a planar one, or one without friction).
    - `friction`: the Coulomb coefficients `μ`, shape (k,).
    - `restitution`: Newton's coefficients `e`, shape (k,).
    - `crossing`: for contacts between shapes that a body could pass through within one
      step (a ball at a thin wall), the least time in which each could at its present
      relative speed, shape (k,) (`inf` for the others); None where no contact can (a gap
      that is monotone along a straight path: planes, joint limits). The simulation bounds
      its steps by it.
    """

    normal: ConstraintRows
    tangent: ConstraintRows
    friction: Float[Array, " k"]
    restitution: Float[Array, " k"]
    crossing: Float[Array, " k"] | None = None

    @property
    def size(self) -> int:
        return self.normal.b.shape[0]


def concatenate(parts: list[ContactRows]) -> ContactRows | None:
    """Several contacts' rows as one, in order (None for none)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if any(p.crossing is not None for p in parts):
        # beside contacts that can be crossed, the others never are
        never = lambda p: jnp.full(p.size, jnp.inf, p.friction.dtype)  # noqa: E731
        parts = [
            p if p.crossing is not None else eqx.tree_at(lambda p: p.crossing, p, never(p), is_leaf=lambda x: x is None)
            for p in parts
        ]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


class AbstractUnilateral(AbstractConstraint):
    """Unilateral constraints `g(t, q) ≥ 0` (a joint at its limit, a gap between bodies),
    with Coulomb friction where a contact has tangent directions. Put them in a
    [`ukjax.ConstrainedSystem`][] beside equality constraints; [`ukjax.simulate`][] then
    integrates the motion event by event (see 'Unilateral constraints' on the documentation
    site). Subclass it with `contact_rows`, `labels` and its coefficients `friction` and
    `restitution` (fields or properties: a scalar or one per contact).
    """

    friction: eqx.AbstractVar[Float[Array, "*k"]]
    restitution: eqx.AbstractVar[Float[Array, "*k"]]

    @abc.abstractmethod
    def labels(self) -> tuple[str, ...] | None:
        """A label for each contact, in the order of its rows (a file's geoms by name, its
        joints' limits), or None where they have none."""

    @abc.abstractmethod
    def contact_rows(self, system, t: Real[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]) -> ContactRows:
        """The rows of these contacts on `system` at `(t, q, q̇)`.

        **Returns:**

        A [`ukjax.ContactRows`][].
        """

    def __check_init__(self):
        check_coefficients(self)

    def rows(self, t, q, qd):
        raise TypeError(
            f"{type(self).__name__} is unilateral: it has no equality rows. Put it in a "
            "ConstrainedSystem, or call its contact_rows(system, t, q, qd)."
        )


def valid_coefficients(friction: Float[Array, "*k"], restitution: Float[Array, "*k"]) -> Bool[Array, ""]:
    """Whether every friction coefficient is finite and `≥ 0` and every restitution in
    `[0, 1]` (a NaN is neither)."""
    friction, restitution = jnp.asarray(friction), jnp.asarray(restitution)
    return jnp.all(jnp.isfinite(friction) & (friction >= 0)) & jnp.all((restitution >= 0) & (restitution <= 1))


def check_coefficients(unilateral: "AbstractUnilateral") -> None:
    """Raise a `ValueError` where a unilateral constraint's coefficients are known and
    invalid (under a transformation they are read during the run: `Status.INVALID_PARAMETERS`)."""
    friction, restitution = unilateral.friction, unilateral.restitution
    if any(isinstance(x, jax.core.Tracer) for x in (friction, restitution)):
        return
    with jax.ensure_compile_time_eval():  # known values, checked now even inside a caller's `jit`
        valid = bool(valid_coefficients(friction, restitution))
    if not valid:
        raise ValueError(
            f"{type(unilateral).__name__} needs friction coefficients that are finite and ≥ 0 and "
            f"restitution coefficients in [0, 1]; got friction {np.asarray(friction).tolist()}, "
            f"restitution {np.asarray(restitution).tolist()}."
        )


def _per_contact(x: Array, k: int, name: str) -> Array:
    if x.shape not in ((), (k,)):
        raise ValueError(f"{name} must be a scalar or have one entry per contact ({k}), got shape {x.shape}.")
    return jnp.broadcast_to(x, (k,))


class Unilateral(AbstractUnilateral):
    """Unilateral constraints `g(t, q) ≥ 0` from functions: each entry of `g` is a contact
    that may open, close (with an impact by Newton's law), slide and stick.

    **Arguments:**

    - `gap`: `gap(t, q) -> g`, a scalar or shape (k,); `g ≥ 0` is allowed.
    - `restitution`: Newton's coefficient `e` in [0, 1] (a scalar or one per contact): an
      impact reverses the normal velocity `ġ` to `−e ġ`.
    - `friction`: the Coulomb coefficient `μ ≥ 0` (a scalar or one per contact).
    - `slip`: `slip(t, q, qd) -> v`, the tangential velocities at the contacts, linear in
      `q̇`, shape (k,) (one tangent direction each) or (k, 2) (two); needed where
      `friction` is non-zero.
    """

    gap: Callable
    restitution: Float[Array, "*k"] = eqx.field(converter=as_inexact, default=0.0)
    friction: Float[Array, "*k"] = eqx.field(converter=as_inexact, default=0.0)
    slip: Callable | None = None

    def labels(self):
        return None

    def contact_rows(self, system, t, q, qd):
        normal = holonomic_rows(lambda t, q: _as_rows(self.gap(t, q), "Unilateral gap"), t, q, qd)
        k = normal.b.shape[0]
        restitution = _per_contact(self.restitution, k, "Unilateral restitution")
        friction = _per_contact(self.friction, k, "Unilateral friction")
        if self.slip is None:
            zeros = jnp.zeros(2 * k, q.dtype)
            tangent = ConstraintRows(jnp.zeros((2 * k, q.shape[0]), q.dtype), zeros, zeros, zeros)
            return ContactRows(normal, tangent, friction, restitution)
        t = jnp.asarray(t, q.dtype)

        def slip(t, q, qd):
            v = jnp.atleast_1d(jnp.asarray(self.slip(t, q, qd)))
            v = v[:, None] if v.ndim == 1 else v
            if v.ndim != 2 or v.shape[0] != k or v.shape[1] > 2:
                raise ValueError(
                    f"Unilateral slip must return shape (k,) or (k, 2) with k = {k} contacts, got {v.shape}."
                )
            return jnp.pad(v, ((0, 0), (0, 2 - v.shape[1]))).reshape(2 * k)

        v, rate = _time_derivative(slip, t, q, qd)
        A = _jacobian(lambda qd: slip(t, q, qd), qd)
        return ContactRows(normal, ConstraintRows(A, -rate, jnp.zeros_like(v), v), friction, restitution)


class Modes(NamedTuple):
    """Which contacts are open, sliding or sticking, and where the sliding ones slip.

    **Attributes:**

    - `mode`: `OPEN`, `SLIDING` or `STICKING` per contact, shape (k,).
    - `direction`: the unit slip direction of each sliding contact in its tangent basis,
      shape (k, 2) (zero where it does not slide).
    - `weight`: each contact's share of the sticking friction, shape (k,). Where sticking
      contacts hold a body statically indeterminately, the friction forces are the ones of
      least `Σ |fₜ|² / weight` (`μ λₙ` from the search's solves: each contact's friction in
      proportion to the most its cone allows); elsewhere the forces are unique and it
      changes nothing.
    """

    mode: Int[Array, " k"]
    direction: Float[Array, "k 2"]
    weight: Float[Array, " k"]


class ContactState(NamedTuple):
    """What the events read of the contacts at a state besides their forces: the gaps `g`,
    shape (k,), the slips (the tangent rows' rates), shape (k, 2), and Coulomb's `μ`, shape (k,)."""

    gap: Float[Array, " k"]
    slip: Float[Array, "k 2"]
    friction: Float[Array, " k"]


def contact_state(contacts: ContactRows) -> ContactState:
    """The `ContactState` of `contacts`' rows."""
    return ContactState(contacts.normal.phi, contacts.tangent.phid.reshape(-1, 2), contacts.friction)


class ContactSolution(NamedTuple):
    """One solve of the equality and contact rows for given modes.

    **Attributes:**

    - `x`: the acceleration (or, at the velocity level, the velocity jump), shape (n,).
    - `constraint_force`: `M x − Q`, shape (n,).
    - `normal`: the normal forces (impulses) `λₙ`, shape (k,); zero where open.
    - `tangent`: the tangential forces (impulses), shape (k, 2): the sticking force, or
      `−μ λₙ t̂` while sliding.
    - `rate`: `Aₙ x − bₙ` per contact (`g̈`, or `ġ⁺ + e ġ⁻` at the velocity level).
    - `scale`: each contact's own force scale, shape (k,): its normal and friction forces
      plus the force that would stop its normal rate without any constraint force (the
      free rate over the contact's inverse effective mass). Decisions about a contact
      (pulling, outside its cone) and its event values are relative to it, never to
      another contact's forces.
    - `inconsistency`, `mass_ok`: as in [`ukjax.UKSolution`][].
    - `solvable`: False where the sliding contacts' normal forces have no solution
      (`I − S G S` singular: Painlevé's paradox).
    """

    x: Float[Array, " n"]
    constraint_force: Float[Array, " n"]
    normal: Float[Array, " k"]
    tangent: Float[Array, "k 2"]
    rate: Float[Array, " k"]
    scale: Float[Array, " k"]
    inconsistency: Float[Array, ""]
    mass_ok: Bool[Array, ""]
    solvable: Bool[Array, ""]


def solve_modes(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    equalities: ConstraintRows,
    contacts: ContactRows,
    modes: Modes,
    scales: bool = True,
    kernel: ContactKernel | None = None,
) -> ContactSolution:
    """`M x = Q + Aᵀλ + friction`, `A x = b` over the equality rows and the rows the modes
    close, solved exactly (module docstring).

    **Arguments:**

    - `M`, `Q`: the mass matrix and the applied forces (with any non-ideal force added).
    - `equalities`: the equality rows (`b` the right-hand side to meet).
    - `contacts`: the contacts' rows (`normal.b`, `tangent.b` the right-hand sides).
    - `modes`: the contacts' [`Modes`][].
    - `scales`: whether to evaluate `scale` (the modes' search needs it; NaN without). The
      open contacts' rows enter the solve only for it: on Cassie standing, its 32 open limits
      are 32 of the 60 columns of the kernel's substitutions.
    - `kernel`: the compiled solve to run it on (a level's, as a backend set it), or None:
      XLA's.

    **Returns:**

    A `ContactSolution`.
    """
    k, p = contacts.size, equalities.b.shape[0]
    closed, stick = modes.mode != OPEN, modes.mode == STICKING
    slide = (modes.mode == SLIDING) & (contacts.friction > 0)
    stick2 = jnp.repeat(stick, 2)
    # a row scaled by s has its multiplier divided by s in the minimum-norm solution
    root = jnp.sqrt(jnp.repeat(modes.weight, 2))
    rows = jnp.concatenate([equalities.A, contacts.normal.A, root[:, None] * contacts.tangent.A])
    closing = jnp.concatenate([jnp.ones(p, bool), closed, stick2])
    b = jnp.concatenate([equalities.b, contacts.normal.b, root * contacts.tangent.b])
    # friction directions Aₜᵀ t̂ μ of the sliding contacts, as columns
    At = contacts.tangent.A.reshape(k, 2, -1)
    K = jnp.einsum("kdn,kd->nk", At, modes.direction) * jnp.where(slide, contacts.friction, 0)
    arguments = (M, Q, rows, jnp.where(closing, b, 0), closing.astype(Q.dtype), K, slide.astype(Q.dtype))
    if kernel is not None:
        x, force, lam, lam_slide, mobility, free, health = kernel.solve(*arguments, p, scales)
    else:
        x, force, lam, lam_slide, mobility, free, health = dense_solve(*arguments, p)
    inconsistency, mass_ok, pivot = health
    solvable = jnp.all(jnp.isfinite(lam_slide)) & (pivot > PIVOT_FLOOR)
    normal = jnp.where(closed, lam[p : p + k], 0)
    sticking = jnp.where(stick[:, None], (root * lam[p + k :]).reshape(k, 2), 0)
    sliding = -(jnp.where(slide, contacts.friction * normal, 0))[:, None] * modes.direction
    tangent = sticking + sliding
    # each contact's inverse effective mass (open or closed) turns its free rate into a force
    free = jnp.abs(contacts.normal.b - free)
    own = jnp.abs(normal) + norm(tangent) + jnp.where(mobility > 0, free / jnp.where(mobility > 0, mobility, 1), 0)
    scale = own + _SCALE_FLOOR * (1 + jnp.max(own, initial=0))
    return ContactSolution(
        x,
        force,
        normal,
        tangent,
        contacts.normal.A @ x - contacts.normal.b,
        scale if scales else jnp.full_like(scale, jnp.nan),
        inconsistency,
        mass_ok > 0,
        solvable,
    )


def unilaterals(system) -> list[AbstractUnilateral]:
    """The unilateral constraints anywhere in `system`, read from its structure (no trace)."""
    unilateral = lambda x: isinstance(x, AbstractUnilateral)  # noqa: E731
    return [x for x in jax.tree.leaves(system, is_leaf=unilateral) if unilateral(x)]


def inverse_masses(L: Float[Array, "n n"], A: Float[Array, "p n"]) -> Float[Array, " p"]:
    """Each row's inverse effective mass, the diagonal of `A M⁻¹ Aᵀ` (`M = L Lᵀ`): what a unit
    force along the row does to its rate (zero for a zero row)."""
    return jnp.sum(la.solve_lower(L, A.T, unroll=False) ** 2, axis=0)


def norm(v: Float[Array, "*k d"]) -> Float[Array, "*k"]:
    """`‖v‖` along the last axis, with zero derivatives (not NaN) where `v` is zero: a
    contact at rest or without friction has a zero slip and force, and reverse mode
    multiplies a zero cotangent by the norm's derivative there."""
    # summed by hand: XLA's CPU reduction over a minor axis of two or three, fused with what
    # feeds it, cost a broadphase's bounds of 1 505 pairs 7x their own arithmetic
    squared = sum((v[..., i] * v[..., i] for i in range(v.shape[-1])), jnp.zeros(v.shape[:-1], v.dtype))
    return jnp.where(squared > 0, jnp.sqrt(jnp.where(squared > 0, squared, 1)), 0)


def unit(v: Float[Array, "*k d"]) -> Float[Array, "*k d"]:
    """`v / ‖v‖` along the last axis, zero (with zero derivatives) where `v` is zero."""
    length = norm(v)[..., None]
    return jnp.where(length > 0, v / jnp.where(length > 0, length, 1), 0)


def select_modes(
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
    """The modes that solve the complementarity problem among `candidates` (the contacts
    touching, and not separating), starting from all of them closed, by changing the
    worst-violated mode one at a time, or every contact outside its cone at once; after
    `2k + 1` changes, the violated mode of the first contact instead (at most `4k + 2`
    solves).

    **Arguments:**

    - `M`, `Q`, `equalities`, `contacts`: as for `solve_modes`.
    - `candidates`: the contacts that may close, shape (k,).
    - `slipping`: the tangential velocity of each contact, shape (k, 2): a contact that
      slips can only slide (against it); one at rest may stick. Zero at the velocity
      level, where any contact may stick.
    - `differentiable`: whether the answer carries derivatives (those of the solve at the
      final modes; False: none).
    - `slack`: how far each sticking force may leave its cone before the contact slides (a
      scalar or shape (k,); `inf` for a velocity correction that is no physical impulse:
      every contact not slipping sticks). At an impact, the impulse that changes a contact's
      slip by less than the integration's drift.
    - `held`: candidates that stay closed whatever the sign of their normal force (default
      none): at an impact, the contacts that would leave too slowly to matter (`_transition`).
    - `kernel`: as for `solve_modes`.

    **Returns:**

    `(modes, solution, converged)`.
    """
    k = contacts.size
    held = jnp.zeros(k, bool) if held is None else held
    slack = jax.lax.stop_gradient(jnp.broadcast_to(slack, (k,)).astype(Q.dtype))
    search = _searched if differentiable else _search
    return search(M, Q, equalities, contacts, candidates, slipping, slack, held, kernel=kernel)


def _search(M, Q, equalities, contacts, candidates, slipping, slack, held, *, kernel):
    """`select_modes`' search: its modes, the solve at them (without derivatives) and
    whether they solve the problem."""
    k = contacts.size
    dtype = Q.dtype
    # The search is discrete: nothing the loop reads may carry derivatives (reverse mode
    # cannot pass a while loop); they come from `_searched`'s rule, on the final modes.
    fixed = jax.lax.stop_gradient((M, Q, equalities, contacts))
    slipping = jax.lax.stop_gradient(slipping)
    friction = fixed[3].friction
    moving = norm(slipping) > TOUCH
    can_stick = (friction > 0) & ~moving
    start = Modes(
        jnp.where(candidates, jnp.where(can_stick, STICKING, SLIDING), OPEN).astype(jnp.int32),
        jnp.where(moving[:, None], unit(slipping), 0).astype(dtype),
        jnp.ones(k, dtype),
    )

    def violations(sol: ContactSolution, modes: Modes):
        # forces relative to each contact's own scale, rates to the largest (a rate of 1e-9
        # is far below what any event is located to)
        scale = jax.lax.stop_gradient(sol.scale)
        rate_scale = 1e-9 * (1 + jnp.max(jnp.abs(sol.rate), initial=0))
        mode = modes.mode
        pull = jnp.where((mode != OPEN) & ~held, -sol.normal / scale - PULL, -jnp.inf)  # a closed contact pulling
        enter = jnp.where((mode == OPEN) & candidates, -sol.rate - rate_scale, -jnp.inf)  # penetrating
        outside = jnp.where(
            mode == STICKING,
            (norm(sol.tangent) - friction * sol.normal - slack) / scale - CONE,
            -jnp.inf,
        )
        return jnp.stack([pull, enter, outside])

    def step(
        modes: Modes, sol: ContactSolution, shared: Bool[Array, ""], first: Bool[Array, ""]
    ) -> tuple[Modes, Bool[Array, ""]]:
        # `shared`: whether `sol` shares the friction by the weights from these modes' solve;
        # `first`: change the first violating contact's mode rather than the worst one
        v = violations(sol, modes)
        kind, i = jnp.unravel_index(jnp.argmax(v), v.shape)
        # The worst violation first takes few solves, but it can cycle: a box landing on one
        # corner while another slides went round eight mode sets, a contact opened for a pull
        # of 1e-11 (its own scale 2e-11) and closed again for the other's penetration. The
        # least-index rule of principal pivoting (Murty 1974) does not cycle where the
        # problem is a P-matrix LCP; as a fallback after the greedy rule has had its turn
        # (Júdice & Pires 1994), it settled that landing in three more solves.
        j = jnp.argmax(jnp.any(v > 0, axis=0))
        kind, i = jnp.where(first, jnp.argmax(v[:, j]), kind), jnp.where(first, j, i)
        limit = friction * jnp.maximum(sol.normal, 0)
        # the floor keeps an unloaded contact's rows in the solve (scaled to zero, its slip
        # would no longer be held)
        weight = limit + 1e-9 * (1 + jnp.max(limit, initial=0))
        # a cone violated by the forces shared uniformly is first checked with the friction
        # shared in proportion to what each cone allows; only then does a contact slide
        reshare = (kind == 2) & ~shared
        mode = modes.mode
        new = jnp.select(
            [kind == 0, kind == 1],
            [OPEN, jnp.where(can_stick[i], STICKING, SLIDING)],
            SLIDING,
        )
        # a contact closing again slides against its slip (opening cleared its direction; a
        # slipping contact re-closed without one would be frictionless, and Painlevé's
        # paradox, where no mode solves the problem, would read as solved)
        direction = jnp.where(new == OPEN, 0, jnp.where(kind == 1, start.direction[i], modes.direction[i]))
        mode, direction = mode.at[i].set(new), modes.direction.at[i].set(direction)
        # Where the worst violation is a cone's, every contact outside its cone starts to slide
        # at once, against its own sticking force: one at a time, the forces that stay
        # sticking turn to balance the first ones' friction, and a body held at several
        # points (a box between two pads) would slide askew.
        outside = (kind == 2) & (v[2] > 0)
        mode = jnp.where(outside, SLIDING, mode)
        direction = jnp.where(outside[:, None], -unit(sol.tangent), direction)
        changed = Modes(mode, direction, weight)
        kept = Modes(modes.mode, modes.direction, weight)
        return jax.tree.map(lambda a, b: jnp.where(reshare, a, b), kept, changed), reshare

    def cond(state):
        modes, sol, _, count = state
        return (count == 0) | ((count <= 4 * k + 1) & jnp.any(violations(sol, modes) > 0))

    def body(state):
        # the first pass solves the starting modes: one copy of the solve in the program
        modes, sol, shared, count = state
        new, shared = step(modes, sol, shared, count > 2 * k + 1)
        modes = jax.tree.map(lambda new, old: jnp.where(count == 0, old, new), new, modes)
        return modes, solve_modes(*fixed, modes, kernel=kernel), shared & (count > 0), count + 1

    placeholder = jax.tree.map(jnp.zeros_like, jax.eval_shape(lambda *a: solve_modes(*a, kernel=kernel), *fixed, start))
    modes, sol, _, _ = jax.lax.while_loop(cond, body, (start, placeholder, jnp.array(False), 0))
    return modes, sol, ~jnp.any(violations(sol, modes) > 0) & sol.solvable


@eqx.filter_custom_jvp
def _searched(M, Q, equalities, contacts, candidates, slipping, slack, held, *, kernel):
    """`_search`, differentiable: its last solve is the answer, and its derivative is that of
    the solve at the final modes (computed only where a derivative is taken; before, every
    search solved its final modes once more for the tape, a third of a resting step's
    time-stepping cost)."""
    return _search(M, Q, equalities, contacts, candidates, slipping, slack, held, kernel=kernel)


@_searched.def_jvp
def _searched_jvp(primals, tangents, *, kernel):
    modes, _, converged = _search(*primals, kernel=kernel)
    diff, static = eqx.partition(primals[:4], eqx.is_inexact_array)
    # a symbolic zero (None) where a problem's array carries no derivative
    fill = lambda x, t: None if x is None else (jnp.zeros_like(x) if t is None else t)  # noqa: E731
    t_diff = jax.tree.map(fill, diff, tangents[:4], is_leaf=lambda x: x is None)
    slipping = primals[5]
    t_slipping = jnp.zeros_like(slipping) if tangents[5] is None else tangents[5]
    # A contact that slips slides against its slip whatever the search does (it cannot
    # stick; re-closed, it takes that direction again), so its direction turns with the
    # slip: without this, a time-stepping run's slides kept the direction of their first
    # step (`tests/test_time_stepping.py`'s pushed skater).
    against = (modes.mode == SLIDING) & (norm(slipping) > TOUCH)

    def solve(diff, slipping):
        M, Q, equalities, contacts = eqx.combine(diff, static)
        direction = jnp.where(against[:, None], unit(slipping), modes.direction)
        return solve_modes(M, Q, equalities, contacts, modes._replace(direction=direction), kernel=kernel)

    sol, t_sol = jax.jvp(solve, (diff, slipping), (t_diff, t_slipping))
    return (modes, sol, converged), (jax.tree.map(lambda _: None, modes), t_sol, None)


# Below `rest` a sliding contact's direction is that of `v + SLOW_TURN (rest − |v|) d`
# (`sliding_now`): its slip's at `rest`, soon the one it started in below; the value takes the
# fewest steps on the turning slide of `tests/test_contact_cases.py` and `benchmarks/tumbling.py`.
SLOW_TURN = 100.0


def sliding_now(modes: Modes, contacts: ContactRows, rest: Float[ArrayLike, ""]) -> Modes:
    """The modes with each sliding contact's direction that of its slip now, where it slips
    forwards faster than `rest`; slower, turned into the one it started in (`d`: of the
    force that broke its cone, or of its slip then) as `v + SLOW_TURN (rest − |v|) d`, which
    is the slip's direction at `rest`: near zero slip `v/|v|` is stiff and, integrated to a
    tolerance, mostly noise (`_events._SLIDE_SPEED`). Switched to `d` at `rest`,
    a slide slowing to a stop that had turned since it started (a box's corner after an
    impact) was held at `|v| = rest` by friction across its slip below and against it
    above, and the steps shrank until max_steps. A slip that has turned back (`v · d ≤
    0`) has ended the slide (`_event_values.mode_values`): the stages of a step past that end see
    the force that ended it, not its reverse, so that the step's error is the smooth
    motion's and the end is found on its dense output (with `v/|v|` there, the contacts
    scene's steps were a third rejected)."""
    v = contacts.tangent.phid.reshape(-1, 2)
    forwards = (modes.mode == SLIDING) & (jnp.einsum("kd,kd->k", v, modes.direction) > 0)
    slow = SLOW_TURN * jnp.maximum(rest - norm(v), 0)
    direction = unit(v + slow[:, None] * modes.direction)
    return modes._replace(direction=jnp.where(forwards[:, None], direction, modes.direction))


def candidates(contacts: ContactRows) -> Bool[Array, " k"]:
    """The contacts touching and not moving apart."""
    return (contacts.normal.phi <= TOUCH) & (contacts.normal.phid <= TOUCH)
