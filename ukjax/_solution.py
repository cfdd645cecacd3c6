"""The outcome of a simulation: its `Solution`, `ContactRecord` and `Status`, how the status
is read off diffrax's result and the health record integrated beside the state, and what is
evaluated at the saves after the run."""

import enum

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


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


MESSAGES = {
    Status.SUCCESS: "",
    Status.MAX_STEPS_REACHED: "The solver ran out of steps before t1: raise max_steps, loosen "
    "rtol/atol, or use ukjax.stiff_solver() if large Baumgarte gains made the problem stiff.",
    Status.SOLVER_FAILED: "The solver failed (step size underflow or a failed implicit solve, or a "
    "time step whose end could not be brought back onto its constraints: shorten dt0); check the "
    "model for singular configurations.",
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
    "slip that jumps across zero instead of crossing it), or more contacts touched at once than the "
    "solve holds (2 per coordinate, at least 32); the run stopped there. Check the friction "
    "coefficients and the contact geometry.",
    Status.MAX_EVENTS_REACHED: "The run met max_events contact events (impacts, releases, "
    "stick–slip changes) before t1: raise max_events.",
    Status.INVALID_PARAMETERS: "A contact's friction coefficient was negative or not finite, or its "
    "restitution outside [0, 1]: the run did not start.",
    Status.CONTACT_MISSED: "A contact was found penetrated by more than √atol: the run passed through "
    "it between two steps without seeing it. Tighten rtol/atol or report the geometry.",
}

# Components of the health record integrated beside the state: each integrates an indicator,
# so it is non-zero once an accepted step met the fault at any stage, not only at saved times.
HEALTH = 4  # the record's length
_MASS, _RANK, _NONFINITE, _INCONSISTENT = range(HEALTH)
FATAL = 3  # the first three stop the solve: no acceleration exists there




class ContactRecord(eqx.Module):
    """What the unilateral constraints did during a simulation (`Solution.contacts`).

    **Attributes:**

    - `gap`: each contact's `g` at the saved times, shape (k, c).
    - `mode`: `0` open, `1` sliding, `2` sticking, at the saved times, shape (k, c).
    - `normal`: the normal force `λₙ` at the saved times, shape (k, c).
    - `tangent`: the friction force in each contact's tangent basis, shape (k, c, 2).
      Both are read off the steps' dense output as the states are (the rate of the forces'
      integral, which the run carries), to about 100 times the tolerance relative to the
      force (3.4e-8 at `rtol = atol = 1e-10`), with no contact solve per save.
    - `event_times`: the times of the events (impacts, releases, stick–slip changes), in
      order; `inf` past the last, shape (E,) with `E = max_events`.
    - `impulses`: the normal impulse of each contact at each event, shape (E, c).
    - `penetration`: the largest `−g` met at the saved times and at the events (zero
      where nothing penetrated); a start inside a contact or a limit is projected out of
      it and not counted here.
    - `start_penetration`: how deep the start was inside a contact or a limit (zero where
      it was not): the run began from the start projected out of it.
    """

    gap: Float[Array, "k c"]
    mode: Int[Array, "k c"]
    normal: Float[Array, "k c"]
    tangent: Float[Array, "k c 2"]
    event_times: Float[Array, " E"]
    impulses: Float[Array, "E c"]
    penetration: Float[Array, ""]
    start_penetration: Float[Array, ""]

    @property
    def events(self) -> Int[Array, ""]:
        """The number of events."""
        return jnp.sum(jnp.isfinite(self.event_times), axis=-1)


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
    - `stats`: the numbers of steps: `num_steps` (all taken), `num_accepted_steps`,
      `num_rejected_steps`.
    - `contacts`: for a system with unilateral constraints, a [`ukjax.ContactRecord`][]
      (gaps, modes and forces at the saved times, the events and their impulses, the
      largest penetration); None otherwise.
    - `backend`: the backend the run took (`AutoBackend` reports its pick: an
      [`ukjax.XLABackend`][] or a [`ukjax.TreeKernel`][]).
    """

    ts: Float[Array, " k"]
    q: Float[Array, "k n"]
    qd: Float[Array, "k n"]
    phi: Float[Array, "k p"] | None
    phid: Float[Array, "k p"] | None
    status: Int[Array, ""]
    stats: dict
    contacts: ContactRecord | None = None
    backend: eqx.Module | None = None

    @property
    def success(self) -> Array:
        """True where the simulation succeeded."""
        return self.status == Status.SUCCESS


def final_status(result, start_finite, health, q, qd) -> Int[Array, ""]:
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


# A long grid of saves is evaluated in blocks whose intermediates stay in cache
# (`benchmarks/ball_drop.py`'s 25 001 saves).
_SAVES_PER_BLOCK = 32


def at_saves(f, *xs):
    """`jax.vmap(f)(*xs)` over the saves (the leading axis of each of `xs`), in blocks of
    `_SAVES_PER_BLOCK`, the last padded with the last save."""
    k = xs[0].shape[0]
    size = min(_SAVES_PER_BLOCK, k)
    blocks = -(-k // size)

    def split(x):
        x = jnp.concatenate([x, jnp.repeat(x[-1:], blocks * size - k, axis=0)])
        return x.reshape(blocks, size, *x.shape[1:])

    out = jax.lax.map(lambda block: jax.vmap(f)(*block), tuple(split(x) for x in xs))
    return jax.tree.map(lambda y: y.reshape(blocks * size, *y.shape[2:])[:k], out)
