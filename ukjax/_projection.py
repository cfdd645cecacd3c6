"""Projection of a state onto a system's constraints: damped Gauss–Newton steps with a line
search on `‖Φ‖²` for the positions, one least-squares step for the velocities; and the one
step that takes an integration step's drift out."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _linalg as la
from ._constraints import value_and_jacfwd
from ._jit import jit


class Projection(eqx.Module):
    """The result of [`ukjax.ConstrainedSystem.project`][].

    **Attributes:**

    - `q`, `qd`: the projected state, shape (n,).
    - `phi`, `phid`: the constraint residuals left there, shape (p,) (as `violation` gives).
    - `steps`: the Gauss–Newton steps taken.
    - `success`: whether `|Φ|` and `|Φ̇|` are within the tolerance everywhere.
    """

    q: Float[Array, " n"]
    qd: Float[Array, " n"]
    phi: Float[Array, " p"]
    phid: Float[Array, " p"]
    steps: Int[Array, ""]
    success: Bool[Array, ""]


# Step lengths tried along each Gauss–Newton direction, all in one batched evaluation.
_STEP_LENGTHS = 0.5 ** np.arange(12)


def _damped_solve(J: Float[Array, "p n"], r: Float[Array, " p"], damping: Float[Array, ""]) -> Float[Array, " n"]:
    """`Jᵀ (J Jᵀ + μ I)⁻¹ r` by the SVD of `J`: the minimum-norm least-squares solution of
    `J x = r` where `μ = 0`, and shorter where `J` is nearly singular and `μ > 0`."""
    U, s, Vt = jnp.linalg.svd(J, full_matrices=False)
    kept = s > jnp.finfo(J.dtype).eps * max(J.shape) * s[0]
    gain = jnp.where(kept, s / jnp.where(kept, s * s + damping, 1.0), 0.0)
    return Vt.T @ (gain * (U.T @ r))


# Compiled as one program: evaluated op by op, the unrolled kernels dispatch thousands of
# scalar operations (seconds for the parallel robot).
# Jitted so that its trace is cached: `project` evaluates it six times (values, Jacobians, the
# line search), each a trace of the system's rows otherwise.
@eqx.filter_jit
def _violation(system, t, q, qd):
    return system.violation(t, q, qd)


@jit
def project(system, t, q, qd, tol, max_steps) -> Projection:
    """`system`'s state `(q, q̇)` at `t` moved onto its constraints (what
    [`ukjax.ConstrainedSystem.project`][] documents), to `tol` in at most `max_steps` steps."""
    def residual(q):
        return _violation(system, t, q, jnp.zeros_like(q))[0]

    def merit(r):
        return jnp.sum(r * r)

    def step(state):
        k, q, r, _ = state
        r, jacobian = value_and_jacfwd(residual, q)
        direction = -_damped_solve(jacobian, r, merit(r))
        lengths = jnp.asarray(_STEP_LENGTHS, q.dtype)
        tried = jax.vmap(lambda a: residual(q + a * direction))(lengths)
        # Armijo's test on ‖Φ‖² (the full step of Gauss–Newton decreases it by 2‖Φ‖² to
        # first order where J has full row rank): the longest step that passes it
        decrease = jax.vmap(merit)(tried) <= (1 - 1e-4 * lengths) * merit(r)
        best = jnp.argmax(decrease)
        moved = decrease[best]
        return k + 1, jnp.where(moved, q + lengths[best] * direction, q), jnp.where(moved, tried[best], r), moved

    def going(state):
        k, _, r, moved = state
        return (k < max_steps) & moved & (merit(r) > 0)

    r0 = residual(q)
    steps, q, _, _ = jax.lax.while_loop(going, step, (jnp.zeros((), jnp.int32), q, r0, jnp.array(True)))
    # Φ̇ and ψ are affine in q̇, so one least-squares step is exact.
    rate, jacobian = value_and_jacfwd(lambda qd: _violation(system, t, q, qd)[1], qd)
    qd = qd - jnp.linalg.pinv(jacobian) @ rate
    phi, phid = _violation(system, t, q, qd)
    largest = jnp.maximum(jnp.max(jnp.abs(phi)), jnp.max(jnp.abs(phid)))
    return Projection(q, qd, phi, phid, steps, largest <= tol)


def drift_step(system, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
    """`(q, q̇)` with the drift an integration step leaves taken out: one minimum-norm
    Gauss–Newton step of `q` onto `Φ = 0`, then the minimum-norm step of `q̇` onto `Φ̇ = 0`
    (and `ψ = 0`) at the corrected `q` (the projection method for index-reduced DAEs, Hairer
    & Wanner VII.2). What is left is second order in the drift."""

    def rows(q):
        levels = system.constraint_levels(t, q, qd)
        return tuple(jnp.concatenate([getattr(level.rows, name) for level in levels]) for name in ("A", "phi", "phid"))

    A, phi, _ = rows(q)
    q = q - la.pinv_solve_multipliers(A, phi[:, None].astype(q.dtype), False)[0][:, 0]
    A, _, phid = rows(q)
    # Φ̇ and ψ are affine in q̇: this step is exact
    return q, qd - la.pinv_solve_multipliers(A, phid[:, None].astype(q.dtype), False)[0][:, 0]
