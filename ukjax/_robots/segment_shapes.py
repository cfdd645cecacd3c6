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
from .._unilateral import AbstractUnilateral, ContactRows, norm
from . import algorithms, broadphase, shapes
from .contacts import _between_bodies, _check_shapes, _coefficients, _dot
from .equalities import Connect, tree_of
from .shapes import SHAPES
from .spatial import mm, mv

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
        ends = algorithms.points_motion(tree, kin, motion, index, jnp.concatenate([segments[:, 0], segments[:, 1]])).x
        shape = algorithms.points_motion(tree, kin, motion, shape_bodies, sel(self.positions))
        R_s = sel(self.rotations).astype(q.dtype)
        to_shape = jnp.swapaxes(mm(shape.rotation, R_s), 1, 2)  # world to the shape's frame
        # both ends in the shape's frame, and the segment's direction e there
        y0, y1 = mv(to_shape, ends[:k] - shape.x), mv(to_shape, ends[k:] - shape.x)
        e = y1 - y0
        codes = jnp.asarray(np.array([SHAPES.index(x) for x in self.kinds]))
        codes = codes if pick is None else codes[pick]
        size = sel(self.sizes).astype(q.dtype)
        kinds = sorted(set(self.kinds))
        s = jax.lax.stop_gradient(nearest(kinds, codes, y0, e, size))
        # For derivatives through the run, one Newton step on the slope (zero at s) gives s the
        # nearest point's derivative, −(∂²d/∂s∂q)/(∂²d/∂s²), and leaves its value as it is.
        normal, H_e = _normal_along(kinds, codes, y0 + s[:, None] * e, e, size)
        slope, curvature = _dot(normal, e), jax.lax.stop_gradient(_dot(H_e, e))
        free = (s > 0) & (s < 1) & (curvature * norm(e) > 1e-12 * _dot(e, e))
        s = s - jnp.where(free, (slope - jax.lax.stop_gradient(slope)) / jnp.where(free, curvature, 1.0), 0.0)
        local = segments[:, 0] + s[:, None] * (segments[:, 1] - segments[:, 0])
        return sliding_rows(
            tree, kin, motion, qd, bodies, local, shape, R_s, sel(self.radii).astype(q.dtype), kinds, codes, size, e,
            jnp.zeros_like(e), (s > 0) & (s < 1), _coefficients(self, pick),
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


def sliding_rows(
    tree, kin, motion, qd, bodies, local, shape, R_s, radii, kinds, codes, size, tangent, bend, free, coefficients
) -> ContactRows:
    """The rows of contacts at points of curves on bodies (a segment, a rim) where the
    signed distance to a shape is least along the curve: the material point there (`local`, in
    its body's frame), its sphere's `radii`, the curve's `tangent` `∂y/∂θ` and `bend`
    `∂²y/∂θ²` there in the shape's frame (the shape's origin moving as `shape`, `R_s` its frame
    in its body's), and where the point is `free` to slide along the curve (not at an end).

    The point slides at `θ̇ = −(∂²d/∂θ∂t)/(∂²d/∂θ²)` and `g̈` gains `θ̇ ∂²d/∂θ∂t`: the second
    derivative of a least value, not of a fixed point's distance. Where the distance is flat
    along the curve (a segment lying along a face or parallel to a cylinder's axis, a rim flat
    on a face) any point is as near and `θ̇` is taken as zero. The slip is at the touching
    point `c = x − r n`, as [`ukjax.models.ShapeContacts`][] has it, `x` moving along the curve
    at `θ̇` besides the body's own motion."""
    point = algorithms.points_motion(tree, kin, motion, bodies, local)
    R_st = jnp.swapaxes(R_s, 1, 2)
    rows = Connect._rows(kin.twists, shape, point)
    y, y_rate = -mv(R_st, rows.phi), -mv(R_st, rows.phid)
    # the curve turns with its body relative to the shape's frame
    spin = mv(R_st, mv(jnp.swapaxes(shape.rotation, 1, 2), point.omega - shape.omega))
    tangent_rate = jnp.cross(spin, tangent)
    k = y.shape[0]
    distance, n_local, H_rate, H_e = jnp.zeros(k, y.dtype), jnp.zeros_like(y), jnp.zeros_like(y), jnp.zeros_like(y)
    thickness = jnp.zeros(k, y.dtype)
    for kind in kinds:
        (d, n), (_, n_rate) = jax.jvp(lambda y: shapes.distance(kind, y, size), (y,), (y_rate,))
        _, n_along = jax.jvp(lambda y: shapes.distance(kind, y, size)[1], (y,), (tangent,))
        mine = codes == SHAPES.index(kind)
        distance, thickness = jnp.where(mine, d, distance), jnp.where(mine, shapes.thickness(kind, size), thickness)
        n_local, H_rate, H_e = (jnp.where(mine[:, None], x, old) for x, old in ((n, n_local), (n_rate, H_rate), (n_along, H_e)))
    curvature = _dot(tangent, H_e) + _dot(n_local, bend)
    free = free & (curvature * norm(tangent) > 1e-12 * _dot(tangent, tangent))
    cross = _dot(tangent, H_rate) + _dot(n_local, tangent_rate)
    slide = jnp.where(free, -cross / jnp.where(free, curvature, 1.0), 0.0)
    # ġ = ∇d · ẏ at the material point (∇d · e is zero where it slides, θ̇ zero where it
    # does not); g̈ = ∇d · ÿ + ẏᵀ H ẏ + θ̇ ∂²d/∂θ∂t, ÿ = −R_sᵀ (A_s q̈ − b_s) the material point's
    n_body = mv(R_s, n_local)
    n = mv(shape.rotation, n_body)
    relative = point.moves - shape.moves
    A = algorithms.directional_rows(kin.twists, relative, point.x, n[:, None])[:, 0]
    b = -_dot(n_body, rows.b) - _dot(H_rate, y_rate) - slide * cross
    normal = ConstraintRows(A, b, distance - radii, _dot(n_local, y_rate))
    n_rate = jnp.cross(shape.omega, n) + mv(shape.rotation, mv(R_s, H_rate + slide[:, None] * H_e))
    x, x_rate = point.x, point.velocity
    c = x - radii[:, None] * n
    arm = c - shape.x
    w = x_rate - radii[:, None] * jnp.cross(point.omega, n) - shape.velocity - jnp.cross(shape.omega, arm)
    along = mv(shape.rotation, mv(R_s, tangent))
    c_rate = x_rate + slide[:, None] * along - radii[:, None] * n_rate
    w_rate = (
        point.bias
        - radii[:, None] * jnp.cross(point.alpha, n)
        + jnp.cross(point.omega, c_rate - x_rate)
        - shape.bias
        - jnp.cross(shape.alpha, arm)
        - jnp.cross(shape.omega, c_rate - shape.velocity)
    )
    reach = jnp.maximum(distance - radii, 0) + 2 * radii + thickness
    return _between_bodies(
        coefficients, normal, n, n_rate, kin.twists, relative, c, w, w_rate, qd, reach,
        norm(y_rate) + jnp.abs(slide) * norm(tangent),
    )
