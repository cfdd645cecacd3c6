"""Spatial algebra and rotations for rigid-body trees: twists and wrenches as (angular, linear)
pairs at the world origin, stacked small-matrix products that XLA fuses, and the rotations of
hinges (Rodrigues) and quaternions."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

# Spatial vectors are pairs (angular, linear) of 3-vectors at the world origin: a twist
# (ω, v) has v the velocity of the body-fixed point at the origin, a wrench (n, f) has n the
# moment about the origin. Everything is expressed in the world frame, so that a joint's
# twist and the bodies' inertias need no transforms between frames.


def motion_cross(V, S):
    """`V ×ₘ S`: the rate of change of a twist `S` carried by a body moving with twist `V`."""
    (w, v), (sw, sv) = V, S
    return jnp.cross(w, sw), jnp.cross(w, sv) + jnp.cross(v, sw)


def force_cross(V, F):
    """`V ×_f F`: the rate of change of a wrench `F` carried by a body moving with twist `V`."""
    (w, v), (n, f) = V, F
    return jnp.cross(w, n) + jnp.cross(v, f), jnp.cross(w, f)


def apply_inertia(inertia, S):
    """The spatial inertia `(m, h = m c, Ī = rotational inertia about the origin)` times `S`
    (for one body, or stacked over bodies along a leading axis)."""
    m, h, inertia_o = inertia
    w, v = S
    return mv(inertia_o, w) + jnp.cross(h, v), m[..., None] * v + jnp.cross(w, h)


def add(X, Y):
    return X[0] + Y[0], X[1] + Y[1]


def mm(A, B):
    """`A @ B` over stacks of 3 × 3 matrices `A` and 3-row matrices `B`, as one broadcast product
    whose three slices are added: as fast as XLA's dot on CPU (a dot with several batch
    dimensions, a vmapped batch of vmapped simulations, was turned into an invalid program by
    XLA's layout pass), faster than `jnp.sum` over the size-3 axis, and few operations to
    trace."""
    P = A[..., :, :, None] * B[..., None, :, :]
    return P[..., 0, :] + P[..., 1, :] + P[..., 2, :]


def mv(A, x):
    """`A @ x` over stacks of 3 × 3 matrices and 3-vectors (as `mm`)."""
    P = A * x[..., None, :]
    return P[..., 0] + P[..., 1] + P[..., 2]


def put(x: Array, index: np.ndarray | tuple[np.ndarray, ...], values: ArrayLike) -> Array:
    """`x.at[index].set(values)` for distinct indices known when tracing (an array into the
    first axis, or a tuple of arrays into as many leading axes), as one gather from `x` and
    `values` side by side. XLA's CPU backend turns every such scatter into a loop of its own,
    and a robot's program compiles longer for them."""
    axes = len(index) if isinstance(index, tuple) else 1
    flat = np.ravel_multi_index(np.broadcast_arrays(*index), x.shape[:axes]) if axes > 1 else np.asarray(index)
    rest = x.shape[axes:]
    values = jnp.broadcast_to(jnp.asarray(values, x.dtype), flat.shape + rest).reshape(-1, *rest)
    source = np.arange(np.prod(x.shape[:axes], dtype=int))
    source[flat.ravel()] = source.size + np.arange(flat.size)
    return jnp.concatenate([x.reshape(-1, *rest), values])[source].reshape(x.shape)


def matrix(rows):
    """A stack of small matrices from nested lists of same-shaped arrays (entries last)."""
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


# The three helpers below take stacks (leading axes) as well as single ones: written on
# arrays rather than vmapped, they trace in a fraction of the time.


def axis_angle(axis: Float[Array, "*j 3"], angle: Float[Array, "*j"]) -> Float[Array, "*j 3 3"]:
    """Rotation by `angle` about the unit `axis` (Rodrigues)."""
    x, y, z = (axis[..., i] for i in range(3))
    zero = jnp.zeros_like(x)
    K = matrix([[zero, -z, y], [z, zero, -x], [-y, x, zero]])
    s, c = jnp.sin(angle)[..., None, None], jnp.cos(angle)[..., None, None]
    return jnp.eye(3, dtype=axis.dtype) + s * K + (1 - c) * mm(K, K)


def quaternion_matrix(u: Float[Array, "*j 4"]) -> Float[Array, "*j 3 3"]:
    """The rotation of the unit quaternion `u/‖u‖`, `u = (w, x, y, z)`."""
    u = u / jnp.sqrt(jnp.sum(u * u, axis=-1, keepdims=True))
    w, x, y, z = (u[..., i] for i in range(4))
    return matrix(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def rate_map(u: Float[Array, "*j 4"]) -> Float[Array, "*j 3 4"]:
    """`E(u)` with `ω = 2 E(u) u̇` the angular velocity in the rotated (body) frame; `E(u) u = 0`,
    `E Eᵀ = I` for a unit `u`, and `E(u̇) u̇ = 0`, so that `ω̇ = 2 E(u) ü`."""
    w, x, y, z = (u[..., i] for i in range(4))
    return matrix([[-x, w, z, -y], [-y, -z, w, x], [-z, y, -x, w]])
