"""Residual builders for fitting: trajectories (single and multiple shooting) and joint
torques."""


import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from ._control import ServoControl
from ._simulate import simulate
from ._systems import AbstractSystem


class MultipleShooting(eqx.Module):
    """A system with the starts of the later shooting segments as fitted unknowns: the
    model to give [`ukjax.trajectory_residuals`][] for multiple shooting.

    Single shooting from a poor start only converges on short records: on a long one the
    simulated and measured motions part ways and the residuals have many local minima. Cutting
    the record into segments, each simulated from its own start (fitted alongside the
    parameters, tied to the previous segment's end by continuity residuals), keeps every
    segment short. Fit the starts too: `where=lambda m: (m.system.masses, m.q_starts,
    m.qd_starts)`.

    **Arguments:**

    - `system`: the system.
    - `q_starts`, `qd_starts`: states at the start of segments 2…S, shape (S − 1, n) (or
      (E, S − 1, n) for E experiments).
    """

    system: AbstractSystem
    q_starts: Float[Array, "*e s n"]
    qd_starts: Float[Array, "*e s n"]

    @classmethod
    def from_measurements(
        cls,
        system: AbstractSystem,
        ts: Real[ArrayLike, " k"],
        q_measured: Float[ArrayLike, "*e k n"],
        segments: int,
        qd_measured: Float[ArrayLike, "*e k n"] | None = None,
    ) -> "MultipleShooting":
        """Segment starts read off the measurements (velocities by central differences of
        the positions where none were measured)."""
        ts, q = jnp.asarray(ts), jnp.asarray(q_measured)
        K = _segment_length(ts.shape[0], segments)
        qd = jnp.gradient(q, ts, axis=-2) if qd_measured is None else jnp.asarray(qd_measured)
        index = K * jnp.arange(1, segments)
        return cls(system, q[..., index, :], qd[..., index, :])


def _segment_length(k: int, segments: int) -> int:
    if segments < 1 or (k - 1) % segments:
        raise ValueError(
            f"{k} saved times cannot be cut into {segments} segments of equal length: need (k − 1) % segments == 0."
        )
    return (k - 1) // segments


def trajectory_residuals(
    model: AbstractSystem | MultipleShooting,
    q0: Float[ArrayLike, "*e n"],
    qd0: Float[ArrayLike, "*e n"],
    ts: Real[ArrayLike, " k"],
    q_measured: Float[ArrayLike, "*e k n"],
    *,
    qd_measured: Float[ArrayLike, "*e k n"] | None = None,
    weights: Float[ArrayLike, "..."] | None = None,
    continuity_weight: float = 1.0,
    **simulate_kwargs,
) -> Float[Array, " m"]:
    """Simulated minus measured motion at the saved times, for one experiment or a batch.

    **Arguments:**

    - `model`: the system, or a [`ukjax.MultipleShooting`][] for multiple shooting.
    - `q0`, `qd0`: the start, shape (n,), or (E, n) for E experiments fitted together.
    - `ts`: the measurement times, shape (k,), `ts[0]` the start time.
    - `q_measured`: measured coordinates, shape (k, n) or (E, k, n).
    - `qd_measured`: measured velocities, same shape, if any.
    - `weights`: multiplies the residuals, broadcast against `q_measured` ((k, n), or
      (E, k, n) for one set of weights per experiment).
    - `continuity_weight`: multiplies the continuity residuals of multiple shooting.
    - `simulate_kwargs`: passed to [`ukjax.simulate`][]. By default `adjoint` is
      `diffrax.ForwardMode()` (the Jacobian of `fit_least_squares` has few columns) and
      `throw` is False (a failed trial gives non-finite residuals, which the solver rejects).

    **Returns:**

    All residuals in one vector: per experiment, positions (then velocities) at `ts`, then the
    continuity residuals of the segment joints.
    """
    simulate_kwargs = {"adjoint": diffrax.ForwardMode(), "throw": False} | simulate_kwargs
    ts = jnp.asarray(ts)
    q0, qd0, qm = jnp.asarray(q0), jnp.asarray(qd0), jnp.asarray(q_measured)
    qdm = None if qd_measured is None else jnp.asarray(qd_measured)
    shooting = isinstance(model, MultipleShooting)
    system = model.system if shooting else model
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"model must be a ukjax system or a MultipleShooting, got {type(model).__name__}.")
    if qm.shape[-2:] != (ts.shape[0], q0.shape[-1]) or qm.shape[:-2] != q0.shape[:-1]:
        raise ValueError(
            f"q_measured must have shape {q0.shape[:-1] + (ts.shape[0], q0.shape[-1])} to match q0 and ts, got {qm.shape}."
        )
    if qdm is not None and qdm.shape != qm.shape:
        raise ValueError(f"qd_measured must have the shape of q_measured {qm.shape}, got {qdm.shape}.")
    weights = jnp.ones(()) if weights is None else jnp.asarray(weights)
    try:
        weights = jnp.broadcast_to(weights, qm.shape)
    except ValueError:
        raise ValueError(
            f"weights must broadcast against q_measured's shape {qm.shape} (one weight per experiment, "
            f"time and coordinate at most), got {weights.shape}."
        ) from None
    segments = model.q_starts.shape[-2] + 1 if shooting else 1
    K = _segment_length(ts.shape[0], segments)
    seg_ts = jnp.stack([ts[i * K : i * K + K + 1] for i in range(segments)])

    def one(q0, qd0, qm, qdm, weights, q_starts, qd_starts):
        starts_q = jnp.concatenate([q0[None], q_starts])
        starts_qd = jnp.concatenate([qd0[None], qd_starts])
        sol = jax.vmap(lambda q, qd, st: simulate(system, q, qd, st[0], st[-1], ts=st, **simulate_kwargs))(
            starts_q, starts_qd, seg_ts
        )

        def at_ts(x):  # (S, K + 1, n) segment saves -> (k, n), each shared time once
            return jnp.concatenate([x[:, :-1].reshape(-1, x.shape[-1]), x[-1, -1:]])

        parts = [weights * (at_ts(sol.q) - qm)]
        if qdm is not None:
            parts.append(weights * (at_ts(sol.qd) - qdm))
        gaps = jnp.concatenate([sol.q[:-1, -1] - starts_q[1:], sol.qd[:-1, -1] - starts_qd[1:]], axis=-1)
        return jnp.concatenate([jnp.ravel(p) for p in parts] + [continuity_weight * jnp.ravel(gaps)])

    n = q0.shape[-1]
    empty = jnp.zeros(q0.shape[:-1] + (0, n), q0.dtype)
    q_starts = model.q_starts if shooting else empty
    qd_starts = model.qd_starts if shooting else empty
    qdm_or_q = qm if qdm is None else qdm
    run = one if qdm is not None else (lambda q0, qd0, qm, _, w, qs, qds: one(q0, qd0, qm, None, w, qs, qds))
    if q0.ndim == 1:
        return run(q0, qd0, qm, qdm_or_q, weights, q_starts, qd_starts)
    return jnp.ravel(jax.vmap(run)(q0, qd0, qm, qdm_or_q, weights, q_starts, qd_starts))


def _constrained_forces(system: AbstractSystem, t, q, qd, qdd):
    """`N` and `M q̈ − Q`, with `N = I − A⁺A` over every constraint row (I without any): `N`
    removes the forces that ideal constraints could supply."""
    d = system.dynamics(t, q, qd)
    f = d.M @ qdd - d.Q
    if not d.levels:
        return jnp.eye(q.shape[0], dtype=f.dtype), f
    A = jnp.concatenate([level.rows.A for level in d.levels])
    return jnp.eye(q.shape[0], dtype=f.dtype) - jnp.linalg.pinv(A) @ A, f


def torque_residuals(
    controller_or_system: ServoControl | AbstractSystem,
    ts: Real[ArrayLike, " k"],
    q: Float[ArrayLike, "k n"],
    qd: Float[ArrayLike, "k n"],
    qdd: Float[ArrayLike, "k n"],
    u_measured: Float[ArrayLike, "k m"],
) -> Float[Array, "k m"]:
    """Inverse-dynamics residuals: the inputs the model needs for the measured motion minus
    the measured inputs, at each time.

    With a [`ukjax.ServoControl`][], its system (passive constraints included) and actuation
    matrix `B` give the minimum-norm inputs `u = (N B)⁺ N (M q̈ − Q)`, where `N = I − A⁺A`
    projects out what the constraint forces supply; `u_measured` has shape (k, m). With a
    system, `u_measured` are generalized forces (k, n) and the residual is
    `N (M q̈ − Q − u)`. Both are linear in the inertial parameters (`N`, `B` do not depend on
    them), so a regressor is one `jax.jacfwd` away.

    **Returns:**

    The residuals, shape (k, m) or (k, n).
    """
    ts, q, qd, qdd, u = (jnp.asarray(x) for x in (ts, q, qd, qdd, u_measured))
    control = isinstance(controller_or_system, ServoControl)
    system = controller_or_system.system if control else controller_or_system

    def one(t, q, qd, qdd, u):
        N, f = _constrained_forces(system, t, q, qd, qdd)
        if control:
            return jnp.linalg.pinv(N @ controller_or_system.actuation) @ (N @ f) - u
        return N @ (f - u)

    return jax.vmap(one)(ts, q, qd, qdd, u)


