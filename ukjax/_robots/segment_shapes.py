"""Segments with radii (a capsule's axis, a box's edge) against primitive shapes fixed to other
bodies (a cylinder above all): the gap is the least signed distance to the shape over the
segment's points, less the radius, exact wherever along the segment the nearest point lies."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint, ConstraintRows
from .._unilateral import AbstractUnilateral, norm
from . import algorithms, broadphase, shapes
from .contacts import _between_bodies, _check_shapes, _coefficients, _dot
from .equalities import Connect, tree_of
from .shapes import SHAPES
from .spatial import mv

# Bisection halves of the segment's parameter: 2⁻⁵² of its length, round-off
_HALVINGS = 52


def _normal_along(kinds, codes, y, e, size):
    """The unit normal `∇d` at `y` and its derivative `H e` along `e`, each contact by its
    shape's kind (`codes` per contact)."""
    normal, along = jnp.zeros_like(y), jnp.zeros_like(y)
    for kind in kinds:
        n, n_e = jax.jvp(lambda y: shapes.distance(kind, y, size)[1], (y,), (e,))
        mine = (codes == SHAPES.index(kind))[:, None]
        normal, along = jnp.where(mine, n, normal), jnp.where(mine, n_e, along)
    return normal, along


def _slope(kinds, codes, y0, e, size, s):
    """`∂d/∂s = ∇d(y0 + s e) · e` along each segment `y0 + s e`, each contact by its shape's
    kind (`codes` per contact)."""
    y = y0 + s[:, None] * e
    slope = jnp.zeros(y0.shape[0], y0.dtype)
    for kind in kinds:
        _, n = shapes.distance(kind, y, size)
        slope = jnp.where(codes == SHAPES.index(kind), _dot(n, e), slope)
    return slope


def nearest(kinds, codes, y0, e, size) -> Float[Array, " k"]:
    """The parameter `s ∈ [0, 1]` of each segment `y0 + s e`'s point of least signed distance
    to its shape (in the shape's frame): the distance is convex along a line (the shapes are
    convex), so its slope is bisected for the sign change; an end where the slope there
    already points away (within round-off of the segment's length: a segment lying flat on a
    face takes its first end, as its end rows do)."""
    k = y0.shape[0]
    tol = 1e-12 * norm(e)
    first = _slope(kinds, codes, y0, e, size, jnp.zeros(k, y0.dtype))
    last = _slope(kinds, codes, y0, e, size, jnp.ones(k, y0.dtype))

    def halve(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        rising = _slope(kinds, codes, y0, e, size, mid) >= 0
        return jnp.where(rising, lo, mid), jnp.where(rising, mid, hi)

    lo, hi = jax.lax.fori_loop(0, _HALVINGS, halve, (jnp.zeros(k, y0.dtype), jnp.ones(k, y0.dtype)))
    inside = 0.5 * (lo + hi)
    return jnp.where(first >= -tol, 0.0, jnp.where(last <= tol, 1.0, inside))


class SegmentShapeContacts(AbstractUnilateral, AbstractDrawnConstraint):
    """Segments with radii fixed to bodies of a tree (a capsule's axis; a box's edge, radius 0)
    against primitive shapes fixed to other bodies or to the world (a cylinder, a box, a
    capsule or a sphere): `g` is the least signed distance from the segment's points to the
    shape, less the radius, `g ≥ 0`, with Coulomb friction on the relative velocity of the two
    bodies at the touching point. A capsule's middle or a box's edge across a cylinder's side,
    rim or cap is met here, exactly: the nearest point slides along the segment as the bodies
    turn, and the rows follow it (its rate from the distance's curvature along the segment).

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each segment (`k` names; `"world"` for a fixed one).
    - `segments`: each segment's two ends in its body's frame, shape (k, 2, 3).
    - `radii`: shape (k,).
    - `shape_bodies`, `kinds`, `positions`, `rotations`, `sizes`: the shapes, as
      [`ukjax.models.ShapeContacts`][] takes them (not planes: a segment's ends are its
      nearest points to a plane).
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact.
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    segments: Float[Array, "k 2 3"]
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
        self, system, bodies, segments, radii, shape_bodies, kinds, positions, rotations, sizes, friction,
        restitution=0.0, names=None,
    ):
        tree = tree_of(system)
        self.bodies, self.shape_bodies, self.kinds = tuple(bodies), tuple(shape_bodies), tuple(kinds)
        k = len(self.bodies)
        for body in self.bodies + self.shape_bodies:
            tree.body_index(body)  # raises for an unknown body
        if len(self.shape_bodies) != k or len(self.kinds) != k:
            raise ValueError(f"SegmentShapeContacts needs one shape body and one kind per segment ({k}).")
        unknown = sorted(set(self.kinds) - set(SHAPES) | ({"plane"} & set(self.kinds)))
        if unknown:
            raise ValueError(
                f"SegmentShapeContacts kinds must be among {SHAPES[1:]}, got {unknown} (a segment meets a plane "
                "at its ends: ShapeContacts or PlaneContacts)."
            )
        self.segments, self.radii = as_inexact(segments), as_inexact(radii)
        self.positions, self.rotations, self.sizes = as_inexact(positions), as_inexact(rotations), as_inexact(sizes)
        _check_shapes(self, k, segments=(2, 3), radii=(), positions=(3,), rotations=(3, 3), sizes=(3,))
        if not isinstance(self.segments, jax.core.Tracer) and not np.all(
            np.linalg.norm(np.diff(np.asarray(self.segments), axis=1), axis=-1) > 0
        ):
            raise ValueError("SegmentShapeContacts segments need two distinct ends (a point is a sphere: ShapeContacts).")
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = tuple(names) if names is not None else tuple(
            f"{a}–{b}[{i}]" for i, (a, b) in enumerate(zip(self.bodies, self.shape_bodies))
        )

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
        """A lower bound of each gap: the distance between a sphere about the segment's middle
        that holds it (its radius included) and a sphere about the shape's origin that holds
        the shape."""
        one, two = (broadphase.points(tree, kin, self.bodies, self.segments[:, i]) for i in (0, 1))
        origin = broadphase.points(tree, kin, self.shape_bodies, self.positions)
        size = self.sizes.astype(one.dtype)
        held = jnp.zeros(len(self.kinds), one.dtype)
        for kind in set(self.kinds):
            held = jnp.where(np.array(self.kinds) == kind, shapes.extent(kind, size), held)
        return norm((one + two) / 2 - origin) - norm(one - two) / 2 - self.radii.astype(one.dtype) - held

    def _rows(self, tree, kin, motion, q, qd, pick):
        """The contacts' rows, all of them, or those `pick`ed (indices chosen during the run)."""
        sel = (lambda x: x) if pick is None else (lambda x: x[pick])  # noqa: E731
        bodies, shape_bodies = (self.bodies, self.shape_bodies) if pick is None else (
            tuple(jnp.asarray(algorithms.body_indices(tree, b))[pick] for b in (self.bodies, self.shape_bodies))
        )
        segments = sel(self.segments)
        k = segments.shape[0]
        index = bodies + bodies if pick is None else jnp.concatenate([bodies, bodies])
        ends = algorithms.points_motion(tree, kin, motion, index, jnp.concatenate([segments[:, 0], segments[:, 1]]))
        a0, a1 = (jax.tree.map(lambda x: x[i * k : (i + 1) * k], ends) for i in (0, 1))
        shape = algorithms.points_motion(tree, kin, motion, shape_bodies, sel(self.positions))
        R_s, r = sel(self.rotations).astype(q.dtype), sel(self.radii).astype(q.dtype)
        R_st = jnp.swapaxes(R_s, 1, 2)
        # both ends in the shape's frame (as ShapeContacts takes a sphere's centre), the
        # segment's direction e there and its rate
        c0, c1 = Connect._rows(kin.twists, shape, a0), Connect._rows(kin.twists, shape, a1)
        y0, y0_rate = -mv(R_st, c0.phi), -mv(R_st, c0.phid)
        e, e_rate = -mv(R_st, c1.phi) - y0, -mv(R_st, c1.phid) - y0_rate
        codes = jnp.asarray(np.array([SHAPES.index(x) for x in self.kinds]))
        codes = codes if pick is None else codes[pick]
        size = sel(self.sizes).astype(q.dtype)
        kinds = sorted(set(self.kinds))
        s = jax.lax.stop_gradient(nearest(kinds, codes, y0, e, size))
        # The nearest point moves along the segment at ṡ = −(∂²d/∂s∂t)/(∂²d/∂s²) where it lies
        # between the ends (where the slope ∂d/∂s is zero), and g̈ gains ṡ ∂²d/∂s∂t: the
        # second derivative of a least value, not of a fixed point's distance. Where the
        # distance is flat along the segment (lying along a face or parallel to a cylinder's
        # axis) any point is as near and ṡ is taken as zero. For derivatives through the run,
        # one Newton step on the slope (zero at s) gives s the nearest point's derivative,
        # −(∂²d/∂s∂q)/(∂²d/∂s²), and leaves its value as it is.
        normal, H_e = _normal_along(kinds, codes, y0 + s[:, None] * e, e, size)
        slope, curvature = _dot(normal, e), jax.lax.stop_gradient(_dot(H_e, e))
        between_ends = (s > 0) & (s < 1) & (curvature * norm(e) > 1e-12 * _dot(e, e))
        safe = jnp.where(between_ends, curvature, 1.0)
        s = s - jnp.where(between_ends, (slope - jax.lax.stop_gradient(slope)) / safe, 0.0)
        # the material point of the segment's body at the nearest point, its motion the ends'
        # in proportion (one rigid body)
        between = lambda x0, x1: x0 + s.reshape((-1,) + (1,) * (x0.ndim - 1)) * (x1 - x0)  # noqa: E731
        y, y_rate = y0 + s[:, None] * e, y0_rate + s[:, None] * e_rate
        distance, n_local, H_rate = jnp.zeros(k, q.dtype), jnp.zeros_like(y), jnp.zeros_like(y)
        thickness = jnp.zeros(k, q.dtype)
        for kind in kinds:
            (d, n), (_, n_rate) = jax.jvp(lambda y: shapes.distance(kind, y, size), (y,), (y_rate,))
            mine = codes == SHAPES.index(kind)
            distance, thickness = jnp.where(mine, d, distance), jnp.where(mine, shapes.thickness(kind, size), thickness)
            n_local, H_rate = jnp.where(mine[:, None], n, n_local), jnp.where(mine[:, None], n_rate, H_rate)
        cross = _dot(e, H_rate) + _dot(n_local, e_rate)
        s_rate = jnp.where(between_ends, -cross / safe, 0.0)
        # the normal's rate H (ẏ + ṡ e) as the point slides
        n_local_rate = H_rate + s_rate[:, None] * H_e
        # ġ = ∇d · ẏ at the material point (∇d · e is zero between the ends, ṡ zero at them);
        # g̈ = ∇d · ÿ + ẏᵀ H ẏ + ṡ ∂²d/∂s∂t, with ÿ = −R_sᵀ (A_s q̈ − b_s) the material point's
        x, x_rate = between(a0.x, a1.x), between(a0.velocity, a1.velocity)
        point_b = between(c0.b, c1.b)
        n_body = mv(R_s, n_local)
        n = mv(shape.rotation, n_body)
        relative = a0.moves - shape.moves
        A = algorithms.directional_rows(kin.twists, relative, x, n[:, None])[:, 0]
        b = -_dot(n_body, point_b) - _dot(H_rate, y_rate) - s_rate * cross
        normal = ConstraintRows(A, b, distance - r, _dot(n_local, y_rate))
        # the slip at the touching point c = x − r n, as ShapeContacts has it, the point x
        # moving along the segment at ṡ besides the body's own motion
        n_rate = jnp.cross(shape.omega, n) + mv(shape.rotation, mv(R_s, n_local_rate))
        c = x - r[:, None] * n
        arm = c - shape.x
        o_rate = shape.velocity
        w = x_rate - r[:, None] * jnp.cross(a0.omega, n) - o_rate - jnp.cross(shape.omega, arm)
        c_rate = x_rate + s_rate[:, None] * (a1.x - a0.x) - r[:, None] * n_rate
        w_rate = (
            between(a0.bias, a1.bias)
            - r[:, None] * jnp.cross(a0.alpha, n)
            + jnp.cross(a0.omega, c_rate - x_rate)
            - shape.bias
            - jnp.cross(shape.alpha, arm)
            - jnp.cross(shape.omega, c_rate - o_rate)
        )
        reach = jnp.maximum(distance - r, 0) + 2 * r + thickness
        return _between_bodies(
            _coefficients(self, pick), normal, n, n_rate, kin.twists, relative, c, w, w_rate, qd, reach,
            norm(y_rate) + jnp.abs(s_rate) * norm(e),
        )

    def sketch(self, system, t, q):
        """Each segment, and its nearest point to its shape."""
        tree = tree_of(system)
        kin, _ = tree._motion(q, jnp.zeros_like(q))
        one, two = (broadphase.points(tree, kin, self.bodies, self.segments[:, i]) for i in (0, 1))
        origin = broadphase.points(tree, kin, self.shape_bodies, self.positions)
        index = algorithms.body_indices(tree, self.shape_bodies)
        rotations = jnp.concatenate([kin.rotations, jnp.eye(3, dtype=q.dtype)[None]])[index]
        R = jnp.einsum("kij,kjl->kil", rotations, self.rotations.astype(q.dtype))
        Rt = jnp.swapaxes(R, 1, 2)
        y0, y1 = mv(Rt, one - origin), mv(Rt, two - origin)
        codes = jnp.asarray(np.array([SHAPES.index(x) for x in self.kinds]))
        s = nearest(sorted(set(self.kinds)), codes, y0, y1 - y0, self.sizes.astype(q.dtype))
        return Sketch(jnp.stack([one, two], axis=1), one + s[:, None] * (two - one))
