"""What a run is asked (`RunOptions`) and the integrators that make it (`AbstractIntegrator`):
the smooth one (`_smooth.Smooth`) and the event-driven one (`_events.EventDriven`) side by
side, each a `run` of a system from a start to the solution at the saves. `simulate` and
`simulate_batch` pick one (`_simulate.integrator_for`)."""

import abc
from typing import ClassVar

import diffrax
import equinox as eqx
from jaxtyping import Array


class RunOptions(eqx.Module):
    """A run's options as `simulate` checked and converted them: the save times `ts`, the
    diffrax `solver`, the tolerances, the first (or fixed) step `dt0` (None: the controller's
    choice), whether the steps adapt, the most steps a stretch and events a run may take, the
    `adjoint` and the `progress_meter`."""

    ts: Array
    solver: diffrax.AbstractSolver
    rtol: Array
    atol: Array
    dt0: Array | None
    adaptive: bool = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    max_events: int = eqx.field(static=True)
    adjoint: diffrax.AbstractAdjoint
    progress_meter: diffrax.AbstractProgressMeter


class AbstractIntegrator(eqx.Module):
    """How a run integrates a system: `run(system, q0, qd0, t0, t1, options)` gives its
    `Solution` at `options.ts`, as one compiled program (`events`: whether that program is
    the event-driven path's, which compiles with `_jit.EVENT_COMPILER_OPTIONS`)."""

    events: ClassVar[bool]

    @abc.abstractmethod
    def run(self, system, q0: Array, qd0: Array, t0: Array, t1: Array, options: RunOptions):
        """The run's `Solution` (its `backend` not yet set)."""
