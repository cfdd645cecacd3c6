"""Baumgarte gains tuned by gradient through a simulation, within the solver's stability
limit."""

import math

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from ._constraints import Baumgarte
from ._fit import fit
from ._simulate import simulate
from ._stability import real_stability_limit
from ._solution import Status
from ._systems import ConstrainedSystem


class _Gains(eqx.Module):
    """Real-root Baumgarte gains: `α = ω₁ + ω₂`, `β = ω₁ω₂` with `ωᵢ = ω_max σ(uᵢ)`, so that
    every trial stays inside the integrator's stability region."""

    u: Float[Array, "2 *p"]
    omega_max: Float[Array, ""]

    def baumgarte(self) -> Baumgarte:
        w = self.omega_max * jax.nn.sigmoid(self.u)
        return Baumgarte(w[0] + w[1], w[0] * w[1])


def tune_baumgarte(
    csys: ConstrainedSystem,
    q0: Float[ArrayLike, " n"],
    qd0: Float[ArrayLike, " n"],
    t1: Real[ArrayLike, ""],
    *,
    t0: Real[ArrayLike, ""] = 0.0,
    solver: diffrax.AbstractSolver | None = None,
    dt0: Real[ArrayLike, ""] | None = None,
    adaptive: bool = True,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    per_row: bool = False,
    max_steps: int | None = None,
    steps: int = 100,
    saves: int = 401,
    margin: float = 0.1,
    progress: bool = True,
) -> Baumgarte:
    """Baumgarte gains that minimise the constraint drift `∫‖Φ‖dt` of one simulation, found
    by gradient (forward mode, a handful of parameters) through the whole run.

    The search keeps the error dynamics `Φ̈ + αΦ̇ + βΦ = 0` where the integrator can follow
    them: their roots are real (`α = ω₁ + ω₂`, `β = ω₁ω₂`, critically or over-damped) and
    `ωᵢ h ≤ (1 − margin) x`, with `x` the real stability limit of the solver's Runge–Kutta
    stability function and `h` the fixed step, or with adaptive steps the mean step of the run
    under the starting gains, so that tuning does not buy drift with a stiff, slow solve.
    Adaptive runs are also capped at `max_steps` (default twice the starting run's steps); a
    trial that fails counts as an infinite loss. The start is critically damped at the
    system's current `β` (`ω = √β`), or at a tenth of the bound without stabilization.

    **Arguments:**

    - `csys`: the constrained system; its own rows get the gains.
    - `q0`, `qd0`, `t1`, `t0`: the run to tune for.
    - `solver`, `dt0`, `adaptive`, `rtol`, `atol`: the integrator, as for `simulate` (default
      `Tsit5`).
    - `per_row`: one pair of gains per constraint row instead of one for all.
    - `max_steps`: the step cap of adaptive trials.
    - `steps`: the most optimiser (L-BFGS) steps.
    - `saves`: points of the violation integral with adaptive steps (fixed steps use every
      step).
    - `margin`: how far inside the stability limit to stay.
    - `progress`: as for [`ukjax.fit`][].

    **Returns:**

    The tuned [`ukjax.Baumgarte`][] gains.
    """
    if not isinstance(csys, ConstrainedSystem):
        raise TypeError(f"tune_baumgarte needs a ukjax.ConstrainedSystem, got {type(csys).__name__}.")
    if not adaptive and dt0 is None:
        raise ValueError("Fixed-step tuning (adaptive=False) needs the step size dt0.")
    solver = diffrax.Tsit5() if solver is None else solver
    q0 = jnp.asarray(q0)
    qd0 = jnp.asarray(qd0, q0.dtype)
    t0, t1 = float(t0), float(t1)
    p = csys.rows(t0, q0, qd0).b.shape[0]
    run = dict(solver=solver, dt0=dt0, adaptive=adaptive, rtol=rtol, atol=atol, throw=False)
    if adaptive:
        ts = jnp.linspace(t0, t1, saves)
        reference = simulate(csys, q0, qd0, t0, t1, ts=ts, **run)
        if not bool(reference.success):
            raise ValueError(
                f"The run with the starting gains fails (status {Status(int(reference.status)).name}); tune from gains that work."
            )
        h = (t1 - t0) / int(reference.stats["num_accepted_steps"])
        cap = 2 * int(reference.stats["num_steps"]) if max_steps is None else max_steps
    else:
        count = round((t1 - t0) / float(dt0))
        ts = t0 + float(dt0) * jnp.arange(count + 1)
        h, cap = float(dt0), count + 1 if max_steps is None else max_steps
    omega_max = (1 - margin) * real_stability_limit(solver) / h
    if not math.isfinite(omega_max):
        raise ValueError(
            "tune_baumgarte bounds the gains by an explicit Runge–Kutta solver's stability region; pass one."
        )
    current = csys.stabilization
    omega0 = jnp.sqrt(current.beta) if current is not None else jnp.asarray(0.1 * omega_max)
    if not per_row:  # one pair for all rows: start from the rows' mean frequency
        omega0 = jnp.mean(omega0)
    omega0 = jnp.clip(jnp.broadcast_to(omega0, (p,) if per_row else ()), 1e-3 * omega_max, 0.5 * omega_max)
    # slightly apart, so that the search can leave critical damping
    u0 = jax.scipy.special.logit(jnp.stack([0.9 * omega0, omega0 / 0.9]) / omega_max)

    def with_gains(gains: _Gains) -> ConstrainedSystem:
        return ConstrainedSystem(
            csys.system,
            csys.constraints,
            gains.baumgarte(),
            nonideal=csys.nonideal,
            method=csys.method,
            sequential=csys.sequential,
        )

    def loss(gains: _Gains):
        sol = simulate(
            with_gains(gains), q0, qd0, t0, t1, ts=ts, max_steps=cap, adjoint=diffrax.ForwardMode(), **run
        )
        # ‖Φ‖ has no derivative where Φ = 0 (a consistent start): the square root is taken
        # only where the sum is positive, so that no NaN tangent is formed at all
        squares = jnp.sum(sol.phi**2, axis=1)
        positive = squares > 0
        drift = jnp.trapezoid(jnp.where(positive, jnp.sqrt(jnp.where(positive, squares, 1)), 0), ts)
        return jnp.where(sol.success, jnp.log(drift), jnp.inf)

    start = _Gains(u0, jnp.asarray(omega_max, q0.dtype))
    res = fit(loss, start, where=lambda g: g.u, steps=steps, tol=1e-8, progress=progress, jac="fwd")
    return res.model.baumgarte()

