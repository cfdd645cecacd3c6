"""The primitive shapes a sphere can touch, each as its signed distance and outward unit
normal at a point `y` in the shape's frame (`size`: a sphere's radius; a capsule's or a
cylinder's radius and half length along z; a box's half sizes; a plane is z ≥ 0)."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._unilateral import norm, unit

SHAPES = ("plane", "sphere", "capsule", "box", "cylinder")


def thickness(kind: str, size: Float[Array, "k 3"]) -> Float[Array, " k"]:
    """The least width of the shape `kind`: how far a point must travel through it to come
    out on the other side (a plane cannot be passed)."""
    if kind == "plane":
        return jnp.full(size.shape[0], jnp.inf, size.dtype)
    if kind in ("sphere", "capsule"):
        return 2 * size[:, 0]
    if kind == "cylinder":
        return 2 * jnp.minimum(size[:, 0], size[:, 1])
    return 2 * jnp.min(size, axis=-1)


def extent(kind: str, size: Float[Array, "k 3"]) -> Float[Array, " k"]:
    """The radius of the sphere about the shape's origin that holds it (a plane: infinite)."""
    if kind == "plane":
        return jnp.full(size.shape[0], jnp.inf, size.dtype)
    if kind == "sphere":
        return size[:, 0]
    if kind == "capsule":
        return size[:, 0] + size[:, 1]
    if kind == "cylinder":
        return norm(size[:, :2])
    return norm(size)


def _outside_or_inside(excess, outward, inward):
    """The distance from per-axis `excess`es beyond a shape's faces (a box's three, a
    cylinder's side and caps) and the normal: outside, the distance to the nearest point
    (`outward` maps the positive excesses to a direction); inside, minus the distance to the
    nearest face (`inward` maps its index to that face's normal)."""
    beyond = jnp.maximum(excess, 0.0)
    outside = norm(beyond)
    face = jnp.argmax(excess, axis=-1)
    inner = jnp.take_along_axis(excess, face[:, None], axis=-1)[:, 0]
    is_out = jnp.any(excess > 0, axis=-1)
    normal = jnp.where(is_out[:, None], unit(outward(beyond)), inward(face))
    return jnp.where(is_out, outside, inner), normal


def distance(kind: str, y: Float[Array, "k 3"], size: Float[Array, "k 3"]):
    """The signed distance from `y` to the shape `kind` and its outward normal there."""
    e_z = jnp.eye(3, dtype=y.dtype)[2]
    if kind == "plane":
        return y[:, 2], jnp.broadcast_to(e_z, y.shape)
    if kind in ("sphere", "capsule"):
        # a capsule is the points within its radius of its axis segment
        axis = jnp.clip(y[:, 2], -size[:, 1], size[:, 1]) if kind == "capsule" else 0.0 * y[:, 2]
        offset = y - axis[:, None] * e_z
        return norm(offset) - size[:, 0], unit(offset)
    if kind == "cylinder":
        # in the plane of the axis through `y`: a rectangle of half sizes (radius, half
        # length); on the axis itself every radial direction is as near, and x is taken
        across = y.at[:, 2].set(0.0)
        radial = jnp.where(norm(across)[:, None] > 0, unit(across), jnp.eye(3, dtype=y.dtype)[0])
        up = jnp.where(y[:, 2:] >= 0, 1.0, -1.0) * e_z
        excess = jnp.stack([norm(across) - size[:, 0], jnp.abs(y[:, 2]) - size[:, 1]], axis=-1)
        return _outside_or_inside(
            excess,
            lambda beyond: beyond[:, :1] * radial + beyond[:, 1:] * up,
            lambda face: jnp.where(face[:, None] == 0, radial, up),
        )
    # a box, by its three axes
    sign = jnp.where(y >= 0, 1.0, -1.0)
    return _outside_or_inside(
        jnp.abs(y) - size,
        lambda beyond: sign * beyond,
        lambda face: sign * jax.nn.one_hot(face, 3, dtype=y.dtype),
    )
