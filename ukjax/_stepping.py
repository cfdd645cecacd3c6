"""What a simulation steps with: the vector field its solver integrates, the step-size
controllers that end a run at a fault and keep a step from crossing a contact unseen, and the
loop that takes the steps."""

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, PyTree

from ._core import sqrt_eps
from ._event_values import mode_values
from ._projection import drift_step
from ._backends._acceleration import solve_system
from ._solution import FATAL, HEALTH


class FieldArgs(eqx.Module):
    """What the vector field reads besides the state, in the normalised time `s = (t − t0) /
    span` of a run: the system, `t0` and `span`; between events (`_events`) the contacts'
    `modes`, the slip speed `rest` below which a sliding direction turns (`sliding_now`) and
    the contacts' force scales (`force_scale`, the event values' units); None without contacts."""

    system: eqx.Module
    t0: Array
    span: Array
    modes: PyTree = None
    rest: Array | None = None
    force_scale: Array | None = None

    def time(self, s):
        """The physical time at `s`."""
        return self.t0 + s * self.span


@jax.custom_jvp
def _tied(q, qd, parameters):
    return q, qd


@_tied.defjvp
def _tied_jvp(primals, tangents):
    # Zero tangents arrive instantiated, but `linearize` would take them for zero again: a
    # term in every tangent keeps both perturbed.
    zero = 0 * sum(jnp.sum(t) for t in jax.tree.leaves(tangents))
    return primals[:2], tuple(t + zero.astype(t.dtype) for t in tangents[:2])


def vector_field(s, y, args):
    q, qd = y[:2]
    # JAX settles which of a loop's carries are batched (under vmap) or perturbed (under jvp,
    # linearize and diffrax's checkpointed adjoint) by transforming the loop body until they
    # stop changing. The rates are called alike in every pass, so that their large program is
    # transformed once, not once per pass: the time is batched wherever the state is, and the
    # state perturbed wherever it or a parameter is (a quarter less tracing:
    # `benchmarks/fit_gradients.py`).
    s = jnp.where(jnp.any(jnp.isnan(q)), s, s)
    q, qd = _tied(q, qd, [x for x in jax.tree.leaves(args) if eqx.is_inexact_array(x)])
    return _rates(s, q, qd, args)


# Jitted so that its trace is cached: diffrax traces the vector field once per stage and once
# more per shape query, and for the unrolled kernels each trace costs seconds. Under vmap, jvp and the
# adjoints JAX transforms the cached program instead of tracing the Python again. Always nested
# in `_simulate`'s program, so with no compiler options of its own.
@eqx.filter_jit
def _rates(s, q, qd, args):
    # in the normalised time s = (t - t0) / (t1 - t0) of `_simulate`
    system, span, modes, rest = args.system, args.span, args.modes, args.rest
    t = args.time(s)
    # between events the contacts keep the modes the simulation chose (`_events`)
    sol, contacts, state = solve_system(system, t, q, qd, modes, rest)
    # Results follow the state's dtype even where the model's parameters are wider.
    qdd = sol.acceleration.astype(qd.dtype)
    # one reduction, not three: each is an operation of its own in every stage
    nonfinite = ~jnp.all(jnp.isfinite(jnp.concatenate([qdd, q.astype(qd.dtype), qd])))
    faults = jnp.stack([~sol.mass_ok, ~sol.rank_ok, nonfinite, sol.inconsistency > sqrt_eps(qd)])
    # A finite stand-in where no acceleration exists: the step controller then shrinks the
    # step onto the fault (the indicator jumps there) and `StopAtFault` ends the solve,
    # instead of rejecting NaN steps until max_steps.
    fatal = jnp.any(faults[:FATAL])
    qdd = jnp.where(fatal, 0, qdd)
    # the indicators' sign follows the span's; only whether they are zero is read
    record = faults.astype(qd.dtype)
    if contacts is not None:
        # With contacts the record goes on with the contacts' forces (λₙ, then λₜ): the state
        # integrates them, so that the saves read them off the derivative of the steps' dense
        # output, at the cost of its interpolation, not of a contact solve per save. In the
        # indicators' leaf, as each leaf of the state costs operations of its own in every
        # stage; left out of the steps' error control (`events_norm`).
        forces = jnp.concatenate([contacts.normal, contacts.tangent.reshape(-1)]).astype(qd.dtype)
        record = jnp.concatenate([record, jnp.where(fatal, 0, forces)])
        # and last the event's value at this state, not scaled: a step's last stage is at its
        # end (Tsit5's and Kvaerno5's), where `integrate` reads it instead of solving again;
        # finite, for its integral is carried too (and read by nothing)
        value = mode_values(state, contacts, modes, args.force_scale)
        value = jnp.minimum(value, jnp.finfo(qd.dtype).max).astype(qd.dtype)
        return span * qd, span * qdd, jnp.concatenate([span * record, value[None]])
    return span * qd, span * qdd, span * record


def events_norm(error) -> Array:
    """The step controller's norm of the scaled error (`diffrax.PIDController`'s RMS) over
    the state and the fault indicators, not the integrated contact forces (`_rates`): a force's
    integral is read for the saves only, and its error does not decide the steps."""
    return optx.rms_norm((error[0], error[1], error[2][:HEALTH]))


class StopAtFault(diffrax.AbstractStepSizeController):
    """`controller`, with the solve ended at the first accepted step that met a fatal fault:
    time jumps to the end (1 in the normalised time of `_simulate`), and the state records
    where that step began, so that the saves from there on are voided.

    A diffrax `Event` does the same, but makes the solve's result a traced value: diffrax
    then traces its step once more, and the program carries the event's machinery.
    """

    controller: diffrax.AbstractStepSizeController

    def wrap(self, direction):
        return StopAtFault(self.controller.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return tnext, (state, jnp.full((), jnp.inf, y0[0].dtype))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, stopped = controller_state
        keep, tprev, tnext, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        stop = keep & jnp.any(y1_candidate[2][:FATAL] != 0)
        end = jnp.ones_like(tprev)
        return (
            keep,
            jnp.where(stop, end, tprev),
            jnp.where(stop, end, tnext),
            made_jump,
            (state, jnp.where(stop, t0, stopped)),
            result,
        )


class Bounded(diffrax.AbstractStepSizeController):
    """`controller`, with no step longer than half the least time in which a contact could
    be crossed (`ContactRows.crossing`), at the state where the step begins and at the state
    where it ends: events are seen by the sign of a gap at the steps' ends, and a step that
    carries a ball through a thin wall sees it positive at both (conservative advancement).
    The half leaves room for the relative speed to vary within the step; the end's bound
    rejects a step over which it grew past that room (a body falling from rest has no speed
    where the step begins)."""

    controller: diffrax.AbstractStepSizeController

    def wrap(self, direction):
        return Bounded(self.controller.wrap(direction))

    @staticmethod
    def _longest(s, y, args):
        q, qd = y[:2]
        crossing = args.system.constraint_levels(args.time(s), q, qd)[-1].contacts.crossing
        return 0.5 * jnp.min(crossing) / jnp.where(args.span == 0, 1, jnp.abs(args.span))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return jnp.minimum(tnext, t0 + self._longest(t0, y0, args)), state

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        accepted, _, tnext, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
        )
        # the step was no longer than the start's bound (the previous call's `tnext`); it is
        # taken again, within the end's bound, if it was longer than the whole time the end's
        # speed takes to cross (twice that bound: a step just within it is kept)
        longest = self._longest(t1, y1_candidate, args)
        keep = accepted & (t1 - t0 <= 2 * longest)
        tnext = jnp.where(keep, jnp.minimum(tnext, t1 + longest), jnp.minimum(jnp.where(accepted, jnp.inf, tnext), t0 + longest))
        return keep, jnp.where(keep, t1, t0), tnext, made_jump, state, result


class Projecting(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """`solver`, with the drift of each step taken out (`drift_step`) where it ends: the
    equality constraints are held to second order in one step's drift, not to its sum over
    the run. The steps' dense output (the saves between step ends) is the solver's own."""

    solver: diffrax.AbstractSolver
    # diffrax reads and sets a Runge–Kutta solver's `scan_kind` for forward mode, and takes
    # this wrapper for one: handed on to the solver inside
    scan_kind: str | None = None

    def _inner(self):
        if self.scan_kind is None or not isinstance(self.solver, diffrax.AbstractRungeKutta):
            return self.solver
        return eqx.tree_at(lambda s: s.scan_kind, self.solver, self.scan_kind, is_leaf=lambda x: x is None)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self._inner().init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self._inner().step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        q, qd = drift_step(args.system, args.time(t1), *y1[:2])
        return (q, qd, *y1[2:]), y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self._inner().func(terms, t0, y0, args)


class _FallState(eqx.Module):
    lower: Array
    upper: Array
    lower_value: Array
    upper_value: Array
    replaced: Array  # +1 where the last step moved `lower`, -1 `upper`, 0 before the first
    last: Array
    value: Array
    step: Array  # from `last` to the next point
    flat: Array  # the value where the bracket began is below atol


class FallingRoot(optx.AbstractRootFinder):
    """The root of a scalar function that falls through zero in `[lower, upper]` (`f(lower) > 0
    ≥ f(upper)`), by the Illinois method: regula falsi, with the value at an end halved where
    the other end moved twice running, so that both ends close in. Where bisection to 1e-14
    takes 30–47 evaluations from a step's width, this takes about 10 on a smooth crossing (11
    against 47 in `tests/test_contacts.py`); on a jump it closes in on the jump about as
    bisection does. Where the value it starts from is already below `atol` (a contact held at
    its offset by the others, beside another's crossing), the secant leans on that end and
    crawls: it bisects instead.

    Its options: `lower`, `upper`, and `lower_value` (`f(lower)`, known to the caller).
    It stops at an evaluation with `|f| < atol` whose next step is within `atol + rtol·|y|`
    (as bisection's ends are) and returns that point, or fails (`nonlinear_divergence`) where
    the ends are that close with no such value between (a jump across zero).
    """

    rtol: float
    atol: float
    norm: ClassVar[Callable] = optx.max_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        dtype = f_struct.dtype
        lower, upper, lower_value = (jnp.asarray(options[k], dtype) for k in ("lower", "upper", "lower_value"))
        nan = jnp.full((), jnp.nan, dtype)
        inf = jnp.full((), jnp.inf, dtype)
        flat = jnp.abs(lower_value) < self.atol
        return _FallState(lower, upper, lower_value, nan, jnp.array(0), y, inf, inf, flat)

    def step(self, fn, y, args, options, state, tags):
        value, aux = fn(y, args)
        above = value > 0
        # the Illinois rule: an end left behind twice running has its value halved
        lower_value = jnp.where(~above & (state.replaced == -1), 0.5 * state.lower_value, state.lower_value)
        upper_value = jnp.where(above & (state.replaced == 1), 0.5 * state.upper_value, state.upper_value)
        lower, lower_value = jnp.where(above, y, state.lower), jnp.where(above, value, lower_value)
        upper, upper_value = jnp.where(above, state.upper, y), jnp.where(above, upper_value, value)
        secant = upper - upper_value * (upper - lower) / (upper_value - lower_value)
        # Bisection where the value the bracket began with is below atol: a secant leaning
        # on a value that small (an open contact held at its gap's offset by the others, a
        # finger at its limit beside another joint's impact) moved by a fraction of 1e-11 a
        # step, and 256 steps did not find the impact.
        inside = jnp.isfinite(secant) & (lower < secant) & (secant < upper) & ~state.flat
        # a zero is the root: stay there
        new = jnp.where(value == 0, y, jnp.where(inside, secant, lower + 0.5 * (upper - lower)))
        replaced = jnp.where(above, 1, -1)
        state = _FallState(lower, upper, lower_value, upper_value, replaced, y, value, jnp.abs(new - y), state.flat)
        return new, state, aux

    def terminate(self, fn, y, args, options, state, tags):
        small = jnp.abs(state.value) < self.atol
        # a small value is not enough where the function is flat: the next step must be small too
        settled = state.step < self.atol + self.rtol * jnp.abs(state.last)
        # ends this close with no small value: the function jumps across zero there
        closed = state.upper - state.lower < self.atol + self.rtol * jnp.abs(state.upper)
        failed = closed & ~small
        return (small & settled) | closed, optx.RESULTS.where(
            failed, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return state.last, aux, {}


def loop_kind(adjoint: diffrax.AbstractAdjoint) -> str:
    """The kind of `integrate`'s while loops for `adjoint`: checkpointed for reverse mode,
    plain for forward mode."""
    if isinstance(adjoint, diffrax.ForwardMode):
        return "lax"
    if isinstance(adjoint, diffrax.RecursiveCheckpointAdjoint):
        return "checkpointed"
    raise NotImplementedError(
        "simulate takes its steps in a loop of its own: its adjoints are diffrax.RecursiveCheckpointAdjoint "
        f"(reverse mode) and diffrax.ForwardMode, not {type(adjoint).__name__}."
    )


class Integration(eqx.Module):
    """Where `integrate` stands: the step to take next (`s` to `snext`), the saves so far,
    and, once a step's end crossed the event, that step (`bracket`: its start, its end and
    its dense output)."""

    s: Array
    snext: Array
    y: PyTree
    solver_state: PyTree
    controller_state: PyTree
    value: Array  # the event's value at `s`
    crossed: Array
    bracket: tuple
    records: PyTree
    index: Array
    result: diffrax.RESULTS
    unlocated: Array  # the event's crossing, where its root could not be located
    accepted: Array
    rejected: Array
    meter: PyTree

    @property
    def stats(self) -> dict:
        """The numbers of steps, as diffrax counts them."""
        return {
            "num_steps": self.accepted + self.rejected,
            "num_accepted_steps": self.accepted,
            "num_rejected_steps": self.rejected,
        }


# Saves interpolated at once on a step (a vectorised evaluation of its dense output): past
# this, a trip's cost no longer falls (`benchmarks/ball_drop.py`'s 25 001 saves).
_SAVES_AT_ONCE = 128


def save_rows(k: int) -> int:
    """The rows of `integrate`'s records for `k` saves: the saves' own, then the rows that
    take a block's saves not due (`_save`); the first `k` are the saves."""
    return k + min(_SAVES_AT_ONCE, k)


def _save(interpolation, saves, upto, record, records, index, kind):
    """The saves from `index` on that lie at or before `upto`, interpolated on the step's
    dense output and written by `record` into `records` (`save_rows` rows), up to
    `_SAVES_AT_ONCE` at a time."""
    k = saves.shape[0]
    size = min(_SAVES_AT_ONCE, k)

    def cond(carry):
        _, i = carry
        return (i < k) & (saves[jnp.minimum(i, k - 1)] <= upto)

    def body(carry):
        records, i = carry
        # a block of the records, from the first save due or ending at the last save
        rows = jnp.minimum(i, k - size) + jnp.arange(size)
        due = (rows >= i) & (saves[rows] <= upto)
        # each save's state and its rate (the dense output's derivative), for `record`
        rate = lambda s: jax.jvp(interpolation.evaluate, (s,), (jnp.ones_like(s),))  # noqa: E731
        new = jax.vmap(record)(*jax.vmap(rate)(saves[rows]))

        # Each save's row is written once, by the trip that saves it: a loop's buffer is
        # transposed as written once per row (its cotangent read once, not cleared), and
        # a row written again with what it held had its derivative counted once per write.
        # The block's rows not due go to the rows after the saves, whose cotangent is zero.
        # (Written out of bounds and dropped, their cotangents would be read back as NaN.)
        target = jnp.where(due, rows, k + jnp.arange(size))

        # mapped over `new`: the records' leaves are buffers, each a pytree of its own
        new = jax.tree.map(lambda x, all: all.at[target].set(x, unique_indices=True), new, records)
        return new, i + jnp.sum(due, dtype=i.dtype)

    # the records as buffers: written in place where a member of a batch saves, not copied
    # whole for every member that does not
    return eqxi.while_loop(cond, body, (records, index), max_steps=k, buffers=lambda carry: carry[0], kind=kind)


def integrate(
    solver,
    controller,
    s0,
    y0,
    args,
    dt0,
    *,
    saves,
    records,
    index,
    record,
    max_steps,
    adjoint,
    progress_meter,
    meter,
    event=None,
) -> Integration:
    """Integrate `vector_field` from `s0` to 1 (the normalised time of `_simulate`) with
    diffrax's `solver` and step-size `controller`, in a loop of ukjax's own: the program then
    holds no runtime check of the save times or the first step (host callbacks, which JAX's
    persistent compilation cache refuses), each save is interpolated once on the step that
    reaches it, and an event's value is evaluated once per step, at the step's end.

    **Arguments:**

    - `solver`, `controller`: diffrax's (wrapped or not by `StopAtFault` and `Bounded`);
      `dt0` the first step (None, or under an adaptive controller NaN: the controller's
      choice).
    - `s0`, `y0`, `args`: the start and the vector field's arguments.
    - `saves`: the save times, sorted; the saves from `index` on are due.
    - `records`, `record`: leaves with `save_rows(k)` rows for the `k` saves, the saves in the
      first `k`; `record(y, rate)` is a save's rows (from its state and the state's rate in
      `s`, both from the step's dense output).
    - `max_steps`: the most steps; `adjoint`: diffrax's, for the loops' kind (`loop_kind`).
    - `progress_meter`: diffrax's, with its state `meter`.
    - `event`: None, or `(function, value, read)`: the run stops where `function(s, y)`
      falls from above zero to zero or below between two steps' ends, located on the step's
      dense output (`FallingRoot`, to 1e-14); `value` its value at `s0`; `read(rate)` the same
      value from the vector field's output at `(s, y)`, read at a step's end from the
      solver's last stage where the solver keeps it (first same as last), not evaluated again.

    **Returns:**

    The `Integration` at the end: `s` and `y` where the run stopped (1, an event, a fault, or
    `max_steps`), `result` diffrax's (a root that could not be located included).
    """
    kind = loop_kind(adjoint)
    if kind == "lax" and isinstance(solver, (diffrax.AbstractRungeKutta, Projecting)) and solver.scan_kind is None:
        # a Runge–Kutta solver's stages in a plain loop, for forward mode (as diffrax does)
        solver = eqx.tree_at(lambda s: s.scan_kind, solver, "lax", is_leaf=lambda x: x is None)
    terms = diffrax.ODETerm(vector_field)
    error_order = solver.error_order(terms)
    one = jnp.ones_like(s0)
    # a step ending within 100 ulps of the end ends there (diffrax's rule)
    floor = np.asarray(1 - 100 * np.finfo(s0.dtype).epsneg, s0.dtype)
    function, value, read = (lambda s, y: jnp.full((), jnp.inf, s.dtype), jnp.inf, None) if event is None else event
    init = lambda dt0: controller.init(terms, s0, one, y0, dt0, args, solver.func, error_order)  # noqa: E731
    inner = controller
    while isinstance(inner, (StopAtFault, Bounded)):
        inner = inner.controller
    if dt0 is None or isinstance(inner, diffrax.ConstantStepSize):
        snext, controller_state = init(dt0)
    else:
        # a NaN first step is the controller's choice (its estimate costs two evaluations)
        dt0 = jnp.asarray(dt0, s0.dtype)
        snext, controller_state = jax.lax.cond(
            jnp.isnan(dt0), lambda: init(None), lambda: init(jnp.where(jnp.isnan(dt0), 0, dt0))
        )
    snext = jnp.minimum(snext, one)
    solver_state = solver.init(terms, s0, snext, y0, args)
    # a first-same-as-last Runge–Kutta method's state after a step: (False, the vector field
    # at the step's end); other solvers' states hold other things (ReversibleHeun's: the vector
    # field at a point that is not the step's end)
    last_stage = isinstance(solver, diffrax.AbstractRungeKutta) and solver_state is not None
    dense = eqx.filter_eval_shape(solver.step, terms, s0, snext, y0, args, solver_state, False)[2]
    zero = jnp.zeros((), jnp.int32)
    value = jnp.asarray(value, s0.dtype)
    start = Integration(
        s=s0,
        snext=snext,
        y=y0,
        solver_state=solver_state,
        controller_state=controller_state,
        value=value,
        crossed=jnp.array(False),
        bracket=(s0, snext, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), dense)),
        records=records,
        index=index,
        result=diffrax.RESULTS.successful,
        unlocated=jnp.array(False),
        accepted=zero,
        rejected=zero,
        meter=meter,
    )

    def cond(x):
        return (x.s < 1) & ~x.crossed & (x.result == diffrax.RESULTS.successful)

    def body(x):
        y1, error, dense, solver_state, solver_result = solver.step(terms, x.s, x.snext, x.y, args, x.solver_state, False)
        error = jax.tree.map(lambda e: jnp.where(jnp.isnan(e), jnp.inf, e), error)
        keep, sprev, snext, _, controller_state, controller_result = controller.adapt_step_size(
            x.s, x.snext, x.y, y1, args, error, error_order, x.controller_state
        )
        sprev = jnp.minimum(sprev, one)
        snext = jnp.where(snext > floor, jnp.where(keep, one, sprev + 0.5 * (one - sprev)), snext)
        value = function(x.snext, y1) if read is None or not last_stage else read(solver_state[1])
        crossed = keep & (x.value > 0) & (value <= 0)
        advance = keep & ~crossed
        interpolation = solver.interpolation_cls(t0=x.s, t1=x.snext, **dense)
        # a step that crossed saves up to the event, once it is located
        records, index = _save(
            interpolation, saves, jnp.where(advance, x.snext, -jnp.inf), record, x.records, x.index, kind
        )
        result = diffrax.RESULTS.where(keep, solver_result, diffrax.RESULTS.successful)
        result = diffrax.RESULTS.where(result == diffrax.RESULTS.successful, controller_result, result)
        where = lambda new, old: jax.tree.map(lambda a, b: jnp.where(advance, a, b), new, old)  # noqa: E731
        return Integration(
            s=where(sprev, x.s),
            snext=jnp.where(crossed, x.snext, snext),
            y=where(y1, x.y),
            solver_state=where(solver_state, x.solver_state),
            controller_state=jax.tree.map(lambda a, b: jnp.where(crossed, b, a), controller_state, x.controller_state),
            value=jnp.where(advance, value, x.value),
            crossed=crossed,
            bracket=(x.s, x.snext, dense),
            records=records,
            index=index,
            result=result,
            unlocated=x.unlocated,
            accepted=x.accepted + keep,
            rejected=x.rejected + ~keep,
            meter=progress_meter.step(x.meter, jnp.where(advance, sprev, x.s)),
        )

    checkpoints = adjoint.checkpoints if isinstance(adjoint, diffrax.RecursiveCheckpointAdjoint) else None
    x = eqxi.while_loop(
        cond, body, start, max_steps=max_steps, buffers=lambda x: x.records, kind=kind, checkpoints=checkpoints
    )
    x = eqx.tree_at(lambda x: x.result, x, diffrax.RESULTS.where(cond(x), diffrax.RESULTS.max_steps_reached, x.result))
    if event is None:
        return x

    lower, upper, dense = x.bracket
    interpolation = solver.interpolation_cls(t0=lower, t1=upper, **dense)

    def locate():
        # values fall through zero; a member that met no event has its root at its end
        root = optx.root_find(
            lambda s, _: jnp.where(x.crossed, function(s, interpolation.evaluate(s)), upper - s),
            FallingRoot(rtol=1e-14, atol=1e-14),
            y0=upper,
            options=dict(lower=lower, upper=upper, lower_value=jnp.where(x.crossed, x.value, upper - lower)),
            throw=False,
        )
        unlocated = x.crossed & (root.result != optx.RESULTS.successful)
        return root.value, diffrax.RESULTS.where(unlocated, diffrax.RESULTS.promote(root.result), x.result), unlocated

    # no root to find where no member of a batch met an event
    s, result, unlocated = jax.lax.cond(
        eqxi.unvmap_any(x.crossed), locate, lambda: (upper, x.result, jnp.array(False))
    )
    s = jnp.where(x.crossed, s, x.s)
    y = jax.tree.map(lambda a, b: jnp.where(x.crossed, a, b), interpolation.evaluate(s), x.y)
    records, index = _save(interpolation, saves, jnp.where(x.crossed, s, -jnp.inf), record, x.records, x.index, kind)
    return eqx.tree_at(
        lambda x: (x.s, x.y, x.records, x.index, x.result, x.unlocated), x, (s, y, records, index, result, unlocated)
    )
