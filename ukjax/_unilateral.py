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
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from . import _linalg as la
from ._arrays import as_inexact
from ._core import mass_check
from ._constraints import AbstractConstraint, ConstraintRows, _as_rows, _jacobian, _time_derivative, holonomic_rows

# The modes of a contact.
OPEN, SLIDING, STICKING = 0, 1, 2
# Gaps and speeds (in the model's units) below which a contact counts as touching and resting.
TOUCH = 1e-9
# What the modes' search accepts, relative to the largest normal force: a closed contact
# pulling by PULL, a sticking one outside its cone by CONE. The cone's is the larger: an
# impact elsewhere in the system must not set sliding a contact whose only impulse is the
# correction of its integration drift (a rolling sphere's 1e-9 m/s of slip when a pendulum
# hits its limit).
PULL, CONE = 1e-9, 1e-6


class ContactRows(eqx.Module):
    """The rows of `k` contacts at one state.

    **Attributes:**

    - `normal`: `k` rows: `A` = ∂g/∂q, `b` = −(ġ's terms without q̈), `phi` = g, `phid` = ġ.
    - `tangent`: `2k` rows, contact `i`'s at `2i` and `2i + 1`: the tangential velocity
      `v = A q̇` (`phid`), its rate without the q̈ term (`b`); zero rows where a contact has
      fewer than two tangent directions (a planar one, or one without friction).
    - `friction`: the Coulomb coefficients `μ`, shape (k,).
    - `restitution`: Newton's coefficients `e`, shape (k,).
    """

    normal: ConstraintRows
    tangent: ConstraintRows
    friction: Float[Array, " k"]
    restitution: Float[Array, " k"]

    @property
    def size(self) -> int:
        return self.normal.b.shape[0]


def concatenate(parts: list[ContactRows]) -> ContactRows | None:
    """Several contacts' rows as one, in order (None for none)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


class AbstractUnilateral(AbstractConstraint):
    """Unilateral constraints `g(t, q) ≥ 0` (a joint at its limit, a gap between bodies),
    with Coulomb friction where a contact has tangent directions. Put them in a
    [`ukjax.ConstrainedSystem`][] beside equality constraints; [`ukjax.simulate`][] then
    integrates the motion event by event (see 'Unilateral constraints' on the documentation
    site). Subclass it with `contact_rows`.
    """

    @abc.abstractmethod
    def contact_rows(self, system, t: Real[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]) -> ContactRows:
        """The rows of these contacts on `system` at `(t, q, q̇)`.

        **Returns:**

        A [`ukjax.ContactRows`][].
        """

    def rows(self, t, q, qd):
        raise TypeError(
            f"{type(self).__name__} is unilateral: it has no equality rows. Put it in a "
            "ConstrainedSystem, or call its contact_rows(system, t, q, qd)."
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


class ContactSolution(NamedTuple):
    """One solve of the equality and contact rows for given modes.

    **Attributes:**

    - `x`: the acceleration (or, at the velocity level, the velocity jump), shape (n,).
    - `constraint_force`: `M x − Q`, shape (n,).
    - `normal`: the normal forces (impulses) `λₙ`, shape (k,); zero where open.
    - `tangent`: the tangential forces (impulses), shape (k, 2): the sticking force, or
      `−μ λₙ t̂` while sliding.
    - `rate`: `Aₙ x − bₙ` per contact (`g̈`, or `ġ⁺ + e ġ⁻` at the velocity level).
    - `inconsistency`, `mass_ok`: as in [`ukjax.UKSolution`][].
    - `solvable`: False where the sliding contacts' normal forces have no solution
      (`I − S G S` singular: Painlevé's paradox).
    """

    x: Float[Array, " n"]
    constraint_force: Float[Array, " n"]
    normal: Float[Array, " k"]
    tangent: Float[Array, "k 2"]
    rate: Float[Array, " k"]
    inconsistency: Float[Array, ""]
    mass_ok: Bool[Array, ""]
    solvable: Bool[Array, ""]


def solve_modes(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    equalities: ConstraintRows,
    contacts: ContactRows,
    modes: Modes,
) -> ContactSolution:
    """`M x = Q + Aᵀλ + friction`, `A x = b` over the equality rows and the rows the modes
    close, solved exactly (module docstring).

    **Arguments:**

    - `M`, `Q`: the mass matrix and the applied forces (with any non-ideal force added).
    - `equalities`: the equality rows (`b` the right-hand side to meet).
    - `contacts`: the contacts' rows (`normal.b`, `tangent.b` the right-hand sides).
    - `modes`: the contacts' [`Modes`][].

    **Returns:**

    A `ContactSolution`.
    """
    k, p = contacts.size, equalities.b.shape[0]
    closed, stick = modes.mode != OPEN, modes.mode == STICKING
    slide = (modes.mode == SLIDING) & (contacts.friction > 0)
    stick2 = jnp.repeat(stick, 2)
    # a row scaled by s has its multiplier divided by s in the minimum-norm solution
    root = jnp.sqrt(jnp.repeat(modes.weight, 2))
    A = jnp.concatenate(
        [
            equalities.A,
            jnp.where(closed[:, None], contacts.normal.A, 0),
            jnp.where(stick2[:, None], root[:, None] * contacts.tangent.A, 0),
        ]
    )
    b = jnp.concatenate(
        [equalities.b, jnp.where(closed, contacts.normal.b, 0), jnp.where(stick2, root * contacts.tangent.b, 0)]
    )
    # Loops, not the unrolled kernels: a simulation with contacts holds this solve in seven
    # places (the rates, the event values, the impacts and the modes' search at each level),
    # and unrolled they doubled its compile time (a sphere on a plane: 34 s → 21 s of XLA).
    unroll = False
    L = la.cholesky(M, unroll)
    a = la.cho_solve(L, Q, unroll)
    B = la.solve_lower(L, A.T, unroll=unroll).T
    e = b - A @ a
    # friction directions Aₜᵀ t̂ μ of the sliding contacts, as columns
    At = contacts.tangent.A.reshape(k, 2, -1)
    K = jnp.einsum("kdn,kd->nk", At, modes.direction) * jnp.where(slide, contacts.friction, 0)
    Y = la.solve_lower(L, K, unroll=unroll)  # L⁻¹ K
    Z, Lam = la.pinv_solve_multipliers(B, jnp.concatenate([e[:, None], B @ Y], axis=1), unroll)
    G = Lam[p : p + k, 1:]
    s = slide.astype(Q.dtype)
    coupling = jnp.eye(k, dtype=Q.dtype) - s[:, None] * G * s[None, :]
    lam_slide, pivot = la.solve_square(coupling, s * Lam[p : p + k, 0])
    solvable = jnp.all(jnp.isfinite(lam_slide)) & (pivot > 1e-8)
    z = Z[:, 0] + Z[:, 1:] @ lam_slide
    lam = Lam[:, 0] + Lam[:, 1:] @ lam_slide
    force = L @ (z - Y @ lam_slide)
    x = a + la.solve_lower(L, z - Y @ lam_slide, transpose=True, unroll=unroll)
    normal = jnp.where(closed, lam[p : p + k], 0)
    sticking = jnp.where(stick[:, None], (root * lam[p + k :]).reshape(k, 2), 0)
    sliding = -(jnp.where(slide, contacts.friction * normal, 0))[:, None] * modes.direction
    # as `uk_solve` measures it: B z = e with the sliding friction's share in e
    target = e + B @ Y @ lam_slide
    residual = B @ z - target
    scale = jnp.linalg.norm(target) + jnp.linalg.norm(B) * jnp.linalg.norm(z)
    return ContactSolution(
        x,
        force,
        normal,
        sticking + sliding,
        contacts.normal.A @ x - contacts.normal.b,
        jnp.linalg.norm(residual) / jnp.where(scale > 0, scale, 1),
        mass_check(M, L),
        solvable,
    )


def _unit(v: Array) -> Array:
    norm = jnp.linalg.norm(v, axis=-1, keepdims=True)
    return jnp.where(norm > 0, v / jnp.where(norm > 0, norm, 1), 0)


def select_modes(
    M: Float[Array, "n n"],
    Q: Float[Array, " n"],
    equalities: ConstraintRows,
    contacts: ContactRows,
    candidates: Bool[Array, " k"],
    slipping: Float[Array, "k 2"],
    differentiable: bool = True,
    cone: Bool[ArrayLike, ""] = True,
    held: Bool[Array, " k"] | None = None,
) -> tuple[Modes, ContactSolution, Bool[Array, ""]]:
    """The modes that solve the complementarity problem among `candidates` (the contacts
    touching, and not separating), starting from all of them closed, by changing the
    worst-violated mode one at a time, or every contact outside its cone at once (at most
    `4k + 2` solves).

    **Arguments:**

    - `M`, `Q`, `equalities`, `contacts`: as for `solve_modes`.
    - `candidates`: the contacts that may close, shape (k,).
    - `slipping`: the tangential velocity of each contact, shape (k, 2): a contact that
      slips can only slide (against it); one at rest may stick. Zero at the velocity
      level, where any contact may stick.
    - `differentiable`: solve the final modes once more on the tape (False: the search's
      last solve, without derivatives, one solve less in the program).
    - `cone`: whether the friction cone bounds the sticking forces (False for a velocity
      correction that is no physical impulse: every contact not slipping sticks).
    - `held`: candidates that stay closed whatever the sign of their normal force (default
      none): at an impact, the contacts that would leave too slowly to matter (`_transition`).

    **Returns:**

    `(modes, solution, converged)`.
    """
    k = contacts.size
    dtype = Q.dtype
    held = jnp.zeros(k, bool) if held is None else held
    # The search is discrete: derivatives come from the last solve, on the final modes only.
    slipping = jax.lax.stop_gradient(slipping)
    fixed = jax.lax.stop_gradient((M, Q, equalities, contacts))
    moving = jnp.linalg.norm(slipping, axis=-1) > TOUCH
    can_stick = (contacts.friction > 0) & ~moving
    start = Modes(
        jnp.where(candidates, jnp.where(can_stick, STICKING, SLIDING), OPEN).astype(jnp.int32),
        jnp.where(moving[:, None], _unit(slipping), 0).astype(dtype),
        jnp.ones(k, dtype),
    )

    def violations(sol: ContactSolution, modes: Modes):
        scale = 1 + jnp.max(jnp.abs(sol.normal), initial=0)
        rate_scale = 1e-9 * (1 + jnp.max(jnp.abs(sol.rate), initial=0))
        mode = modes.mode
        pull = jnp.where((mode != OPEN) & ~held, -sol.normal - PULL * scale, -jnp.inf)  # a closed contact pulling
        enter = jnp.where((mode == OPEN) & candidates, -sol.rate - rate_scale, -jnp.inf)  # penetrating
        outside = jnp.where(
            (mode == STICKING) & cone,
            jnp.linalg.norm(sol.tangent, axis=-1) - contacts.friction * sol.normal - CONE * scale,
            -jnp.inf,
        )
        return jnp.stack([pull / (1 + jnp.abs(sol.normal)), enter, outside / (1 + jnp.abs(sol.normal))])

    def step(modes: Modes, sol: ContactSolution, shared: Bool[Array, ""]) -> tuple[Modes, Bool[Array, ""]]:
        # `shared`: whether `sol` shares the friction by the weights from these modes' solve
        v = violations(sol, modes)
        kind, i = jnp.unravel_index(jnp.argmax(v), v.shape)
        limit = contacts.friction * jnp.maximum(sol.normal, 0)
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
        direction = jnp.where(new == OPEN, 0, modes.direction[i])
        mode, direction = mode.at[i].set(new), modes.direction.at[i].set(direction)
        # Where the worst violation is a cone's, every contact outside its cone starts to slide
        # at once, against its own sticking force: one at a time, the forces that stay
        # sticking turn to balance the first ones' friction, and a body held at several
        # points (a box between two pads) would slide askew.
        outside = (kind == 2) & (v[2] > 0)
        mode = jnp.where(outside, SLIDING, mode)
        direction = jnp.where(outside[:, None], -_unit(sol.tangent), direction)
        changed = Modes(mode, direction, weight)
        kept = Modes(modes.mode, modes.direction, weight)
        return jax.tree.map(lambda a, b: jnp.where(reshare, a, b), kept, changed), reshare

    def cond(state):
        modes, sol, _, count = state
        return (count == 0) | ((count <= 4 * k + 1) & jnp.any(violations(sol, modes) > 0))

    def body(state):
        # the first pass solves the starting modes: one copy of the solve in the program
        modes, sol, shared, count = state
        new, shared = step(modes, sol, shared)
        modes = jax.tree.map(lambda new, old: jnp.where(count == 0, old, new), new, modes)
        return modes, solve_modes(*fixed, modes), shared & (count > 0), count + 1

    placeholder = jax.tree.map(jnp.zeros_like, jax.eval_shape(solve_modes, *fixed, start))
    modes, sol, _, _ = jax.lax.while_loop(cond, body, (start, placeholder, jnp.array(False), 0))
    if differentiable:
        sol = solve_modes(M, Q, equalities, contacts, modes)
    converged = ~jnp.any(violations(sol, modes) > 0) & sol.solvable
    return modes, sol, converged


def sliding_now(modes: Modes, contacts: ContactRows) -> Modes:
    """The modes with each sliding contact's direction that of its slip now (the one it
    started with while the slip is still below `TOUCH`)."""
    v = contacts.tangent.phid.reshape(-1, 2)
    moving = (modes.mode == SLIDING) & (jnp.linalg.norm(v, axis=-1) > TOUCH)
    return modes._replace(direction=jnp.where(moving[:, None], _unit(v), modes.direction))


def candidates(contacts: ContactRows) -> Bool[Array, " k"]:
    """The contacts touching and not moving apart."""
    return (contacts.normal.phi <= TOUCH) & (contacts.normal.phid <= TOUCH)


class ContactRecord(eqx.Module):
    """What the unilateral constraints did during a simulation (`Solution.contacts`).

    **Attributes:**

    - `gap`: each contact's `g` at the saved times, shape (k, c).
    - `mode`: `0` open, `1` sliding, `2` sticking, at the saved times, shape (k, c).
    - `normal`: the normal force `λₙ` at the saved times, shape (k, c).
    - `tangent`: the friction force in each contact's tangent basis, shape (k, c, 2).
    - `event_times`: the times of the events (impacts, releases, stick–slip changes), in
      order; `inf` past the last, shape (E,) with `E = max_events`.
    - `impulses`: the normal impulse of each contact at each event, shape (E, c).
    - `penetration`: the largest `−g` met at the saved times and at the events (zero
      where nothing penetrated); a start inside a contact or a limit is projected out of
      it and not counted.
    """

    gap: Float[Array, "k c"]
    mode: Int[Array, "k c"]
    normal: Float[Array, "k c"]
    tangent: Float[Array, "k c 2"]
    event_times: Float[Array, " E"]
    impulses: Float[Array, "E c"]
    penetration: Float[Array, ""]

    @property
    def events(self) -> Int[Array, ""]:
        """The number of events."""
        return jnp.sum(jnp.isfinite(self.event_times), axis=-1)
