"""Integration of a system's equations of motion with diffrax."""

import enum
import warnings
from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float, Int, Real

from . import _linalg as la
from ._arrays import as_inexact
from ._core import sqrt_eps
from ._jit import jit
from ._projection import drift_step
from ._robots import kernels
from ._systems import AbstractSystem, check_state, levels_violation, solve_dynamics, solve_levels
from ._unilateral import (
    CONE,
    OPEN,
    PULL,
    SLIDING,
    STICKING,
    TOUCH,
    AbstractUnilateral,
    ContactRecord,
    Modes,
    check_coefficients,
    norm,
    select_modes,
    sliding_now,
    valid_coefficients,
)


class Status(enum.IntEnum):
    """Outcome of a simulation, one per batch member in `Solution.status`."""

    SUCCESS = 0
    MAX_STEPS_REACHED = 1
    SOLVER_FAILED = 2
    NONFINITE_STATE = 3
    INCONSISTENT_CONSTRAINTS = 4
    SINGULAR_MASS_MATRIX = 5
    REDUNDANT_CONSTRAINTS = 6
    CONTACT_UNRESOLVED = 7
    MAX_EVENTS_REACHED = 8
    INVALID_PARAMETERS = 9
    CONTACT_MISSED = 10


_MESSAGES = {
    Status.SUCCESS: "",
    Status.MAX_STEPS_REACHED: "The solver ran out of steps before t1: raise max_steps, loosen "
    "rtol/atol, or use ukjax.stiff_solver() if large Baumgarte gains made the problem stiff.",
    Status.SOLVER_FAILED: "The solver failed (step size underflow or a failed implicit solve); "
    "check the model for singular configurations.",
    Status.NONFINITE_STATE: "The state or the acceleration became non-finite (NaN/inf): check the "
    "initial conditions and the model's functions for NaN.",
    Status.INCONSISTENT_CONSTRAINTS: "The constraints were inconsistent (A A⁺ b ≠ b) during the "
    "run, or servo constraints asked for what the inputs cannot produce: check for "
    "contradictory constraints, and that the actuation reaches every servo constraint.",
    Status.SINGULAR_MASS_MATRIX: "The mass matrix stopped being symmetric positive definite "
    "during the run (the solve stopped there): check the model's inertias and that its "
    "configuration stays valid.",
    Status.REDUNDANT_CONSTRAINTS: "method='cholesky' met linearly dependent (redundant) "
    "constraint rows during the run (the solve stopped there): use method='svd', which handles "
    "any rank.",
    Status.CONTACT_UNRESOLVED: "At an event no choice of open, sliding and sticking contacts solved "
    "the contact problem (Painlevé's paradox: sliding friction that no normal force balances, or "
    "a search that did not settle), or an event could not be located (a gap, contact force or "
    "slip that jumps across zero instead of crossing it); the run stopped there. Check the "
    "friction coefficients and the contact geometry.",
    Status.MAX_EVENTS_REACHED: "The run met max_events contact events (impacts, releases, "
    "stick–slip changes) before t1: raise max_events.",
    Status.INVALID_PARAMETERS: "A contact's friction coefficient was negative or not finite, or its "
    "restitution outside [0, 1]: the run did not start.",
    Status.CONTACT_MISSED: "A contact was found penetrated by more than √atol: the run passed through "
    "it between two steps without seeing it. Tighten rtol/atol or report the geometry.",
}

# Components of the health record integrated beside the state: each integrates an indicator,
# so it is non-zero once an accepted step met the fault at any stage, not only at saved times.
_MASS, _RANK, _NONFINITE, _INCONSISTENT = range(4)
_FATAL = 3  # the first three stop the solve: no acceleration exists there


# rtol and atol of `simulate` unless given
DEFAULT_TOL = 1e-8


class Solution(eqx.Module):
    """The result of [`ukjax.simulate`][] at the saved times.

    **Attributes:**

    - `ts`: saved times, shape (k,).
    - `q`, `qd`: coordinates and velocities, shape (k, n); `inf` from the step where a fault
      stopped the solve onward.
    - `phi`, `phid`: constraint violation at position and velocity level, shape (k, p), for a
      `ConstrainedSystem` (see its `violation`) or the servo tracking error of a closed loop;
      `None` for a system without constraints.
    - `status`: a [`ukjax.Status`][] code (integer array; one per member of a batch).
    - `stats`: diffrax's statistics (number of steps and so on).
    - `contacts`: for a system with unilateral constraints, a [`ukjax.ContactRecord`][]
      (gaps, modes and forces at the saved times, the events and their impulses, the
      largest penetration); None otherwise.
    """

    ts: Float[Array, " k"]
    q: Float[Array, "k n"]
    qd: Float[Array, "k n"]
    phi: Float[Array, "k p"] | None
    phid: Float[Array, "k p"] | None
    status: Int[Array, ""]
    stats: dict
    contacts: ContactRecord | None = None

    @property
    def success(self) -> Array:
        """True where the simulation succeeded."""
        return self.status == Status.SUCCESS


def stiff_solver(rtol: float = 1e-8, atol: float = 1e-8) -> diffrax.AbstractSolver:
    """The solver for stiff problems (large Baumgarte gains): `Kvaerno5` with a Newton root
    finder. Implicit solvers only pay off with Newton; with diffrax's default chord iteration
    they take as many steps as an explicit solver.

    **Arguments:**

    - `rtol`, `atol`: tolerances of the Newton iteration.

    **Returns:**

    A diffrax solver to pass as `simulate(..., solver=...)`.
    """
    return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol))


class RK4(diffrax.AbstractERK):
    """The classic fourth-order Runge–Kutta method (MATLAB's `ode4`), for fixed steps
    (`simulate(..., solver=ukjax.RK4(), adaptive=False, dt0=h)`): it has no error estimate.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = diffrax.ButcherTableau(
        c=np.array([0.5, 0.5, 1.0]),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.zeros(4),
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    )
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


@jax.custom_jvp
def _tied(q, qd, parameters):
    return q, qd


@_tied.defjvp
def _tied_jvp(primals, tangents):
    # Zero tangents arrive instantiated, but `linearize` would take them for zero again: a
    # term in every tangent keeps both perturbed.
    zero = 0 * sum(jnp.sum(t) for t in jax.tree.leaves(tangents))
    return primals[:2], tuple(t + zero.astype(t.dtype) for t in tangents[:2])


def _vector_field(s, y, args):
    q, qd, _ = y
    # JAX settles which of a loop's carries are batched (under vmap) or perturbed (under jvp,
    # linearize and diffrax's checkpointed adjoint) by transforming the loop body until they
    # stop changing. The rates are called alike in every pass, so that their large program is
    # transformed once, not once per pass: the time is batched wherever the state is, and the
    # state perturbed wherever it or a parameter is. Tracing on the coordinated robots, 2
    # cores: a vmapped simulation 1.9 -> 1.4 s, its forward-mode derivative 1.9 -> 1.4 s, the
    # reverse-mode gradient in all the parameters 8.8-9.1 -> 7.5-7.6 s.
    s = jnp.where(jnp.any(jnp.isnan(q)), s, s)
    q, qd = _tied(q, qd, [x for x in jax.tree.leaves(args) if eqx.is_inexact_array(x)])
    return _rates(s, q, qd, args)


# Jitted so that its trace is cached: diffrax traces the vector field once per stage and once
# more per shape query, and for the unrolled kernels each trace costs seconds (measured on the
# coordinated robots' servo control: 9.4 s of tracing per simulation). Under vmap, jvp and the
# adjoints JAX transforms the cached program instead of tracing the Python again. Always nested
# in `_simulate`'s program, so with no compiler options of its own.
@eqx.filter_jit
def _rates(s, q, qd, args):
    # in the normalised time s = (t - t0) / (t1 - t0) of `_simulate`
    system, t0, span, modes, rest = args
    t = t0 + s * span
    # between events the contacts keep the modes the simulation chose (`_events`); mapped over
    # states, a robot tree's solve is one call of the compiled kernel (`kernels.solve`)
    if modes is None:
        sol = kernels.solve(system, t, q, qd)
    else:
        d = system.dynamics(t, q, qd)
        sol = solve_dynamics(d, sliding_now(modes, d.levels[-1].contacts, rest))
    # Results follow the state's dtype even where the model's parameters are wider.
    qdd = sol.acceleration.astype(qd.dtype)
    nonfinite = ~(jnp.all(jnp.isfinite(qdd)) & jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(qd)))
    faults = jnp.stack([~sol.mass_ok, ~sol.rank_ok, nonfinite, sol.inconsistency > sqrt_eps(qd)])
    # A finite stand-in where no acceleration exists: the step controller then shrinks the
    # step onto the fault (the indicator jumps there) and `_StopAtFault` ends the solve,
    # instead of rejecting NaN steps until max_steps.
    qdd = jnp.where(jnp.any(faults[:_FATAL]), 0, qdd)
    # the indicators' sign follows the span's; only whether they are zero is read
    return span * qd, span * qdd, span * faults.astype(qd.dtype)


class _StopAtFault(diffrax.AbstractStepSizeController):
    """`controller`, with the solve ended at the first accepted step that met a fatal fault:
    time jumps to the end (1 in the normalised time of `_simulate`), and the state records
    where that step began, so that the saves from there on are voided.

    A diffrax `Event` does the same, but makes the solve's result a traced value: diffrax
    then traces its step once more, and the program carries the event's machinery (0.3–0.5 s
    more tracing for a batch of the coordinated robots or of Cassie).
    """

    controller: diffrax.AbstractStepSizeController

    def wrap(self, direction):
        return _StopAtFault(self.controller.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return tnext, (state, jnp.full((), jnp.inf, y0[0].dtype))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, stopped = controller_state
        keep, tprev, tnext, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        stop = keep & jnp.any(y1_candidate[2][:_FATAL] != 0)
        end = jnp.ones_like(tprev)
        return (
            keep,
            jnp.where(stop, end, tprev),
            jnp.where(stop, end, tnext),
            made_jump,
            (state, jnp.where(stop, t0, stopped)),
            result,
        )


class _Bounded(diffrax.AbstractStepSizeController):
    """`controller`, with no step longer than half the least time in which a contact could
    be crossed at the state where it begins (`ContactRows.crossing`): events are seen by the
    sign of a gap at the steps' ends, and a step that carries a ball through a thin wall sees
    it positive at both (conservative advancement). The half leaves room for the relative
    speed to grow within the step."""

    controller: diffrax.AbstractStepSizeController

    def wrap(self, direction):
        return _Bounded(self.controller.wrap(direction))

    @staticmethod
    def _longest(s, y, args):
        system, t0, span = args[:3]
        q, qd, _ = y
        crossing = system.constraint_levels(t0 + s * span, q, qd)[-1].contacts.crossing
        return 0.5 * jnp.min(crossing) / jnp.where(span == 0, 1, jnp.abs(span))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return jnp.minimum(tnext, t0 + self._longest(t0, y0, args)), state

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, tprev, tnext, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
        )
        # the next step starts at `tprev`: where this one ended if kept, where it began if not
        y = jax.tree.map(lambda a, b: jnp.where(keep, a, b), y1_candidate, y0)
        return keep, tprev, jnp.minimum(tnext, tprev + self._longest(tprev, y, args)), made_jump, state, result


class _Projecting(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """`solver`, with the drift of each step taken out (`drift_step`) where it ends: the
    equality constraints are held to second order in one step's drift, not to its sum over
    the run. The steps' dense output (the saves between step ends) is the solver's own."""

    solver: diffrax.AbstractSolver
    # diffrax reads and sets a Runge–Kutta solver's `scan_kind` for forward mode, and takes
    # this wrapper for one: handed on to the solver inside
    scan_kind: str | None = None

    def _inner(self):
        if self.scan_kind is None or not hasattr(self.solver, "scan_kind"):
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
        system, origin, span = args[:3]
        q, qd, health = y1
        q, qd = drift_step(system, origin + t1 * span, q, qd)
        return (q, qd, health), y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self._inner().func(terms, t0, y0, args)


def _status(result, start_finite, health, q, qd) -> Int[Array, ""]:
    # diffrax fills the saves after a failure with inf, so the trajectory's finiteness only
    # tells something when the solve succeeded.
    finite = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(qd))
    met = health != 0
    status = jnp.where(met[_INCONSISTENT], Status.INCONSISTENT_CONSTRAINTS, Status.SUCCESS)
    status = jnp.where(finite, status, Status.NONFINITE_STATE)
    status = jnp.where(
        result == diffrax.RESULTS.successful,
        status,
        jnp.where(
            result == diffrax.RESULTS.max_steps_reached, Status.MAX_STEPS_REACHED, Status.SOLVER_FAILED
        ),
    )
    for index, code in (
        (_NONFINITE, Status.NONFINITE_STATE),
        (_RANK, Status.REDUNDANT_CONSTRAINTS),
        (_MASS, Status.SINGULAR_MASS_MATRIX),
    ):
        status = jnp.where(met[index], code, status)
    return jnp.where(start_finite, status, Status.NONFINITE_STATE).astype(jnp.int32)


def simulate(
    system: AbstractSystem,
    q0: Float[ArrayLike, " n"],
    qd0: Float[ArrayLike, " n"],
    t0: Real[ArrayLike, ""],
    t1: Real[ArrayLike, ""],
    *,
    ts: Real[ArrayLike, " k"] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = DEFAULT_TOL,
    atol: float = DEFAULT_TOL,
    dt0: Real[ArrayLike, ""] | None = None,
    adaptive: bool = True,
    max_steps: int = 100_000,
    max_events: int = 256,
    adjoint: diffrax.AbstractAdjoint | None = None,
    project: bool = False,
    throw: bool = True,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
) -> Solution:
    """Integrate `M q̈ = Q + Qᶜ` from `(q0, qd0)` at `t0` to `t1`.

    Compiled once per shape and system structure (numbers, lists and arrays alike are
    converted to arrays first, so new values never recompile); `jax.vmap` it for batches
    (with `throw=False`, so that failed members are marked in `status` and the others kept)
    and `jax.grad` through it. Faults are detected at every step, not only at the saved
    times: a mass matrix that stops being positive definite, dependent rows under
    `method="cholesky"` and a non-finite acceleration stop the solve where they occur;
    inconsistent constraints are reported at the end. A robot tree (a
    [`ukjax.models.RigidBodyTree`][] under equality constraints, driven or not) runs on a
    compiled C++ kernel on CPUs, once per batch under `jax.vmap` (built on first use with
    `g++`; `UKJAX_KERNELS=0` chooses the XLA route; "Batches and devices" on the documentation
    site); its derivatives come from the XLA route.

    **Arguments:**

    - `system`: any ukjax system, typically a [`ukjax.ConstrainedSystem`][].
    - `q0`, `qd0`: initial coordinates and velocities, shape (n,).
    - `t0`, `t1`: start and end times.
    - `ts`: times to save at, from `t0` towards `t1` (default: `t0` and `t1`); a time past an
      end by rounding alone is taken as that end.
    - `solver`: a diffrax solver (default `Tsit5`; see [`ukjax.stiff_solver`][] for stiff cases).
    - `rtol`, `atol`: tolerances of the adaptive step-size controller.
    - `dt0`: initial step (required for fixed steps).
    - `adaptive`: `False` for fixed steps of size `dt0`.
    - `max_steps`: the most steps the solver may take (per smooth stretch, with unilateral
      constraints).
    - `max_events`: with unilateral constraints, the most events (impacts, releases,
      stick–slip changes) in the run.
    - `adjoint`: a diffrax adjoint for gradients (default: checkpointed reverse mode;
      `diffrax.ForwardMode()` for forward-mode Jacobians).
    - `project`: after each step and at each save, take the step's drift off the equality
      constraints (one minimum-norm Gauss–Newton step onto `Φ = 0`, `Φ̇ = 0` from one
      factorization of the rows; derivatives go through it). The U-K rows hold the
      constraints' second derivative exactly, so the drift is the integrator's error alone:
      small on slow mechanisms, growing with a fast one's speed and the run's length.
    - `throw`: raise a `RuntimeError` on failure; pass `False` under `vmap` and read `status`.
    - `progress_meter`: e.g. `diffrax.TqdmProgressMeter()`.

    **Returns:**

    A [`ukjax.Solution`][].
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
    q0, qd0 = check_state(system, q0, qd0)
    if not (jnp.issubdtype(q0.dtype, jnp.floating) or jnp.issubdtype(q0.dtype, jnp.integer)):
        raise TypeError(f"q0 must be real numbers, got dtype {q0.dtype}.")
    q0 = as_inexact(q0)  # lists of integers are promoted, as NumPy would
    qd0 = qd0.astype(q0.dtype)
    if q0.dtype == jnp.float32:
        warnings.warn(
            "ukjax.simulate is running in float32; constraint drift and gradients are far less "
            "accurate than in float64. Enable it with jax.config.update('jax_enable_x64', True).",
            stacklevel=2,
        )
    t0, t1 = jnp.asarray(t0, q0.dtype), jnp.asarray(t1, q0.dtype)
    ts = jnp.stack([t0, t1]) if ts is None else _save_times(jnp.asarray(ts, q0.dtype), t0, t1)
    if not adaptive and dt0 is None:
        raise ValueError("Fixed-step integration (adaptive=False) needs a step size dt0.")
    if adaptive and isinstance(solver, RK4):
        raise ValueError("ukjax.RK4 has no error estimate: use it with adaptive=False and dt0.")
    # read from the system's structure: no trace of its rows for every call
    unilateral = lambda x: isinstance(x, AbstractUnilateral)  # noqa: E731
    unilaterals = [x for x in jax.tree.leaves(system, is_leaf=unilateral) if unilateral(x)]
    events = bool(unilaterals)
    for x in unilaterals:  # as built, or as edited since (`eqx.tree_at`)
        check_coefficients(x)
    if events and type(system).solve is not AbstractSystem.solve:
        raise NotImplementedError(
            f"{type(system).__name__} solves its own accelerations (servo control), which do not see "
            "unilateral constraints: simulate the contacts without it, or apply the control as a force "
            "(ukjax.Forced)."
        )
    solver = diffrax.Tsit5() if solver is None else solver
    arguments = (
        system,
        q0,
        qd0,
        t0,
        t1,
        ts,
        _Projecting(solver) if project else solver,
        jnp.asarray(rtol, q0.dtype),
        jnp.asarray(atol, q0.dtype),
        None if dt0 is None else jnp.asarray(dt0, q0.dtype),
        adaptive,
        max_steps,
        diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        diffrax.NoProgressMeter() if progress_meter is None else progress_meter,
    )
    try:
        if events:
            solution = _simulate_events(*arguments[:-2], max_events, *arguments[-2:])
        else:
            solution = _simulate(*arguments)
    except TypeError as error:
        if "forward-mode autodiff" not in str(error):
            raise
        raise TypeError(
            "jax.jacfwd, jax.jvp or jax.hessian reached simulate, whose default adjoint "
            "(diffrax.RecursiveCheckpointAdjoint) is reverse mode only: pass "
            "adjoint=diffrax.ForwardMode() for forward-mode derivatives (the cheaper route for few "
            "parameters and many outputs; see 'Fitting and derivatives' on the documentation site)."
        ) from None
    # Outside the simulation's program, so that a run with `throw` and one without share it:
    # in the caller's program where `simulate` is traced, in Python where it ran.
    if throw and isinstance(solution.status, jax.core.Tracer):
        solution = eqx.branched_error_if(
            solution, solution.status != Status.SUCCESS, solution.status, [_MESSAGES[s] for s in Status]
        )
    elif throw and solution.status != Status.SUCCESS:
        raise RuntimeError(_MESSAGES[Status(int(solution.status))])
    warn_if_started_inside(solution, atol)
    warn_if_started_off(solution, q0, qd0, rtol, atol)
    return solution


def _save_times(ts: Array, t0: Array, t1: Array) -> Array:
    """`ts` checked against `[t0, t1]` (either direction) and snapped onto it where it lies
    past an end by rounding alone: a grid built as `linspace(0, 1) * t1` can end an ulp past
    `t1`, a save the run would never reach."""
    if ts.ndim != 1:
        raise ValueError(f"ts must be a vector of save times, got shape {ts.shape}.")
    lo, hi = jnp.minimum(t0, t1), jnp.maximum(t0, t1)
    slack = 8 * jnp.finfo(ts.dtype).eps * jnp.maximum(jnp.abs(t0), jnp.abs(t1))
    if not any(isinstance(x, jax.core.Tracer) for x in (ts, t0, t1)):
        if bool(jnp.any((ts < lo - slack) | (ts > hi + slack))):
            raise ValueError(
                f"ts must lie between t0 = {float(t0)} and t1 = {float(t1)}; it spans "
                f"{float(jnp.min(ts))} to {float(jnp.max(ts))}."
            )
        steps = jnp.diff(ts) * jnp.sign(t1 - t0)
        if bool(jnp.any(steps < 0)):
            raise ValueError("ts must run from t0 towards t1 (sorted in the direction of the run).")
    snapped = jnp.clip(ts, lo, hi)
    return jnp.where(jnp.abs(ts - snapped) <= slack, snapped, ts)


def warn_if_started_inside(solution: Solution, atol: float) -> None:
    """Warn where a run (or members of a batch) started inside a contact or a joint limit by
    more than `atol`: it began from the start projected out of it, not from the caller's.
    Nothing happens under a transformation."""
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
    warnings.warn(
        f"The simulation starts inside a contact or a joint limit ({members}), by up to {float(np.max(depth)):.2e}: "
        "it began from the start projected out of it onto g = 0 (sol.q[0] where ts starts at t0), so a "
        "deep start moves the bodies and may leave the other constraints off (a quaternion's norm): start "
        "outside the contacts, or from ConstrainedSystem.project's state.",
        RuntimeWarning,
        stacklevel=3,
    )


def warn_if_started_off(solution: Solution, q0: Array, qd0: Array, rtol: float, atol: float) -> None:
    """Warn where a run (or members of a batch) started off its constraints by more than its
    tolerance `atol + rtol |x|`: without Baumgarte gains the violation then stays or grows
    while every step succeeds. Nothing happens under a transformation (read `sol.phi`)."""
    if solution.phi is None or isinstance(solution.phi, jax.core.Tracer) or not solution.phi.is_fully_addressable:
        return  # traced, or spread over other processes' devices (each process sees its own part)
    rtol, atol = float(rtol), float(atol)
    phi, phid = np.asarray(solution.phi)[..., 0, :], np.asarray(solution.phid)[..., 0, :]
    gaps = [
        (np.max(np.abs(x), axis=-1), atol + rtol * np.max(np.abs(np.asarray(y)), axis=-1))
        for x, y in ((phi, q0), (phid, qd0))
    ]
    off = np.logical_or(*(gap > bound for gap, bound in gaps))
    if not np.any(off):
        return
    members = f"{int(np.sum(off))} of {off.size} members" if off.ndim else "the run"
    warnings.warn(
        f"The simulation starts off its constraints ({members}): |Φ| = {float(np.max(gaps[0][0])):.2e} and "
        f"|Φ̇| = {float(np.max(gaps[1][0])):.2e} at ts[0], over the tolerance atol + rtol·|q| (rtol = {rtol:g}, "
        f"atol = {atol:g}); without Baumgarte gains the violation stays or grows though the status says "
        "SUCCESS. Start from ConstrainedSystem.project(t0, q0, qd0), or stabilize with ukjax.Baumgarte.",
        RuntimeWarning,
        stacklevel=3,
    )


@jit
def _simulate(
    system, q0, qd0, t0, t1, ts, solver, rtol, atol, dt0, adaptive, max_steps, adjoint, progress_meter
):
    controller = diffrax.PIDController(rtol=rtol, atol=atol) if adaptive else diffrax.ConstantStepSize()
    # diffrax integrates from 0 to 1 in s = (t - t0) / (t1 - t0): its end time is then a
    # constant, and what it derives from it (100 `prevbefore` calls, 1 500 operations) folds
    # away when compiling, 0.2 s less to compile every simulation. Fixed steps: the N steps
    # diffrax would take in t, each ending at t0 + (t1 - t0) k / N as there.
    span = t1 - t0
    scale = jnp.where(span == 0, 1.0, span)  # t0 = t1: nothing moves, any s will do
    if dt0 is not None and not adaptive:
        dt0 = 1 / jnp.maximum(jnp.ceil(jnp.abs(span) / jnp.nextafter(jnp.abs(dt0), jnp.inf)), 1)
    elif dt0 is not None:
        dt0 = dt0 / scale
    s0, s1 = jnp.zeros((), q0.dtype), jnp.ones((), q0.dtype)
    saves = (ts - t0) / scale
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_vector_field),
        solver,
        s0,
        s1,
        dt0,
        (q0, qd0, jnp.zeros(4, q0.dtype)),
        args=(system, t0, span, None, None),
        saveat=diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=saves), diffrax.SubSaveAt(t1=True)], controller_state=True
        ),
        stepsize_controller=_StopAtFault(controller),
        max_steps=max_steps,
        adjoint=adjoint,
        throw=False,
        progress_meter=progress_meter,
    )
    (q, qd, _), (_, _, health) = sol.ys
    if isinstance(solver, _Projecting):  # the saves between step ends too
        projected = jax.vmap(drift_step, in_axes=(None, 0, 0, 0))(system, ts, q, qd)
        finite = (jnp.all(jnp.isfinite(q), axis=1) & jnp.all(jnp.isfinite(qd), axis=1))[:, None]
        q, qd = (jnp.where(finite, new, old) for new, old in zip(projected, (q, qd)))
    # From the step that met a fatal fault onward the saves hold no motion (that step's
    # interpolation was stretched to the end): voided, as diffrax leaves the saves it never
    # reached.
    void = (saves > sol.controller_state[1])[:, None]
    q, qd = jnp.where(void, jnp.inf, q), jnp.where(void, jnp.inf, qd)
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    status = _status(sol.result, start_finite, health[-1], q, qd)
    violation = jax.vmap(system.violation)(ts, q, qd)
    phi, phid = (None, None) if violation is None else violation
    return Solution(ts, q, qd, phi, phid, status, sol.stats)


# Event values are kept this far above zero where a mode begins: diffrax's events fire when a
# value goes from positive to non-positive, and a mode begins where its own condition is zero
# (a contact released at λₙ = 0, a slide started at zero slip). Gaps and slip speeds in the
# model's units. Forces, relative to each contact's own force scale at the segment's start
# (`ContactSolution.scale`): twice
# what the modes' search accepts (`PULL`, `CONE`), as a value that started a segment below zero
# would hide every event of that segment.
_GAP_OFFSET = 1e-12
_FORCE_OFFSET = 2.0
# The root finder stops where the bracket is 1e-14 wide and the value below 1e-14. Forces
# solved through an ill-conditioned Delassus matrix (Cassie's feet and loops) carry more
# round-off than that, and whether their events were located was luck: values are scaled so
# that 1e-8 (m, m/s, or relative to a contact's force scale) counts as zero. A value that
# jumps across zero still never gets there (`Status.CONTACT_UNRESOLVED`).
_EVENT_SCALE = 1e-6
# A sliding contact takes the direction of its slip once it slips faster than this many times
# atol (`sliding_now`): below, the slip integrated to atol is too uncertain to give a direction.
# A slide from rest under a turning force (F = (3, 5t) N on 1 kg, μ = 0.5), q(2 s) against
# DOP853: at 1e-9 m/s, 2.2e-3 m off in 7.8e4 steps (atol 1e-8) and out of steps (1e-10); at
# 1e3 atol, 1.1e-6 m in 579 steps, 2.8e-8 in 4 168, 1.4e-9 in 32 555 (atol 1e-8, 1e-10, 1e-12).
_SLIDE_SPEED = 1e3


def _contact_state(system, t, q, qd, modes=None, rest=None):
    """`(dynamics, contact level, (modes, ContactSolution, converged))` at one state: in the
    given modes (sliding as `sliding_now` says with `rest`), or in the modes that solve the
    contact problem there."""
    d = system.dynamics(t, q, qd)
    if modes is not None:
        modes = sliding_now(modes, d.levels[-1].contacts, rest)
    _, contacts = solve_levels(d, modes)
    return d, d.levels[-1], contacts


def _event_value(s, y, args, **kwargs):
    """Positive while every contact's mode holds: an open contact's gap, a closed one's
    normal force, a sticking one's margin inside the friction cone, a sliding one's slip
    along the direction it started in."""
    system, t0, span, modes, rest, force_scale = args
    q, qd, _ = y
    _, level, (_, sol, _) = _contact_state(system, t0 + s * span, q, qd, modes, rest)
    c = level.contacts
    slip = jnp.einsum("kd,kd->k", c.tangent.phid.reshape(-1, 2), modes.direction)
    friction = c.friction > 0
    values = [
        jnp.where(modes.mode == OPEN, c.normal.phi + _GAP_OFFSET, jnp.inf),
        jnp.where(modes.mode != OPEN, sol.normal / force_scale + PULL * _FORCE_OFFSET, jnp.inf),
        jnp.where(
            (modes.mode == STICKING) & friction,
            (c.friction * sol.normal - norm(sol.tangent)) / force_scale + CONE * _FORCE_OFFSET,
            jnp.inf,
        ),
        jnp.where((modes.mode == SLIDING) & friction, slip + _GAP_OFFSET, jnp.inf),
    ]
    # where no acceleration exists (a mass matrix that is not positive definite) the values
    # are NaN: no event, so that the fault stops the run (`_StopAtFault`) and is reported,
    # instead of every step being rejected until max_steps
    value = _EVENT_SCALE * jnp.min(jnp.stack(values))
    return jnp.where(jnp.isnan(value), jnp.inf, value)


def _transition(system, t, q, qd, rest_speed):
    """What happens at an event: the touching contacts and the equality rows projected back
    onto `g = 0`, `Φ = 0` (two minimum-norm Gauss–Newton steps), then impacts by Newton's
    law (the velocity-level complementarity problem, equality rows and resting contacts
    held) at the projected configuration, so that no velocity residual is left where the
    motion restarts, and the modes that hold from there.

    **Returns:**

    `(q, qd, modes, impulses, the contacts' force scales, penetration, converged, valid)`:
    `valid` False where a contact's coefficients are out of range.
    """
    def newton(q, _):
        level = system.constraint_levels(t, q, qd)[-1]
        c = level.contacts
        touching = c.normal.phi <= TOUCH
        A = jnp.concatenate([level.rows.A, jnp.where(touching[:, None], c.normal.A, 0)])
        r = jnp.concatenate([level.rows.phi, jnp.where(touching, c.normal.phi, 0)])
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
    touching = (c.normal.phi <= TOUCH) & (approach <= TOUCH)
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
    mobility = jnp.max(jnp.sum(la.solve_lower(L, c.tangent.A.T, unroll=False) ** 2, axis=0).reshape(k, 2), axis=1)
    slack = jnp.where(impact, rest_speed / jnp.where(mobility > 0, mobility, 1), jnp.inf)

    # Zeno's accumulation, truncated: a contact that an impact elsewhere would lift off slower
    # than `rest_speed` is held, as event-driven schemes stop at accumulation points (Acary &
    # Brogliato 2008). A foot rocking from heel to toe otherwise goes through an unbounded
    # series of ever smaller impacts.
    def solve(held, _):
        modes, jump, converged = select_modes(
            d.M,
            jnp.zeros_like(d.Q),
            equalities,
            contacts,
            touching,
            jnp.where((moving & ~impact)[:, None], slip, 0),
            slack=slack,
            held=held,
        )
        leaving = c.normal.A @ jump.x + approach
        return held | (touching & (modes.mode == OPEN) & (leaving < rest_speed)), (jump, converged)

    _, (jump, converged) = jax.lax.scan(solve, jnp.zeros(k, bool), None, length=2)
    jump, converged = jax.tree.map(lambda x: x[-1], (jump, converged))
    qd = qd + jump.x
    # the modes from here on; their forces only scale the event values (off the tape)
    _, (modes, sol, settled) = solve_levels(system.dynamics(t, q, qd), differentiable=False)
    valid = valid_coefficients(c.friction, c.restitution)
    return q, qd, modes, jump.normal, sol.scale, penetration, converged & settled & valid, valid


@jit
def _simulate_events(
    system, q0, qd0, t0, t1, ts, solver, rtol, atol, dt0, adaptive, max_steps, max_events, adjoint, progress_meter
):
    """`_simulate` for a system with unilateral constraints: diffrax integrates each smooth
    stretch at its full order with the contacts' modes fixed, stops where a mode stops
    holding (`_event_value` crosses zero, located by Newton's method on the dense output),
    and `_transition` applies the impact and chooses the next modes."""
    controller = diffrax.PIDController(rtol=rtol, atol=atol) if adaptive else diffrax.ConstantStepSize()
    span = t1 - t0
    scale = jnp.where(span == 0, 1.0, span)
    if dt0 is not None:
        dt0 = dt0 / scale
    if adaptive and eqx.filter_eval_shape(system.constraint_levels, t0, q0, qd0)[-1].contacts.crossing is not None:
        controller = _Bounded(controller)
    saves = (ts - t0) / scale
    rest_speed = jnp.sqrt(atol)
    k = ts.shape[0]
    time = lambda s: t0 + s * span  # noqa: E731

    dtype = q0.dtype
    c = eqx.filter_eval_shape(system.constraint_levels, t0, q0, qd0)[-1].contacts.size
    records = (
        jnp.full((k,) + q0.shape, jnp.inf, dtype),
        jnp.full((k,) + q0.shape, jnp.inf, dtype),
        jnp.zeros((k, c), jnp.int32),
        jnp.zeros((k, c, 2), dtype),
        jnp.ones((k, c), dtype),
    )
    # The start is resolved as an event is (a ball dropped resting, a start inside a limit),
    # by the loop's first pass: one copy of the transition in the program.
    init = dict(
        s=jnp.zeros((), dtype),
        q=q0,
        qd=qd0,
        modes=Modes(jnp.zeros(c, jnp.int32), jnp.zeros((c, 2), dtype), jnp.ones(c, dtype)),
        start=jnp.array(True),
        health=jnp.zeros(4, dtype),
        records=records,
        filled=jnp.zeros(k, bool),
        count=jnp.zeros((), jnp.int32),
        event_times=jnp.full(max_events, jnp.inf, dtype),
        impulses=jnp.zeros((max_events, c), dtype),
        penetration=jnp.zeros((), dtype),
        start_penetration=jnp.zeros((), dtype),
        converged=jnp.array(True),
        valid=jnp.array(True),
        result=diffrax.RESULTS.successful,
        steps=jnp.zeros((), jnp.int32),
    )

    def cond(state):
        return (state["s"] < 1) & state["converged"] & (state["result"] == diffrax.RESULTS.successful) & (
            state["count"] < max_events
        )

    def body(state):
        s0, count, start = state["s"], state["count"], state["start"]
        q, qd, modes, jump, force_scale, penetration, converged, valid = _transition(
            system, time(s0), state["q"], state["qd"], rest_speed
        )
        # where the transition has no solution (a mass matrix that is not positive definite)
        # the stretch starts from the state before it: its first step meets the fault, which
        # stops the run and names it, where a NaN state had every step rejected
        finite = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(qd))
        q, qd = jnp.where(finite, q, state["q"]), jnp.where(finite, qd, state["qd"])
        # the events are counted from the first transition after the start
        event_times = state["event_times"].at[count].set(jnp.where(start, jnp.inf, time(s0)))
        impulses = state["impulses"].at[count].set(jnp.where(start, 0, jump))
        count = count + ~start
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_vector_field),
            solver,
            s0,
            jnp.ones((), dtype),
            dt0,
            (q, qd, state["health"]),
            args=(system, t0, span, modes, _SLIDE_SPEED * atol),
            saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=jnp.clip(saves, s0, 1)), diffrax.SubSaveAt(t1=True)]),
            stepsize_controller=_StopAtFault(controller),
            event=diffrax.Event(
                lambda t, y, args, **kwargs: _event_value(t, y, args + (force_scale,)),
                optx.Bisection(rtol=1e-14, atol=1e-14, flip=True),  # values fall through zero
                direction=False,
            ),
            max_steps=max_steps,
            adjoint=adjoint,
            throw=False,
            progress_meter=progress_meter,
        )
        (qs, qds, _), (s1, y1) = (sol.ys[0], (sol.ts[1][-1], sol.ys[1]))
        q1, qd1, health = (x[-1] for x in y1)
        # a member with invalid coefficients saves nothing: its run never started
        new = (saves >= s0) & (saves <= s1) & ~state["filled"] & valid
        records = tuple(
            jnp.where(new.reshape((k,) + (1,) * (old.ndim - 1)), value, old)
            for old, value in zip(
                state["records"],
                (qs, qds, *(jnp.broadcast_to(x, (k,) + x.shape) for x in modes)),
            )
        )
        return dict(
            s=s1,
            q=q1,
            qd=qd1,
            modes=modes,
            start=jnp.array(False),
            health=health,
            records=records,
            filled=state["filled"] | new,
            count=count,
            event_times=event_times,
            impulses=impulses,
            # what the start brings in is the caller's, projected away; not counted
            penetration=jnp.where(start, state["penetration"], jnp.maximum(state["penetration"], penetration)),
            start_penetration=jnp.where(start, penetration, state["start_penetration"]),
            converged=converged,
            valid=valid,
            result=diffrax.RESULTS.where(
                sol.result == diffrax.RESULTS.event_occurred, diffrax.RESULTS.successful, sol.result
            ),
            steps=state["steps"] + sol.stats["num_steps"],
        )

    # reverse mode through the events needs the checkpointed loop, forward mode the plain one
    kind = "lax" if isinstance(adjoint, diffrax.ForwardMode) else "checkpointed"
    final = eqxi.while_loop(cond, body, init, max_steps=max_events + 1, kind=kind)
    q, qd, mode, direction, weight = final["records"]
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    status = _status(final["result"], start_finite, final["health"], q, qd)
    # A loop that ended before t1 with its last solve successful and no fault met stopped for
    # the contacts (the saves it never reached are voided, which `_status` alone would read
    # as a non-finite state).
    stopped = (
        (final["s"] < 1)
        & (final["result"] == diffrax.RESULTS.successful)
        & jnp.all(final["health"][:_FATAL] == 0)
        & start_finite
    )
    contacts_status = jnp.where(final["converged"], Status.MAX_EVENTS_REACHED, Status.CONTACT_UNRESOLVED)
    status = jnp.where(stopped, contacts_status, status)
    # The event's root finder stops only where the event value is within 1e-14 of zero: it
    # runs out of steps where a value jumps across zero instead of crossing it.
    unlocated = final["result"] == diffrax.RESULTS.nonlinear_max_steps_reached
    status = jnp.where(unlocated & start_finite, Status.CONTACT_UNRESOLVED, status)
    status = jnp.where(final["valid"], status, Status.INVALID_PARAMETERS).astype(jnp.int32)

    def saved(t, q, qd, mode, direction, weight):
        d, level, (_, sol, _) = _contact_state(system, t, q, qd, Modes(mode, direction, weight), _SLIDE_SPEED * atol)
        # `violation` from the same levels
        return level.contacts.normal.phi, sol.normal, sol.tangent, levels_violation(d.levels)

    gap, normal, tangent, violation = jax.vmap(saved)(ts, q, qd, mode, direction, weight)
    penetration = jnp.maximum(final["penetration"], jnp.max(jnp.where(jnp.isfinite(gap), -gap, 0), initial=0))
    # exact contacts penetrate by round-off and the events' location: more is a contact passed
    status = jnp.where((status == Status.SUCCESS) & (penetration > rest_speed), Status.CONTACT_MISSED, status)
    record = ContactRecord(
        gap, mode, normal, tangent, final["event_times"], final["impulses"], penetration, final["start_penetration"]
    )
    return Solution(ts, q, qd, *violation, status, {"num_steps": final["steps"]}, record)
