"""Integration of a system's equations of motion with diffrax."""

import enum
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float, Int, Real

from ._core import sqrt_eps
from ._systems import AbstractSystem, ConstrainedSystem, check_dynamics_shapes


class Status(enum.IntEnum):
    """Outcome of a simulation, one per batch member in `Solution.status`."""

    SUCCESS = 0
    MAX_STEPS_REACHED = 1
    SOLVER_FAILED = 2
    NONFINITE_STATE = 3
    INCONSISTENT_CONSTRAINTS = 4


_MESSAGES = {
    Status.SUCCESS: "",
    Status.MAX_STEPS_REACHED: "The solver ran out of steps before t1: raise max_steps, loosen "
    "rtol/atol, or use ukjax.stiff_solver() if large Baumgarte gains made the problem stiff.",
    Status.SOLVER_FAILED: "The solver failed (step size underflow or a failed implicit solve); "
    "check the model for singular configurations.",
    Status.NONFINITE_STATE: "The state became non-finite (NaN/inf): check the initial "
    "conditions and that the mass matrix stays symmetric positive definite.",
    Status.INCONSISTENT_CONSTRAINTS: "The constraints became inconsistent (A A⁺ b ≠ b) at a "
    "saved time, or servo constraints asked for what the inputs cannot produce: check for "
    "contradictory constraints, and that the actuation reaches every servo constraint.",
}


class Solution(eqx.Module):
    """The result of [`ukjax.simulate`][] at the saved times.

    **Attributes:**

    - `ts`: saved times, shape (k,).
    - `q`, `qd`: coordinates and velocities, shape (k, n).
    - `phi`, `phid`: constraint violation at position and velocity level, shape (k, p), for a
      `ConstrainedSystem` (see its `violation`) or the servo tracking error of a closed loop;
      `None` for a system without constraints.
    - `status`: a [`ukjax.Status`][] code (integer array; one per member of a batch).
    - `stats`: diffrax's statistics (number of steps and so on).
    """

    ts: Float[Array, " k"]
    q: Float[Array, "k n"]
    qd: Float[Array, "k n"]
    phi: Float[Array, "k p"] | None
    phid: Float[Array, "k p"] | None
    status: Int[Array, ""]
    stats: dict

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


def _vector_field(t, y, system):
    q, qd = y
    # Results follow the state's dtype even where the model's parameters are wider.
    return qd, system.acceleration(t, q, qd).astype(qd.dtype)


def _status(system, result, q0, qd0, ts, q, qd) -> Int[Array, ""]:
    # diffrax fills the saves after a failure with inf, so the trajectory's finiteness only
    # tells something when the solve succeeded.
    start_finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    finite = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(qd))
    status = jnp.where(finite, Status.SUCCESS, Status.NONFINITE_STATE)
    if hasattr(system, "inconsistency"):
        inconsistency = jax.vmap(system.inconsistency)(ts, q, qd)
        consistent = jnp.all(inconsistency <= sqrt_eps(q))
        status = jnp.where((status == Status.SUCCESS) & ~consistent, Status.INCONSISTENT_CONSTRAINTS, status)
    status = jnp.where(
        result == diffrax.RESULTS.successful,
        status,
        jnp.where(result == diffrax.RESULTS.max_steps_reached, Status.MAX_STEPS_REACHED, Status.SOLVER_FAILED),
    )
    return jnp.where(start_finite, status, Status.NONFINITE_STATE).astype(jnp.int32)


def _check_inputs(system, q0, qd0, t0):
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
    if q0.ndim != 1 or q0.shape != qd0.shape:
        raise ValueError(
            f"q0 and qd0 must both have shape (n,); got {q0.shape} and {qd0.shape}. "
            "For a batch, use jax.vmap over simulate."
        )
    if not jnp.issubdtype(q0.dtype, jnp.floating):
        raise TypeError(f"q0 must be a floating-point array, got dtype {q0.dtype}.")
    if q0.dtype == jnp.float32:
        warnings.warn(
            "ukjax.simulate is running in float32; constraint drift and gradients are far less "
            "accurate than in float64. Enable it with jax.config.update('jax_enable_x64', True).",
            stacklevel=3,
        )
    if not isinstance(system, ConstrainedSystem):
        M = jax.eval_shape(system.mass_matrix, t0, q0)
        Q = jax.eval_shape(system.forces, t0, q0, qd0)
        check_dynamics_shapes(M, Q, q0)


@eqx.filter_jit
def simulate(
    system: AbstractSystem,
    q0: Float[ArrayLike, " n"],
    qd0: Float[ArrayLike, " n"],
    t0: Real[ArrayLike, ""],
    t1: Real[ArrayLike, ""],
    *,
    ts: Real[ArrayLike, " k"] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    dt0: Real[ArrayLike, ""] | None = None,
    adaptive: bool = True,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    throw: bool = True,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
) -> Solution:
    """Integrate `M q̈ = Q (+ Qᶜ)` from `(q0, qd0)` at `t0` to `t1`.

    Compiled once per shape and system structure; `jax.vmap` it for batches (with
    `throw=False`, so that failed members are marked in `status` and the others kept) and
    `jax.grad` through it.

    **Arguments:**

    - `system`: any ukjax system, typically a [`ukjax.ConstrainedSystem`][].
    - `q0`, `qd0`: initial coordinates and velocities, shape (n,).
    - `t0`, `t1`: start and end times.
    - `ts`: times to save at (default: `t0` and `t1`).
    - `solver`: a diffrax solver (default `Tsit5`; see [`ukjax.stiff_solver`][] for stiff cases).
    - `rtol`, `atol`: tolerances of the adaptive step-size controller.
    - `dt0`: initial step (required for fixed steps).
    - `adaptive`: `False` for fixed steps of size `dt0`.
    - `max_steps`: the most steps the solver may take.
    - `adjoint`: a diffrax adjoint for reverse-mode gradients (default: checkpointed backprop).
    - `throw`: raise on failure; pass `False` under `vmap` and read `status`.
    - `progress_meter`: e.g. `diffrax.TqdmProgressMeter()`.

    **Returns:**

    A [`ukjax.Solution`][].
    """
    q0 = jnp.asarray(q0)
    qd0 = jnp.asarray(qd0, dtype=q0.dtype)
    _check_inputs(system, q0, qd0, t0)
    ts = jnp.stack([jnp.asarray(t0), jnp.asarray(t1)]) if ts is None else jnp.asarray(ts)
    ts = ts.astype(q0.dtype)
    if ts.ndim != 1:
        raise ValueError(f"ts must be a vector of save times, got shape {ts.shape}.")
    if adaptive:
        controller = diffrax.PIDController(rtol=rtol, atol=atol)
    elif dt0 is None:
        raise ValueError("Fixed-step integration (adaptive=False) needs a step size dt0.")
    else:
        controller = diffrax.ConstantStepSize()
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_vector_field),
        diffrax.Tsit5() if solver is None else solver,
        t0,
        t1,
        dt0,
        (q0, qd0),
        args=system,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=controller,
        max_steps=max_steps,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        throw=False,
        progress_meter=diffrax.NoProgressMeter() if progress_meter is None else progress_meter,
    )
    q, qd = sol.ys
    status = _status(system, sol.result, q0, qd0, ts, q, qd)
    if hasattr(system, "violation"):
        phi, phid = jax.vmap(system.violation)(ts, q, qd)
    else:
        phi = phid = None
    solution = Solution(ts, q, qd, phi, phid, status, sol.stats)
    if throw:
        solution = eqx.branched_error_if(
            solution, status != Status.SUCCESS, status, [_MESSAGES[s] for s in Status]
        )
    return solution
