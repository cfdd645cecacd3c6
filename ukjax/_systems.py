"""Mechanical systems `M(t, q) q̈ = Q(t, q, q̇)`: explicit, Lagrangian, forced, composed and
constrained."""

import abc
import warnings
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from ._animate import AbstractDrawn, join, sketch_of
from ._arrays import as_inexact, as_input
from ._constraints import AbstractConstraint, AbstractDrawnConstraint, Baumgarte, ConstraintRows, stack_rows
from ._core import Method, UKSolution, check_method
from ._backends._contact_kernel import ContactKernel
from ._dynamics import ConstraintLevel, Dynamics, levels_violation, merge, solve_dynamics
from ._projection import Projection, project
from ._unilateral import AbstractUnilateral, ContactRows, concatenate

Time = Real[ArrayLike, ""]
Coordinates = Float[Array, " n"]


class AbstractSystem(eqx.Module):
    """A mechanical system `M(t, q) q̈ = Q(t, q, q̇) + Qᶜ`, where `Qᶜ` is the force of the
    constraints anywhere in the system (none for an unconstrained one). Its accelerations are
    those of its `dynamics`, solved one way for every system (`solve`)."""

    @abc.abstractmethod
    def mass_matrix(self, t: Time, q: Coordinates) -> Float[Array, "n n"]:
        """The symmetric positive definite mass matrix `M(t, q)`, shape (n, n)."""

    @abc.abstractmethod
    def forces(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The applied generalized forces `Q(t, q, q̇)` (Coriolis, gravity, actuators):
        everything except constraint forces, shape (n,)."""

    @abc.abstractmethod
    def dynamics(self, t: Time, q: Coordinates, qd: Coordinates) -> Dynamics:
        """`M`, `Q` and every constraint of the system tree at `(t, q, q̇)`, each evaluated
        once. Wrappers build theirs from their parts' so that constraints are never lost.

        **Returns:**

        A [`ukjax.Dynamics`][].
        """

    @abc.abstractmethod
    def constraint_levels(self, t: Time, q: Coordinates, qd: Coordinates) -> tuple[ConstraintLevel, ...]:
        """The constraints of the system tree at `(t, q, q̇)`, as `dynamics` gives them, without
        evaluating `M` and `Q` (what `violation` and `project` need).

        **Returns:**

        One [`ukjax.ConstraintLevel`][] per U-K solve (none for an unconstrained system).
        """

    @abc.abstractmethod
    def violation(
        self, t: Time, q: Coordinates, qd: Coordinates
    ) -> tuple[Float[Array, " p"], Float[Array, " p"]] | None:
        """How far `(q, q̇)` is from satisfying every constraint of the system tree.

        **Returns:**

        `(phi, phid)`, each shape (p,) over all rows (inner systems' rows first):
        `phi` the position-level residual (holonomic rows; zero for others) and `phid` the
        velocity-level residual (`φ̇` for holonomic rows, `ψ` for first-order rows; zero for
        acceleration-level rows). A level's unilateral constraints follow its rows, each
        with `min(g, 0)` (the penetration) and zero. None for a system without constraints.
        """

    def solve(self, t: Time, q: Coordinates, qd: Coordinates) -> UKSolution:
        """The U-K solve of `dynamics` at `(t, q, q̇)` with its diagnostics (no runtime checks).

        **Returns:**

        A [`ukjax.UKSolution`][].
        """
        return solve_dynamics(self.dynamics(t, q, qd))

    def acceleration(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The acceleration `q̈` at `(t, q, q̇)`, every constraint included, shape (n,)."""
        return self.solve(t, *check_state(self, q, qd)).acceleration

    def constraint_force(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The total constraint force `Qᶜ = M q̈ − Q` (ideal plus non-ideal), shape (n,)."""
        return self.solve(t, *check_state(self, q, qd)).constraint_force

    def inconsistency(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, ""]:
        """`‖A q̈ − b‖` relative to its terms: zero unless the constraints are inconsistent."""
        return self.solve(t, q, qd).inconsistency


class AbstractSized(eqx.Module):
    """A system that knows its size: a tree, a chain, a composition."""

    num_coordinates: eqx.AbstractVar[int]
    num_velocities: eqx.AbstractVar[int]


class AbstractWrapper(AbstractSystem, AbstractDrawn):
    """A system built around another one (constrained, forced, actuated, controlled), which
    it draws and whose size it has."""

    system: eqx.AbstractVar[AbstractSystem]

    @property
    def num_coordinates(self) -> int:
        """The number of coordinates `n` of the system inside."""
        return sizes_of(self)[0]

    @property
    def num_velocities(self) -> int:
        """The number of velocities of the system inside (MuJoCo's `nv`)."""
        return sizes_of(self)[1]


def innermost(system: AbstractSystem) -> AbstractSystem:
    """The system inside every wrapper around `system` (itself if it wraps none)."""
    while isinstance(system, AbstractWrapper):
        system = system.system
    return system


def sizes_of(system: AbstractSystem) -> tuple[int, int]:
    """`(num_coordinates, num_velocities)` of `system`, through its wrappers: a
    `TypeError` where it does not know them (a system of functions)."""
    inner = innermost(system)
    if not isinstance(inner, AbstractSized):
        raise TypeError(f"{type(inner).__name__} does not say how many coordinates it has.")
    return inner.num_coordinates, inner.num_velocities


def violation_of(levels: Sequence[ConstraintLevel]) -> tuple[Float[Array, " p"], Float[Array, " p"]] | None:
    """`AbstractSystem.violation` from the levels (None without any)."""
    return levels_violation(levels) if levels else None


def check_state(
    system: AbstractSystem, q: ArrayLike, qd: ArrayLike, batch: bool = False, inputs: bool = False
) -> tuple[Array, Array]:
    """`q` and `q̇` as arrays, with a ValueError that names the expected length
    (and, for a tree with quaternions, MuJoCo's `nq` and `nv`) where they do not fit `system`.

    **Arguments:**

    - `system`: the system the state belongs to.
    - `q`, `qd`: the state, shape (n,) (`(batch, n)` with `batch=True`).
    - `batch`: whether the state has a leading batch axis.
    - `inputs`: whether to give them as a compiled program's arguments (`as_input`: NumPy
      arrays where they are not on a device yet) rather than as JAX arrays.

    **Returns:**

    `(q, qd)` as arrays.
    """
    q, qd = (as_input(x) if inputs else jnp.asarray(x) for x in (q, qd))
    shape = "(batch, n)" if batch else "(n,)"
    if q.ndim != 1 + batch or q.shape != qd.shape or (batch and q.shape[0] == 0):
        raise ValueError(
            f"q0 and qd0 must both have shape {shape}{' with batch ≥ 1' if batch else ''} (q and q̇); got "
            f"{q.shape} and {qd.shape}." + ("" if batch else " For a batch, use ukjax.simulate_batch or jax.vmap.")
        )
    if not isinstance(innermost(system), AbstractSized):
        return q, qd
    n, nv = sizes_of(system)
    if q.shape[-1] == n:
        return q, qd
    note = (
        f" The model's ball and free joints keep quaternions: n counts MuJoCo's qpos entries "
        f"(nq = {n}), not its qvel entries (nv = {nv}), and q̇ is the rate of q, also {n} long; "
        "convert MuJoCo's state with Model.state_from_mujoco(qpos, qvel)."
        if nv != n
        else ""
    )
    raise ValueError(
        f"The system has {n} coordinates, so q and q̇ must have {n} entries each; got {q.shape[-1]}.{note}"
    )


def check_dynamics_shapes(M, Q, q) -> None:
    """Raise a ValueError if `M` and `Q` do not match the number of coordinates."""
    n = q.shape[0]
    if M.shape != (n, n) or Q.shape != (n,):
        raise ValueError(
            f"The system's mass matrix has shape {M.shape} and forces shape {Q.shape}, but q "
            f"has n = {n} entries: expected ({n}, {n}) and ({n},)."
        )


class AbstractUnconstrainedSystem(AbstractSystem):
    """A model without constraints of its own: subclass it with `mass_matrix` and `forces`,
    parameters as fields (floating-point arrays, so that `jax.grad` reaches them); beside
    [`ukjax.AbstractDrawn`][] with a `sketch` to be drawn."""

    def dynamics(self, t, q, qd):
        M, Q = self.mass_matrix(t, q), self.forces(t, q, qd)
        check_dynamics_shapes(M, Q, q)
        return Dynamics(M, Q, ())

    def constraint_levels(self, t, q, qd):
        return ()

    def violation(self, t, q, qd):
        return None


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
        # T is quadratic in q̇, so its Hessian is the same at every q̇. It is taken at one
        # with distinct, non-zero entries, where every usual way of writing T is smooth
        # (‖q̇‖ is not differentiable at q̇ = 0, nor ‖q̇ᵢ − q̇ⱼ‖ where q̇ᵢ = q̇ⱼ).
        qd = jnp.sqrt(jnp.arange(2, q.shape[0] + 2, dtype=q.dtype))
        return jax.hessian(self.kinetic_energy, argnums=2)(t, q, qd)

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


class ConstrainedSystem(AbstractWrapper):
    """A system under constraints, moving by the Udwadia–Kalaba equation.

    It is itself a system, so it can be forced, composed or constrained again; every
    constraint in the tree is kept: by default the constraints of `system` and these are
    solved jointly in one U-K solve (whose rows `sol.phi` reports together), and the
    stabilization and non-ideal term given here apply to these rows only.
    `sequential=True` instead imposes these constraints on `system` as the parallel-robot paper [1] §3 writes it:
    a second solve that takes the inner constraint force as a given applied force and so does
    not keep the inner constraints.

    **Arguments:**

    - `system`: the unconstrained (or already constrained) system.
    - `constraints`: a constraint or a sequence of them, mixed freely.
    - `stabilization`: optional [`ukjax.Baumgarte`][] gains over these rows.
    - `nonideal`: optional `c(t, q, qd) -> (n,)`, the non-ideal constraint force specification
      (the servo-control paper [3] eq. 12–13); the force it adds does work `q̇ᵀc` on admissible motions. In a
      joint solve the `c` of every level is added.
    - `method`: `"svd"` (default; any rank) or `"cholesky"` (linearly independent rows only;
      faster). It applies to the joint solve of everything inside.
    - `sequential`: the literal cascade of the parallel-robot paper [1] §3 instead of the joint solve.
    """

    system: AbstractSystem
    constraints: tuple[AbstractConstraint, ...]
    stabilization: Baumgarte | None
    nonideal: Callable | None
    method: Method = eqx.field(static=True)
    sequential: bool = eqx.field(static=True)
    contact_kernel: ContactKernel | None

    def __init__(
        self,
        system: AbstractSystem,
        constraints: AbstractConstraint | Sequence[AbstractConstraint],
        stabilization: Baumgarte | None = None,
        *,
        nonideal: Callable | None = None,
        method: Method = "svd",
        sequential: bool = False,
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
        self.sequential = sequential
        self.contact_kernel = None  # XLA's contact solve, until a backend binds the system

    def sketch(self, t, q):
        drawn = (c for c in self.constraints if isinstance(c, AbstractDrawnConstraint))
        return join(sketch_of(self.system, t, q), *(c.sketch(self.system, t, q) for c in drawn))

    def rows(self, t: Time, q: Coordinates, qd: Coordinates) -> ConstraintRows:
        """The stacked rows of this level's equality constraints (not the inner ones, not the
        unilateral ones), `b` stabilized."""
        equalities = [c for c in self.constraints if not isinstance(c, AbstractUnilateral)]
        if not equalities:
            zeros = jnp.zeros(0, q.dtype)
            return ConstraintRows(jnp.zeros((0, q.shape[0]), q.dtype), zeros, zeros, zeros)
        rows = stack_rows(equalities, self.system, t, q, qd)
        if self.stabilization is not None:
            rows = eqx.tree_at(lambda r: r.b, rows, self.stabilization.apply(rows))
        return rows

    # Jitted so that its trace is cached (the program is the same: XLA inlines the call): the
    # event-driven path builds the rows at about a dozen places (the rates, the event value,
    # the impacts, the modes, the saves): `benchmarks/grasp.py`'s compile.
    @eqx.filter_jit
    def contact_rows(self, t: Time, q: Coordinates, qd: Coordinates) -> ContactRows | None:
        """The rows of this level's unilateral constraints (None without any)."""
        return concatenate(
            [c.contact_rows(self.system, t, q, qd) for c in self.constraints if isinstance(c, AbstractUnilateral)]
        )

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd)

    def _with_own(self, inner: tuple[ConstraintLevel, ...], t, q, qd) -> tuple[ConstraintLevel, ...]:
        """The inner levels with these constraints joined to the last one (or after it)."""
        c = None if self.nonideal is None else jnp.asarray(self.nonideal(t, q, qd))
        own = ConstraintLevel(self.rows(t, q, qd), c, self.method, self.contact_rows(t, q, qd), self.contact_kernel)
        if inner and inner[-1].contacts is not None and self.sequential:
            raise ValueError(
                "A sequential ConstrainedSystem cannot wrap unilateral constraints: contacts are "
                "solved with the last level's rows, so put them in the outer system."
            )
        if self.sequential or not inner:
            return inner + (own,)
        return inner[:-1] + (merge([inner[-1], own], self.method),)

    def constraint_levels(self, t, q, qd):
        return self._with_own(self.system.constraint_levels(t, q, qd), t, q, qd)

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))

    def dynamics(self, t, q, qd):
        inner = self.system.dynamics(t, q, qd)
        return inner._replace(levels=self._with_own(inner.levels, t, q, qd))

    def project(
        self, t: Time, q: Coordinates, qd: Coordinates, *, tol: float | None = None, max_steps: int = 64
    ) -> Projection:
        """The nearest consistent state: `q` moved onto `Φ = 0` by minimum-norm Gauss–Newton
        steps with a backtracking line search on `‖Φ‖²`, then `q̇` onto `Φ̇ = 0` (and `ψ = 0`)
        by a minimum-norm correction, for every constraint of the system tree. Use it to start
        a simulation from printed, rounded initial conditions.

        The steps go on until `‖Φ‖` stops falling (round-off, or a configuration from which
        no step closes the constraints further). A projection that ends more than `tol` off
        is never silent: called eagerly it warns with the distance left; under `jit` or
        `vmap` read `success`.

        **Arguments:**

        - `t`, `q`, `qd`: the state to correct.
        - `tol`: the largest `|Φ|`, `|Φ̇|` counted as consistent (default `ε^¾` of the
          state's dtype: 1.8e-12 in float64).
        - `max_steps`: the most Gauss–Newton steps.

        **Returns:**

        A [`ukjax.Projection`][]: `q`, `qd`, the residuals `phi` and `phid` left, the number
        of steps and `success`.
        """
        q, qd = check_state(self, q, qd)
        q = as_inexact(q)
        qd = qd.astype(q.dtype)
        tol = float(jnp.finfo(q.dtype).eps) ** 0.75 if tol is None else tol
        result = project(self, t, q, qd, jnp.asarray(tol, q.dtype), max_steps)
        if not isinstance(result.success, jax.core.Tracer) and not bool(result.success):
            warnings.warn(
                f"ConstrainedSystem.project missed its tolerance {tol:.1e}: after {int(result.steps)} "
                f"Gauss–Newton steps the constraints are still |Φ| = {float(jnp.max(jnp.abs(result.phi))):.2e} "
                f"and |Φ̇| = {float(jnp.max(jnp.abs(result.phid))):.2e} off. No step from there closes them "
                "further: start nearer a consistent state (or check that one exists).",
                RuntimeWarning,
                stacklevel=2,
            )
        return result


class Forced(AbstractWrapper):
    """A system with further applied generalized forces `F(t, q, q̇)` (actuator torques,
    springs, a control law): `M q̈ = Q + F (+ Qᶜ)`. The constraints of a constrained `system`
    keep holding under `F`.

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

    def sketch(self, t, q):
        return sketch_of(self.system, t, q)

    def constraint_levels(self, t, q, qd):
        return self.system.constraint_levels(t, q, qd)

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))

    def dynamics(self, t, q, qd):
        inner = self.system.dynamics(t, q, qd)
        F = jnp.asarray(self.force(t, q, qd))
        if F.shape != inner.Q.shape:
            raise ValueError(f"Forced's force must have shape {inner.Q.shape} like q, got {F.shape}.")
        return inner._replace(Q=inner.Q + F)
