"""A tree's unilateral constraints: joint limits, contacts of spheres with planes fixed in the
world (rows in closed form), and of spheres with primitive shapes fixed to bodies."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint, ConstraintRows, holonomic_rows
from .._unilateral import AbstractUnilateral, ContactRows, _per_contact, norm, unit
from . import algorithms, broadphase, shapes
from .equalities import Connect, tree_of
from .shapes import SHAPES
from .spatial import mm, mv, put


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

    @property
    def friction(self) -> Float[Array, ""]:
        """Zero: a limit has no tangent directions."""
        return jnp.zeros(())

    def labels(self):
        return tuple(f"{joint} (lower limit)" for joint in self.joints) + tuple(
            f"{joint} (upper limit)" for joint in self.joints
        )

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


def _check_shapes(contacts, k: int, **fields: tuple[int, ...]):
    """That each named field of `contacts` has `k` rows of the given shape."""
    for name, shape in fields.items():
        x = getattr(contacts, name)
        if x.shape != (k, *shape):
            raise ValueError(
                f"{type(contacts).__name__} {name} must have shape {(k, *shape)} for {k} contacts, got {x.shape}."
            )


def tangent_basis(normals: Float[Array, "k 3"]) -> Float[Array, "k 2 3"]:
    """Two unit tangents orthogonal to each unit normal (and to each other)."""
    # The world axis least aligned with the normal, made orthogonal to it. Ties (a normal
    # along an axis, whose other two components are round-off) go to the first axis: where
    # round-off chose, the basis flipped between evaluations, and a sliding contact's
    # direction, kept in its basis, turned by 90° within a stretch (a spurious event).
    tie_break = jnp.array([0.0, 1e-6, 2e-6], normals.dtype)
    axis = jnp.eye(3, dtype=normals.dtype)[jnp.argmin(jnp.abs(normals) + tie_break, axis=-1)]
    t1 = axis - jnp.sum(axis * normals, axis=-1, keepdims=True) * normals
    t1 = t1 / jnp.linalg.norm(t1, axis=-1, keepdims=True)
    return jnp.stack([t1, jnp.cross(normals, t1)], axis=1)


class PlaneContacts(AbstractUnilateral, AbstractDrawnConstraint):
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
        _check_shapes(self, k, centres=(3,), radii=(), normals=(3,), offsets=())
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = tuple(names) if names is not None else tuple(f"{body}[{i}]" for i, body in enumerate(self.bodies))

    def labels(self):
        return self.names

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        kin, motion = tree._motion(q, qd)
        m = algorithms.points_motion(tree, kin, motion, self.bodies, self.centres)
        n, r = self.normals.astype(q.dtype), self.radii.astype(q.dtype)
        A = algorithms.directional_rows(kin.twists, m.moves, m.x, n[:, None])[:, 0]
        normal = ConstraintRows(
            A, -_dot(n, m.bias), _dot(n, m.x) - r - self.offsets, A @ qd
        )
        # the slip of the body's material point at the touching point x − r n (it rolls)
        T = tangent_basis(n)
        At = algorithms.directional_rows(kin.twists, m.moves, m.x - r[:, None] * n, T).reshape(-1, q.shape[0])
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


def _between_bodies(coefficients, normal: ConstraintRows, n, n_rate, twists, moves, c, w, w_rate, qd, reach, speed):
    """The `ContactRows` of contacts between two moving bodies (`coefficients` their friction
    and restitution, one each), given their normal rows:
    the slip `w` at each touching point `c` (the first body's material point against the
    second's; `moves` the difference of their `BodyMotion.moves`) along a tangent basis that
    turns with the unit normal `n` (at `ṅ`), its rate without the q̈ term (`w_rate` the
    slip's own), and the least time in which each contact could be crossed, `reach / speed`
    (None for a `reach` of None: contacts that cannot be)."""
    k = n.shape[0]
    T, T_rate = jax.jvp(tangent_basis, (n,), (n_rate,))
    At = algorithms.directional_rows(twists, moves, c, T).reshape(-1, qd.shape[0])
    rate = jnp.einsum("kdj,kj->kd", T, w_rate) + jnp.einsum("kdj,kj->kd", T_rate, w)
    crossing = None if reach is None else jnp.where(speed > 0, reach / jnp.where(speed > 0, speed, 1), jnp.inf)
    friction, restitution = coefficients
    return ContactRows(
        normal,
        ConstraintRows(At, -rate.reshape(-1), jnp.zeros(2 * k, qd.dtype), jnp.einsum("kdj,kj->kd", T, w).reshape(-1)),
        friction,
        restitution,
        crossing,
    )


def _coefficients(contacts, pick) -> tuple[Array, Array]:
    """The friction and restitution of each contact of `contacts` (`pick`ed: those a
    broadphase keeps)."""
    name, k = type(contacts).__name__, len(contacts.bodies)
    friction = _per_contact(contacts.friction, k, f"{name} friction")
    restitution = _per_contact(contacts.restitution, k, f"{name} restitution")
    return (friction, restitution) if pick is None else (friction[pick], restitution[pick])


class ShapeContacts(AbstractUnilateral, AbstractDrawnConstraint):
    """Spheres fixed to bodies of a tree against primitive shapes (a plane, a sphere, a capsule,
    a box or a cylinder) fixed to other bodies or to the world: `g` is the sphere centre's
    signed distance to the shape minus the sphere's radius, `g ≥ 0`, with Coulomb friction on
    the relative velocity of the two bodies at the touching point. A box's corners (radius 0) and a
    capsule's end spheres make the contacts of boxes and capsules with each other. The rows
    are in closed form from the bodies' motion, exact in a box's face, edge and corner regions
    and a cylinder's side, rims and caps alike, and while the touching point moves over both
    surfaces (rolling).

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each sphere (`k` names; `"world"` for a fixed one).
    - `centres`: each sphere's centre in its body's frame, shape (k, 3).
    - `radii`: shape (k,).
    - `shape_bodies`: the body each shape is fixed to (`k` names; `"world"` allowed).
    - `kinds`: each shape's kind, one of `"plane"`, `"sphere"`, `"capsule"`, `"box"`,
      `"cylinder"`.
    - `positions`, `rotations`: each shape's frame in its body's frame, shapes (k, 3) and
      (k, 3, 3) (a plane is the frame's `z ≥ 0`; a capsule's and a cylinder's axis is its z
      axis).
    - `sizes`: shape (k, 3): a sphere's radius; a capsule's or a cylinder's radius and half
      length; a box's half sizes (unused entries zero).
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact.
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    centres: Float[Array, "k 3"]
    radii: Float[Array, " k"]
    shape_bodies: tuple[str, ...] = eqx.field(static=True)
    kinds: tuple[str, ...] = eqx.field(static=True)
    positions: Float[Array, "k 3"]
    rotations: Float[Array, "k 3 3"]
    sizes: Float[Array, "k 3"]
    friction: Float[Array, "*k"]
    restitution: Float[Array, "*k"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        system,
        bodies,
        centres,
        radii,
        shape_bodies,
        kinds,
        positions,
        rotations,
        sizes,
        friction,
        restitution=0.0,
        names=None,
    ):
        tree = tree_of(system)
        self.bodies, self.shape_bodies, self.kinds = tuple(bodies), tuple(shape_bodies), tuple(kinds)
        k = len(self.bodies)
        for body in self.bodies + self.shape_bodies:
            tree.body_index(body)  # raises for an unknown body
        if len(self.shape_bodies) != k or len(self.kinds) != k:
            raise ValueError(f"ShapeContacts needs one shape body and one kind per sphere ({k}).")
        unknown = sorted(set(self.kinds) - set(SHAPES))
        if unknown:
            raise ValueError(f"ShapeContacts kinds must be among {SHAPES}, got {unknown}.")
        self.centres, self.radii = as_inexact(centres), as_inexact(radii)
        self.positions, self.rotations, self.sizes = as_inexact(positions), as_inexact(rotations), as_inexact(sizes)
        _check_shapes(self, k, centres=(3,), radii=(), positions=(3,), rotations=(3, 3), sizes=(3,))
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = tuple(names) if names is not None else tuple(
            f"{a}–{b}[{i}]" for i, (a, b) in enumerate(zip(self.bodies, self.shape_bodies))
        )

    def _distances(self, y: Float[Array, "k 3"], yd: Float[Array, "k 3"], pick=None):
        """Each centre's signed distance to its shape (its frame's `y`), the unit normal `∇d`
        there and the normal's rate `H ẏ` (`H` the distance's Hessian) along `ẏ`; for the
        contacts `pick`ed (indices chosen during the run) where given."""
        distance, normal, rate = jnp.zeros(y.shape[0], y.dtype), jnp.zeros_like(y), jnp.zeros_like(y)
        thickness = jnp.zeros(y.shape[0], y.dtype)
        if pick is not None:
            # which kind each picked contact is is known only during the run: every kind
            # present evaluated for all of them, each contact taking its own
            codes = jnp.asarray(np.array([SHAPES.index(x) for x in self.kinds]))[pick]
            sizes = self.sizes[pick].astype(y.dtype)
            for kind in sorted(set(self.kinds)):
                (d, n), (_, n_rate) = jax.jvp(lambda y: shapes.distance(kind, y, sizes), (y,), (yd,))
                mine = codes == SHAPES.index(kind)
                distance, thickness = jnp.where(mine, d, distance), jnp.where(mine, shapes.thickness(kind, sizes), thickness)
                normal, rate = jnp.where(mine[:, None], n, normal), jnp.where(mine[:, None], n_rate, rate)
            return distance, normal, rate, thickness
        # one evaluation per kind present (a static grouping)
        for kind in sorted(set(self.kinds)):
            index = np.array([i for i, x in enumerate(self.kinds) if x == kind])
            size = self.sizes[index].astype(y.dtype)
            (d, n), (_, n_rate) = jax.jvp(lambda y: shapes.distance(kind, y, size), (y[index],), (yd[index],))
            distance, normal, rate = put(distance, index, d), put(normal, index, n), put(rate, index, n_rate)
            thickness = put(thickness, index, shapes.thickness(kind, size))
        return distance, normal, rate, thickness

    def labels(self):
        return self.names

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        kin, motion = tree._motion(q, qd)
        bodies = (self.bodies, self.shape_bodies)
        return broadphase.rows(
            tree, kin, qd, bodies, self._bounds, lambda pick: self._rows(tree, kin, motion, q, qd, pick)
        )

    def _bounds(self, tree, kin) -> Float[Array, " k"]:
        """A lower bound of each gap: the distance between the sphere and a sphere about the
        shape's origin that holds it (a plane holds everything: no bound)."""
        centre = broadphase.points(tree, kin, self.bodies, self.centres)
        origin = broadphase.points(tree, kin, self.shape_bodies, self.positions)
        size = self.sizes.astype(centre.dtype)
        held = jnp.zeros(len(self.kinds), centre.dtype)
        for kind in set(self.kinds):
            held = jnp.where(np.array(self.kinds) == kind, shapes.extent(kind, size), held)
        return norm(centre - origin) - self.radii.astype(centre.dtype) - held

    def _rows(self, tree, kin, motion, q, qd, pick):
        """The contacts' rows, all of them, or those `pick`ed (indices chosen during the run)."""
        sel = (lambda x: x) if pick is None else (lambda x: x[pick])  # noqa: E731
        bodies, shape_bodies = (
            (self.bodies, self.shape_bodies)
            if pick is None
            else tuple(jnp.asarray(algorithms.body_indices(tree, b))[pick] for b in (self.bodies, self.shape_bodies))
        )
        sphere = algorithms.points_motion(tree, kin, motion, bodies, sel(self.centres))
        shape = algorithms.points_motion(tree, kin, motion, shape_bodies, sel(self.positions))
        # the centre in the shape's frame, y = R_sᵀ s with s = R_Bᵀ (x − o) (B the shape's
        # body, o the shape's origin): minus the rows of a loop joining o to x
        s = Connect._rows(kin.twists, shape, sphere)
        R_s, r = sel(self.rotations).astype(q.dtype), sel(self.radii).astype(q.dtype)
        R_st = jnp.swapaxes(R_s, 1, 2)
        y, yd = -mv(R_st, s.phi), -mv(R_st, s.phid)
        distance, n_local, n_local_rate, thickness = self._distances(y, yd, pick)
        # ġ = ∇d · ẏ = n · (v_A(x) − v_B(x)) (n = R_B R_s ∇d in the world, v_B(x) the velocity of
        # the shape body's material point at the centre x), g̈ = ∇d · ÿ + ẏᵀ H ẏ, with
        # ÿ = −R_sᵀ (A_s q̈ − b_s)
        n_body = mv(R_s, n_local)
        n = mv(shape.rotation, n_body)
        relative = sphere.moves - shape.moves
        A = algorithms.directional_rows(kin.twists, relative, sphere.x, n[:, None])[:, 0]
        b = -_dot(n_body, s.b) - _dot(n_local_rate, yd)
        normal = ConstraintRows(A, b, distance - r, _dot(n_local, yd))
        # the slip: the relative velocity of the two bodies' material points at the touching
        # point c = x − r n, w = v_A(c) − v_B(c); its rate, exact also while the touching point
        # moves over both surfaces (rolling), from ṅ = ω_B × n + R_B R_s H ẏ
        n_rate = jnp.cross(shape.omega, n) + mv(shape.rotation, mv(R_s, n_local_rate))
        c = sphere.x - r[:, None] * n
        arm = c - shape.x  # c − o
        x_rate, o_rate = sphere.velocity, shape.velocity
        w = x_rate - r[:, None] * jnp.cross(sphere.omega, n) - o_rate - jnp.cross(shape.omega, arm)
        c_rate = x_rate - r[:, None] * n_rate
        w_rate = (
            sphere.bias
            - r[:, None] * jnp.cross(sphere.alpha, n)
            + jnp.cross(sphere.omega, c_rate - x_rate)
            - shape.bias
            - jnp.cross(shape.alpha, arm)
            - jnp.cross(shape.omega, c_rate - o_rate)
        )
        # to pass through the shape unseen the sphere's centre travels, relative to it, at
        # least the gap and the widths of both (a gap along a curved path, or through a
        # shape thinner than a step, changes sign twice within one step)
        reach = None if set(self.kinds) == {"plane"} else jnp.maximum(distance - r, 0) + 2 * r + thickness
        coefficients = _coefficients(self, pick)
        return _between_bodies(coefficients, normal, n, n_rate, kin.twists, relative, c, w, w_rate, qd, reach, norm(yd))

    def _touching(self, tree, q):
        """Each touching point `x − r n` and each shape's origin, in the world."""
        kin, motion = tree._motion(q, jnp.zeros_like(q))
        sphere = algorithms.points_motion(tree, kin, motion, self.bodies, self.centres)
        shape = algorithms.points_motion(tree, kin, motion, self.shape_bodies, self.positions)
        R = mm(shape.rotation, self.rotations.astype(q.dtype))
        _, n_local, _, _ = self._distances(mv(jnp.swapaxes(R, 1, 2), sphere.x - shape.x), jnp.zeros_like(sphere.x))
        return sphere.x - self.radii[:, None] * mv(R, n_local), sphere, shape

    def sketch(self, system, t, q):
        """Each sphere's body origin joined to its touching point (toward its shape), those
        points, and each shape's frame origin joined to the same point."""
        touching, sphere, shape = self._touching(tree_of(system), q)
        origins = [jnp.stack([x, touching], axis=1) for x in (sphere.x - mv(sphere.rotation, self.centres), shape.x)]
        return Sketch(jnp.concatenate(origins), touching)


def _dot(x, y):
    """`x · y` along the last axis (summed by hand, as `norm` is)."""
    return sum(x[..., i] * y[..., i] for i in range(x.shape[-1]))


def _closest(a0, a1, b0, b1):
    """The parameters `(s, u)` in [0, 1] of the closest points `a0 + s (a1 − a0)` and
    `b0 + u (b1 − b0)` of two segments (each argument shape (k, 3))."""
    d1, d2, r = a1 - a0, b1 - b0, a0 - b0
    a, e, b, c, f = _dot(d1, d1), _dot(d2, d2), _dot(d1, d2), _dot(d1, r), _dot(d2, r)
    denom = a * e - b * b
    # parallel segments (sin² of their angle below 1e-12): every point of the overlap is as
    # close, and the start of the first is taken
    skew = denom > 1e-12 * a * e
    s = jnp.where(skew, jnp.clip((b * f - c * e) / jnp.where(skew, denom, 1.0), 0.0, 1.0), 0.0)
    u = (b * s + f) / e
    # past an end of the second segment, the point of the first nearest that end
    s = jnp.where(u < 0, jnp.clip(-c / a, 0.0, 1.0), jnp.where(u > 1, jnp.clip((b - c) / a, 0.0, 1.0), s))
    return s, jnp.clip(u, 0.0, 1.0)


class SegmentContacts(AbstractUnilateral, AbstractDrawnConstraint):
    """Segments with radii (a capsule's axis; a box's edge, radius 0) fixed to bodies of a
    tree, against other such segments on other bodies or the world: `g` is the distance
    between the two segments' closest points minus both radii, `g ≥ 0`, with Coulomb friction
    on the relative velocity of the two bodies at the touching point. A capsule's middle across
    a box's edge or across another capsule is met here: the closest points slide along both
    segments, and the rows in closed form follow them (the rates of the points' parameters
    included).

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each segment (`k` names; `"world"` for a fixed one).
    - `segments`: each segment's two ends in its body's frame, shape (k, 2, 3).
    - `radii`: shape (k,).
    - `other_bodies`, `other_segments`, `other_radii`: the segments they touch, likewise.
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact.
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    segments: Float[Array, "k 2 3"]
    radii: Float[Array, " k"]
    other_bodies: tuple[str, ...] = eqx.field(static=True)
    other_segments: Float[Array, "k 2 3"]
    other_radii: Float[Array, " k"]
    friction: Float[Array, "*k"]
    restitution: Float[Array, "*k"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self, system, bodies, segments, radii, other_bodies, other_segments, other_radii, friction, restitution=0.0,
        names=None,
    ):
        tree = tree_of(system)
        self.bodies, self.other_bodies = tuple(bodies), tuple(other_bodies)
        k = len(self.bodies)
        for body in self.bodies + self.other_bodies:
            tree.body_index(body)  # raises for an unknown body
        if len(self.other_bodies) != k:
            raise ValueError(f"SegmentContacts needs one other body per segment ({k}), got {len(self.other_bodies)}.")
        self.segments, self.radii = as_inexact(segments), as_inexact(radii)
        self.other_segments, self.other_radii = as_inexact(other_segments), as_inexact(other_radii)
        _check_shapes(self, k, segments=(2, 3), radii=(), other_segments=(2, 3), other_radii=())
        ends = [x for x in (self.segments, self.other_segments) if not isinstance(x, jax.core.Tracer)]
        if not all(np.all(np.linalg.norm(np.diff(np.asarray(x), axis=1), axis=-1) > 0) for x in ends):
            raise ValueError("SegmentContacts segments need two distinct ends (a point is a sphere: ShapeContacts).")
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = tuple(names) if names is not None else tuple(
            f"{a}–{b}[{i}]" for i, (a, b) in enumerate(zip(self.bodies, self.other_bodies))
        )

    def labels(self):
        return self.names

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        kin, motion = tree._motion(q, qd)
        bodies = (self.bodies, self.other_bodies)
        return broadphase.rows(
            tree, kin, qd, bodies, self._bounds, lambda pick: self._rows(tree, kin, motion, q, qd, pick)
        )

    def _bounds(self, tree, kin) -> Float[Array, " k"]:
        """A lower bound of each gap: the distance between spheres about the segments'
        middles that hold them, their radii included."""
        sides = ((self.bodies, self.segments, self.radii), (self.other_bodies, self.other_segments, self.other_radii))
        middles, held = [], []
        for bodies, segments, radii in sides:
            one, two = (broadphase.points(tree, kin, bodies, segments[:, i]) for i in (0, 1))
            middles.append((one + two) / 2)
            held.append(norm(one - two) / 2 + radii.astype(one.dtype))
        return norm(middles[0] - middles[1]) - held[0] - held[1]

    def _rows(self, tree, kin, motion, q, qd, pick):
        """The contacts' rows, all of them, or those `pick`ed (indices chosen during the run)."""
        a0, a1, b0, b1 = self._ends(tree, kin, motion, pick)
        ends = tuple(m.x for m in (a0, a1, b0, b1))
        ends_rate = tuple(m.velocity for m in (a0, a1, b0, b1))
        # the closest points' parameters on the two segments, and their rates
        (s, u), (s_rate, u_rate) = jax.jvp(_closest, ends, ends_rate)

        def between(x, y, w):  # x + w (y − x), w per contact
            w = w.reshape(w.shape + (1,) * (x.ndim - 1))
            return x + w * (y - x)

        # the two bodies' material points at the closest points; these points slide along the
        # segments at (ṡ, u̇), which moves the normal but not the gap to first order
        p_a, p_b = between(a0.x, a1.x, s), between(b0.x, b1.x, u)
        d = p_a - p_b
        d_material = between(ends_rate[0], ends_rate[1], s) - between(ends_rate[2], ends_rate[3], u)
        d_rate = d_material + s_rate[:, None] * (a1.x - a0.x) - u_rate[:, None] * (b1.x - b0.x)
        n, n_rate = jax.jvp(unit, (d,), (d_rate,))
        sel = (lambda x: x) if pick is None else (lambda x: x[pick])  # noqa: E731
        r, r_other = sel(self.radii).astype(q.dtype), sel(self.other_radii).astype(q.dtype)
        # n · (v_a(p_a) − v_b(p_b)), the bodies' material points at the closest points
        rows = [algorithms.directional_rows(kin.twists, m.moves, p, n[:, None])[:, 0] for m, p in ((a0, p_a), (b0, p_b))]
        A = rows[0] - rows[1]
        # g̈ = n · d̈_material + ṅ · ḋ_material + ṡ n · (ȧ1 − ȧ0) − u̇ n · (ḃ1 − ḃ0)
        b = -(
            _dot(n, between(a0.bias, a1.bias, s) - between(b0.bias, b1.bias, u))
            + _dot(n_rate, d_material)
            + s_rate * _dot(n, ends_rate[1] - ends_rate[0])
            - u_rate * _dot(n, ends_rate[3] - ends_rate[2])
        )
        distance = norm(d)
        normal = ConstraintRows(A, b, distance - r - r_other, _dot(n, d_material))
        # the slip at the touching point c on the first segment's surface, each body's velocity
        # there from its first end: v(c) = v(a0) + ω × (c − a0)
        c = p_a - r[:, None] * n
        c_rate = between(ends_rate[0], ends_rate[1], s) + s_rate[:, None] * (a1.x - a0.x) - r[:, None] * n_rate
        arm_a, arm_b = c - a0.x, c - b0.x
        w = ends_rate[0] + jnp.cross(a0.omega, arm_a) - ends_rate[2] - jnp.cross(b0.omega, arm_b)
        w_rate = (
            a0.bias
            + jnp.cross(a0.alpha, arm_a)
            + jnp.cross(a0.omega, c_rate - ends_rate[0])
            - b0.bias
            - jnp.cross(b0.alpha, arm_b)
            - jnp.cross(b0.omega, c_rate - ends_rate[2])
        )
        # the gap is below zero only while the segments are within both radii of each other:
        # a relative motion of twice that passes through unseen
        reach = jnp.maximum(distance - r - r_other, 0) + 2 * (r + r_other)
        return _between_bodies(
            _coefficients(self, pick), normal, n, n_rate, kin.twists, a0.moves - b0.moves, c, w, w_rate, qd, reach,
            norm(d_rate),
        )

    def _ends(self, tree, kin, motion, pick=None) -> list[algorithms.BodyMotion]:
        """The motion of the segments' ends: the first ends, the second ends, the other
        segments' first ends, their second ends (one evaluation for all of them; for the
        segments `pick`ed where given)."""
        bodies = self.bodies + self.bodies + self.other_bodies + self.other_bodies
        segments, other = self.segments, self.other_segments
        if pick is not None:
            index = jnp.asarray(algorithms.body_indices(tree, bodies)).reshape(4, -1)[:, pick]
            bodies, segments, other = index.reshape(-1), segments[pick], other[pick]
        points = jnp.concatenate([segments[:, 0], segments[:, 1], other[:, 0], other[:, 1]])
        every = algorithms.points_motion(tree, kin, motion, bodies, points)
        k = segments.shape[0]
        return [jax.tree.map(lambda x: x[i * k : (i + 1) * k], every) for i in range(4)]

    def sketch(self, system, t, q):
        """Each segment (both sets), and the closest point of each first segment."""
        tree = tree_of(system)
        kin, motion = tree._motion(q, jnp.zeros_like(q))
        a0, a1, b0, b1 = (m.x for m in self._ends(tree, kin, motion))
        s, _ = _closest(a0, a1, b0, b1)
        links = jnp.concatenate([jnp.stack([a0, a1], axis=1), jnp.stack([b0, b1], axis=1)])
        return Sketch(links, a0 + s[:, None] * (a1 - a0))
