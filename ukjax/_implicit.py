"""How a time step takes the applied forces: at the step's start (`ExplicitForces`), or at
its end to first order (`ImplicitForces`, MuJoCo's `implicitfast`, springs optionally), so
that stiff damping, servos and springs are stable at a robot file's own timestep."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import _linalg as la
from ._dynamics import Dynamics


class AbstractForces(eqx.Module):
    """How a step of [`ukjax.TimeStepping`][] takes the applied forces `Q(t, q, q̇)`: the
    step's mass matrix and force `(M̃, Q̃)` of `M̃ Δv = h Q̃ + Jᵀ p`."""

    @abc.abstractmethod
    def linearized(
        self, system, t, q: Float[Array, " n"], qd: Float[Array, " n"], h, d: Dynamics
    ) -> Dynamics:
        """The step's `Dynamics`: `d` (the system's at the step's start) with `M̃` and `Q̃`
        in place of `M` and `Q`, its constraint levels as they were."""


class ExplicitForces(AbstractForces):
    """The forces at the step's start: `M Δv = h Q(t, q, q̇)` (semi-implicit Euler). A step
    past a stiff force's stability limit (`h > 2/ω` of a spring, `h > 2 m/d` of a damper)
    grows without bound."""

    def linearized(self, system, t, q, qd, h, d):
        return d


class ImplicitForces(AbstractForces):
    """The forces at the step's end to first order in the state's change: with `D = −∂Q/∂q̇`
    and `K = −∂Q/∂q` at the step's start (by forward mode, symmetrized), `q⁺ = q + h q̇⁺` and
    `Δv = q̇⁺ − q̇`,

        (M + h D + h² K) Δv = h (Q − h K q̇) + Jᵀ p.

    The default takes `D` alone, as MuJoCo's `implicitfast` does (which also leaves out the
    Coriolis forces' share of `D`; on one hinge, and to 1e-9 rad on a UR5e under its servos,
    the two steps are the same): damping and servos' velocity gains stable at any step.
    `positions=True` adds `K` (springs, servos' position gains): backward Euler for forces
    linear in the state, stable at any step. Where `M̃` is not positive definite (a force
    pushing away from equilibrium faster than `M` resists within the step) the step takes
    `M` and `Q` as `ExplicitForces` does. Its cost: the Jacobians, one forward pass of the
    forces a coordinate (on Cassie standing at 0.5 ms, twice the explicit step's time).

    **Arguments:**

    - `velocities`: take `D` (default True).
    - `positions`: take `K` (default False).
    """

    velocities: bool = eqx.field(default=True, static=True)
    positions: bool = eqx.field(default=False, static=True)

    def linearized(self, system, t, q, qd, h, d):
        if not (self.velocities or self.positions):
            return d

        def forces(q, qd):
            return system.forces(t, q, qd)

        # Jacobians by forward mode, n columns each (the forces are one evaluation wide:
        # reverse mode would build the same columns from n cotangents at a tape's cost)
        symmetric = lambda J: -(J + J.T) / 2  # noqa: E731
        zero = jnp.zeros_like(d.M)
        D = symmetric(jax.jacfwd(forces, argnums=1)(q, qd)) if self.velocities else zero
        K = symmetric(jax.jacfwd(forces, argnums=0)(q, qd)) if self.positions else zero
        M = d.M + h * D + h * h * K
        Q = d.Q - h * (K @ qd)
        definite = jnp.all(jnp.isfinite(la.cholesky(M)))
        M, Q = jnp.where(definite, M, d.M), jnp.where(definite, Q, d.Q)
        return Dynamics(M, Q, d.levels)
