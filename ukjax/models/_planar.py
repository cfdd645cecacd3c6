"""General planar n-link serial manipulator (the dual-arm paper [5]; the servo-control paper's appendix is the 5-link case)."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._animate import AbstractDrawn, Sketch
from .._arrays import as_inexact
from .._linalg import UNROLL_MAX
from .._systems import AbstractSized, AbstractUnconstrainedSystem


def _rotate(theta, v):
    c, s = jnp.cos(theta), jnp.sin(theta)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


class PlanarChain(AbstractUnconstrainedSystem, AbstractSized, AbstractDrawn):
    """A planar serial chain of `k` rigid links joined by revolute joints.

    Coordinates: the `k` joint angles, measured from the x axis (`absolute=True`) or from the
    previous link (`absolute=False`), followed by the base position `(x, y)` when
    `floating_base=True` (the parallel-robot paper's subsystems). Dynamics in closed form from the links'
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
        if (
            self.lengths.ndim != 1
            or self.masses.shape != k
            or self.inertias.shape != k
            or self.com.shape != k + (2,)
        ):
            raise ValueError(
                "PlanarChain needs lengths, masses and inertias of shape (k,) and com of shape (k,) or "
                f"(k, 2); got {self.lengths.shape}, {self.masses.shape}, {self.inertias.shape}, {self.com.shape}."
            )
        if self.gravity.shape != (2,) or self.base.shape != (2,):
            raise ValueError(
                f"gravity and base must have shape (2,), got {self.gravity.shape}, {self.base.shape}."
            )

    @property
    def num_links(self) -> int:
        return self.lengths.shape[0]

    @property
    def num_coordinates(self) -> int:
        return self.num_links + 2 * self.floating_base

    @property
    def num_velocities(self) -> int:
        return self.num_coordinates

    def _split(self, q):
        k = self.num_links
        base = q[k : k + 2] if self.floating_base else self.base
        theta = q[:k] if self.absolute else jnp.stack([sum(q[: i + 1]) for i in range(k)])
        return theta, base

    def sketch(self, t, q):
        """The links from the base to the tip, the joints as points (2D)."""
        P = self.joint_positions(q)
        return Sketch(jnp.stack([P[:-1], P[1:]], axis=1), P)

    def joint_positions(self, q: Float[Array, " n"]) -> Float[Array, "k+1 2"]:
        """Positions of the base (row 0), the joints, and the tip (row k)."""
        theta, base = self._split(q)
        # A running sum of scalars rather than `cumsum`, which XLA runs as a separate
        # reduce-window per batch member (see `_links`).
        points = [(base[0], base[1])]
        for i in range(self.num_links):
            x, y = points[-1]
            points.append((x + self.lengths[i] * jnp.cos(theta[i]), y + self.lengths[i] * jnp.sin(theta[i])))
        return jnp.stack([jnp.stack(point) for point in points])

    def com_positions(self, q: Float[Array, " n"]) -> Float[Array, "k 2"]:
        """Positions of the links' centres of mass."""
        theta, _ = self._split(q)
        return self.joint_positions(q)[:-1] + _rotate(theta, self.com)

    def absolute_angles(self, q: Float[Array, " n"]) -> Float[Array, " k"]:
        """The links' angles from the x axis."""
        return self._split(q)[0]

    def _links(self, q, qd):
        """Per link, as scalars: the CoM Jacobian's columns `(x, y)` in the generalized
        coordinates and the CoM acceleration at zero `q̈`.

        Written with one scalar per entry, unrolled over the links at trace time: under `vmap`
        every operation is then elementwise over the batch and XLA fuses the whole model into
        one loop, where small array contractions would each be a separate kernel.
        """
        k, n = self.num_links, self.num_coordinates
        theta, w = [q[i] for i in range(k)], [qd[i] for i in range(k)]
        if not self.absolute:
            for i in range(1, k):
                theta[i], w[i] = theta[i - 1] + theta[i], w[i - 1] + w[i]
        c, s = [jnp.cos(x) for x in theta], [jnp.sin(x) for x in theta]
        l, com = self.lengths, self.com
        zero = jnp.zeros_like(q[0])
        links = []
        for i in range(k):
            r = (c[i] * com[i, 0] - s[i] * com[i, 1], s[i] * com[i, 0] + c[i] * com[i, 1])
            # ∂(CoM i)/∂θⱼ in absolute angles: the link vector turned by 90° for j < i, the
            # CoM offset turned by 90° for j = i.
            columns = (
                [(-l[j] * s[j], l[j] * c[j]) for j in range(i)]
                + [(-r[1], r[0])]
                + [(zero, zero)] * (k - i - 1)
            )
            if not self.absolute:  # θ_abs,m = Σ_{j ≤ m} q_j: column j is the sum of those for m ≥ j
                for j in range(k - 2, -1, -1):
                    columns[j] = (columns[j][0] + columns[j + 1][0], columns[j][1] + columns[j + 1][1])
            if self.floating_base:
                columns += [(1.0 + zero, zero), (zero, 1.0 + zero)]
            accel = [-(w[i] ** 2) * r[a] for a in range(2)]
            for j in range(i):
                accel = [accel[0] - l[j] * w[j] ** 2 * c[j], accel[1] - l[j] * w[j] ** 2 * s[j]]
            links.append((columns, accel))
        # dθ_abs,i/dq_j: the rotational part of the mass matrix.
        rotation = [
            [1.0 if (j == i or (not self.absolute and j < i)) else 0.0 for j in range(n)] for i in range(k)
        ]
        return links, rotation

    def _arrays(self, q, qd):
        """`_links` as arrays for long chains, where one scalar per entry would make the traced
        program grow as k·n²: the CoM Jacobians (k, n, 2), the CoM accelerations at zero `q̈`
        (k, 2) and `dθ_abs/dq` (k, n)."""
        k = self.num_links
        lower = jnp.tril(jnp.ones((k, k), q.dtype))
        to_absolute = lower if not self.absolute else jnp.eye(k, dtype=q.dtype)
        theta, w = to_absolute @ q[:k], to_absolute @ qd[:k]
        c, s = jnp.cos(theta), jnp.sin(theta)
        links = self.lengths[:, None] * jnp.stack([c, s], axis=-1)
        offsets = _rotate(theta, self.com)

        def perp(v):
            return jnp.stack([-v[..., 1], v[..., 0]], axis=-1)

        before = lower - jnp.eye(k, dtype=q.dtype)  # j < i
        J = (
            before[:, :, None] * perp(links)[None]
            + jnp.eye(k, dtype=q.dtype)[:, :, None] * perp(offsets)[:, None]
        )
        J = jnp.einsum("ijd,jm->imd", J, to_absolute)
        rotation = to_absolute
        if self.floating_base:
            J = jnp.concatenate([J, jnp.broadcast_to(jnp.eye(2, dtype=q.dtype), (k, 2, 2))], axis=1)
            rotation = jnp.concatenate([rotation, jnp.zeros((k, 2), q.dtype)], axis=1)
        accel = -(w**2)[:, None] * offsets - before @ ((w**2)[:, None] * links)
        return J, accel, rotation

    def mass_matrix(self, t, q):
        n = self.num_coordinates
        if n > UNROLL_MAX:
            J, _, rotation = self._arrays(q, jnp.zeros_like(q))
            return jnp.einsum("i,iad,ibd->ab", self.masses, J, J) + jnp.einsum(
                "i,ia,ib->ab", self.inertias, rotation, rotation
            )
        links, rotation = self._links(q, jnp.zeros_like(q))
        M = [[0.0] * n for _ in range(n)]
        for i, (J, _) in enumerate(links):
            for a in range(n):
                for b in range(a + 1):
                    entry = self.masses[i] * (J[a][0] * J[b][0] + J[a][1] * J[b][1])
                    if rotation[i][a] and rotation[i][b]:
                        entry = entry + self.inertias[i]
                    M[a][b] = M[a][b] + entry
        zero = jnp.zeros_like(q[0])
        return jnp.stack(
            [jnp.stack([M[a][b] + zero if b <= a else M[b][a] + zero for b in range(n)]) for a in range(n)]
        )

    def forces(self, t, q, qd):
        if self.num_coordinates > UNROLL_MAX:
            J, accel, _ = self._arrays(q, qd)
            return jnp.einsum("iad,id->a", J, self.masses[:, None] * (self.gravity - accel))
        links, _ = self._links(q, qd)
        Q = [0.0] * self.num_coordinates
        for i, (J, accel) in enumerate(links):
            force = [self.masses[i] * (self.gravity[a] - accel[a]) for a in range(2)]
            Q = [Q[a] + J[a][0] * force[0] + J[a][1] * force[1] for a in range(len(Q))]
        return jnp.stack([x + jnp.zeros_like(q[0]) for x in Q])
