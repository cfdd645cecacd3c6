"""Mechanical systems `M(t, q) q̈ = Q(t, q, q̇)`: explicit, Lagrangian, forced, composed and
constrained."""

import abc
import functools
import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from ._animate import Sketch, join
from ._constraints import (
    AbstractConstraint,
    Baumgarte,
    ConstraintRows,
    as_inexact,
    stack_rows,
    value_and_jacfwd,
)
from ._core import Method, UKSolution, check_method, check_shapes, free_solve, uk_solve
from ._jit import jit

Time = Real[ArrayLike, ""]
Coordinates = Float[Array, " n"]


class ConstraintLevel(NamedTuple):
    """Constraint rows solved together in one U-K solve.

    **Attributes:**

    - `rows`: the stacked rows, `b` already stabilized.
    - `nonideal`: the non-ideal constraint force specification `c` (n,), or None.
    - `method`: the pseudo-inverse route of this solve.
    """

    rows: ConstraintRows
    nonideal: Float[Array, " n"] | None
    method: Method


class Dynamics(NamedTuple):
    """A system's equations of motion at one state, each term evaluated once.

    **Attributes:**

    - `M`: the mass matrix (n, n).
    - `Q`: the applied generalized forces (n,): everything except constraint forces.
    - `levels`: the constraints, one [`ukjax.ConstraintLevel`][] per U-K solve. All constraints
      of a system tree form one level; a sequential cascade adds one level per
      `ConstrainedSystem(..., sequential=True)`, each solved under the forces of the ones
      before it (the parallel-robot paper [1] §3 taken literally).
    """

    M: Float[Array, "n n"]
    Q: Float[Array, " n"]
    levels: tuple[ConstraintLevel, ...]


def solve_dynamics(d: Dynamics) -> UKSolution:
    """The acceleration from `Dynamics`, level by level, with the diagnostics of every solve."""
    if not d.levels:
        return free_solve(d.M, d.Q)
    Q, sols = d.Q, []
    for level in d.levels:
        check_shapes(d.M, Q, level.rows.A, level.rows.b, level.nonideal)
        sol = uk_solve(d.M, Q, level.rows.A, level.rows.b, level.nonideal, level.method)
        Q = Q + sol.constraint_force
        sols.append(sol)
    return UKSolution(
        sols[-1].acceleration,
        Q - d.Q,
        functools.reduce(jnp.maximum, [sol.inconsistency for sol in sols]),
        functools.reduce(jnp.logical_and, [sol.mass_ok for sol in sols]),
        functools.reduce(jnp.logical_and, [sol.rank_ok for sol in sols]),
    )


class AbstractSystem(eqx.Module):
    """A mechanical system `M(t, q) q̈ = Q(t, q, q̇) + Qᶜ`, where `Qᶜ` is the force of the
    constraints anywhere in the system (none for an unconstrained one)."""

    @abc.abstractmethod
    def mass_matrix(self, t: Time, q: Coordinates) -> Float[Array, "n n"]:
        """The symmetric positive definite mass matrix `M(t, q)`, shape (n, n)."""

    @abc.abstractmethod
    def forces(self, t: Time, q: Coordinates, qd: Coordinates) -> Float[Array, " n"]:
        """The applied generalized forces `Q(t, q, q̇)` (Coriolis, gravity, actuators):
        everything except constraint forces, shape (n,)."""

    def dynamics(self, t: Time, q: Coordinates, qd: Coordinates) -> Dynamics:
        """`M`, `Q` and every constraint of the system tree at `(t, q, q̇)`, each evaluated
        once. Wrappers build theirs from their parts' so that constraints are never lost.

        **Returns:**

        A [`ukjax.Dynamics`][].
        """
        M, Q = self.mass_matrix(t, q), self.forces(t, q, qd)
        check_dynamics_shapes(M, Q, q)
        return Dynamics(M, Q, self.constraint_levels(t, q, qd))

    def constraint_levels(self, t: Time, q: Coordinates, qd: Coordinates) -> tuple[ConstraintLevel, ...]:
        """The constraints of the system tree at `(t, q, q̇)`, as `dynamics` gives them, without
        evaluating `M` and `Q` (what `violation` and `project` need). A system that brings
        constraints of its own overrides this, and its `dynamics` returns the same levels.

        **Returns:**

        One [`ukjax.ConstraintLevel`][] per U-K solve (none for an unconstrained system).
        """
        return ()

    def sketch(self, t: Time, q: Coordinates) -> Sketch:
        """A stick figure of the configuration `q` at time `t`, what [`ukjax.animate`][]
        draws. Systems with a geometry override this; wrappers draw what they wrap.

        **Returns:**

        A [`ukjax.Sketch`][].
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not say how it is drawn: give it a sketch(t, q) method "
            "returning a ukjax.Sketch. A worked example: 'Drawing your own system' on the documentation "
            "site (docs/examples/sketch.py in the repository)."
        )

    def solve(self, t: Time, q: Coordinates, qd: Coordinates) -> UKSolution:
        """The U-K solve at `(t, q, q̇)` with its diagnostics (no runtime checks).

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

    def violation(
        self, t: Time, q: Coordinates, qd: Coordinates
    ) -> tuple[Float[Array, " p"], Float[Array, " p"]] | None:
        """How far `(q, q̇)` is from satisfying every constraint of the system tree.

        **Returns:**

        `(phi, phid)`, each shape (p,) over all rows (inner systems' rows first):
        `phi` the position-level residual (holonomic rows; zero for others) and `phid` the
        velocity-level residual (`φ̇` for holonomic rows, `ψ` for first-order rows; zero for
        acceleration-level rows). None for a system without constraints.
        """
        levels = self.constraint_levels(t, q, qd)
        if not levels:
            return None
        return (
            jnp.concatenate([level.rows.phi for level in levels]),
            jnp.concatenate([level.rows.phid for level in levels]),
        )


def check_state(system: AbstractSystem, q: ArrayLike, qd: ArrayLike, batch: bool = False) -> tuple[Array, Array]:
    """`q` and `q̇` as arrays of one dtype, with a ValueError that names the expected length
    (and, for a tree with quaternions, MuJoCo's `nq` and `nv`) where they do not fit `system`.

    **Arguments:**

    - `system`: the system the state belongs to.
    - `q`, `qd`: the state, shape (n,) (`(batch, n)` with `batch=True`).
    - `batch`: whether the state has a leading batch axis.

    **Returns:**

    `(q, qd)` as arrays.
    """
    q, qd = jnp.asarray(q), jnp.asarray(qd)
    shape = "(batch, n)" if batch else "(n,)"
    if q.ndim != 1 + batch or q.shape != qd.shape or (batch and q.shape[0] == 0):
        raise ValueError(
            f"q0 and qd0 must both have shape {shape}{' with batch ≥ 1' if batch else ''} (q and q̇); got "
            f"{q.shape} and {qd.shape}." + ("" if batch else " For a batch, use ukjax.simulate_batch or jax.vmap.")
        )
    n = getattr(system, "num_coordinates", None)
    if n is None or q.shape[-1] == n:
        return q, qd
    inner = system
    while not hasattr(inner, "num_velocities") and hasattr(inner, "system"):
        inner = inner.system
    nv = getattr(inner, "num_velocities", n)
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
    parameters as fields (floating-point arrays, so that `jax.grad` reaches them)."""


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


def _merge(levels: Sequence[ConstraintLevel], method: Method) -> ConstraintLevel:
    """Several levels as one: rows stacked, non-ideal terms added."""
    rows = jax.tree.map(lambda *xs: jnp.concatenate(xs), *(level.rows for level in levels))
    nonideal = [level.nonideal for level in levels if level.nonideal is not None]
    return ConstraintLevel(rows, functools.reduce(jnp.add, nonideal) if nonideal else None, method)


class ConstrainedSystem(AbstractSystem):
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

    @property
    def num_coordinates(self) -> int:
        return self.system.num_coordinates

    def sketch(self, t, q):
        return join(self.system.sketch(t, q), *(c.sketch(self.system, t, q) for c in self.constraints))

    def rows(self, t: Time, q: Coordinates, qd: Coordinates) -> ConstraintRows:
        """The stacked rows of this level's constraints (not the inner ones), `b` stabilized."""
        rows = stack_rows(self.constraints, self.system, t, q, qd)
        if self.stabilization is not None:
            rows = eqx.tree_at(lambda r: r.b, rows, self.stabilization.apply(rows))
        return rows

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd)

    def _with_own(self, inner: tuple[ConstraintLevel, ...], t, q, qd) -> tuple[ConstraintLevel, ...]:
        """The inner levels with these constraints joined to the last one (or after it)."""
        c = None if self.nonideal is None else jnp.asarray(self.nonideal(t, q, qd))
        own = ConstraintLevel(self.rows(t, q, qd), c, self.method)
        if self.sequential or not inner:
            return inner + (own,)
        return inner[:-1] + (_merge([inner[-1], own], self.method),)

    def constraint_levels(self, t, q, qd):
        return self._with_own(self.system.constraint_levels(t, q, qd), t, q, qd)

    def dynamics(self, t, q, qd):
        inner = self.system.dynamics(t, q, qd)
        return inner._replace(levels=self._with_own(inner.levels, t, q, qd))

    def project(
        self, t: Time, q: Coordinates, qd: Coordinates, *, tol: float | None = None, max_steps: int = 64
    ) -> "Projection":
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
        result = _project(self, t, q, qd, jnp.asarray(tol, q.dtype), max_steps)
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
@jit
def _project(system, t, q, qd, tol, max_steps):
    def residual(q):
        return system.violation(t, q, jnp.zeros_like(q))[0]

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
    rate, jacobian = value_and_jacfwd(lambda qd: system.violation(t, q, qd)[1], qd)
    qd = qd - jnp.linalg.pinv(jacobian) @ rate
    phi, phid = system.violation(t, q, qd)
    largest = jnp.maximum(jnp.max(jnp.abs(phi)), jnp.max(jnp.abs(phid)))
    return Projection(q, qd, phi, phid, steps, largest <= tol)


class Forced(AbstractSystem):
    """A system with further applied generalized forces `F(t, q, q̇)` (actuator torques,
    springs, a control law): `M q̈ = Q + F (+ Qᶜ)`. The constraints of a constrained `system`
    keep holding under `F`.

    **Arguments:**

    - `system`: the system acted on.
    - `force`: `F(t, q, qd) -> (n,)`.
    """

    system: AbstractSystem
    force: Callable

    @property
    def num_coordinates(self) -> int:
        return self.system.num_coordinates

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd) + jnp.asarray(self.force(t, q, qd))

    def sketch(self, t, q):
        return self.system.sketch(t, q)

    def constraint_levels(self, t, q, qd):
        return self.system.constraint_levels(t, q, qd)

    def dynamics(self, t, q, qd):
        inner = self.system.dynamics(t, q, qd)
        F = jnp.asarray(self.force(t, q, qd))
        if F.shape != inner.Q.shape:
            raise ValueError(f"Forced's force must have shape {inner.Q.shape} like q, got {F.shape}.")
        return inner._replace(Q=inner.Q + F)


def _embed(level: ConstraintLevel, where: slice, n: int) -> ConstraintLevel:
    """A part's level in the coordinates of the whole: its columns placed at `where`."""
    rows = level.rows
    A = jnp.zeros((rows.A.shape[0], n), rows.A.dtype).at[:, where].set(rows.A)
    c = None if level.nonideal is None else jnp.zeros(n, level.nonideal.dtype).at[where].set(level.nonideal)
    return ConstraintLevel(ConstraintRows(A, rows.b, rows.phi, rows.phid), c, level.method)


class ComposedSystem(AbstractSystem):
    """Subsystems stacked into one: block-diagonal `M`, stacked `Q`, named coordinate slices.
    Connect them with constraints (the parallel-robot paper [1] §2, the redundant-manipulator paper [4]). Constrained parts keep their
    constraints: they join the whole system's U-K solve.

    **Arguments:**

    - `parts`: a mapping from names to systems, in coordinate order.
    - `sizes`: the number of coordinates of each part; read from a part's `num_coordinates`
      where it has one.
    """

    # Names and systems in coordinate order: a dict leaf would come back from a JAX transform
    # with its keys sorted, pairing the slices with the wrong parts.
    names: tuple[str, ...] = eqx.field(static=True)
    systems: tuple[AbstractSystem, ...]
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
        self.names = tuple(parts)
        self.systems = tuple(parts.values())
        self.sizes = tuple(int(sizes[name]) for name in parts)

    @property
    def parts(self) -> dict[str, AbstractSystem]:
        """The parts by name, in coordinate order."""
        return dict(zip(self.names, self.systems))

    @property
    def num_coordinates(self) -> int:
        return sum(self.sizes)

    def slice(self, name: str) -> slice:
        """The coordinates of part `name` within `q`."""
        if name not in self.names:
            raise KeyError(f"No part {name!r}; the parts are {list(self.names)}.")
        k = self.names.index(name)
        start = sum(self.sizes[:k])
        return slice(start, start + self.sizes[k])

    def part(self, q: Float[Array, " n"], name: str) -> Float[Array, " m"]:
        """The coordinates (or velocities) of part `name`."""
        return q[self.slice(name)]

    def _check(self, q) -> None:
        if q.shape != (self.num_coordinates,):
            raise ValueError(
                f"The composed system has {self.num_coordinates} coordinates ({dict(zip(self.names, self.sizes))}), "
                f"but q has shape {q.shape}."
            )

    def sketch(self, t, q):
        return join(*(p.sketch(t, self.part(q, name)) for name, p in self.parts.items()))

    def mass_matrix(self, t, q):
        self._check(q)
        return jsl.block_diag(*(p.mass_matrix(t, self.part(q, name)) for name, p in self.parts.items()))

    def forces(self, t, q, qd):
        self._check(q)
        return jnp.concatenate(
            [p.forces(t, self.part(q, name), self.part(qd, name)) for name, p in self.parts.items()]
        )

    def _aligned(self, parts: list[tuple[slice, tuple[ConstraintLevel, ...]]]) -> tuple[ConstraintLevel, ...]:
        """The parts' levels in the whole's coordinates, aligned at the last one, so that every
        part's own joint solve lands in the last level, which a constraint on the whole joins."""
        n = self.num_coordinates
        depth = max(len(levels) for _, levels in parts)
        out = []
        for k in range(depth):
            members = [
                _embed(levels[k + len(levels) - depth], where, n)
                for where, levels in parts
                if k + len(levels) >= depth
            ]
            # one solve over independent blocks: the robust route if any part asked for it
            method = "svd" if any(level.method == "svd" for level in members) else "cholesky"
            out.append(_merge(members, method))
        return tuple(out)

    def constraint_levels(self, t, q, qd):
        self._check(q)
        return self._aligned(
            [
                (self.slice(name), p.constraint_levels(t, self.part(q, name), self.part(qd, name)))
                for name, p in self.parts.items()
            ]
        )

    def dynamics(self, t, q, qd):
        self._check(q)
        parts = [
            (self.slice(name), p.dynamics(t, self.part(q, name), self.part(qd, name)))
            for name, p in self.parts.items()
        ]
        levels = self._aligned([(where, d.levels) for where, d in parts])
        M = jsl.block_diag(*(d.M for _, d in parts))
        return Dynamics(M, jnp.concatenate([d.Q for _, d in parts]), levels)
