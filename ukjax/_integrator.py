"""What a run is asked (`RunOptions`) and the integrators that make it (`AbstractIntegrator`):
the smooth one (`_smooth.Smooth`) and the event-driven one (`_events.EventDriven`) side by
side, each a `run` of a system from a start to the solution at the saves. `simulate` and
`simulate_batch` pick one (`_simulate.integrator_for`)."""

import abc
from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax.numpy as jnp
import optimistix as optx
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
    # whether a batch's members step together with nothing to wait for (no events)
    lockstep: ClassVar[bool]

    @abc.abstractmethod
    def run(self, system, q0: Array, qd0: Array, t0: Array, t1: Array, options: RunOptions):
        """The run's `Solution` (its `backend` not yet set)."""


class Clock(eqx.Module):
    """A run's normalised time `s = (t − t0) / (t1 − t0)`, in which every integrator runs from
    0 to 1: the end is then a constant, and what derives from it folds away when compiling.
    `saves` are the save times in `s`, `dt0` the first (or fixed) step in `s` (None: the
    controller's choice)."""

    t0: Array
    span: Array
    saves: Array
    dt0: Array | None

    @property
    def scale(self) -> Array:
        """`t1 − t0`, or 1 where they are equal (nothing moves, any `s` will do)."""
        return jnp.where(self.span == 0, 1.0, self.span)

    def time(self, s):
        """The time `t` at `s`."""
        return self.t0 + s * self.span


def start_clock(t0: Array, t1: Array, options: RunOptions, whole_steps: bool) -> Clock:
    """The run's `Clock`. With fixed steps and `whole_steps`, the `N` steps diffrax would take
    in `t`, each ending at `t0 + (t1 − t0) k / N` as there."""
    span = t1 - t0
    scale = jnp.where(span == 0, 1.0, span)
    dt0 = options.dt0
    if dt0 is not None and whole_steps and not options.adaptive:
        dt0 = 1 / jnp.maximum(jnp.ceil(jnp.abs(span) / jnp.nextafter(jnp.abs(dt0), jnp.inf)), 1)
    elif dt0 is not None:
        dt0 = dt0 / scale
    return Clock(t0, span, (options.ts - t0) / scale, dt0)


def step_controller(options: RunOptions, norm: Callable = optx.rms_norm) -> diffrax.AbstractStepSizeController:
    """diffrax's PID controller at the run's tolerances under `norm`, or constant steps."""
    if options.adaptive:
        return diffrax.PIDController(rtol=options.rtol, atol=options.atol, norm=norm)
    return diffrax.ConstantStepSize()
