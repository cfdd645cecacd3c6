"""Servo-constraint (constraint-following) control: seed 002 §II–III, eq. 16–35."""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, ArrayLike, Float

from ._constraints import AbstractConstraint, Baumgarte, stack_rows
from ._core import sqrt_eps, uk_solve
from ._systems import AbstractSystem, ConstrainedSystem


class ServoSolution(NamedTuple):
    """One evaluation of a servo controller."""

    u: Float[Array, " m"]
    # q̈ of the controlled system (passive constraints included) under `u`.
    acceleration: Float[Array, " n"]
    # The part of `b − A a` that no input can produce, relative to its size: zero when the
    # servo constraints are achievable (seed 002, Assumption 3 / eq. 33).
    unachievable: Float[Array, ""]


def _input_map(M, A_passive, F):
    """`P F` with `P = M⁻¹ − M⁻¹A_pᵀ(A_p M⁻¹ A_pᵀ)⁺A_p M⁻¹`: the acceleration that forces `F`
    produce on the passively constrained system; `P = M⁻¹` without passive constraints."""
    if A_passive is None:
        return jsl.cho_solve((jnp.linalg.cholesky(M), True), F)
    # P f is the U-K acceleration under the force f alone with b = 0; M and A_p are shared
    # by the columns, so vmap factors them once.
    zeros = jnp.zeros(A_passive.shape[0], F.dtype)
    return jax.vmap(lambda f: uk_solve(M, f, A_passive, zeros, None, "svd").acceleration, in_axes=1, out_axes=1)(F)


class ServoControl(eqx.Module):
    """Constraint-following servo control (seed 002 eq. 35): the inputs `u` that make the
    system obey the servo constraints `A_s q̈ = b_s`,

        u = (A_s P B_u)⁺ (b_s − A_s a) + (I − (A_s P B_u)⁺(A_s P B_u)) s(t, q, q̇),

    the minimum-norm input plus an optional null-space term, for fully, under- and
    redundantly actuated systems. `a` is the acceleration without input (passive constraints
    included) and `P` the map from forces to accelerations. On a closed chain (`system` a
    `ConstrainedSystem`) the exact `P` is the constrained one; `exact=False` uses `M⁻¹`
    instead, the seed's formula, which tracks only approximately.

    **Arguments:**

    - `system`: the controlled system; a `ConstrainedSystem` carries the passive constraints.
    - `servo_constraints`: the desired motion, constraints of any of the three forms.
    - `actuation`: the actuation matrix `B_u`, shape (n, m): the inputs enter as `Q + B_u u`.
    - `stabilization`: optional Baumgarte gains for the servo rows (feedback on the tracking
      error).
    - `exact`: constrained input map (True) or the seed's `M⁻¹` (False).
    - `nullspace`: optional `s(t, q, qd) -> (m,)` for the null-space term.
    """

    system: AbstractSystem
    servo_constraints: tuple[AbstractConstraint, ...]
    actuation: Float[Array, "n m"]
    stabilization: Baumgarte | None
    exact: bool = eqx.field(static=True)
    nullspace: Callable | None

    def __init__(
        self,
        system: AbstractSystem,
        servo_constraints: AbstractConstraint | Sequence[AbstractConstraint],
        actuation: Float[ArrayLike, "n m"],
        *,
        stabilization: Baumgarte | None = None,
        exact: bool = True,
        nullspace: Callable | None = None,
    ):
        if not isinstance(system, AbstractSystem):
            raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
        # Reuse ConstrainedSystem's validation of constraints and gains.
        checked = ConstrainedSystem(system, servo_constraints, stabilization)
        actuation = jnp.asarray(actuation)
        if actuation.ndim == 1:
            actuation = actuation[:, None]
        if actuation.ndim != 2:
            raise ValueError(f"actuation must be an (n, m) matrix, got shape {actuation.shape}.")
        self.system = system
        self.servo_constraints = checked.constraints
        self.actuation = actuation
        self.stabilization = stabilization
        self.exact = exact
        self.nullspace = nullspace

    def solve(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> ServoSolution:
        """Inputs, resulting acceleration and achievability at `(t, q, q̇)`."""
        n = q.shape[0]
        if self.actuation.shape[0] != n:
            raise ValueError(
                f"actuation has {self.actuation.shape[0]} rows but the system has n = {n} coordinates; "
                "it must be (n, m) with one column per input."
            )
        servo = ConstrainedSystem(self.system, self.servo_constraints, self.stabilization).rows(t, q, qd)
        if isinstance(self.system, ConstrainedSystem):
            M = self.system.system.mass_matrix(t, q)
            A_passive = self.system.rows(t, q, qd).A
        else:
            M, A_passive = self.system.mass_matrix(t, q), None
        a = self.system.acceleration(t, q, qd)
        PB = _input_map(M, A_passive, self.actuation)
        G = servo.A @ (PB if self.exact else _input_map(M, None, self.actuation))
        r = servo.b - servo.A @ a
        G_pinv = jnp.linalg.pinv(G)
        u = G_pinv @ r
        if self.nullspace is not None:
            s = jnp.asarray(self.nullspace(t, q, qd))
            u = u + s - G_pinv @ (G @ s)
        residual = G @ (G_pinv @ r) - r
        scale = jnp.linalg.norm(r) + jnp.linalg.norm(G) * jnp.linalg.norm(u)
        unachievable = jnp.linalg.norm(residual) / jnp.where(scale > 0, scale, 1)
        return ServoSolution(u, a + PB @ u, unachievable)

    def __call__(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " m"]:
        """The inputs `u(t, q, q̇)`, shape (m,)."""
        return self.solve(t, q, qd).u

    def achievable(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Array:
        """Whether the inputs can realise the servo constraints at `(t, q, q̇)` (rank test of
        seed 002 eq. 33, to a relative tolerance of √ε)."""
        sol = self.solve(t, q, qd)
        return sol.unachievable <= sqrt_eps(sol.unachievable)

    def violation(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> tuple[Array, Array]:
        """Tracking error of the servo constraints `(phi, phid)`, as `ConstrainedSystem.violation`."""
        rows = stack_rows(self.servo_constraints, t, q, qd)
        return rows.phi, rows.phid

    def closed_loop(self) -> "ClosedLoop":
        """The system under this control (applied forces `Q + B_u u`), ready for `simulate`."""
        return ClosedLoop(self)


class ClosedLoop(AbstractSystem):
    """A system under servo control: `M q̈ = Q + Qᶜ + B_u u(t, q, q̇)`, passive constraints
    (if any) included. Its `violation` is the servo tracking error, and `simulate` reports
    servo constraints that the inputs cannot realise as `INCONSISTENT_CONSTRAINTS`."""

    control: ServoControl

    def mass_matrix(self, t, q):
        return self.control.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.mass_matrix(t, q) @ self.acceleration(t, q, qd)

    def acceleration(self, t, q, qd):
        return self.control.solve(t, q, qd).acceleration

    def violation(self, t, q, qd):
        """Tracking error of the servo constraints `(phi, phid)`."""
        return self.control.violation(t, q, qd)

    def inconsistency(self, t, q, qd) -> Array:
        """How far the servo constraints are from achievable, or the passive constraints from
        consistent (0 when both are)."""
        unachievable = self.control.solve(t, q, qd).unachievable
        if isinstance(self.control.system, ConstrainedSystem):
            return jnp.maximum(unachievable, self.control.system.inconsistency(t, q, qd))
        return unachievable
