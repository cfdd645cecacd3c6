"""Integration of a system's equations of motion with diffrax."""

import warnings
from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from ._arrays import as_input
from ._backends._backend import AbstractBackend, AutoBackend, bound, check_backend
from ._events import EventDriven, warn_if_started_inside
from ._integrator import AbstractIntegrator, RunOptions
from ._smooth import Smooth
from ._solution import MESSAGES, Solution, Status
from ._solvers import RK4
from ._stability import warn_if_unstable
from ._stepping import Projecting, loop_kind
from ._systems import AbstractSystem, check_state
from ._time_stepping import TimeStepping
from ._unilateral import check_coefficients, unilaterals

# rtol and atol of `simulate` unless given
DEFAULT_TOL = 1e-8


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
    backend: AbstractBackend = AutoBackend(),
) -> Solution:
    """Integrate `M q̈ = Q + Qᶜ` from `(q0, qd0)` at `t0` to `t1`.

    Compiled once per shape and system structure (numbers, lists and arrays alike are
    converted to arrays first, so new values never recompile); `jax.vmap` it for batches
    (with `throw=False`, so that failed members are marked in `status` and the others kept)
    and `jax.grad` through it. Faults are detected at every step, not only at the saved
    times: a mass matrix that stops being positive definite, dependent rows under
    `method="cholesky"` and a non-finite acceleration stop the solve where they occur;
    inconsistent constraints are reported at the end. A robot tree (a
    [`ukjax.models.RigidBodyTree`][] under equality constraints, limits and contacts, driven or
    not) runs on a compiled C++ kernel by default (`backend`), once per batch under `jax.vmap`;
    its derivatives come from the XLA route.

    **Arguments:**

    - `system`: any ukjax system, typically a [`ukjax.ConstrainedSystem`][].
    - `q0`, `qd0`: initial coordinates and velocities, shape (n,).
    - `t0`, `t1`: start and end times. `t1 < t0` runs backwards in time (a smooth
      system's motion retraced); with unilateral constraints it is an error, as impacts
      and friction do not run backwards.
    - `ts`: times to save at, from `t0` towards `t1` (default: `t0` and `t1`); a time past an
      end by rounding alone is taken as that end.
    - `solver`: a diffrax solver (default `Tsit5`; see [`ukjax.stiff_solver`][] for stiff cases),
      or [`ukjax.TimeStepping`][]: fixed steps `dt0` of the impulse-level problem, the
      contacts' complementarity exact in each step, first order (the tolerances,
      `max_events` and `project` do not apply to it).
    - `rtol`, `atol`: tolerances of the adaptive step-size controller.
    - `dt0`: initial step (required for fixed steps, at most `t1 − t0`). A fixed step of an
      explicit solver past its stability limit at the start, from the linearization of the
      applied forces there (servos' gains, springs and damping against `M`), is warned of
      with the limit: such a run diverges though its status may say SUCCESS.
    - `adaptive`: `False` for fixed steps of size `dt0`.
    - `max_steps`: the most steps the solver may take (per smooth stretch, with unilateral
      constraints).
    - `max_events`: with unilateral constraints, the most events (impacts, releases,
      stick–slip changes) in the run.
    - `adjoint`: how derivatives go through the steps: `diffrax.RecursiveCheckpointAdjoint()`
      (the default, checkpointed reverse mode) or `diffrax.ForwardMode()` (forward-mode
      Jacobians, the cheaper route for few parameters).
    - `project`: after each step and at each save, take the step's drift off the equality
      constraints (one minimum-norm Gauss–Newton step onto `Φ = 0`, `Φ̇ = 0` from one
      factorization of the rows; derivatives go through it). The U-K rows hold the
      constraints' second derivative exactly, so the drift is the integrator's error alone:
      small on slow mechanisms, growing with a fast one's speed and the run's length.
    - `throw`: raise a `RuntimeError` on failure; pass `False` under `vmap` and read `status`.
    - `backend`: where the accelerations are computed: [`ukjax.AutoBackend`][] (the default:
      the compiled tree kernel where it covers the system and runs, else XLA; the pick is in
      `Solution.backend`), [`ukjax.TreeKernel`][] or [`ukjax.XLABackend`][].
    - `progress_meter`: e.g. `diffrax.TqdmProgressMeter()` (a host callback in the program,
      which JAX's persistent compilation cache then does not keep).

    **Returns:**

    A [`ukjax.Solution`][].
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
    q0, qd0 = check_state(system, q0, qd0, inputs=True)
    if not (jnp.issubdtype(q0.dtype, jnp.floating) or jnp.issubdtype(q0.dtype, jnp.integer)):
        raise TypeError(f"q0 must be real numbers, got dtype {q0.dtype}.")
    # lists of integers are promoted, as NumPy would
    dtype = q0.dtype if jnp.issubdtype(q0.dtype, jnp.inexact) else jnp.result_type(float)
    q0, qd0 = as_input(q0, dtype), as_input(qd0, dtype)
    if q0.dtype == jnp.float32:
        warnings.warn(
            "ukjax.simulate is running in float32; constraint drift and gradients are far less "
            "accurate than in float64. Enable it with jax.config.update('jax_enable_x64', True).",
            stacklevel=2,
        )
    if not adaptive and dt0 is None:
        raise ValueError("Fixed-step integration (adaptive=False) needs a step size dt0.")
    # known values are checked before they become arrays (inside a caller's `jit` they would
    # become traced ones); the program holds no check of its own
    if not any(isinstance(x, jax.core.Tracer) for x in (t0, t1, ts, dt0)):
        _check_times(t0, t1, ts, dt0 if adaptive else None, q0.dtype)
    t0, t1 = as_input(t0, q0.dtype), as_input(t1, q0.dtype)
    ts = _save_times(None if ts is None else as_input(ts, q0.dtype), t0, t1)
    if adaptive and isinstance(solver, RK4):
        raise ValueError("ukjax.RK4 has no error estimate: use it with adaptive=False and dt0.")
    check_backend(backend)
    platform = jax.default_backend()
    # read from the system's structure: no trace of its rows for every call
    backend, bound_system, _, _, found = bound(backend, system, q0.dtype, platform)
    integrator = integrator_for(system, solver, found)
    events = integrator.events
    stepping = isinstance(integrator, TimeStepping)
    if stepping and dt0 is None:
        raise ValueError("ukjax.TimeStepping takes fixed steps: give simulate(..., dt0=h), the step.")
    adaptive = adaptive and not stepping  # whole steps of at most dt0 over the run
    for x in found:  # as built, or as edited since (`eqx.tree_at`)
        check_coefficients(x)
    known = not any(isinstance(x, jax.core.Tracer) for x in (t0, t1, dt0, q0, qd0))
    if events and known and float(t1) < float(t0):
        raise ValueError(
            f"t1 = {float(t1)} is before t0 = {float(t0)}: a run backwards in time through impacts "
            "and friction is not the physics run forwards (an impact loses energy either way). "
            "Simulate from the earlier time, or leave the unilateral constraints out."
        )
    if stepping and known:
        _check_fixed_step(float(t0), float(t1), float(dt0))
    elif not adaptive and known:
        _check_fixed_step(float(t0), float(t1), float(dt0))
        solver_ = diffrax.Tsit5() if solver is None else solver
        warn_if_unstable(system, solver_, t0, q0, qd0, abs(float(t1) - float(t0)), float(dt0))
    solver = diffrax.Tsit5() if solver is None else solver
    system = bound_system
    adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
    loop_kind(adjoint)  # one of the two, said before tracing
    options = RunOptions(
        ts,
        Projecting(solver) if project and not stepping else solver,
        as_input(rtol, q0.dtype),
        as_input(atol, q0.dtype),
        None if dt0 is None else as_input(dt0, q0.dtype),
        adaptive,
        max_steps,
        max_events,
        adjoint,
        diffrax.NoProgressMeter() if progress_meter is None else progress_meter,
    )
    try:
        solution = integrator.run(system, q0, qd0, t0, t1, options)
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
            solution, solution.status != Status.SUCCESS, solution.status, [MESSAGES[s] for s in Status]
        )
    elif throw and solution.status != Status.SUCCESS:
        raise RuntimeError(MESSAGES[Status(int(solution.status))])
    warn_if_started_inside(solution, atol, system, t0, q0, qd0)
    warn_if_started_off(solution, q0, qd0, t0, rtol, atol)
    return eqx.tree_at(lambda s: s.backend, solution, backend, is_leaf=lambda x: x is None)


def _check_fixed_step(t0: float, t1: float, dt0: float) -> None:
    """Refuse a fixed step that does not point from `t0` towards `t1` or is longer than the
    run (its one step would end past `t1`)."""
    if t0 == t1:
        return
    if not dt0 * (t1 - t0) > 0:
        raise ValueError(f"dt0 must point from t0 = {t0} towards t1 = {t1}, got {dt0}.")
    if abs(dt0) > abs(t1 - t0) * (1 + 1e-12):
        raise ValueError(
            f"A fixed step dt0 = {dt0} is longer than the run from t0 = {t0} to t1 = {t1}: it would "
            "step past t1. Take dt0 at most t1 − t0 (a fraction of the motion's fastest period)."
        )


def _check_times(t0, t1, ts, dt0, dtype) -> None:
    """Refuse save times outside `[t0, t1]` (past an end by more than rounding) or out of the
    run's order, and an adaptive first step `dt0` that does not point from `t0` towards `t1`."""
    start, end = float(np.asarray(t0)), float(np.asarray(t1))
    if dt0 is not None and not float(np.asarray(dt0)) * (end - start) > 0 and start != end:
        raise ValueError(f"dt0 must point from t0 = {start} towards t1 = {end}, got {float(np.asarray(dt0))}.")
    if ts is None:
        return
    ts = np.asarray(ts, dtype)
    if ts.ndim != 1:
        raise ValueError(f"ts must be a vector of save times, got shape {ts.shape}.")
    slack = _SLACK * np.finfo(dtype).eps * max(abs(start), abs(end))
    if np.any((ts < min(start, end) - slack) | (ts > max(start, end) + slack)):
        raise ValueError(
            f"ts must lie between t0 = {start} and t1 = {end}; it spans {float(np.min(ts))} to {float(np.max(ts))}."
        )
    if np.any(np.diff(ts) * np.sign(end - start) < 0):
        raise ValueError("ts must run from t0 towards t1 (sorted in the direction of the run).")


# how far past an end a save time may lie by rounding alone, in ulps of the larger end
_SLACK = 8


def _save_times(ts: Array | None, t0: Array, t1: Array) -> Array:
    """`ts` snapped onto `[t0, t1]` where it lies past an end by rounding alone: a grid built
    as `linspace(0, 1) * t1` can end an ulp past `t1`, a save the run would never reach.
    None: `t0` and `t1`. In NumPy where all are known: each eager operation costs a small
    robot's run some steps."""
    xp = jnp if any(isinstance(x, jax.Array) for x in (ts, t0, t1)) else np
    if ts is None:
        return xp.stack([t0, t1])
    if ts.ndim != 1:
        raise ValueError(f"ts must be a vector of save times, got shape {ts.shape}.")
    lo, hi = xp.minimum(t0, t1), xp.maximum(t0, t1)
    slack = _SLACK * jnp.finfo(ts.dtype).eps * xp.maximum(xp.abs(t0), xp.abs(t1))
    snapped = xp.clip(ts, lo, hi)
    return xp.where(xp.abs(ts - snapped) <= slack, snapped, ts)


def warn_if_started_off(solution: Solution, q0: Array, qd0: Array, t0, rtol: float, atol: float) -> None:
    """Warn where a run (or members of a batch) started off its constraints by more than its
    tolerance `atol + rtol |x|`: without Baumgarte gains the violation then stays or grows
    while every step succeeds. Read off the first save where it is the start (`ts[0] = t0`,
    as by default); nothing happens where the saves begin later, or under a transformation
    (read `sol.phi`)."""
    if solution.phi is None or isinstance(solution.phi, jax.core.Tracer) or not solution.phi.is_fully_addressable:
        return  # traced, or spread over other processes' devices (each process sees its own part)
    if isinstance(t0, jax.core.Tracer) or np.any(np.asarray(solution.ts)[..., 0] != np.asarray(t0, float)):
        return  # the first save is not the start: its violation is the run's, not the start's
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
        f"|Φ̇| = {float(np.max(gaps[1][0])):.2e} at t0, over the tolerance atol + rtol·|q| (rtol = {rtol:g}, "
        f"atol = {atol:g}); without Baumgarte gains the violation stays or grows though the status says "
        "SUCCESS. Start from ConstrainedSystem.project(t0, q0, qd0), or stabilize with ukjax.Baumgarte.",
        RuntimeWarning,
        stacklevel=3,
    )


def integrator_for(system, solver=None, found: Sequence | None = None) -> AbstractIntegrator:
    """The integrator a run of `system` with `solver` takes: the solver where it is one
    (`ukjax.TimeStepping`), else event-driven where the system has unilateral constraints
    (`found`, else read from its structure, no trace), else smooth."""
    if isinstance(solver, AbstractIntegrator):
        return solver
    return EventDriven() if (unilaterals(system) if found is None else found) else Smooth()
