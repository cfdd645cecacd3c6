"""A tree's unilateral constraints: joint limits, and contacts of primitive geoms with planes."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import ConstraintRows, holonomic_rows
from .._unilateral import AbstractUnilateral, ContactRows, _per_contact
from . import algorithms
from .equalities import tree_of


def _no_tangents(k: int, n: int, dtype) -> ConstraintRows:
    zeros = jnp.zeros(2 * k, dtype)
    return ConstraintRows(jnp.zeros((2 * k, n), dtype), zeros, zeros, zeros)


class JointLimits(AbstractUnilateral):
    """The ranges of hinge and slide joints, `lower ≤ qⱼ ≤ upper`, as exact unilateral
    constraints: a joint reaching its limit stops there (an impact, by Newton's law with
    `restitution`), and leaves it when the forces pull it away.

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the joints' names.
    - `joints`: the joints' names (hinges and slides).
    - `lower`, `upper`: the ranges, one entry per joint (radians or metres).
    - `restitution`: Newton's coefficient at the limits (default 0: the joint stops).
    """

    joints: tuple[str, ...] = eqx.field(static=True)
    lower: Float[Array, " j"]
    upper: Float[Array, " j"]
    restitution: Float[Array, "*j"]

    def __init__(self, system, joints, lower, upper, restitution=0.0):
        tree = tree_of(system)
        self.joints = tuple(joints)
        for name in self.joints:
            kind = tree.joint_kinds[tree.joint_names.index(name)] if name in tree.joint_names else None
            if kind not in ("hinge", "slide"):
                tree.joint_index(name)  # raises for an unknown joint
                raise ValueError(f"Joint {name!r} is a {kind} joint: limits are for hinges and slides.")
        self.lower, self.upper = as_inexact(lower), as_inexact(upper)
        if self.lower.shape != (len(self.joints),) or self.upper.shape != (len(self.joints),):
            raise ValueError(
                f"lower and upper need one entry per joint ({len(self.joints)}), got shapes "
                f"{self.lower.shape} and {self.upper.shape}."
            )
        self.restitution = as_inexact(restitution)

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        index = jnp.array([tree.joint_index(name) for name in self.joints])

        def gap(t, q):
            return jnp.concatenate([q[index] - self.lower, self.upper - q[index]])

        normal = holonomic_rows(gap, t, q, qd)
        k = 2 * len(self.joints)
        restitution = _per_contact(self.restitution, len(self.joints), "JointLimits restitution")
        restitution = jnp.concatenate([restitution] * 2)  # the lower limits' rows, then the upper ones
        return ContactRows(normal, _no_tangents(k, q.shape[0], q.dtype), jnp.zeros(k, q.dtype), restitution)


def tangent_basis(normals: Float[Array, "k 3"]) -> Float[Array, "k 2 3"]:
    """Two unit tangents orthogonal to each unit normal (and to each other)."""
    # the world axis least aligned with the normal, made orthogonal to it
    axis = jnp.eye(3, dtype=normals.dtype)[jnp.argmin(jnp.abs(normals), axis=-1)]
    t1 = axis - jnp.sum(axis * normals, axis=-1, keepdims=True) * normals
    t1 = t1 / jnp.linalg.norm(t1, axis=-1, keepdims=True)
    return jnp.stack([t1, jnp.cross(normals, t1)], axis=1)


class PlaneContacts(AbstractUnilateral):
    """Spheres fixed to bodies of a tree against planes fixed in the world: the sphere of
    radius `r` centred at `c` stays on the positive side of the plane `n · x = d`,
    `g = n · c − r − d ≥ 0`, with Coulomb friction at the touching point (which rolls
    without slipping while it sticks). A box's corners (radius 0) and a capsule's two end
    spheres are such contacts.

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each sphere (`k` names).
    - `centres`: each centre in its body's frame, shape (k, 3).
    - `radii`: shape (k,).
    - `normals`: each plane's unit normal in the world, shape (k, 3).
    - `offsets`: each plane's `d`, shape (k,).
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact (the geoms' names from a file).
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    centres: Float[Array, "k 3"]
    radii: Float[Array, " k"]
    normals: Float[Array, "k 3"]
    offsets: Float[Array, " k"]
    friction: Float[Array, "*k"]
    restitution: Float[Array, "*k"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, system, bodies, centres, radii, normals, offsets, friction, restitution=0.0, names=None):
        tree = tree_of(system)
        self.bodies = tuple(bodies)
        for body in self.bodies:
            tree.body_index(body)  # raises for an unknown body
        k = len(self.bodies)
        self.centres, self.radii = as_inexact(centres), as_inexact(radii)
        normals = as_inexact(normals)
        self.normals = normals / jnp.linalg.norm(normals, axis=-1, keepdims=True)
        self.offsets = as_inexact(offsets)
        for name, x, shape in (
            ("centres", self.centres, (k, 3)),
            ("radii", self.radii, (k,)),
            ("normals", self.normals, (k, 3)),
            ("offsets", self.offsets, (k,)),
        ):
            if x.shape != shape:
                raise ValueError(f"PlaneContacts {name} must have shape {shape} for {k} bodies, got {x.shape}.")
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = tuple(names) if names is not None else tuple(f"{body}[{i}]" for i, body in enumerate(self.bodies))

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        kin = tree.kinematics(q)
        m = algorithms.points_motion(tree, kin, algorithms.motion(tree, kin, qd), self.bodies, self.centres)
        n, r = self.normals.astype(q.dtype), self.radii.astype(q.dtype)
        A = jnp.einsum("kj,kjn->kn", n, m.J)
        normal = ConstraintRows(
            A, -jnp.sum(n * m.bias, axis=-1), jnp.sum(n * m.x, axis=-1) - r - self.offsets, A @ qd
        )
        # the touching point c − r n moves with the body: v = ċ + ω × (−r n) = ċ + r n × ω
        T = tangent_basis(n)
        rolling = r[:, None, None] * jnp.cross(n[:, :, None], m.J_omega, axisa=1, axisb=1, axisc=1)
        At = jnp.einsum("kdj,kjn->kdn", T, m.J + rolling).reshape(-1, q.shape[0])
        bt = -jnp.einsum("kdj,kj->kd", T, m.bias + r[:, None] * jnp.cross(n, m.alpha)).reshape(-1)
        zeros = jnp.zeros_like(bt)
        k = len(self.bodies)
        return ContactRows(
            normal,
            ConstraintRows(At, bt, zeros, At @ qd),
            _per_contact(self.friction, k, "PlaneContacts friction"),
            _per_contact(self.restitution, k, "PlaneContacts restitution"),
        )

    def sketch(self, system, t, q):
        """Each sphere's body origin joined to the sphere's lowest point (toward its plane),
        those points, and each plane as a 2 m square around its point nearest the world's
        origin."""
        tree = tree_of(system)
        poses = tree._body_poses(q, *self.bodies)
        n = self.normals.astype(q.dtype)
        origins = jnp.stack([p for _, p in poses])
        lowest = jnp.stack([p + R @ c for (R, p), c in zip(poses, self.centres)]) - self.radii[:, None] * n
        # each contact's plane (contacts on one floor draw the same square)
        t1, t2 = jnp.moveaxis(tangent_basis(n), 1, 0)
        centre = n * self.offsets[:, None]
        corners = [centre + a * t1 + b * t2 for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
        squares = jnp.concatenate([jnp.stack([corners[i], corners[(i + 1) % 4]], axis=1) for i in range(4)])
        links = jnp.concatenate([jnp.stack([origins, lowest], axis=1), squares.astype(q.dtype)])
        return Sketch(links, lowest)
