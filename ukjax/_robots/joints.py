"""Joint kinds of a rigid-body tree and what follows from them: each kind's sizes (MuJoCo's nq
and nv), the tree's topology as index arrays, the forward kinematics (every kind's motion and
twists), and the map between coordinate rates and MuJoCo's velocities. A new joint kind is an
entry in `SIZES` and a branch in each function here."""

import functools
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .spatial import axis_angle, mm, mv, put, quaternion_matrix, rate_map

# Coordinates and velocities of each joint kind (MuJoCo's nq and nv per joint).
SIZES = {"hinge": (1, 1), "slide": (1, 1), "ball": (4, 3), "free": (7, 6)}


class Topology(NamedTuple):
    """Index arrays and 0/1 masks of a tree's structure, so that its kinematics and dynamics are
    a few operations over all bodies and coordinates at once rather than one per body (the
    traced program, and XLA's compile time, then grow with the tree's depth, not its size)."""

    # bodies at each depth, and their parents (the world as index b: a padded identity frame)
    levels: tuple[tuple[np.ndarray, np.ndarray], ...]
    # joint slots: for the s-th joint of each body that has one, the bodies and the joints
    slots: tuple[tuple[np.ndarray, np.ndarray], ...]
    # per joint: the parent of its body (b for the world)
    joint_parents: np.ndarray
    # per coordinate: its body, and its row in the stacked candidate twists
    coordinate_bodies: np.ndarray
    twist_rows: np.ndarray
    # (b, n): coordinate k moves body i (k belongs to i or to an ancestor of i)
    moves: np.ndarray
    # (n, n): coordinate k' moves the body before coordinate k's group does (V before k)
    before: np.ndarray
    # (b, b): body j is in the subtree of body i (itself included)
    subtree: np.ndarray
    # (n, n): Mⱼₖ may be non-zero for k ≤ j (k on j's path to the world)
    lower: np.ndarray
    # per joint: masks of the joint kinds, and the first quaternion coordinate (0 for none)
    hinge: np.ndarray
    slide: np.ndarray
    free: np.ndarray
    quaternion: np.ndarray
    quaternion_starts: np.ndarray


@functools.lru_cache(maxsize=64)
def topology_of(parents: tuple[int, ...], joint_bodies: tuple[int, ...], joint_kinds: tuple[str, ...]) -> Topology:
    b, J = len(parents), len(joint_bodies)
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    world = lambda i: b if i < 0 else i  # noqa: E731
    levels = tuple(
        (np.array(bodies), np.array([world(parents[i]) for i in bodies]))
        for d in range(max(depth, default=-1) + 1)
        for bodies in [[i for i in range(b) if depth[i] == d]]
    )
    joints_of = [[j for j in range(J) if joint_bodies[j] == i] for i in range(b)]
    slots = tuple(
        (np.array([i for i in range(b) if len(joints_of[i]) > s]), np.array([js[s] for js in joints_of if len(js) > s]))
        for s in range(max(map(len, joints_of), default=0))
    )
    sizes = [SIZES[kind][0] for kind in joint_kinds]
    starts = np.cumsum([0] + sizes)[:-1]
    coordinate_bodies, twist_rows, groups = [], [], []
    for j, kind in enumerate(joint_kinds):
        body = joint_bodies[j]
        if kind in ("hinge", "slide"):
            rows, group = [j], [0]
        elif kind == "ball":
            rows, group = [J + 4 * j + i for i in range(4)], [0] * 4
        else:  # three world translations, then the quaternion
            rows, group = [5 * J + i for i in range(3)] + [J + 4 * j + i for i in range(4)], [0] * 3 + [1] * 4
        coordinate_bodies += [body] * sizes[j]
        twist_rows += rows
        groups += [(j, g) for g in group]
    ancestors = []
    for i in range(b):
        chain, k = set(), i
        while k >= 0:
            chain.add(k)
            k = parents[k]
        ancestors.append(chain)
    n = len(coordinate_bodies)
    moves = np.array([[float(coordinate_bodies[k] in ancestors[i]) for k in range(n)] for i in range(b)])
    before = np.array(
        [
            [
                float(
                    coordinate_bodies[l] in ancestors[coordinate_bodies[k]] - {coordinate_bodies[k]}
                    or (coordinate_bodies[l] == coordinate_bodies[k] and groups[l] < groups[k])
                )
                for l in range(n)
            ]
            for k in range(n)
        ]
    )
    subtree = np.array([[float(i in ancestors[j]) for j in range(b)] for i in range(b)])
    lower = np.array(
        [[k <= j and coordinate_bodies[k] in ancestors[coordinate_bodies[j]] for k in range(n)] for j in range(n)]
    )
    kinds = np.array(joint_kinds, dtype=object)
    quaternion_starts = np.array(
        [starts[j] + (3 if kind == "free" else 0) if kind in ("ball", "free") else 0 for j, kind in enumerate(joint_kinds)],
        dtype=int,
    )
    return Topology(
        levels,
        slots,
        np.array([world(parents[i]) for i in joint_bodies], dtype=int),
        np.array(coordinate_bodies, dtype=int),
        np.array(twist_rows, dtype=int),
        moves,
        before,
        subtree,
        lower,
        kinds == "hinge",
        kinds == "slide",
        kinds == "free",
        (kinds == "ball") | (kinds == "free"),
        quaternion_starts,
    )


def topology(tree) -> Topology:
    """The topology of a [`ukjax.models.RigidBodyTree`][] (cached per structure)."""
    return topology_of(tree.parents, tree.joint_bodies, tree.joint_kinds)


class Kinematics(eqx.Module):
    """Forward kinematics of a [`ukjax.models.RigidBodyTree`][] at one configuration.

    **Attributes:**

    - `rotations`, `positions`: each body's frame in the world, shapes (b, 3, 3) and (b, 3).
    - `twists`: each coordinate's twist `(ω, v)` in the world frame, shape (n, 6): the body
      motion per unit rate of that coordinate (for a quaternion coordinate `k`, the body's
      rotational twists combined by column `k` of `2 E(u)`).
    """

    rotations: Float[Array, "b 3 3"]
    positions: Float[Array, "b 3"]
    twists: Float[Array, "n 6"]


def kinematics(tree, q: Float[Array, " n"]) -> Kinematics:
    """Body frames and joint twists at `q`."""
    top, dtype = topology(tree), q.dtype
    b, J, n = len(tree.parents), len(tree.joint_kinds), q.shape[0]
    eye = jnp.eye(3, dtype=dtype)
    free_bodies = np.zeros(b, dtype=bool)
    free_bodies[np.array(tree.joint_bodies, dtype=int)[top.free]] = True
    # each body's frame in its parent's, before its joints (MuJoCo places a free body by its
    # joint alone)
    R_local = jnp.where(free_bodies[:, None, None], eye, tree.body_rotations)
    p_local = jnp.where(free_bodies[:, None], 0.0, tree.body_positions)
    R_after, p_after = jnp.zeros((J, 3, 3), dtype), jnp.zeros((J, 3), dtype)
    if J:
        # every joint's motion at once, each kind from its own formula: (R_j, t_j) maps the
        # frame before the joint to the frame after it, (R, p) ↦ (R R_j, p + R t_j)
        coords = np.array(tree.joint_coordinates, dtype=int)
        angle = q[coords] - tree.reference[coords]
        axes, anchors = tree.joint_axes, jnp.where(top.free[:, None], 0.0, tree.joint_anchors)
        quaternion_rows = np.minimum(top.quaternion_starts[:, None] + np.arange(4), n - 1)
        identity = jnp.array([1.0, 0.0, 0.0, 0.0], dtype)
        u = jnp.where(top.quaternion[:, None], q[quaternion_rows], identity)
        R_joint = jnp.where(
            top.hinge[:, None, None],
            axis_angle(axes, angle),
            jnp.where(top.quaternion[:, None, None], quaternion_matrix(u), eye),
        )
        position = q[np.minimum(coords[:, None] + np.arange(3), n - 1)]
        t_joint = jnp.where(
            top.slide[:, None],
            axes * angle[:, None],
            jnp.where(top.free[:, None], position, anchors - mv(R_joint, anchors)),
        )
        for bodies, joints in top.slots:  # a body's joints apply in order
            R, p = R_local[bodies], p_local[bodies]
            R_new, p_new = mm(R, R_joint[joints]), p + mv(R, t_joint[joints])
            R_local, p_local = put(R_local, bodies, R_new), put(p_local, bodies, p_new)
            R_after, p_after = put(R_after, joints, R_new), put(p_after, joints, p_new)
    # world frames level by level; index b is the world
    R_world = jnp.concatenate([R_local, eye[None]])
    p_world = jnp.concatenate([p_local, jnp.zeros((1, 3), dtype)])
    for bodies, parents in top.levels:
        R, p = R_world[parents], p_world[parents]
        R_world = put(R_world, bodies, mm(R, R_local[bodies]))
        p_world = put(p_world, bodies, p + mv(R, p_local[bodies]))
    if not J:
        return Kinematics(R_world[:b], p_world[:b], jnp.zeros((0, 6), dtype))
    # every joint's frame after it moved, in the world: a hinge turns about its own axis and
    # a ball about its anchor, so both are fixed in that frame
    R_parent = R_world[top.joint_parents]
    R = mm(R_parent, R_after)
    p = p_world[top.joint_parents] + mv(R_parent, p_after)
    axis = mv(R, axes)
    anchor = p + mv(R, anchors)
    single = jnp.where(
        top.hinge[:, None],
        jnp.concatenate([axis, jnp.cross(anchor, axis)], 1),
        jnp.concatenate([jnp.zeros_like(axis), axis], 1),
    )
    # a quaternion's four twists: the body's rotations about the anchor, combined by 2 E(u)
    W = 2 * jnp.sum(R[:, :, :, None] * rate_map(u)[:, None, :, :], axis=2).swapaxes(1, 2)
    rotations = jnp.concatenate([W, jnp.cross(anchor[:, None, :], W)], 2)
    translations = jnp.concatenate([jnp.zeros((3, 3), dtype), eye], 1)
    candidates = jnp.concatenate([single, rotations.reshape(4 * J, 6), translations])
    return Kinematics(R_world[:b], p_world[:b], candidates[top.twist_rows])


def velocity_layout(tree) -> tuple[np.ndarray, np.ndarray]:
    """Where `G` has its entries: (dof, coordinate) of each unit entry (hinges, slides, free
    translations), and the first (dof, coordinate) of each quaternion's `2 E(u)` block."""
    ones, blocks = [], []
    for j, kind in enumerate(tree.joint_kinds):
        c, d = tree.joint_coordinates[j], tree.joint_dofs[j]
        if kind in ("hinge", "slide"):
            ones.append((d, c))
            continue
        if kind == "free":
            ones += [(d + i, c + i) for i in range(3)]
            c, d = c + 3, d + 3
        blocks.append((d, c))
    return np.array(ones, dtype=int).reshape(-1, 2), np.array(blocks, dtype=int).reshape(-1, 2)


def rate_maps(q, blocks):
    """`E(u)` of every quaternion, shape (k, 3, 4)."""
    return rate_map(q[blocks[:, 1:] + np.arange(4)])


def dof_metric(tree, q, weights):
    """`Gᵀ diag(weights) G`, shape (n, n), for per-degree-of-freedom weights (armature,
    damping: MuJoCo applies them per degree of freedom): diagonal for hinges, slides and
    translations, `4 Eᵀ diag(w) E` over each quaternion."""
    ones, blocks = velocity_layout(tree)
    n = q.shape[0]
    W = put(jnp.zeros((n, n), q.dtype), (ones[:, 1], ones[:, 1]), weights[ones[:, 0]])
    E = rate_maps(q, blocks)
    w = weights[blocks[:, :1] + np.arange(3)]
    quadratic = 4 * sum(w[:, k, None, None] * E[:, k, :, None] * E[:, k, None, :] for k in range(3))
    c = blocks[:, 1:, None]
    return put(W, (c + np.arange(4)[:, None], c + np.arange(4)), quadratic)
