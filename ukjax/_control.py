"""Servo-constraint (constraint-following) control: the servo-control paper [3] §II–III, eq. 16–35."""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._constraints import AbstractConstraint, Baumgarte, stack_rows
from ._core import UKSolution, projected_solve, sqrt_eps
from ._animate import sketch_of
from ._dynamics import ConstraintLevel, Dynamics, solve_dynamics
from ._systems import AbstractSystem, AbstractWrapper, ConstrainedSystem


class ServoSolution(NamedTuple):
    """One evaluation of a servo controller."""

    u: Float[Array, " m"]
    # q̈ of the controlled system (passive constraints included) under `u`.
    acceleration: Float[Array, " n"]
    # The part of `b − A a` that no input can produce, relative to its size: zero when the
    # servo constraints are achievable (the servo-control paper [3] Assumption 3 / eq. 33).
    unachievable: Float[Array, ""]
    # The solve of the system without inputs (its passive constraints, their diagnostics).
    passive: UKSolution


def _input_map(d: Dynamics, F: Float[Array, "n m"]) -> Float[Array, "n m"]:
    """`P F`: the accelerations that the columns of `F` produce as forces on the system with
    its constraints (homogeneous: `b = 0`, no non-ideal term); `P = M⁻¹` without them."""
    levels = tuple(
        ConstraintLevel(
            eqx.tree_at(lambda r: r.b, level.rows, jnp.zeros_like(level.rows.b)), None, level.method
        )
        for level in d.levels
    )
    # M and the rows are shared by the columns, so vmap factors them once.
    return jax.vmap(lambda f: solve_dynamics(Dynamics(d.M, f, levels)).acceleration, in_axes=1, out_axes=1)(F)


class ServoControl(eqx.Module):
    """Constraint-following servo control (the servo-control paper [3] eq. 35): the inputs `u` that make the
    system obey the servo constraints `A_s q̈ = b_s`,

        u = (A_s P B_u)⁺ (b_s − A_s a) + (I − (A_s P B_u)⁺(A_s P B_u)) s(t, q, q̇),

    the minimum-norm input plus an optional null-space term, for fully, under- and
    redundantly actuated systems. `a` is the acceleration without input (passive constraints
    included) and `P` the map from forces to accelerations. On a closed chain (`system` a
    `ConstrainedSystem`) the exact `P` is the constrained one; `exact=False` uses `M⁻¹`
    instead, the paper's formula, which tracks only approximately.

    **Arguments:**

    - `system`: the controlled system; a `ConstrainedSystem` carries the passive constraints.
    - `servo_constraints`: the desired motion, constraints of any of the three forms.
    - `actuation`: the actuation matrix `B_u`, shape (n, m): the inputs enter as `Q + B_u u`.
    - `stabilization`: optional Baumgarte gains for the servo rows (feedback on the tracking
      error).
    - `exact`: constrained input map (True) or the paper's `M⁻¹` (False).
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

    def solution(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> ServoSolution:
        """Inputs, resulting acceleration and achievability at `(t, q, q̇)`.

        **Returns:**

        A [`ukjax.ServoSolution`][].
        """
        n = q.shape[0]
        if self.actuation.shape[0] != n:
            raise ValueError(
                f"actuation has {self.actuation.shape[0]} rows but the system has n = {n} coordinates; "
                "it must be (n, m) with one column per input."
            )
        servo = ConstrainedSystem(self.system, self.servo_constraints, self.stabilization).rows(t, q, qd)
        d = self.system.dynamics(t, q, qd)
        passive = solve_dynamics(d)
        a = passive.acceleration
        PB = _input_map(d, self.actuation)
        G = servo.A @ (PB if self.exact else _input_map(d._replace(levels=()), self.actuation))
        r = servo.b - servo.A @ a
        s = None if self.nullspace is None else jnp.asarray(self.nullspace(t, q, qd))
        u_ideal, u = projected_solve(G, r, s, robust=True)
        residual = G @ u_ideal - r
        scale = jnp.linalg.norm(r) + jnp.linalg.norm(G) * jnp.linalg.norm(u)
        unachievable = jnp.linalg.norm(residual) / jnp.where(scale > 0, scale, 1)
        return ServoSolution(u, a + PB @ u, unachievable, passive)

    def __call__(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " m"]:
        """The inputs `u(t, q, q̇)`, shape (m,)."""
        return self.solution(t, q, qd).u

    def achievable(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Array:
        """Whether the inputs can realise the servo constraints at `(t, q, q̇)` (rank test of
        the servo-control paper [3] eq. 33, to a relative tolerance of √ε)."""
        sol = self.solution(t, q, qd)
        return sol.unachievable <= sqrt_eps(sol.unachievable)

    def violation(self, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> tuple[Array, Array]:
        """Tracking error of the servo constraints `(phi, phid)`, as `ConstrainedSystem.violation`."""
        rows = stack_rows(self.servo_constraints, self.system, t, q, qd)
        return rows.phi, rows.phid

    def closed_loop(self) -> "ClosedLoop":
        """The system under this control (applied forces `Q + B_u u`), ready for `simulate`."""
        return ClosedLoop(self)


class ClosedLoop(AbstractWrapper):
    """A system under servo control: `M q̈ = Q + B_u u(t, q, q̇) + Qᶜ`, passive constraints
    (if any) included. Its `violation` is the servo tracking error, and `simulate` reports
    servo constraints that the inputs cannot realise as `INCONSISTENT_CONSTRAINTS`. Wrapped or
    composed, it is a system whose applied forces include the control law's; unilateral
    constraints around it (contacts, limits) see the control as a force, which does not see
    them."""

    control: ServoControl

    @property
    def system(self) -> AbstractSystem:
        """The system under control."""
        return self.control.system

    def mass_matrix(self, t, q):
        return self.control.system.mass_matrix(t, q)

    def sketch(self, t, q):
        return sketch_of(self.control.system, t, q)

    def forces(self, t, q, qd):
        return self.control.system.forces(t, q, qd) + self.control.actuation @ self.control(t, q, qd)

    def constraint_levels(self, t, q, qd):
        return self.control.system.constraint_levels(t, q, qd)

    def dynamics(self, t, q, qd):
        # the inputs as a force, and how far they miss the servo constraints as the forces' own
        # inconsistency; the passive constraints solved under that force give the controller's
        # acceleration `a + P B_u u`
        servo = self.control.solution(t, q, qd)
        d = self.control.system.dynamics(t, q, qd)
        return d._replace(Q=d.Q + self.control.actuation @ servo.u, inconsistency=servo.unachievable)

    def violation(self, t, q, qd):
        """Tracking error of the servo constraints `(phi, phid)`."""
        return self.control.violation(t, q, qd)
