"""General planar n-link serial manipulator (seed 004; seed 002's appendix is the 5-link case)."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._constraints import as_inexact
from .._systems import AbstractUnconstrainedSystem


def _unit(theta):
    return jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)


def _rotate(theta, v):
    c, s = jnp.cos(theta), jnp.sin(theta)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


class PlanarChain(AbstractUnconstrainedSystem):
    """A planar serial chain of `k` rigid links joined by revolute joints.

    Coordinates: the `k` joint angles, measured from the x axis (`absolute=True`) or from the
    previous link (`absolute=False`), followed by the base position `(x, y)` when
    `floating_base=True` (seed 000's subsystems). Dynamics in closed form from the links'
    Jacobians: `M = Σ mᵢ Jᵢᵀ Jᵢ + Σ Iᵢ ωᵢᵀωᵢ` and `Q = Σ mᵢ Jᵢᵀ (g − J̇ᵢ q̇)`.

    **Arguments:**

    - `lengths`: link lengths, shape (k,).
    - `masses`: link masses, shape (k,).
    - `com`: centre of mass of each link in its own frame (x along the link), shape (k, 2),
      or the distance along the link, shape (k,).
    - `inertias`: moments of inertia about the centres of mass, shape (k,).
    - `gravity`: gravity vector, shape (2,) (default `(0, −9.81)`).
    - `base`: base position, shape (2,), for a fixed base.
    - `absolute`: absolute rather than relative joint angles.
    - `floating_base`: the base position is two more coordinates.
    """

    lengths: Float[Array, " k"]
    masses: Float[Array, " k"]
    com: Float[Array, "k 2"]
    inertias: Float[Array, " k"]
    gravity: Float[Array, " 2"]
    base: Float[Array, " 2"]
    absolute: bool = eqx.field(static=True)
    floating_base: bool = eqx.field(static=True)

    def __init__(
        self,
        lengths: Float[ArrayLike, " k"],
        masses: Float[ArrayLike, " k"],
        com: Float[ArrayLike, "k 2"] | Float[ArrayLike, " k"],
        inertias: Float[ArrayLike, " k"],
        *,
        gravity: Float[ArrayLike, " 2"] = (0.0, -9.81),
        base: Float[ArrayLike, " 2"] = (0.0, 0.0),
        absolute: bool = False,
        floating_base: bool = False,
    ):
        self.lengths = as_inexact(lengths)
        self.masses = as_inexact(masses)
        com = as_inexact(com)
        self.com = jnp.stack([com, jnp.zeros_like(com)], axis=-1) if com.ndim == 1 else com
        self.inertias = as_inexact(inertias)
        self.gravity = as_inexact(gravity)
        self.base = as_inexact(base)
        self.absolute = absolute
        self.floating_base = floating_base
        k = self.lengths.shape
        if self.lengths.ndim != 1 or self.masses.shape != k or self.inertias.shape != k or self.com.shape != k + (2,):
            raise ValueError(
                "PlanarChain needs lengths, masses and inertias of shape (k,) and com of shape (k,) or "
                f"(k, 2); got {self.lengths.shape}, {self.masses.shape}, {self.inertias.shape}, {self.com.shape}."
            )
        if self.gravity.shape != (2,) or self.base.shape != (2,):
            raise ValueError(f"gravity and base must have shape (2,), got {self.gravity.shape}, {self.base.shape}.")

    @property
    def num_links(self) -> int:
        return self.lengths.shape[0]

    @property
    def num_coordinates(self) -> int:
        return self.num_links + 2 * self.floating_base

    def _to_absolute(self) -> Float[Array, "k k"]:
        """`T` with `θ_abs = T θ` for the joint angles."""
        k = self.num_links
        return jnp.eye(k) if self.absolute else jnp.tril(jnp.ones((k, k)))

    def _split(self, q):
        k = self.num_links
        base = q[k : k + 2] if self.floating_base else self.base
        return self._to_absolute() @ q[:k], base

    def joint_positions(self, q: Float[Array, " n"]) -> Float[Array, "k+1 2"]:
        """Positions of the base (row 0), the joints, and the tip (row k)."""
        theta, base = self._split(q)
        steps = self.lengths[:, None] * _unit(theta)
        return base + jnp.concatenate([jnp.zeros((1, 2)), jnp.cumsum(steps, axis=0)])

    def com_positions(self, q: Float[Array, " n"]) -> Float[Array, "k 2"]:
        """Positions of the links' centres of mass."""
        theta, _ = self._split(q)
        return self.joint_positions(q)[:-1] + _rotate(theta, self.com)

    def absolute_angles(self, q: Float[Array, " n"]) -> Float[Array, " k"]:
        """The links' angles from the x axis."""
        return self._split(q)[0]

    def _jacobians(self, q):
        """CoM Jacobians (k, 2, n) in the generalized coordinates, and the CoM accelerations
        at zero `q̈` (k, 2)."""
        k = self.num_links
        theta, _ = self._split(q)
        T = self._to_absolute()
        perp = jnp.array([-1.0, 1.0]) * self.com[:, ::-1]  # d/dθ R(θ)c = R(θ)(−c_y, c_x)
        links = self.lengths[:, None] * _unit(theta + jnp.pi / 2)  # (k, 2): column j for j < i
        own = _rotate(theta, perp)  # (k, 2): column i of link i
        strict = jnp.tril(jnp.ones((k, k)), -1)
        J_abs = strict[:, None, :] * links.T[None] + jnp.eye(k)[:, None, :] * own[:, :, None]
        J = J_abs @ T
        if self.floating_base:
            J = jnp.concatenate([J, jnp.broadcast_to(jnp.eye(2), (k, 2, 2))], axis=-1)
        return J, T

    def _centripetal(self, q, qd):
        k = self.num_links
        theta, _ = self._split(q)
        w = self._to_absolute() @ qd[:k]
        links = (self.lengths * w**2)[:, None] * _unit(theta)
        strict = jnp.tril(jnp.ones((k, k)), -1)
        return -(strict @ links) - (w**2)[:, None] * _rotate(theta, self.com)

    def mass_matrix(self, t, q):
        J, T = self._jacobians(q)
        M = jnp.einsum("i,iak,ial->kl", self.masses, J, J)
        rotational = T.T @ (self.inertias[:, None] * T)
        return M.at[: self.num_links, : self.num_links].add(rotational)

    def forces(self, t, q, qd):
        J, _ = self._jacobians(q)
        accel = self.gravity - self._centripetal(q, qd)
        return jnp.einsum("i,iak,ia->k", self.masses, J, accel)
