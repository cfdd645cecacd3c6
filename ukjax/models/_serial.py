"""Spatial serial chains from joint twists: the product of exponentials (the SCARA paper [2] eq. 12–39)."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._animate import AbstractDrawn, Sketch, sketch_of
from .._arrays import as_inexact
from .._jit import jit
from .._robots.tree import RigidBodyTree
from .._systems import AbstractSystem, AbstractUnconstrainedSystem, violation_of


def _hat(w):
    return jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _vee(S):
    return jnp.stack([S[2, 1], S[0, 2], S[1, 0]])


def _unit_axis(axis: Float[ArrayLike, " 3"]) -> Float[Array, " 3"]:
    """`axis` normalised (as MuJoCo and URDF readers do); a zero or non-3-vector is refused."""
    w = as_inexact(axis)
    if w.shape != (3,):
        raise ValueError(f"A joint axis must have shape (3,), got {w.shape}.")
    norm = jnp.linalg.norm(w)
    if not isinstance(norm, jax.core.Tracer) and not norm > 0:
        raise ValueError(f"A joint axis must be a non-zero vector, got {w}.")
    return w / norm


def revolute(axis: Float[ArrayLike, " 3"], point: Float[ArrayLike, " 3"]) -> tuple[str, Array]:
    """A revolute joint about `axis` (normalised) through `point`: twist `(−ω × L, ω)`."""
    w = _unit_axis(axis)
    return "revolute", jnp.concatenate([-jnp.cross(w, as_inexact(point)), w])


def prismatic(axis: Float[ArrayLike, " 3"]) -> tuple[str, Array]:
    """A prismatic joint along `axis` (normalised): twist `(v, 0)`."""
    v = _unit_axis(axis)
    return "prismatic", jnp.concatenate([v, jnp.zeros_like(v)])


def _exp(kind: str, twist, theta):
    """`e^{ξ̂θ}` as a (4, 4) homogeneous transform (the SCARA paper [2] eq. 37)."""
    v, w = twist[:3], twist[3:]
    if kind == "prismatic":
        R, p = jnp.eye(3), v * theta
    else:
        W = _hat(w)
        R = jnp.eye(3) + jnp.sin(theta) * W + (1 - jnp.cos(theta)) * W @ W
        p = (jnp.eye(3) - R) @ jnp.cross(w, v) + w * (w @ v) * theta
    return jnp.eye(4).at[:3, :3].set(R).at[:3, 3].set(p)


class SerialChain(AbstractUnconstrainedSystem, AbstractDrawn):
    """A spatial serial chain of revolute and prismatic joints, by the product of exponentials.

    `M = Σ mᵢ Jᵥᵢᵀ Jᵥᵢ + Jωᵢᵀ Rᵢ Iᵢ Rᵢᵀ Jωᵢ` from each link's pose
    `gᵢ(q) = e^{ξ̂₁q₁}⋯e^{ξ̂ᵢqᵢ} gᵢ(0)`; `Q = ∂T/∂q − Ṁ q̇ − ∂V/∂q` by automatic differentiation.

    **Arguments:**

    - `joints`: a sequence of `ukjax.models.revolute(axis, point)` /
      `ukjax.models.prismatic(axis)`, base to tip.
    - `com_frames`: each link's centre-of-mass frame at `q = 0`, shape (n, 4, 4).
    - `masses`: shape (n,).
    - `inertias`: inertia tensors about the centres of mass in those frames, shape (n, 3, 3).
    - `gravity`: shape (3,) (default `(0, 0, −9.81)`).
    """

    kinds: tuple[str, ...] = eqx.field(static=True)
    twists: Float[Array, "n 6"]
    com_frames: Float[Array, "n 4 4"]
    masses: Float[Array, " n"]
    inertias: Float[Array, "n 3 3"]
    gravity: Float[Array, " 3"]

    def __init__(
        self,
        joints: Sequence[tuple[str, Array]],
        com_frames: Float[ArrayLike, "n 4 4"],
        masses: Float[ArrayLike, " n"],
        inertias: Float[ArrayLike, "n 3 3"],
        gravity: Float[ArrayLike, " 3"] = (0.0, 0.0, -9.81),
    ):
        self.kinds = tuple(kind for kind, _ in joints)
        self.twists = jnp.stack([twist for _, twist in joints])
        self.com_frames = as_inexact(com_frames)
        self.masses = as_inexact(masses)
        self.inertias = as_inexact(inertias)
        self.gravity = as_inexact(gravity)
        n = len(self.kinds)
        if (
            self.com_frames.shape != (n, 4, 4)
            or self.masses.shape != (n,)
            or self.inertias.shape != (n, 3, 3)
        ):
            raise ValueError(
                f"SerialChain with {n} joints needs com_frames (n, 4, 4), masses (n,) and inertias "
                f"(n, 3, 3); got {self.com_frames.shape}, {self.masses.shape}, {self.inertias.shape}."
            )

    def inertial(self) -> tuple[Float[Array, " n"], Float[Array, "n 3"], Float[Array, "n 3 3"]]:
        """Masses, centres of mass and inertias in the links' frames at `q = 0` (the centre
        of mass is each frame's origin)."""
        return self.masses, jnp.zeros_like(self.com_frames[:, :3, 3]), self.inertias

    def with_inertial(self, masses, coms, inertias) -> "SerialChain":
        """The chain with other masses, centres of mass (in the current frames) and inertias."""
        frames = self.com_frames.at[:, :3, 3].add(jnp.einsum("iab,ib->ia", self.com_frames[:, :3, :3], coms))
        return eqx.tree_at(lambda c: (c.com_frames, c.masses, c.inertias), self, (frames, masses, inertias))

    def link_poses(self, q: Float[Array, " n"]) -> Float[Array, "n 4 4"]:
        """Each link's centre-of-mass frame `gᵢ(q)`."""
        poses, g = [], jnp.eye(4)
        for i, kind in enumerate(self.kinds):
            g = g @ _exp(kind, self.twists[i], q[i])
            poses.append(g @ self.com_frames[i])
        return jnp.stack(poses)

    def sketch(self, t, q):
        """The base joined to each link's centre-of-mass frame in turn."""
        P = jnp.concatenate([jnp.zeros((1, 3), q.dtype), self.link_poses(q)[:, :3, 3]])
        return Sketch(jnp.stack([P[:-1], P[1:]], axis=1), P)

    def transform(self, q: Float[Array, " n"], tool_at_zero: Float[ArrayLike, "4 4"]) -> Float[Array, "4 4"]:
        """`e^{ξ̂₁q₁}⋯e^{ξ̂ₙqₙ} g(0)` for a tool frame `g(0)` (the SCARA paper [2] eq. 38)."""
        g = jnp.eye(4)
        for i, kind in enumerate(self.kinds):
            g = g @ _exp(kind, self.twists[i], q[i])
        return g @ jnp.asarray(tool_at_zero)

    def mass_matrix(self, t, q):
        poses = self.link_poses(q)
        dposes = jax.jacfwd(self.link_poses)(q)  # (n_links, 4, 4, n)
        Jv = dposes[:, :3, 3, :]
        R = poses[:, :3, :3]
        # spatial angular velocity: ω̂ = Ṙ Rᵀ
        Jw = jax.vmap(jax.vmap(_vee, in_axes=-1, out_axes=-1))(
            jnp.einsum("iabk,icb->iack", dposes[:, :3, :3, :], R)
        )
        inertia_world = R @ self.inertias @ jnp.swapaxes(R, -1, -2)
        return jnp.einsum("i,iak,ial->kl", self.masses, Jv, Jv) + jnp.einsum(
            "iak,iab,ibl->kl", Jw, inertia_world, Jw
        )

    def forces(self, t, q, qd):
        def kinetic(q):
            return 0.5 * qd @ self.mass_matrix(t, q) @ qd

        def potential(q):
            return -jnp.sum(self.masses * (self.link_poses(q)[:, :3, 3] @ self.gravity))

        _, M_rate = jax.jvp(lambda q: self.mass_matrix(t, q), (q,), (qd,))
        return jax.grad(kinetic)(q) - M_rate @ qd - jax.grad(potential)(q)


def _reversed_cholesky(J: Float[Array, "4 4"]) -> Float[Array, "4 4"]:
    """The upper-triangular `U` with `J = U Uᵀ`."""
    return jnp.linalg.cholesky(J[::-1, ::-1])[::-1, ::-1]


def log_cholesky(
    mass: Float[ArrayLike, ""], com: Float[ArrayLike, " 3"], inertia: Float[ArrayLike, "3 3"]
) -> Float[Array, " 10"]:
    """Log-Cholesky parameters of a rigid body's pseudo-inertia (Rucker & Wensing 2022).

    The pseudo-inertia `J = [[Σ, m c], [m cᵀ, m]]`, `Σ = ∫ x xᵀ dm` about the frame's origin,
    is positive definite exactly when the body is physically consistent. Writing
    `J = U Uᵀ`, `U = e^α [[e^{d₁}, s₁₂, s₁₃, t₁], [0, e^{d₂}, s₂₃, t₂], [0, 0, e^{d₃}, t₃],
    [0, 0, 0, 1]]`, every real `θ = (α, d₁, d₂, d₃, s₁₂, s₂₃, s₁₃, t₁, t₂, t₃)` is a
    consistent body and every consistent body has one `θ`.

    **Arguments:**

    - `mass`, `com` (centre of mass in the frame), `inertia` (about the centre of mass, in the
      frame's axes).

    **Returns:**

    `θ`, shape (10,).
    """
    mass, com, inertia = as_inexact(mass), as_inexact(com), as_inexact(inertia)
    about_origin = inertia + mass * (com @ com * jnp.eye(3) - jnp.outer(com, com))
    sigma = 0.5 * jnp.trace(about_origin) * jnp.eye(3) - about_origin
    h = mass * com
    J = jnp.block([[sigma, h[:, None]], [h[None, :], mass[None, None]]])
    U = _reversed_cholesky(J)
    scale = U[3, 3]
    V = U / scale
    return jnp.concatenate(
        [jnp.log(scale)[None], jnp.log(jnp.diag(V)[:3]), jnp.stack([V[0, 1], V[1, 2], V[0, 2]]), V[:3, 3]]
    )


def from_log_cholesky(
    theta: Float[ArrayLike, " 10"],
) -> tuple[Float[Array, ""], Float[Array, " 3"], Float[Array, "3 3"]]:
    """The inverse of [`ukjax.models.log_cholesky`][]: `(mass, com, inertia about the centre
    of mass)` of a physically consistent body, for any real `θ` (10,)."""
    theta = as_inexact(theta)
    alpha, d, s, t = theta[0], theta[1:4], theta[4:7], theta[7:10]
    V = jnp.diag(jnp.concatenate([jnp.exp(d), jnp.ones(1, theta.dtype)]))
    V = V.at[0, 1].set(s[0]).at[1, 2].set(s[1]).at[0, 2].set(s[2]).at[:3, 3].set(t)
    U = jnp.exp(alpha) * V
    J = U @ U.T
    mass, com = J[3, 3], J[:3, 3] / J[3, 3]
    about_origin = jnp.trace(J[:3, :3]) * jnp.eye(3) - J[:3, :3]
    return mass, com, about_origin - mass * (com @ com * jnp.eye(3) - jnp.outer(com, com))


@jit  # called eagerly when a chain is wrapped: op by op, every operation would compile on its own
def _log_cholesky_bodies(masses, coms, inertias):
    return jax.vmap(log_cholesky)(masses, coms, inertias)


class LogCholeskyChain(AbstractSystem, AbstractDrawn):
    """A [`ukjax.models.SerialChain`][] or [`ukjax.models.RigidBodyTree`][] whose bodies'
    inertial parameters are log-Cholesky parameters (see [`ukjax.models.log_cholesky`][]):
    any value of `theta` is a physically consistent set of masses, centres of mass and
    inertias, so an unconstrained fit (`where=lambda m: m.theta`) cannot leave the physical
    set. Each body's parameters are expressed in its own frame (a chain's link frames at
    `q = 0`, a tree's body frames).

    **Arguments:**

    - `chain`: the geometry (joints, frames, gravity, and for a tree damping and springs).
    - `theta`: shape (b, 10); default: `chain`'s own inertial parameters.
    """

    chain: AbstractSystem
    theta: Float[Array, "b 10"]

    def __init__(self, chain: AbstractSystem, theta: Float[ArrayLike, "b 10"] | None = None):
        if not isinstance(chain, (SerialChain, RigidBodyTree)):
            raise TypeError(
                f"LogCholeskyChain needs a SerialChain or a RigidBodyTree, got {type(chain).__name__}."
            )
        self.chain = chain
        masses, coms, inertias = chain.inertial()
        self.theta = _log_cholesky_bodies(masses, coms, inertias) if theta is None else as_inexact(theta)
        if not isinstance(self.theta, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(self.theta))):
            raise ValueError(
                "The chain's inertial parameters are not physically consistent (a pseudo-inertia that is "
                "not positive definite: a mass ≤ 0, or principal inertias that break Iₐ + I_b ≥ I_c)."
            )
        if self.theta.shape != (masses.shape[0], 10):
            raise ValueError(f"theta must have shape ({masses.shape[0]}, 10), got {self.theta.shape}.")

    def physical(self) -> AbstractSystem:
        """The chain with the inertial parameters `theta` stands for."""
        return self.chain.with_inertial(*jax.vmap(from_log_cholesky)(self.theta))

    def mass_matrix(self, t, q):
        return self.physical().mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.physical().forces(t, q, qd)

    def sketch(self, t, q):
        return sketch_of(self.chain, t, q)

    # the chain's own constraint rows (a tree's quaternion norms) come with it
    def constraint_levels(self, t, q, qd):
        return self.physical().constraint_levels(t, q, qd)

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))

    def dynamics(self, t, q, qd):
        return self.physical().dynamics(t, q, qd)
