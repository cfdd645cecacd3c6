"""Mechanical systems `M(t, q) q̈ = Q(t, q, q̇)`: explicit, Lagrangian, forced, composed and
constrained."""

import abc
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, ArrayLike, Float, Real

from ._constraints import AbstractConstraint, Baumgarte, ConstraintRows, stack_rows
from ._core import Method, UKSolution, check_method, check_shapes, uk_solve

Time = Real[ArrayLike, ""]
Coordinates = Float[Array, " n"]


class AbstractSystem(eqx.Module):
    """A mechanical system `M(t, q) q̈ = Q(t, q, q̇)`."""

    @abc.abstractmethod
    def mass_matrix(self, t: Time, q: Coordinates) -> Float[Array, "n n"]:
        """The symmetric positive definite mass matrix `M(t, q)`, shape (n, n)."""

    @abc.abstractmethod
    def forces(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The generalized forces `Q(t, q, q̇)` (Coriolis, gravity, applied), shape (n,)."""

    @abc.abstractmethod
    def acceleration(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The acceleration `q̈` the system's equations give at `(t, q, q̇)`, shape (n,)."""


def check_dynamics_shapes(M, Q, q) -> None:
    """Raise a ValueError if `M` and `Q` do not match the number of coordinates."""
    n = q.shape[0]
    if M.shape != (n, n) or Q.shape != (n,):
        raise ValueError(
            f"The system's mass matrix has shape {M.shape} and forces shape {Q.shape}, but q "
            f"has n = {n} entries: expected ({n}, {n}) and ({n},)."
        )


class AbstractUnconstrainedSystem(AbstractSystem):
    """A system whose acceleration is `M⁻¹ Q`: subclass it with `mass_matrix` and `forces`
    to write a model with its parameters as fields (pytree leaves that `jax.grad` reaches)."""

    def acceleration(self, t, q, qd):
        M = self.mass_matrix(t, q)
        return jsl.cho_solve((jnp.linalg.cholesky(M), True), self.forces(t, q, qd))


class ExplicitSystem(AbstractUnconstrainedSystem):
    """A system given by its mass matrix and force functions.

    **Arguments:**

    - `M`: `M(t, q) -> (n, n)` mass matrix.
    - `Q`: `Q(t, q, qd) -> (n,)` generalized forces.
    """

    M: Callable
    Q: Callable

    def mass_matrix(self, t, q):
        return jnp.asarray(self.M(t, q))

    def forces(self, t, q, qd):
        return jnp.asarray(self.Q(t, q, qd))


class LagrangianSystem(AbstractUnconstrainedSystem):
    """A system from its Lagrangian `L = T − V`, differentiated automatically:
    `M = ∂²T/∂q̇²` and `Q = ∂L/∂q − (∂²L/∂q̇∂q) q̇ − ∂²L/∂q̇∂t + F`.

    **Arguments:**

    - `kinetic_energy`: `T(t, q, qd) -> scalar`, quadratic in `qd` (plus lower-order terms).
    - `potential_energy`: optional `V(t, q) -> scalar`.
    - `generalized_forces`: optional non-conservative forces `F(t, q, qd) -> (n,)`.
    """

    kinetic_energy: Callable
    potential_energy: Callable | None = None
    generalized_forces: Callable | None = None

    def _lagrangian(self, t, q, qd):
        L = self.kinetic_energy(t, q, qd)
        if self.potential_energy is not None:
            L = L - self.potential_energy(t, q)
        return L

    def mass_matrix(self, t, q):
        # T is quadratic in q̇, so its Hessian does not depend on where it is taken.
        return jax.hessian(self.kinetic_energy, argnums=2)(t, q, jnp.zeros_like(q))

    def forces(self, t, q, qd):
        t = jnp.asarray(t, dtype=q.dtype)
        dL_dq = jax.grad(self._lagrangian, argnums=1)(t, q, qd)
        momentum = jax.grad(self._lagrangian, argnums=2)
        # d/dt ∂L/∂q̇ along the motion with the q̈ term left out.
        _, momentum_rate = jax.jvp(momentum, (t, q, qd), (jnp.ones_like(t), qd, jnp.zeros_like(qd)))
        Q = dL_dq - momentum_rate
        if self.generalized_forces is not None:
            Q = Q + self.generalized_forces(t, q, qd)
        return Q


class ConstrainedSystem(AbstractSystem):
    """A system under constraints, moving by the Udwadia–Kalaba equation.

    It is itself a system (`M q̈ = Q + Qᶜ`), so further constraints can be imposed on it.

    **Arguments:**

    - `system`: the unconstrained (or already constrained) system.
    - `constraints`: a constraint or a sequence of them, mixed freely.
    - `stabilization`: optional [`ukjax.Baumgarte`][] gains over the stacked rows.
    - `nonideal`: optional `c(t, q, qd) -> (n,)`, the non-ideal constraint force specification
      (seed 002 eq. 12–13); the force it adds does work `q̇ᵀc` on admissible motions.
    - `method`: `"svd"` (default; any rank) or `"cholesky"` (full row rank only; faster).
    """

    system: AbstractSystem
    constraints: tuple[AbstractConstraint, ...]
    stabilization: Baumgarte | None
    nonideal: Callable | None
    method: Method = eqx.field(static=True)

    def __init__(
        self,
        system: AbstractSystem,
        constraints: AbstractConstraint | Sequence[AbstractConstraint],
        stabilization: Baumgarte | None = None,
        *,
        nonideal: Callable | None = None,
        method: Method = "svd",
    ):
        if not isinstance(system, AbstractSystem):
            raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
        if isinstance(constraints, AbstractConstraint):
            constraints = (constraints,)
        constraints = tuple(constraints)
        if not constraints:
            raise ValueError("ConstrainedSystem needs at least one constraint.")
        for k, con in enumerate(constraints):
            if not isinstance(con, AbstractConstraint):
                raise TypeError(
                    f"constraints[{k}] is a {type(con).__name__}; wrap the function in "
                    "ukjax.Holonomic, ukjax.Nonholonomic or ukjax.AccelerationConstraint."
                )
        if stabilization is not None and not isinstance(stabilization, Baumgarte):
            raise TypeError(f"stabilization must be a ukjax.Baumgarte, got {type(stabilization).__name__}.")
        check_method(method)
        self.system = system
        self.constraints = constraints
        self.stabilization = stabilization
        self.nonideal = nonideal
        self.method = method

    def rows(self, t: Time, q: Coordinates, qd: Coordinates) -> ConstraintRows:
        """The stacked constraint rows, `b` already stabilized."""
        rows = stack_rows(self.constraints, t, q, qd)
        if self.stabilization is not None:
            rows = eqx.tree_at(lambda r: r.b, rows, self.stabilization.apply(rows))
        return rows

    def solve(self, t: Time, q: Coordinates, qd: Coordinates) -> UKSolution:
        """The U-K solve at `(t, q, q̇)`, with its diagnostics (no runtime checks)."""
        M = self.system.mass_matrix(t, q)
        Q = self.system.forces(t, q, qd)
        rows = self.rows(t, q, qd)
        c = None if self.nonideal is None else jnp.asarray(self.nonideal(t, q, qd))
        check_dynamics_shapes(M, Q, q)
        check_shapes(M, Q, rows.A, rows.b, c)
        return uk_solve(M, Q, rows.A, rows.b, c, self.method)

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd) + self.solve(t, q, qd).constraint_force

    def acceleration(self, t, q, qd):
        return self.solve(t, q, qd).acceleration

    def constraint_force(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The constraint force `Qᶜ` (ideal plus non-ideal), shape (n,)."""
        return self.solve(t, q, qd).constraint_force

    def inconsistency(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, ""]:
        """`‖A q̈ − b‖` relative to its terms: zero unless the constraints are inconsistent."""
        return self.solve(t, q, qd).inconsistency

    def project(
        self, t: Time, q: Coordinates, qd: Coordinates, *, iterations: int = 8
    ) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
        """The nearest consistent state: `q` moved onto `Φ = 0` by minimum-norm Gauss–Newton
        steps, then `q̇` onto `Φ̇ = 0` (and `ψ = 0`) by a minimum-norm correction. Use it to
        start a simulation from printed, rounded initial conditions.

        **Arguments:**

        - `t`, `q`, `qd`: the state to correct.
        - `iterations`: Gauss–Newton steps (quadratic convergence; a few suffice).

        **Returns:**

        `(q, qd)`, consistent up to round-off where a consistent state is near.
        """

        def phi(q):
            return stack_rows(self.constraints, t, q, jnp.zeros_like(q)).phi

        def newton(_, q):
            return q - jnp.linalg.pinv(jax.jacfwd(phi)(q)) @ phi(q)

        q = jax.lax.fori_loop(0, iterations, newton, q)

        def phid(qd):
            return stack_rows(self.constraints, t, q, qd).phid

        # Φ̇ and ψ are affine in q̇, so one least-squares step is exact.
        return q, qd - jnp.linalg.pinv(jax.jacfwd(phid)(qd)) @ phid(qd)

    def violation(
        self, t: Time, q: Coordinates, qd: Coordinates
    ) -> tuple[Float[Array, " p"], Float[Array, " p"]]:
        """How far `(q, q̇)` is from satisfying the constraints.

        **Returns:**

        `(phi, phid)`, each shape (p,) over the stacked rows: `phi` the position-level residual
        (holonomic rows; zero for others) and `phid` the velocity-level residual (`φ̇` for
        holonomic rows, `ψ` for first-order rows; zero for acceleration-level rows).
        """
        rows = stack_rows(self.constraints, t, q, qd)
        return rows.phi, rows.phid


class Forced(AbstractUnconstrainedSystem):
    """A system with further applied generalized forces `F(t, q, q̇)` (actuator torques,
    springs, a control law): `M q̈ = Q + F`. Impose constraints on the result.

    **Arguments:**

    - `system`: the system acted on.
    - `force`: `F(t, q, qd) -> (n,)`.
    """

    system: AbstractSystem
    force: Callable

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd) + jnp.asarray(self.force(t, q, qd))


class ComposedSystem(AbstractUnconstrainedSystem):
    """Independent subsystems stacked into one: block-diagonal `M`, stacked `Q`, and named
    coordinate slices. Connect them with constraints (seed 000 §2, seed 003).

    **Arguments:**

    - `parts`: a mapping from names to systems, in coordinate order.
    - `sizes`: the number of coordinates of each part; read from a part's `num_coordinates`
      where it has one.
    """

    parts: dict[str, AbstractSystem]
    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, parts: dict[str, AbstractSystem], sizes: dict[str, int] | None = None):
        sizes = {} if sizes is None else dict(sizes)
        for name, part in parts.items():
            if not isinstance(part, AbstractSystem):
                raise TypeError(f"part {name!r} must be a ukjax system, got {type(part).__name__}.")
            if name not in sizes:
                if not hasattr(part, "num_coordinates"):
                    raise ValueError(f"Give the number of coordinates of part {name!r} in sizes.")
                sizes[name] = part.num_coordinates
        self.parts = dict(parts)
        self.sizes = tuple(sizes[name] for name in parts)

    @property
    def num_coordinates(self) -> int:
        return sum(self.sizes)

    def slice(self, name: str) -> slice:
        """The coordinates of part `name` within `q`."""
        names = list(self.parts)
        if name not in names:
            raise KeyError(f"No part {name!r}; the parts are {names}.")
        start = sum(self.sizes[: names.index(name)])
        return slice(start, start + self.sizes[names.index(name)])

    def part(self, q: Float[Array, " n"], name: str) -> Float[Array, " m"]:
        """The coordinates (or velocities) of part `name`."""
        return q[self.slice(name)]

    def mass_matrix(self, t, q):
        return jsl.block_diag(*(p.mass_matrix(t, self.part(q, name)) for name, p in self.parts.items()))

    def forces(self, t, q, qd):
        return jnp.concatenate(
            [p.forces(t, self.part(q, name), self.part(qd, name)) for name, p in self.parts.items()]
        )
