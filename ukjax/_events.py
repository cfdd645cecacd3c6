"""Event-driven integration of a system with unilateral constraints: each smooth stretch is
integrated with the contacts' modes fixed (diffrax's solvers and step-size controllers, in a
loop of ukjax's own) and stops where a mode stops holding; each event applies its impacts and
chooses the modes that hold from there."""

import warnings

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from . import _linalg as la
from ._event_values import mode_values
from ._integrator import AbstractIntegrator, RunOptions, start_clock, step_controller
from ._jit import jit
from ._narrow import normal_rows, select_in
from ._solution import FATAL, HEALTH, ContactRecord, Solution, Status, at_saves, final_status
from ._backends._acceleration import solve_system
from ._stepping import Bounded, FieldArgs, StopAtFault, events_norm, integrate, loop_kind, save_rows
from ._dynamics import levels_violation, solve_levels
from ._unilateral import (
    OPEN,
    TOUCH,
    Modes,
    contact_state,
    inverse_masses,
    norm,
    unilaterals,
    valid_coefficients,
)


class EventLoop(eqx.Module):
    """The event-driven loop's state between stretches: where the run is (`s`, `q`, `qd`, the
    contacts' `modes`, whether this is the `start`'s pass), what it records (each stretch's
    modes, the saves' `records` and next `index`, the events' times and impulses, the
    penetration past the start and at it, the fault indicators' `health`, the steps), and how
    it stands (the modes' search `converged`, the coefficients `valid`, the last stretch's
    diffrax `result`, an event `unlocated`); `step` the next stretch's first step (NaN: the
    controller's choice) and the progress `meter`'s state."""

    s: Array
    q: Array
    qd: Array
    modes: Modes
    stretches: Array
    start: Array
    health: Array
    records: PyTree
    index: Array
    count: Array
    event_times: Array
    impulses: Array
    penetration: Array
    start_penetration: Array
    converged: Array
    valid: Array
    result: PyTree
    unlocated: Array
    steps: Array
    step: Array
    meter: PyTree


def contact_labels(system) -> list[str] | None:
    """A label for each contact of `system`, in the order of its contact rows, where every
    unilateral constraint names its contacts (a file's geoms by their `names`, its joints'
    limits by `joints`, the lower limits first); None otherwise."""
    labels = []
    for unilateral in unilaterals(system):
        own = unilateral.labels()
        if own is None:
            return None
        labels += list(own)
    return labels


@eqx.filter_jit
def _start_gaps(system, t0, q0, qd0):
    return system.constraint_levels(t0, q0, qd0)[-1].contacts.normal.phi


def warn_if_started_inside(solution: Solution, atol: float, system=None, t0=None, q0=None, qd0=None) -> None:
    """Warn where a run (or members of a batch) started inside a contact or a joint limit by
    more than `atol`: it began from the start projected out of it, not from the caller's.
    Given the system and the start (`q0` per member in a batch), the warning names the
    deepest contacts. Nothing happens under a transformation."""
    record = solution.contacts
    if record is None or isinstance(record.start_penetration, jax.core.Tracer):
        return
    if not record.start_penetration.is_fully_addressable:
        return
    depth = np.asarray(record.start_penetration)
    inside = depth > float(atol)
    if not np.any(inside):
        return
    members = f"{int(np.sum(inside))} of {inside.size} members" if inside.ndim else "the run"
    named = ""
    if system is not None and not any(isinstance(x, jax.core.Tracer) for x in (t0, q0, qd0)):
        deepest = int(np.argmax(depth)) if depth.ndim else None
        q, qd = (jnp.asarray(x) if deepest is None else jnp.asarray(x)[deepest] for x in (q0, qd0))
        gaps = np.asarray(_start_gaps(system, jnp.asarray(t0, q.dtype), q, qd))
        labels = contact_labels(system) or [f"contact {i}" for i in range(gaps.size)]
        if len(labels) == gaps.size:
            order = [i for i in np.argsort(gaps) if gaps[i] < -float(atol)][:4]
            more = int(np.sum(gaps < -float(atol))) - len(order)
            listed = ", ".join(f"{labels[i]} {-gaps[i]:.3g}" for i in order) + (f" and {more} more" if more > 0 else "")
            which = "" if deepest is None else f" of member {deepest}"
            named = f" (the deepest{which}: {listed})"
    warnings.warn(
        f"The simulation starts inside a contact or a joint limit ({members}), by up to {float(np.max(depth)):.2e}"
        f"{named}: it began from the start projected out of it onto g = 0 (sol.q[0] where ts starts at t0), so a "
        "deep start moves the bodies and may leave the other constraints off (a quaternion's norm): start "
        "outside the contacts, or from ConstrainedSystem.project's state.",
        RuntimeWarning,
        stacklevel=3,
    )


# A sliding contact takes the direction of its slip once it slips faster than this many times
# atol (`sliding_now`): below, the slip integrated to atol is too uncertain to give a direction
# (the slide under a turning force of `tests/test_contact_cases.py`, against DOP853).
_SLIDE_SPEED = 1e3


# Jitted so that its trace is cached, as the vector field's (`_stepping._rates`): it is
# called at each step's end and in the root finder.
@eqx.filter_jit
def _event_value(s, y, args):
    """`mode_values` at `y`, in the normalised time `s`, in the modes of `args`."""
    q, qd = y[:2]
    _, sol, state = solve_system(args.system, args.time(s), q, qd, args.modes, args.rest)
    return mode_values(state, sol, args.modes, args.force_scale)


def _transition(system, t, q, qd, rest_speed):
    """What happens at an event: the touching contacts and the equality rows projected back
    onto `g = 0`, `Φ = 0` (two minimum-norm Gauss–Newton steps), then impacts by Newton's
    law (the velocity-level complementarity problem, equality rows and resting contacts
    held) at the projected configuration, so that no velocity residual is left where the
    motion restarts, and the modes that hold from there.

    **Returns:**

    `(q, qd, modes, impulses, the contacts' force scales, the event's value there,
    penetration, converged, valid)`: `valid` False where a contact's coefficients are out of
    range.
    """
    def newton(q, _):
        level = system.constraint_levels(t, q, qd)[-1]
        c = level.contacts
        rows, _ = normal_rows(c, c.normal.phi <= TOUCH, q.shape[0])
        A = jnp.concatenate([level.rows.A, rows.A])
        r = jnp.concatenate([level.rows.phi, rows.phi])
        return q - la.pinv_solve_multipliers(A, r[:, None], False)[0][:, 0], jnp.max(-c.normal.phi, initial=0)

    # the penetration met: the first step's, before any projection
    q, penetration = jax.lax.scan(newton, q, None, length=2)
    penetration = penetration[0]
    d = system.dynamics(t, q, qd)
    level = d.levels[-1]
    c = level.contacts
    k = c.size
    approach = c.normal.phid
    # Newton's law, except for impacts too slow to bounce measurably (Zeno's accumulation)
    e = jnp.where(-approach * c.restitution > rest_speed, c.restitution, 0)
    velocity_rows = lambda rows, target: eqx.tree_at(lambda r: r.b, rows, target)  # noqa: E731
    contacts = eqx.tree_at(
        lambda c: (c.normal, c.tangent),
        c,
        (
            velocity_rows(c.normal, -approach - e * jnp.minimum(approach, 0)),
            velocity_rows(c.tangent, -c.tangent.phid),
        ),
    )
    equalities = velocity_rows(level.rows, -level.rows.phid)
    # Every touching contact takes part in the impact, leaving or not (its complementarity
    # decides whether it opens): left out, an impact elsewhere can drive it into the surface,
    # and a closed mode then holds that speed (a box landing flat on the two corners it slid
    # on, which left at 4e-9 m/s: 0.07 m/s into the floor).
    touching = c.normal.phi <= TOUCH
    slip = c.tangent.phid.reshape(k, 2)
    moving = norm(slip) > rest_speed
    # Coulomb's law for impulses: at an impact every touching contact may stick, slipping or
    # not, where the impulse that stops its slip lies inside its cone; outside it, the
    # impulse slides against that sticking impulse (a landing with a little tangential
    # speed sticks, where a sliding impulse would reverse its slip). The cone is met to the
    # impulse that changes a contact's slip by `rest_speed`, the integration's drift: an
    # impact elsewhere must not set sliding a rolling contact whose only impulse corrects its
    # drift. Without an impact the jump only corrects that drift for the contacts at rest,
    # which is no impulse that a cone bounds, and the contacts that slip slide on.
    impact = jnp.any(touching & (approach < -rest_speed))
    L = la.cholesky(d.M, False)
    mobility = jnp.max(inverse_masses(L, c.tangent.A).reshape(k, 2), axis=1)
    slack = jnp.where(impact, rest_speed / jnp.where(mobility > 0, mobility, 1), jnp.inf)

    # Zeno's accumulation, truncated: a contact that an impact elsewhere would lift off slower
    # than `rest_speed` is held, as event-driven schemes stop at accumulation points (Acary &
    # Brogliato 2008). A foot rocking from heel to toe otherwise goes through an unbounded
    # series of ever smaller impacts.
    # Where that search does not settle, a third pass leaves the impulse's friction unbounded
    # (the perfectly rough impact: every touching contact that does not leave sticks, a
    # problem on the Delassus matrix alone, which always has a solution). Sliding impulses
    # couple the normal ones, and the complementarity problem is no longer one on a P-matrix:
    # a quadruped's third foot touching down at 5e-6 m/s beside two sliding ones cycled
    # through the search's 4k + 2 changes, and its run stopped. Where the second pass settles,
    # the third has no candidates: one solve.
    def solve(carry, fallback):
        held, settled = carry
        rough = fallback & ~settled
        modes, jump, converged = select_in(
            d.M,
            jnp.zeros_like(d.Q),
            equalities,
            contacts,
            touching & (~fallback | rough),
            jnp.where((moving & ~impact)[:, None], slip, 0),
            slack=jnp.where(rough, jnp.inf, slack),
            held=held,
            kernel=level.kernel,
        )
        leaving = c.normal.A @ jump.x + approach
        held = jnp.where(fallback, held, held | (touching & (modes.mode == OPEN) & (leaving < rest_speed)))
        return (held, jnp.where(fallback, settled, converged)), (jump, converged)

    (_, settled), (jumps, converged) = jax.lax.scan(
        solve, (jnp.zeros(k, bool), jnp.array(True)), jnp.array([False, False, True])
    )
    pass_ = jnp.where(settled, 1, 2)
    jump, converged = jax.tree.map(lambda x: x[pass_], (jumps, converged))
    qd = qd + jump.x
    # the modes from here on; their forces only scale the event values (off the tape)
    d = system.dynamics(t, q, qd)
    _, (modes, sol, settled) = solve_levels(d, differentiable=False)
    value = mode_values(contact_state(d.levels[-1].contacts), sol, modes, sol.scale)
    valid = valid_coefficients(c.friction, c.restitution)
    return q, qd, modes, jump.normal, sol.scale, value, penetration, converged & settled & valid, valid


class EventDriven(AbstractIntegrator):
    """Smooth stretches between events, each at the solver's full order with the contacts'
    modes fixed, and at each event its impact and the next modes (`simulate_events`)."""

    events = True
    lockstep = False

    def run(self, system, q0, qd0, t0, t1, options: RunOptions) -> Solution:
        return simulate_events(system, q0, qd0, t0, t1, options)


@jit(events=True)
def simulate_events(system, q0, qd0, t0, t1, options: RunOptions) -> Solution:
    """`_simulate` for a system with unilateral constraints: each smooth stretch is
    integrated at the solver's full order with the contacts' modes fixed, and ends where a
    mode stops holding (`_event_value` crosses zero at a step's end; the root found on that
    step's dense output); `_transition` applies the impact and chooses the next modes.

    The stretches are stepped by `integrate`: a step's end reads the event's value off the
    vector field's last stage (`_rates` returns it), the root finder evaluates it on the
    step's dense output, each save is interpolated once, by the stretch that reaches it, and
    no host callback enters the program. A stretch after an event starts with half the step
    that met it."""
    ts, solver, adaptive = options.ts, options.solver, options.adaptive
    atol, max_steps, max_events = options.atol, options.max_steps, options.max_events
    adjoint, progress_meter = options.adjoint, options.progress_meter
    controller = step_controller(options, events_norm)
    clock = start_clock(t0, t1, options, whole_steps=False)
    span, scale, saves, dt0, time = clock.span, clock.scale, clock.saves, clock.dt0, clock.time
    if adaptive and eqx.filter_eval_shape(system.constraint_levels, t0, q0, qd0)[-1].contacts.crossing is not None:
        controller = Bounded(controller)
    controller = StopAtFault(controller)
    rest_speed = jnp.sqrt(atol)
    k = ts.shape[0]

    dtype = q0.dtype
    c = eqx.filter_eval_shape(system.constraint_levels, t0, q0, qd0)[-1].contacts.size
    # each save's state, the contacts' forces (λₙ, then λₜ) and the stretch it belongs to;
    # the modes are kept per stretch
    rows = save_rows(k)
    records = (
        jnp.full((rows,) + q0.shape, jnp.inf, dtype),
        jnp.full((rows,) + q0.shape, jnp.inf, dtype),
        jnp.full((rows, 3 * c), jnp.nan, dtype),
        jnp.zeros(rows, jnp.int32),
    )
    no_modes = Modes(jnp.zeros(c, jnp.int32), jnp.zeros((c, 2), dtype), jnp.ones(c, dtype))
    # The start is resolved as an event is (a ball dropped resting, a start inside a limit),
    # by the loop's first pass: one copy of the transition in the program.
    init = EventLoop(
        s=jnp.zeros((), dtype),
        q=q0,
        qd=qd0,
        modes=no_modes,
        stretches=jnp.full((max_events + 1, c), OPEN, jnp.int32),  # each stretch's modes
        start=jnp.array(True),
        health=jnp.zeros(HEALTH, dtype),
        records=records,
        index=jnp.zeros((), jnp.int32),
        count=jnp.zeros((), jnp.int32),
        event_times=jnp.full(max_events, jnp.inf, dtype),
        impulses=jnp.zeros((max_events, c), dtype),
        penetration=jnp.zeros((), dtype),
        start_penetration=jnp.zeros((), dtype),
        converged=jnp.array(True),
        valid=jnp.array(True),
        result=diffrax.RESULTS.successful,
        unlocated=jnp.array(False),
        steps=jnp.zeros((), jnp.int32),
        # each stretch's first step (NaN: the controller's choice)
        step=jnp.full((), jnp.nan, dtype) if dt0 is None else jnp.asarray(dt0, dtype),
        meter=progress_meter.init(),
    )

    def cond(state):
        return (state.s < 1) & state.converged & (state.result == diffrax.RESULTS.successful) & (
            state.count < max_events
        )

    def body(state):
        s0, count, start = state.s, state.count, state.start
        q, qd, modes, jump, force_scale, value, penetration, converged, valid = _transition(
            system, time(s0), state.q, state.qd, rest_speed
        )
        # where the transition has no solution (a mass matrix that is not positive definite)
        # the stretch starts from the state before it: its first step meets the fault, which
        # stops the run and names it, where a NaN state had every step rejected
        finite = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(qd))
        q, qd = jnp.where(finite, q, state.q), jnp.where(finite, qd, state.qd)
        # the events are counted from the first transition after the start
        event_times = state.event_times.at[count].set(jnp.where(start, jnp.inf, time(s0)))
        impulses = state.impulses.at[count].set(jnp.where(start, 0, jump))
        count = count + ~start
        stretches = state.stretches.at[count].set(modes.mode)
        # a member with invalid coefficients saves nothing: its run never started
        index = jnp.where(valid, state.index, k)
        args = FieldArgs(system, t0, span, modes, _SLIDE_SPEED * atol, force_scale)
        run = integrate(
            solver,
            controller,
            s0,
            # the forces integrated from zero on each stretch after the health record, and the
            # event's value (`_rates`): only the forces' rate is saved
            (q, qd, jnp.concatenate([state.health, jnp.zeros(3 * c + 1, dtype)])),
            args,
            state.step if adaptive else dt0,
            saves=saves,
            records=state.records,
            index=index,
            record=lambda y, rate: (y[0], y[1], rate[2][HEALTH:-1] / scale, count),
            max_steps=max_steps,
            adjoint=adjoint,
            progress_meter=progress_meter,
            meter=state.meter,
            event=(lambda s, y: _event_value(s, y, args), value, lambda rate: rate[2][-1]),
        )
        q1, qd1, record = run.y
        return EventLoop(
            s=run.s,
            q=q1,
            qd=qd1,
            modes=modes,
            stretches=stretches,
            start=jnp.array(False),
            health=record[:HEALTH],
            records=run.records,
            index=jnp.where(valid, run.index, state.index),
            count=count,
            event_times=event_times,
            impulses=impulses,
            # what the start brings in is the caller's, projected away; not counted
            penetration=jnp.where(start, state.penetration, jnp.maximum(state.penetration, penetration)),
            start_penetration=jnp.where(start, penetration, state.start_penetration),
            converged=converged,
            valid=valid,
            result=run.result,
            unlocated=run.unlocated,
            steps=state.steps + run.stats["num_steps"],
            # The next stretch starts with half the step that met the event: the motion's
            # own scale, with room for an impact's change. (The controller's estimate from
            # the derivatives there took a ball's bounces up from tiny steps: 514 steps for
            # 16 members against 383; the whole step, 303, but a rocking block's ninth
            # impulse 2e-6 off Housner's ratio, against 3e-7 with the half.)
            step=jnp.where(run.crossed, 0.5 * jax.lax.stop_gradient(run.bracket[1] - run.bracket[0]), state.step),
            meter=run.meter,
        )

    # reverse mode through the events needs the checkpointed loop, forward mode the plain one
    final = eqxi.while_loop(
        cond, body, init, max_steps=max_events + 1, buffers=lambda state: state.records, kind=loop_kind(adjoint)
    )
    progress_meter.close(final.meter)
    q, qd, forces, stretch = (x[:k] for x in final.records)
    normal, tangent = forces[:, :c], forces[:, c:].reshape(k, c, 2)
    # a save never reached has every contact open
    mode = jnp.where((jnp.arange(k) < final.index)[:, None], final.stretches[stretch], OPEN)
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    status = final_status(final.result, start_finite, final.health, q, qd)
    # A loop that ended before t1 with its last solve successful and no fault met stopped for
    # the contacts (the saves it never reached are voided, which `_status` alone would read
    # as a non-finite state).
    stopped = (
        (final.s < 1)
        & (final.result == diffrax.RESULTS.successful)
        & jnp.all(final.health[:FATAL] == 0)
        & start_finite
    )
    contacts_status = jnp.where(final.converged, Status.MAX_EVENTS_REACHED, Status.CONTACT_UNRESOLVED)
    status = jnp.where(stopped, contacts_status, status)
    # The event's root finder stops only where the event value is within 1e-14 of zero: it
    # fails where a value jumps across zero instead of crossing it.
    status = jnp.where(final.unlocated & start_finite, Status.CONTACT_UNRESOLVED, status)
    status = jnp.where(final.valid, status, Status.INVALID_PARAMETERS).astype(jnp.int32)

    def saved(t, q, qd):
        levels = system.constraint_levels(t, q, qd)
        return levels[-1].contacts.normal.phi, levels_violation(levels)

    gap, violation = at_saves(saved, ts, q, qd)
    penetration = jnp.maximum(final.penetration, jnp.max(jnp.where(jnp.isfinite(gap), -gap, 0), initial=0))
    # exact contacts penetrate by round-off and the events' location: more is a contact passed
    status = jnp.where((status == Status.SUCCESS) & (penetration > rest_speed), Status.CONTACT_MISSED, status)
    record = ContactRecord(
        gap, mode, normal, tangent, final.event_times, final.impulses, penetration, final.start_penetration
    )
    return Solution(ts, q, qd, *violation, status, {"num_steps": final.steps}, record)
