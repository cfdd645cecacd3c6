"""The contacts MuJoCo's collision filter admits in a compiled model, and its joint limits, as
exact unilateral constraints."""

import warnings

import numpy as np

from .contacts import JointLimits, PlaneContacts, SegmentContacts, ShapeContacts
from .mjmodel import _KINDS, _disabled, _name, _rotation
from .rim_faces import RimFaceContacts
from .rings import RingContacts
from .segment_shapes import SegmentShapeContacts
from .shapes import SHAPES
from .tree import RigidBodyTree

# a box's corners in units of its half sizes, and its twelve edges as pairs of corners
_CORNERS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=float)
_EDGES = np.array([(i, j) for i in range(8) for j in range(i + 1, 8) if np.sum(_CORNERS[i] != _CORNERS[j]) == 1])
# the points of a cylinder's rims that carry a face resting flat (a hexagon in each rim: its
# support reaches cos 30° = 0.87 of the radius), in units of the radius and half length;
# turned 15° off the geom's axes, where a file's tilts put the rim's lowest point (a point
# there and the rim's lowest point make two rows equal but for round-off, which a face
# coming down flat on them turns into a solve that jumps)
_RIM = np.array([[np.cos(a), np.sin(a), z] for z in (-1, 1) for a in np.radians(15 + 60 * np.arange(6))])


def _colliding_pairs(mjm) -> list[tuple[int, int, float, int, float]]:
    """The geom pairs MuJoCo's collision filter admits, with their sliding friction, `condim`
    and `margin` (how far from the surfaces MuJoCo's contact acts; its `gap` moves nothing
    there, measured with MuJoCo 4): different weld bodies, not parent and child (unless
    `filterparent` is disabled or one is the world), not excluded, compatible
    `contype`/`conaffinity` (friction and `condim`: the higher `priority`'s, else the larger;
    the margin the larger); plus explicit `<pair>`s with their own, which replace the dynamic
    contact of the same two geoms."""
    if _disabled(mjm, "CONSTRAINT") or _disabled(mjm, "CONTACT"):
        return []
    weld, parent = mjm.body_weldid, mjm.body_weldid[mjm.body_parentid[mjm.body_weldid]]
    filter_parent = not _disabled(mjm, "FILTERPARENT")
    excluded = set(int(x) for x in mjm.exclude_signature)
    geoms = np.flatnonzero((mjm.geom_contype != 0) | (mjm.geom_conaffinity != 0))
    found = [
        (int(a), int(b), float(mu), int(dim), float(margin))
        for a, b, mu, dim, margin in zip(
            mjm.pair_geom1, mjm.pair_geom2, mjm.pair_friction[:, 0], mjm.pair_dim, mjm.pair_margin
        )
    ]
    # a geom pair given explicitly is that pair alone (MuJoCo: one contact, the pair's own)
    explicit = {frozenset(pair[:2]) for pair in found}
    for k, g1 in enumerate(geoms):
        for g2 in geoms[k + 1 :]:
            if frozenset((int(g1), int(g2))) in explicit:
                continue
            b1, b2 = int(mjm.geom_bodyid[g1]), int(mjm.geom_bodyid[g2])
            w1, w2 = weld[b1], weld[b2]
            if w1 == w2 or (filter_parent and w1 and w2 and (w1 == parent[w2] or w2 == parent[w1])):
                continue
            if ((min(b1, b2) << 16) + max(b1, b2)) in excluded:
                continue
            if (mjm.geom_contype[g1] & mjm.geom_conaffinity[g2]) or (mjm.geom_contype[g2] & mjm.geom_conaffinity[g1]):
                p1, p2 = mjm.geom_priority[g1], mjm.geom_priority[g2]
                mu1, mu2 = mjm.geom_friction[g1, 0], mjm.geom_friction[g2, 0]
                dim1, dim2 = mjm.geom_condim[g1], mjm.geom_condim[g2]
                mu = mu1 if p1 > p2 else mu2 if p2 > p1 else max(mu1, mu2)
                dim = dim1 if p1 > p2 else dim2 if p2 > p1 else max(dim1, dim2)
                margin = max(mjm.geom_margin[g1], mjm.geom_margin[g2])
                found.append((int(g1), int(g2), float(mu), int(dim), float(margin)))
    return found


def _unilateral(mjm, tree: RigidBodyTree, notes: list[str]) -> tuple:
    """The file's joint limits, the contacts of its spheres, capsules, boxes and cylinders with
    planes fixed in the world and with each other, as exact unilateral constraints (those of
    cylinders with capsules, boxes and cylinders, and of boxes with boxes, at points of them);
    what else could collide goes to `notes`."""
    import mujoco

    out = []
    limits_on = not (_disabled(mjm, "CONSTRAINT") or _disabled(mjm, "LIMIT"))
    limited = [j for j in np.flatnonzero(mjm.jnt_limited) if _KINDS[int(mjm.jnt_type[j])] in ("hinge", "slide")]
    if limited and limits_on:
        names = [_name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j, "joint") for j in limited]
        # a limit's margin moves it inwards: MuJoCo's limit acts that far inside the range
        margin = mjm.jnt_margin[limited]
        out.append(JointLimits(tree, names, mjm.jnt_range[limited, 0] + margin, mjm.jnt_range[limited, 1] - margin))
        direct = [n for n, j in zip(names, limited) if mjm.jnt_solref[j, 0] < 0]
        if direct:
            notes.append(f"the stiffness and damping of joint limits given as negative solref ({', '.join(direct)}): exact here")
    cones = [
        _name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
        for j in np.flatnonzero(mjm.jnt_limited)
        if _KINDS[int(mjm.jnt_type[j])] == "ball"
    ]
    if cones and limits_on:
        notes.append(f"the cone limits of ball joints ({', '.join(cones)})")
    geom = lambda g: _name(mjm, mujoco.mjtObj.mjOBJ_GEOM, g, "geom")  # noqa: E731
    body = lambda g: "world" if mjm.geom_bodyid[g] == 0 else tree.body_names[mjm.geom_bodyid[g] - 1]  # noqa: E731
    kinds = {int(getattr(mujoco.mjtGeom, f"mjGEOM_{kind.upper()}")): kind for kind in SHAPES}
    kind = lambda g: kinds.get(int(mjm.geom_type[g]))  # noqa: E731

    def spheres(g) -> list[tuple[np.ndarray, float]]:
        """The geom as spheres in its body's frame: a sphere, a capsule's end spheres, a box's
        corners, points of a cylinder's rims (radius 0)."""
        R, size = _rotation(mjm.geom_quat[g]), mjm.geom_size[g]
        if kind(g) == "sphere":
            points, radius = [np.zeros(3)], size[0]
        elif kind(g) == "capsule":
            points, radius = [R[:, 2] * size[1], -R[:, 2] * size[1]], size[0]
        elif kind(g) == "cylinder":
            points, radius = list(_RIM * size[[0, 0, 1]] @ R.T), 0.0
        else:
            points, radius = list(_CORNERS * size @ R.T), 0.0
        return [(mjm.geom_pos[g] + point, float(radius)) for point in points]

    def segments(g) -> np.ndarray:
        """A capsule's axis, or a box's twelve edges, in its body's frame: shape (s, 2, 3)."""
        R, size = _rotation(mjm.geom_quat[g]), mjm.geom_size[g]
        if kind(g) == "capsule":
            return mjm.geom_pos[g] + np.array([[[-1.0], [1.0]]]) * R[:, 2] * size[1]
        return mjm.geom_pos[g] + (_CORNERS * size @ R.T)[_EDGES]

    # the static geoms' world poses (those of bodies welded to the world do not depend on q)
    world = mujoco.MjData(mjm)
    mujoco.mj_kinematics(mjm, world)
    on_planes, on_rings, on_shapes, on_segments, on_segment_shapes, on_rim_faces = [], [], [], [], [], []
    others, twisting = [], 0
    sampled = {"box": [], "cylinder": []}
    direct = []
    for g1, g2, mu, dim, margin in _colliding_pairs(mjm):
        mu = 0.0 if dim == 1 else mu
        if min(mjm.geom_solref[g1, 0], mjm.geom_solref[g2, 0]) < 0:
            direct.append(f"{geom(g1)}–{geom(g2)}")
        if kind(g2) == "plane" or kind(g1) == "sphere":
            g1, g2 = g2, g1
        # a plane on a body without joints is welded to the world (MuJoCo's static bodies)
        if kind(g1) is None or kind(g2) in (None, "plane") or (kind(g1) == "plane" and mjm.body_weldid[mjm.geom_bodyid[g1]]):
            others.append(f"{geom(g1)}–{geom(g2)}")
            continue
        twisting += dim > 3
        if kind(g1) == "plane":
            normal, origin = world.geom_xmat[g1].reshape(3, 3)[:, 2], world.geom_xpos[g1]
            points = spheres(g2)
            for i, (point, radius) in enumerate(points):
                label = f"{geom(g2)}–{geom(g1)}" + (f"[{i}]" if len(points) > 1 else "")
                # a margin moves the surface out by it: the sphere grows (MuJoCo rests a ball
                # that far above the floor, to its softness)
                on_planes.append((body(g2), point, radius + margin, normal, normal @ origin, mu, label))
            if kind(g2) == "cylinder":
                # the rims at their lowest points (the points above carry a face lying flat)
                R, (radius, half) = _rotation(mjm.geom_quat[g2]), mjm.geom_size[g2, :2]
                for end, side in ((-1, "bottom"), (1, "top")):
                    centre = mjm.geom_pos[g2] + end * half * R[:, 2]
                    on_rings.append(
                        (body(g2), centre, R[:, 2], radius, margin, normal, normal @ origin, mu, f"{geom(g2)}–{geom(g1)}[{side} rim]")
                    )
        else:
            # a sphere's centre against the other shape; a capsule's end spheres against the
            # other shape, and its axis against the other's axis or edges (the closest points of
            # a capsule and a box are an end against the box or the axis against an edge); two
            # boxes' corners against each other, both ways
            if kind(g1) == "box" and kind(g2) == "capsule":
                g1, g2 = g2, g1
            if kind(g2) == "sphere":
                pairs = ((g2, g1),)
            elif kind(g1) == "capsule" and kind(g2) == "box":
                pairs = ((g1, g2),)
            else:
                pairs = ((g1, g2), (g2, g1))
                # two cylinders, and two boxes' crossed edges, are met at points of them (a
                # capsule or a box against a cylinder is exact: below)
                if kind(g1) == kind(g2) and kind(g1) in sampled:
                    sampled[kind(g1)].append(f"{geom(g1)}–{geom(g2)}")
            for a, b in pairs:
                points = spheres(a)
                used = {"sphere": 1, "capsule": 2, "box": 3, "cylinder": 2}[kind(b)]
                size = np.where(np.arange(3) < used, mjm.geom_size[b], 0.0)
                for i, (point, radius) in enumerate(points):
                    label = f"{geom(a)}–{geom(b)}" + (f"[{i}]" if len(points) > 1 else "")
                    on_shapes.append(
                        (body(a), point, radius + margin, body(b), kind(b), mjm.geom_pos[b], _rotation(mjm.geom_quat[b]), size,
                         mu, label)
                    )
            # a capsule's axis, or a box's edges, against a cylinder: the least distance over
            # the segment, exact on the side, rims and caps alike
            cylinder = g1 if kind(g1) == "cylinder" else g2
            other = g2 if cylinder == g1 else g1
            if kind(cylinder) == "cylinder" and kind(other) in ("capsule", "box"):
                radius = (mjm.geom_size[other, 0] if kind(other) == "capsule" else 0.0) + margin
                size = np.where(np.arange(3) < 2, mjm.geom_size[cylinder], 0.0)
                for i, segment in enumerate(segments(other)):
                    label = f"{geom(other)}–{geom(cylinder)}" + ("[axis]" if kind(other) == "capsule" else f"[edge {i}]")
                    on_segment_shapes.append(
                        (body(other), segment, radius, body(cylinder), "cylinder", mjm.geom_pos[cylinder],
                         _rotation(mjm.geom_quat[cylinder]), size, mu, label)
                    )
                if kind(other) == "box":
                    # each rim against each face, at the rim's point nearest the face's plane
                    R, (rim, half) = _rotation(mjm.geom_quat[cylinder]), mjm.geom_size[cylinder, :2]
                    for end, side in ((-1, "bottom"), (1, "top")):
                        centre = mjm.geom_pos[cylinder] + end * half * R[:, 2]
                        for face in range(6):
                            on_rim_faces.append(
                                (body(cylinder), centre, R[:, 2], rim, margin, body(other), mjm.geom_pos[other],
                                 _rotation(mjm.geom_quat[other]), mjm.geom_size[other], face, mu,
                                 f"{geom(cylinder)}–{geom(other)}[{side} rim, face {face}]")
                            )
            if kind(g1) == "capsule" and kind(g2) in ("capsule", "box"):
                (axis,), radius = segments(g1), mjm.geom_size[g1, 0] + margin
                other_radius = mjm.geom_size[g2, 0] if kind(g2) == "capsule" else 0.0
                for i, other in enumerate(segments(g2)):
                    label = f"{geom(g1)}–{geom(g2)}" + ("[axes]" if kind(g2) == "capsule" else f"[edge {i}]")
                    on_segments.append((body(g1), axis, radius, body(g2), other, other_radius, mu, label))
    if on_planes:
        bodies, centres, radii, normals, offsets, friction, labels = zip(*on_planes)
        out.append(PlaneContacts(tree, bodies, np.array(centres), np.array(radii), np.array(normals), np.array(offsets), np.array(friction), names=labels))
    if on_rings:
        bodies, centres, axes, radii, tubes, normals, offsets, friction, labels = zip(*on_rings)
        out.append(
            RingContacts(
                tree, bodies, np.array(centres), np.array(axes), np.array(radii), np.array(tubes), np.array(normals),
                np.array(offsets), np.array(friction), names=labels,
            )
        )
    if on_shapes:
        bodies, centres, radii, shape_bodies, shape_kinds, positions, rotations, sizes, friction, labels = zip(*on_shapes)
        out.append(
            ShapeContacts(
                tree, bodies, np.array(centres), np.array(radii), shape_bodies, shape_kinds, np.array(positions),
                np.array(rotations), np.array(sizes), np.array(friction), names=labels,
            )
        )
    if on_segments:
        bodies, ends, radii, other_bodies, other_ends, other_radii, friction, labels = zip(*on_segments)
        out.append(
            SegmentContacts(
                tree, bodies, np.array(ends), np.array(radii), other_bodies, np.array(other_ends), np.array(other_radii),
                np.array(friction), names=labels,
            )
        )
    if on_segment_shapes:
        bodies, ends, radii, shape_bodies, shape_kinds, positions, rotations, sizes, friction, labels = zip(*on_segment_shapes)
        out.append(
            SegmentShapeContacts(
                tree, bodies, np.array(ends), np.array(radii), shape_bodies, shape_kinds, np.array(positions),
                np.array(rotations), np.array(sizes), np.array(friction), names=labels,
            )
        )
    if on_rim_faces:
        bodies, centres, axes, radii, tubes, shape_bodies, positions, rotations, sizes, faces, friction, labels = zip(*on_rim_faces)
        out.append(
            RimFaceContacts(
                tree, bodies, np.array(centres), np.array(axes), np.array(radii), np.array(tubes), shape_bodies,
                np.array(positions), np.array(rotations), np.array(sizes), faces, np.array(friction), names=labels,
            )
        )
    if direct:
        notes.append(
            f"the stiffness and damping of contacts given as negative solref ({len(direct)} geom pairs: "
            f"{', '.join(direct[:6])}{', …' if len(direct) > 6 else ''}): exact here, their restitution 0"
        )
    listed = lambda pairs: f"{len(pairs)} geom pairs: {', '.join(pairs[:6])}{', …' if len(pairs) > 6 else ''}"  # noqa: E731
    if sampled["box"]:
        warnings.warn(
            f"Contacts between boxes are met at their corners only, each box's eight against the other "
            f"({listed(sampled['box'])}): two crossed edges pass through each other unseen. Capsules and spheres "
            "against boxes are met exactly.",
            stacklevel=4,
        )
    if sampled["cylinder"]:
        warnings.warn(
            "Contacts between cylinders are met at points of them only, six points of each rim against the other "
            f"({listed(sampled['cylinder'])}): two sides across each other pass through unseen. Cylinders against "
            "planes, spheres, capsules and boxes are met exactly.",
            stacklevel=4,
        )
    if twisting:
        notes.append(f"torsional and rolling friction (condim 4 or 6) of {twisting} geom pair(s): sliding friction kept")
    if others:
        notes.append(
            f"contacts other than those of planes, spheres, capsules, boxes and cylinders ({len(others)} geom pairs: "
            f"{', '.join(others[:6])}{', …' if len(others) > 6 else ''})"
        )
    return tuple(out)
