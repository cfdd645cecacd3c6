"""A cylinder's rims against a box's faces, on other bodies: each rim's point nearest the
face's plane against the box's signed distance, exact where that point is over the face."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint
from .._unilateral import AbstractUnilateral, norm, unit
from . import algorithms, broadphase, shapes
from .contacts import _check_shapes, _coefficients
from .equalities import tree_of
from .segment_shapes import sliding_rows
from .shapes import SHAPES
from .spatial import mm, mv


def _lowest(axis: Float[Array, "k 3"], faces: Int[Array, " k"]) -> Float[Array, "k 3"]:
    """The unit direction from each rim's centre to its point nearest the plane of its face
    (the face's outward normal `±e_i` in the box's frame, `axis` the rim's there): minus
    `n − (n · a) a`, written `a × (n × a)`, whose difference would lose the direction to
    round-off as the rim nears flat. Flat to the face every point of the rim is as near and
    the direction is zero: the row at the rim's centre, inside the face that touches (as
    `RingContacts` has it)."""
    normal = jnp.where(faces[:, None] % 2 == 0, 1.0, -1.0) * jax.nn.one_hot(faces // 2, 3, dtype=axis.dtype)
    across = jnp.cross(axis, jnp.cross(normal, axis))
    # Flat to within 1e-9 rad (a gap off by 1e-9 R at most): a rim square to a face it does
    # not touch (a can lying on a table, against the table's sides) has every point as near
    # that face, and round-off would pick its lowest point, a copy of the top face's row
    # but for round-off, which the contact solve cannot tell from a second contact.
    return jnp.where(norm(across)[:, None] > 1e-9, -unit(across), 0.0)


class RimFaceContacts(AbstractUnilateral, AbstractDrawnConstraint):
    """Rims (a cylinder's, radius `R` about a centre in the plane normal to an axis, swept by a
    tube of radius `r`, 0 for a rim) fixed to bodies of a tree against boxes' faces on other
    bodies or the world: `g` is the box's signed distance at the rim's point nearest the
    face's plane, less `r`, `g ≥ 0`, with Coulomb friction there. Exact wherever that point is
    over the face (a cylinder lying on a box, a rim tipped onto a face); past the face's
    edges the gap is that point's distance to the box, which is more than the rim's (a box's
    edges against the cylinder, [`ukjax.models.SegmentShapeContacts`][], meet the rim
    there). The point runs along the rim as the bodies turn, and the rows follow it. A rim
    flat on a face is carried by points of it besides, as on a plane.

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each rim (`k` names; `"world"` for a fixed one).
    - `centres`, `axes`: each rim's centre and unit axis in its body's frame, shapes (k, 3).
    - `radii`, `tubes`: each rim's radius `R` and tube's radius `r`, shape (k,).
    - `shape_bodies`: the body each box is fixed to (`k` names; `"world"` allowed).
    - `positions`, `rotations`, `sizes`: each box's frame in its body's frame and its half
      sizes, shapes (k, 3), (k, 3, 3), (k, 3).
    - `faces`: each contact's face, `2 i` for `+e_i` and `2 i + 1` for `−e_i` in the box's
      frame, shape (k,).
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact.
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    centres: Float[Array, "k 3"]
    axes: Float[Array, "k 3"]
    radii: Float[Array, " k"]
    tubes: Float[Array, " k"]
    shape_bodies: tuple[str, ...] = eqx.field(static=True)
    positions: Float[Array, "k 3"]
    rotations: Float[Array, "k 3 3"]
    sizes: Float[Array, "k 3"]
    faces: tuple[int, ...] = eqx.field(static=True)
    friction: Float[Array, "*k"]
    restitution: Float[Array, "*k"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self, system, bodies, centres, axes, radii, tubes, shape_bodies, positions, rotations, sizes, faces, friction,
        restitution=0.0, names=None,
    ):
        tree = tree_of(system)
        self.bodies, self.shape_bodies, self.faces = tuple(bodies), tuple(shape_bodies), tuple(int(f) for f in faces)
        k = len(self.bodies)
        for body in self.bodies + self.shape_bodies:
            tree.body_index(body)  # raises for an unknown body
        if len(self.shape_bodies) != k or len(self.faces) != k or not all(0 <= f < 6 for f in self.faces):
            raise ValueError(f"RimFaceContacts needs one box body and one face in 0..5 per rim ({k}).")
        self.centres, self.axes = as_inexact(centres), as_inexact(axes)
        self.radii, self.tubes = as_inexact(radii), as_inexact(tubes)
        self.positions, self.rotations, self.sizes = as_inexact(positions), as_inexact(rotations), as_inexact(sizes)
        _check_shapes(
            self, k, centres=(3,), axes=(3,), radii=(), tubes=(), positions=(3,), rotations=(3, 3), sizes=(3,)
        )
        if not isinstance(self.axes, jax.core.Tracer) and not np.allclose(np.linalg.norm(self.axes, axis=-1), 1.0):
            raise ValueError("RimFaceContacts axes must be unit vectors.")
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
        """A lower bound of each gap: the distance between a sphere about the rim's centre that
        holds it and one about the box's origin that holds the box."""
        centre = broadphase.points(tree, kin, self.bodies, self.centres)
        origin = broadphase.points(tree, kin, self.shape_bodies, self.positions)
        size = self.sizes.astype(centre.dtype)
        return norm(centre - origin) - (self.radii + self.tubes).astype(centre.dtype) - shapes.extent("box", size)

    def _frames(self, tree, kin, motion, pick):
        """The rims' centres and the boxes' origins in motion, the boxes' frames, each rim's
        axis and the direction of its point nearest the face, in the box's frame."""
        sel = (lambda x: x) if pick is None else (lambda x: x[pick])  # noqa: E731
        bodies, shape_bodies = (self.bodies, self.shape_bodies) if pick is None else (
            tuple(jnp.asarray(algorithms.body_indices(tree, b))[pick] for b in (self.bodies, self.shape_bodies))
        )
        dtype = kin.positions.dtype
        centre = algorithms.points_motion(tree, kin, motion, bodies, sel(self.centres))
        shape = algorithms.points_motion(tree, kin, motion, shape_bodies, sel(self.positions))
        R_s = sel(self.rotations).astype(dtype)
        to_shape = jnp.swapaxes(mm(shape.rotation, R_s), 1, 2)
        axis = mv(to_shape, mv(centre.rotation, sel(self.axes).astype(dtype)))
        faces = jnp.asarray(np.array(self.faces))
        return bodies, centre, shape, R_s, to_shape, axis, _lowest(axis, faces if pick is None else faces[pick])

    def _rows(self, tree, kin, motion, q, qd, pick):
        """The contacts' rows, all of them, or those `pick`ed (indices chosen during the run)."""
        sel = (lambda x: x) if pick is None else (lambda x: x[pick])  # noqa: E731
        bodies, centre, shape, R_s, to_shape, axis, direction = self._frames(tree, kin, motion, pick)
        R = sel(self.radii).astype(q.dtype)
        # the nearest point in the rim's body's frame; along the rim θ, ∂y/∂θ = a × (y − c) and
        # ∂²y/∂θ² = −(y − c)
        world = mv(jnp.swapaxes(to_shape, 1, 2), direction)
        local = sel(self.centres).astype(q.dtype) + R[:, None] * mv(jnp.swapaxes(centre.rotation, 1, 2), world)
        offset = R[:, None] * direction
        size = sel(self.sizes).astype(q.dtype)
        codes = jnp.full(offset.shape[0], SHAPES.index("box"))
        return sliding_rows(
            tree, kin, motion, qd, bodies, local, shape, R_s, sel(self.tubes).astype(q.dtype), ("box",), codes, size,
            jnp.cross(axis, offset), -offset, norm(direction) > 0, _coefficients(self, pick),
        )

    def sketch(self, system, t, q):
        """Each rim's centre joined to its point nearest its face, and those points."""
        tree = tree_of(system)
        kin, motion = tree._motion(q, jnp.zeros_like(q))
        _, centre, _, _, to_shape, _, direction = self._frames(tree, kin, motion, None)
        nearest = centre.x + self.radii[:, None] * mv(jnp.swapaxes(to_shape, 1, 2), direction)
        return Sketch(jnp.stack([centre.x, nearest], axis=1), nearest)
