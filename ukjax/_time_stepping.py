"""Time-stepping: fixed steps of the U-K equation at the impulse level, `M Δv = h Q + Jᵀ p`,
with the contacts' complementarity solved exactly in each step (Moreau–Jean at the velocity
level, the gap in Signorini's condition as Anitescu and Potra write it), for contact-rich
scenes and for control loops that step a system themselves (`step`)."""

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _linalg as la
from ._arrays import as_inexact
from ._dynamics import Dynamics, solve_levels
from ._implicit import AbstractForces, ImplicitForces
from ._integrator import AbstractIntegrator, RunOptions, start_clock
from ._jit import jit
from ._narrow import normal_rows, on_candidates, select_in
from ._solution import ContactRecord, Solution, Status, at_saves
from ._stepping import loop_kind
from ._systems import check_state
from ._unilateral import (
    OPEN,
    TOUCH,
    ContactRows,
    check_coefficients,
    inverse_masses,
    norm,
    unilaterals,
    valid_coefficients,
)

# how far ahead a contact is a candidate of the step's problem: twice the reach of its
# predicted speed (a candidate that does not close stays open, at the cost of its rows)
_REACH = 2.0
# the projection has failed where its last step starts farther than this from the equality
# constraints (m, rad): three Gauss–Newton steps bring a step's drift within 1e-9; a step
# too long for their curvature (a loop opened by centimetres) is left farther
_SETTLED = 1e-6
# the projection stops at a configuration this near its constraints (m, rad), well within
# the route's 1e-9; at most four Gauss–Newton steps
_CLOSED, _GAUSS_NEWTON = 1e-12, 4


class StepResult(eqx.Module):
    """One step of [`ukjax.step`][].

    **Attributes:**

    - `q`, `qd`: the state at the step's end, shape (n,).
    - `normal`: each contact's normal impulse over the step, shape (c,) (the average force
      is `normal / h`).
    - `tangent`: each contact's friction impulse in its tangent basis, shape (c, 2).
    - `mode`: each contact's mode over the step: `0` open, `1` sliding, `2` sticking, shape (c,).
    - `gap`: each contact's gap `g` where the step began, shape (c,).
    - `converged`: whether the step's complementarity problem was solved (and its
      coefficients valid).
    - `projected`: whether the step's end was brought back onto its constraints (a step too
      long for their curvature leaves them).
    """

    q: Float[Array, " n"]
    qd: Float[Array, " n"]
    normal: Float[Array, " c"]
    tangent: Float[Array, "c 2"]
    mode: Int[Array, " c"]
    gap: Float[Array, " c"]
    converged: Bool[Array, ""]
    projected: Bool[Array, ""]


def _contact_level(d: Dynamics):
    """The forces the last level's solve sees (a sequential cascade's earlier levels as
    given forces, the non-ideal term) and that level."""
    Q, level = d.Q, d.levels[-1]
    if len(d.levels) > 1:
        Q = Q + solve_levels(Dynamics(d.M, d.Q, d.levels[:-1]))[0].constraint_force
    if level.nonideal is not None:
        Q = Q + level.nonideal
    return Q, level


def _least_change(A: Float[Array, "p n"], r: Float[Array, " p"]) -> Float[Array, " n"]:
    """The least `δ` with `A δ = r`, by the Gram matrix regularized at √ε of its largest
    diagonal entry (dependent rows, a box on four corners, and zero rows, the contacts left
    out, have a solution then; what the regularization leaves is the next step's): a Cholesky
    factor of `p × p`, where the robust pseudo-inverse's basis costs several times more."""
    G = A @ A.T
    scale = jnp.max(jnp.diagonal(G), initial=0)
    mu = jnp.sqrt(jnp.finfo(A.dtype).eps) * jnp.where(scale > 0, scale, 1)
    factor = jax.scipy.linalg.cho_factor(G + mu * jnp.eye(G.shape[0], dtype=G.dtype), lower=True)
    return A.T @ jax.scipy.linalg.cho_solve(factor, r)


def _project(system, t, q, qd, active, kind: str = "bounded"):
    """`q` onto the equality constraints and onto `g = 0` for the `active(contacts, q)`
    contacts by minimum-norm Gauss–Newton steps (the third for a contact the second pushed
    in, the fourth for what the regularized steps leave), until a configuration is within
    `_CLOSED` of them (it is kept as it is) or four steps were taken; then `q̇` onto `Φ̇ = 0`
    (and `ψ = 0`) by the rows of the last evaluation; and whether that evaluation was within
    `_SETTLED` of the equality constraints. A step on its constraints after one correction
    evaluates them twice, not four times (each evaluation of a robot's contacts is a fifth
    of its step). `kind` is the loop's (`eqxi.while_loop`'s: `"lax"` for forward mode,
    `"checkpointed"` for reverse, `"bounded"` for both)."""

    def rows(q):
        level = system.constraint_levels(t, q, qd)[-1]
        A, r = level.rows.A, level.rows.phi
        if level.contacts is not None:
            contacts, _ = normal_rows(level.contacts, active(level.contacts), q.shape[0])
            A, r = jnp.concatenate([A, contacts.A]), jnp.concatenate([r, contacts.phi])
        return A, r, level.rows

    A0, _, equalities = jax.eval_shape(rows, q)
    zeros = lambda x: jnp.zeros(x.shape, x.dtype)  # noqa: E731
    last = (zeros(equalities.A), jnp.zeros(equalities.phid.shape, q.dtype), jnp.zeros((), q.dtype))
    start = (jnp.zeros((), jnp.int32), q, *last, jnp.array(True))

    def cond(x):
        i, _, _, _, _, far = x
        return (i < _GAUSS_NEWTON) & far

    def body(x):
        i, q, _, _, _, _ = x
        A, r, level = rows(q)
        closure = jnp.max(jnp.abs(level.phi), initial=0).astype(q.dtype)
        far = jnp.max(jnp.abs(r), initial=0) > _CLOSED
        # a configuration within `_CLOSED` stays: the regularized step on a residual of
        # round-off can move it by micrometres along dependent rows (a Go1's four feet and
        # its limits, `benchmarks/quadruped.py`)
        q = jnp.where(far, q - _least_change(A, r), q)
        return i + 1, q, level.A, level.phid.astype(q.dtype), closure, far

    if A0.shape[0] == 0:
        # no equality rows and no contacts: nothing to project onto
        return q, qd, jnp.array(True)
    _, q, A, phid, closure, _ = eqxi.while_loop(cond, body, start, max_steps=_GAUSS_NEWTON, kind=kind)
    settled = closure <= _SETTLED
    if A.shape[0] == 0:
        return q, qd, settled
    return q, qd - _least_change(A, phid), settled


def take_step(system, t, q, qd, h, rest_speed, forces: AbstractForces, kind: str = "bounded") -> StepResult:
    """One step of length `h` from `(t, q, q̇)` (no checks; `step` is the public one).

    The contacts within reach of the step are the candidates of one velocity-level
    complementarity problem on the free motion's impulse `h Q`, solved exactly by the mode
    search of the event-driven route's impacts (`select_in`: Signorini and Coulomb's cone, a
    contact slipping faster than its cone can stop sliding against its slip, a slower one
    sticking where that impulse lies in the cone, minimum-norm impulses for dependent rows):
    a contact that closes within the step (`g + h ġ ≤ 0` at the free
    speed) leaves at Newton's `−e ġ⁻`, or with `e = 0` (or an approach slower than
    `rest_speed`) reaches `g = 0` at the step's end (`ġ⁺ ≥ −g/h`); one that does not may
    not pass its gap. The equality rows hold their acceleration-level form over the step
    (`A Δv = h b`); the step ends with `q⁺ = q + h q̇⁺` projected back onto them and onto
    the contacts it closed.
    """
    d = forces.linearized(system, t, q, qd, h, system.dynamics(t, q, qd))
    if not d.levels or d.levels[-1].contacts is None:
        sol = solve_levels(d)[0]
        qd1 = qd + h * sol.acceleration.astype(qd.dtype)
        if d.levels:
            q1, qd1, projected = _project(system, t + h, q + h * qd1, qd1, lambda c: jnp.zeros(0, bool), kind)
        else:
            q1, projected = q + h * qd1, jnp.array(True)
        zeros = jnp.zeros(0, q.dtype)
        ok = sol.mass_ok & jnp.isfinite(sol.inconsistency)
        return StepResult(q1, qd1, zeros, zeros.reshape(0, 2), jnp.zeros(0, jnp.int32), zeros, ok, projected)
    Q, level = _contact_level(d)
    c = level.contacts
    k = c.size
    g, rate = c.normal.phi, c.normal.phid
    # the normal speed at the step's end under the smooth forces alone: which contacts the
    # step can close, and the approach Newton's law reverses
    L = la.cholesky(d.M, False)
    smooth = la.cho_solve(L, Q[:, None], False)[:, 0]
    free = rate + h * (c.normal.A @ smooth)
    closing = g + h * free <= 0
    e = jnp.where(closing & (-free * c.restitution > rest_speed), c.restitution, 0)
    target = jnp.where(closing, jnp.maximum(-g / h, -e * free), -g / h)
    candidates = (g + _REACH * h * jnp.minimum(free, 0) <= TOUCH) | (g <= TOUCH)
    velocity_rows = lambda rows, b: eqx.tree_at(lambda r: r.b, rows, b)  # noqa: E731
    contacts = eqx.tree_at(
        lambda c: (c.normal, c.tangent),
        c,
        (velocity_rows(c.normal, target - rate), velocity_rows(c.tangent, -c.tangent.phid)),
    )
    equalities = velocity_rows(level.rows, h * level.rows.b)
    # A contact slipping faster than its cone's impulse over the step could stop (the normal
    # impulse that stops its approach, through the contact's mobilities) slides against its
    # slip, as the event-driven route's sliding contacts do: friction opposes the motion, to
    # first order in the step. One slower may stick, where the impulse that stops it lies in
    # the cone (exactly: no slack); else it slides against that impulse.
    # Only a candidate's is read: a robot's far self-collision pairs (zero rows) are left out
    # of the mobilities' triangular solves, thousands of rows that decide nothing
    # (`benchmarks/self_collisions.py --stepping`).
    def moving_of(c: ContactRows) -> Bool[Array, " c"]:
        free = c.normal.phid + h * (c.normal.A @ smooth)
        normal_mobility = inverse_masses(L, c.normal.A)
        tangent_mobility = jnp.max(inverse_masses(L, c.tangent.A).reshape(c.size, 2), axis=1)
        stoppable = (
            c.friction
            * jnp.maximum(-free, 0)
            * tangent_mobility
            / jnp.where(normal_mobility > 0, normal_mobility, 1)
        )
        return norm(c.tangent.phid.reshape(c.size, 2)) > jnp.maximum(2 * stoppable, rest_speed)

    slip = c.tangent.phid.reshape(k, 2)
    moving = on_candidates(moving_of, c, candidates, q.shape[0], False)
    modes, jump, converged = select_in(
        d.M, h * Q, equalities, contacts, candidates, jnp.where(moving[:, None], slip, 0), kernel=level.kernel
    )
    qd1 = qd + jump.x.astype(qd.dtype)
    closed = (modes.mode != OPEN) & (target <= 0)  # resting or landing: on the surface at the end
    q1, qd1, projected = _project(system, t + h, q + h * qd1, qd1, lambda c: closed | (c.normal.phi < 0), kind)
    valid = valid_coefficients(c.friction, c.restitution)
    ok = converged & valid & jnp.isfinite(jump.inconsistency)
    return StepResult(q1, qd1, jump.normal, jump.tangent.reshape(k, 2), modes.mode, g, ok, projected)


class _Loop(eqx.Module):
    """The stepping loop's state: the step count `k`, the state, the saves' records, the
    largest penetration at a step's start, whether every step so far was solved, and whether
    the one that was not ended finite and on its constraints."""

    k: Array
    q: Array
    qd: Array
    records: tuple
    penetration: Array
    ok: Array
    finite: Array
    projected: Array


def _save(records, saves, s0, s1, q0, qd0, after: StepResult, h):
    """The saves in `(s0, s1]` written from the step between them: the state interpolated
    linearly, the modes and the average forces (impulse over `h`) the step's."""
    due = (saves > s0) & (saves <= s1)
    theta = ((saves - s0) / (s1 - s0))[:, None]
    values = (
        q0 + theta * (after.q - q0),
        qd0 + theta * (after.qd - qd0),
        jnp.broadcast_to(after.mode, (saves.shape[0],) + after.mode.shape),
        jnp.broadcast_to(after.normal / h, (saves.shape[0],) + after.normal.shape),
        jnp.broadcast_to(after.tangent / h, (saves.shape[0],) + after.tangent.shape),
    )
    return tuple(
        jnp.where(due.reshape((-1,) + (1,) * (old.ndim - 1)), new.astype(old.dtype), old)
        for new, old in zip(values, records)
    )


def _contacts_of(system, t, q, qd) -> int:
    levels = eqx.filter_eval_shape(system.constraint_levels, t, q, qd)
    return 0 if not levels or levels[-1].contacts is None else levels[-1].contacts.size


@jit(events=True)
def _run(system, q0, qd0, t0, t1, options: RunOptions, rest_speed, forces: AbstractForces) -> Solution:
    ts, adjoint = options.ts, options.adjoint
    kind = loop_kind(adjoint)
    clock = start_clock(t0, t1, options, whole_steps=True)
    # t0 = t1: no step (the start is the run)
    steps = jnp.where(clock.span == 0, 0, jnp.round(1 / clock.dt0)).astype(jnp.int32)
    dtype, K, c = q0.dtype, ts.shape[0], _contacts_of(system, t0, q0, qd0)
    # the start onto its constraints and out of any contact it is inside, as the
    # event-driven route's start is
    start_gap, valid = jnp.zeros(0, dtype), jnp.array(True)
    if c:
        contacts = system.constraint_levels(t0, q0, qd0)[-1].contacts
        start_gap, valid = contacts.normal.phi, valid_coefficients(contacts.friction, contacts.restitution)
        q0, qd0, _ = _project(system, t0, q0, qd0, lambda contacts: contacts.normal.phi < 0, kind)
    elif eqx.filter_eval_shape(system.constraint_levels, t0, q0, qd0):
        q0, qd0, _ = _project(system, t0, q0, qd0, lambda contacts: jnp.zeros(0, bool), kind)
    at_start = (clock.saves <= 0)[:, None]
    records = (
        jnp.where(at_start, q0, jnp.inf),
        jnp.where(at_start, qd0, jnp.inf),
        jnp.zeros((K, c), jnp.int32),
        jnp.zeros((K, c), dtype),
        jnp.zeros((K, c, 2), dtype),
    )
    h = clock.dt0 * clock.span

    def cond(x: _Loop):
        return (x.k < steps) & x.ok

    def body(x: _Loop):
        s0 = x.k * clock.dt0
        s1 = jnp.where(x.k + 1 == steps, 1.0, (x.k + 1) * clock.dt0)
        result = take_step(system, clock.time(s0), x.q, x.qd, h, rest_speed, forces, kind)
        finite = jnp.all(jnp.isfinite(result.q)) & jnp.all(jnp.isfinite(result.qd))
        ok = result.converged & finite & result.projected
        records = _save(x.records, clock.saves, s0, s1, x.q, x.qd, result, h)
        # a step that failed is not taken: its saves and the state stay as they were
        records = jax.tree.map(lambda new, old: jnp.where(ok, new, old), records, x.records)
        deepest = jnp.max(-result.gap, initial=0)
        return _Loop(
            x.k + ok,
            jnp.where(ok, result.q, x.q),
            jnp.where(ok, result.qd, x.qd),
            records,
            jnp.where(x.k > 0, jnp.maximum(x.penetration, deepest), x.penetration),
            ok,
            finite,
            result.projected,
        )

    yes = jnp.array(True)
    start = _Loop(jnp.zeros((), jnp.int32), q0, qd0, records, jnp.zeros((), dtype), yes, yes, yes)
    final = eqxi.while_loop(cond, body, start, max_steps=options.max_steps, kind=loop_kind(adjoint))
    q, qd, mode, normal, tangent = final.records
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    status = jnp.where(final.ok, Status.SUCCESS, Status.CONTACT_UNRESOLVED)
    status = jnp.where(final.projected, status, Status.SOLVER_FAILED)
    status = jnp.where(final.ok & (final.k < steps), Status.MAX_STEPS_REACHED, status)
    status = jnp.where(start_finite & final.finite, status, Status.NONFINITE_STATE).astype(jnp.int32)
    stats = {"num_steps": final.k}
    if not c:
        violation = at_saves(system.violation, ts, q, qd)
        phi, phid = (None, None) if violation is None else violation
        return Solution(ts, q, qd, phi, phid, status, stats)

    def saved(t, q, qd):
        return system.constraint_levels(t, q, qd)[-1].contacts.normal.phi, system.violation(t, q, qd)

    gap, violation = at_saves(saved, ts, q, qd)
    penetration = jnp.maximum(final.penetration, jnp.max(jnp.where(jnp.isfinite(gap), -gap, 0), initial=0))
    status = jnp.where(valid, status, Status.INVALID_PARAMETERS).astype(jnp.int32)
    record = ContactRecord(
        gap,
        mode,
        normal,
        tangent,
        jnp.zeros(0, dtype),
        jnp.zeros((0, c), dtype),
        penetration,
        jnp.max(-start_gap, initial=0),
    )
    return Solution(ts, q, qd, *violation, status, stats, record)


class TimeStepping(AbstractIntegrator):
    """Fixed steps of the impulse-level U-K equation with the contacts' complementarity exact
    in each step (`take_step`): `simulate(system, ..., solver=ukjax.TimeStepping(), dt0=h)`,
    the run cut into whole steps of at most `h` (as diffrax's fixed steps are). First order
    in `h`; every step ends on the equality constraints and on the contacts it closed (up to
    four Gauss–Newton steps, to 1e-9 or less). The tolerances and `max_events` do not apply;
    `max_steps` bounds the steps.

    **Arguments:**

    - `rest_speed`: an approach slower than this is not reversed by restitution (no
      bounce), as Zeno's accumulation is truncated in the event-driven route (default
      `1e-5`, in the state's units per second).
    - `forces`: how a step takes the applied forces (default [`ukjax.ImplicitForces`][]:
      their velocity derivative at the step's end, MuJoCo's `implicitfast`;
      [`ukjax.ExplicitForces`][] at its start, cheaper where nothing is stiff).
    """

    events = True
    lockstep = True
    rest_speed: float = 1e-5
    forces: AbstractForces = ImplicitForces()

    def run(self, system, q0, qd0, t0, t1, options: RunOptions) -> Solution:
        if options.dt0 is None:
            raise ValueError("ukjax.TimeStepping steps by dt0: give simulate(..., dt0=h).")
        return _run(system, q0, qd0, t0, t1, options, jnp.asarray(self.rest_speed, q0.dtype), self.forces)


def step(
    system, t, q, qd, h, *, rest_speed: float = 1e-5, forces: AbstractForces = ImplicitForces()
) -> StepResult:
    """One step of [`ukjax.TimeStepping`][] from `(t, q, q̇)`: for a control loop that steps
    a system itself (a policy, MPC), its controls in the system (a `Model.controlled`'s, an
    `eqx.tree_at` away). Jit-able, vmappable and differentiable in both modes: the
    derivative is that of the step's final modes (the mode search is discrete; where a mode
    switches the step is not differentiable, and the derivative is the one of the modes found).

    **Arguments:**

    - `system`: any ukjax system (with or without unilateral constraints; unbound, so in XLA).
    - `t`, `q`, `qd`: the state, `q` and `qd` shape (n,).
    - `h`: the step, `> 0`.
    - `rest_speed`, `forces`: as for `TimeStepping`.

    **Returns:**

    A [`ukjax.StepResult`][]: the next state, the step's impulses, its contacts' modes and
    whether it was solved and ended on its constraints.
    """
    q, qd = check_state(system, q, qd)
    q = as_inexact(q)
    qd = qd.astype(q.dtype)
    if not isinstance(h, jax.core.Tracer) and not float(h) > 0:
        raise ValueError(f"The step h must be positive, got {h}.")
    for x in unilaterals(system):
        check_coefficients(x)
    t, h = jnp.asarray(t, q.dtype), jnp.asarray(h, q.dtype)
    return take_step(system, t, q, qd, h, jnp.asarray(rest_speed, q.dtype), forces)
