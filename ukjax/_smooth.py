"""The smooth integrator: a system without unilateral constraints integrated in one go by a
diffrax solver under ukjax's step controllers (`_stepping`), from `t0` to `t1` in normalised
time."""

import jax
import jax.numpy as jnp

from ._integrator import AbstractIntegrator, RunOptions, start_clock, step_controller
from ._jit import jit
from ._projection import drift_step
from ._solution import HEALTH, Solution, at_saves, final_status
from ._stepping import FieldArgs, Projecting, StopAtFault, integrate, save_rows


class Smooth(AbstractIntegrator):
    """The whole run as one diffrax integration (a system with no unilateral constraints)."""

    events = False
    lockstep = True

    def run(self, system, q0, qd0, t0, t1, options: RunOptions) -> Solution:
        return _run(system, q0, qd0, t0, t1, options)


@jit
def _run(system, q0, qd0, t0, t1, options: RunOptions) -> Solution:
    ts, solver, progress_meter = options.ts, options.solver, options.progress_meter
    clock = start_clock(t0, t1, options, whole_steps=True)
    saves = clock.saves
    inf = jnp.full((save_rows(ts.shape[0]),) + q0.shape, jnp.inf, q0.dtype)
    run = integrate(
        solver,
        StopAtFault(step_controller(options)),
        jnp.zeros((), q0.dtype),
        (q0, qd0, jnp.zeros(HEALTH, q0.dtype)),
        FieldArgs(system, t0, clock.span),
        clock.dt0,
        saves=saves,
        records=(inf, inf),
        index=jnp.zeros((), jnp.int32),
        record=lambda y, _: y[:2],
        max_steps=options.max_steps,
        adjoint=options.adjoint,
        progress_meter=progress_meter,
        meter=progress_meter.init(),
    )
    progress_meter.close(run.meter)
    (q, qd), (_, _, health) = (x[: ts.shape[0]] for x in run.records), run.y
    if isinstance(solver, Projecting):  # the saves between step ends too
        projected = jax.vmap(drift_step, in_axes=(None, 0, 0, 0))(system, ts, q, qd)
        finite = (jnp.all(jnp.isfinite(q), axis=1) & jnp.all(jnp.isfinite(qd), axis=1))[:, None]
        q, qd = (jnp.where(finite, new, old) for new, old in zip(projected, (q, qd)))
    # From the step that met a fatal fault onward the saves hold no motion: voided, as the
    # saves the run never reached are.
    void = (saves > run.controller_state[1])[:, None]
    q, qd = jnp.where(void, jnp.inf, q), jnp.where(void, jnp.inf, qd)
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    status = final_status(run.result, start_finite, health, q, qd)
    violation = at_saves(system.violation, ts, q, qd)
    phi, phid = (None, None) if violation is None else violation
    return Solution(ts, q, qd, phi, phid, status, run.stats)
