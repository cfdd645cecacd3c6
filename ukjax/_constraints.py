"""Constraints from plain functions, reduced to the second-order form `A q̈ = b`."""

import abc
import itertools
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from ._animate import Sketch
from ._arrays import as_inexact
from ._linalg import UNROLL_MAX


class ConstraintRows(eqx.Module):
    """The rows one constraint contributes: `A q̈ = b`, with the position-level residual `phi`
    and the velocity-level residual `phid` of each row (zero where a row has none)."""

    A: Float[Array, "p n"]
    b: Float[Array, " p"]
    phi: Float[Array, " p"]
    phid: Float[Array, " p"]


def _time_derivative(fn, t, q, qd):
    """`(f, ḟ)` for `f(t, q, q̇)` along the motion, leaving out the `q̈` term."""
    return jax.jvp(fn, (t, q, qd), (jnp.ones_like(t), qd, jnp.zeros_like(qd)))


def _jacobian(fn, q):
    """`∂f/∂q` as one JVP per column up to `UNROLL_MAX` columns: `jax.jacfwd` would `vmap`
    them, which under an outer `vmap` gives small minor axes that XLA does not fuse with the
    model's scalar code. Above it, separate JVPs cost more compile time than they save."""
    if q.shape[0] > UNROLL_MAX:
        return jax.jacfwd(fn)(q)
    basis = jnp.eye(q.shape[0], dtype=q.dtype)
    return jnp.stack([jax.jvp(fn, (q,), (basis[j],))[1] for j in range(q.shape[0])], axis=-1)


def value_and_jacfwd(fn: Callable, x: Array) -> tuple[Array, Array]:
    """`(fn(x), ∂fn/∂x)` by forward mode with `fn` evaluated once: the value is the tangents'
    auxiliary output. Beside `jax.jacfwd(fn)(x)`, `fn(x)` is a second copy of `fn` in the
    program, which XLA does not merge where it holds a while loop (a simulation)."""
    jacobian, value = jax.jacfwd(lambda x: (value := fn(x), value), has_aux=True)(x)
    return value, jacobian


def _as_rows(x, name: str) -> Array:
    x = jnp.asarray(x)
    if x.ndim > 1:
        raise ValueError(f"{name} must return a scalar or a vector of shape (p,), got {x.shape}.")
    return jnp.atleast_1d(x)


class AbstractConstraint(eqx.Module):
    """A constraint that can be written as rows of `A(t, q, q̇) q̈ = b(t, q, q̇)`."""

    @abc.abstractmethod
    def rows(self, t: Real[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]) -> ConstraintRows:
        """The second-order form of the constraint at `(t, q, q̇)`.

        **Returns:**

        A `ConstraintRows` with `A` (p, n), `b` (p,) and the residuals `phi`, `phid` (p,).
        """


class AbstractDrawnConstraint(AbstractConstraint):
    """A constraint that adds to the drawing of the system it constrains (a loop closure's gap,
    a path to follow, a contact's geometry). Subclass it with `rows` and `sketch`."""

    @abc.abstractmethod
    def sketch(self, system, t: Real[ArrayLike, ""], q: Float[Array, " n"]) -> Sketch | None:
        """What the constraint adds to a drawing of `system` at `(t, q)`, or None (nothing at
        this configuration).

        **Returns:**

        A [`ukjax.Sketch`][] or None.
        """


def holonomic_rows(phi: Callable, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> ConstraintRows:
    """The rows of `φ(t, q) = 0` differentiated twice (`phi` returns `(p,)`)."""
    t = jnp.asarray(t, dtype=q.dtype)

    def phi_and_rate(t, q, qd):
        return jax.jvp(phi, (t, q), (jnp.ones_like(t), qd))

    (value, rate), (_, accel_free) = _time_derivative(phi_and_rate, t, q, qd)
    return ConstraintRows(_jacobian(lambda q: phi(t, q), q), -accel_free, value, rate)


class AbstractHolonomic(AbstractConstraint):
    """A holonomic (configuration) constraint `φ(t, q) = 0`, differentiated twice.
    Subclass it with `residual` to write a constraint whose parameters are fields."""

    @abc.abstractmethod
    def residual(self, t: Real[ArrayLike, ""], q: Float[Array, " n"]) -> Float[Array, " p"]:
        """`φ(t, q)`, a scalar or a `(p,)` vector."""

    def rows(self, t, q, qd):
        name = f"{type(self).__name__} residual"
        return holonomic_rows(lambda t, q: _as_rows(self.residual(t, q), name), t, q, qd)


class AbstractNonholonomic(AbstractConstraint):
    """A first-order constraint `ψ(t, q, q̇) = 0` (nonholonomic or velocity-level),
    differentiated once. Subclass it with `residual`."""

    @abc.abstractmethod
    def residual(
        self, t: Real[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]
    ) -> Float[Array, " p"]:
        """`ψ(t, q, q̇)`, a scalar or a `(p,)` vector."""

    def rows(self, t, q, qd):
        t = jnp.asarray(t, dtype=q.dtype)

        def psi(t, q, qd):
            return _as_rows(self.residual(t, q, qd), f"{type(self).__name__} residual")

        value, accel_free = _time_derivative(psi, t, q, qd)
        A = _jacobian(lambda qd: psi(t, q, qd), qd)
        return ConstraintRows(A, -accel_free, jnp.zeros_like(value), value)


class AbstractSystemConstraint(AbstractConstraint):
    """A constraint that reads the system it constrains (geometry, sites, joint references)
    each time it is evaluated, instead of keeping a copy: whatever `eqx.tree_at` changes in
    the system reaches its rows, its violation and every gradient. It is evaluated through
    the system it is put in ([`ukjax.ConstrainedSystem`][], [`ukjax.ServoControl`][]), or
    directly with `system_rows`."""

    @abc.abstractmethod
    def system_rows(
        self, system, t: Real[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]
    ) -> ConstraintRows:
        """The second-order form of the constraint on `system` at `(t, q, q̇)`.

        **Returns:**

        A `ConstraintRows` with `A` (p, n), `b` (p,) and the residuals `phi`, `phid` (p,).
        """

    @classmethod
    def stacked_rows(cls, constraints: Sequence["AbstractSystemConstraint"], system, t, q, qd) -> list[ConstraintRows]:
        """`system_rows` of several constraints of this type on one system, in order. Types
        whose constraints can share work (a tree's kinematics, evaluated once for all of a
        robot's loops) override it.

        **Returns:**

        One `ConstraintRows` per constraint.
        """
        return [constraint.system_rows(system, t, q, qd) for constraint in constraints]

    def rows(self, t, q, qd):
        raise TypeError(
            f"{type(self).__name__} reads the system it constrains: evaluate it through "
            "ConstrainedSystem(system, constraints) or call its system_rows(system, t, q, qd)."
        )


class Holonomic(AbstractHolonomic):
    """A holonomic (configuration) constraint `φ(t, q) = 0` from a function.

    **Arguments:**

    - `fn`: `fn(t, q) -> φ`, a scalar or a `(p,)` vector.
    """

    fn: Callable

    def residual(self, t, q):
        return self.fn(t, q)


class Nonholonomic(AbstractNonholonomic):
    """A first-order constraint `ψ(t, q, q̇) = 0` (nonholonomic or velocity-level) from a
    function.

    **Arguments:**

    - `fn`: `fn(t, q, qd) -> ψ`, a scalar or a `(p,)` vector.
    """

    fn: Callable

    def residual(self, t, q, qd):
        return self.fn(t, q, qd)


class AccelerationConstraint(AbstractConstraint):
    """A constraint given directly in second-order form `A q̈ = b`.

    **Arguments:**

    - `fn`: `fn(t, q, qd) -> (A, b)` with `A` of shape (p, n) and `b` of shape (p,).
    """

    fn: Callable

    def rows(self, t, q, qd):
        A, b = self.fn(t, q, qd)
        A = jnp.asarray(A)
        b = _as_rows(b, "AccelerationConstraint fn's b")
        if A.ndim == 1:
            A = A[None]
        if A.shape != (b.shape[0], q.shape[0]):
            raise ValueError(
                f"AccelerationConstraint fn must return A of shape (p, n) = ({b.shape[0]}, "
                f"{q.shape[0]}) matching b and q, got {A.shape}."
            )
        zeros = jnp.zeros_like(b)
        return ConstraintRows(A, b, zeros, zeros)


class Baumgarte(eqx.Module):
    """Baumgarte stabilization: each row obeys `Φ̈ + α Φ̇ + β Φ = 0` instead of `Φ̈ = 0`
    (for first-order constraints `ψ̇ + α ψ = 0`; acceleration-level rows are left alone).

    The servo-control paper [3] writes the gains as `2α` and `β²`; the critically damped choice for a
    frequency `ω` is `alpha = 2ω`, `beta = ω²`.

    **Arguments:**

    - `alpha`: damping gain, a scalar or one per constraint row.
    - `beta`: stiffness gain, a scalar or one per constraint row.
    """

    alpha: Float[Array, "*p"] = eqx.field(converter=as_inexact)
    beta: Float[Array, "*p"] = eqx.field(converter=as_inexact)

    def apply(self, rows: ConstraintRows) -> Float[Array, " p"]:
        """The stabilized right-hand side `b − α Φ̇ − β Φ`."""
        p = rows.b.shape[0]
        for name, gain in (("alpha", self.alpha), ("beta", self.beta)):
            if gain.shape not in ((), (p,)):
                raise ValueError(
                    f"Baumgarte {name} must be a scalar or have one entry per constraint row "
                    f"({p}), got shape {gain.shape}."
                )
        return rows.b - self.alpha * rows.phid - self.beta * rows.phi


def stack_rows(constraints, system, t, q, qd) -> ConstraintRows:
    """Stack the rows of several constraints on `system`, checking each against `q`.
    Neighbouring system constraints of one type are evaluated together (`stacked_rows`)."""
    parts = []
    for kind, group in itertools.groupby(constraints, type):
        group = list(group)
        if issubclass(kind, AbstractSystemConstraint):
            parts += kind.stacked_rows(group, system, t, q, qd)
        else:
            parts += [constraint.rows(t, q, qd) for constraint in group]
    for k, (constraint, r) in enumerate(zip(constraints, parts)):
        if r.A.shape[1:] != q.shape:
            raise ValueError(
                f"Constraint {k} ({type(constraint).__name__}) gives A with {r.A.shape[1]} "
                f"columns, but the system has n = {q.shape[0]} coordinates."
            )
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
