"""The batch as the last (minor) axis: a measurement prototype for the speed issue, not library
code. A rigid-body tree's `M`, `Q`, the quaternions' norm rows and the `connect` rows for `B`
states at once in that layout (same formulas and conventions as `ukjax/_robots/joints.py`,
`algorithms.py` and `equalities.py`), the other terms of a system (actuators, other
constraints) mapped over the states with `vmap` and transposed at the boundary; then the U-K
solve on them two ways: in XLA (`lane_solve`: `M = Lᵀ D L` following the coordinates'
elimination tree by depth levels, and the Gram matrix of `W = D^{-1/2} L⁻ᵀ Aᵀ`, rows
normalised, pivots at or below `rank_tolerance` dropped), and the same algorithm as one XLA FFI
call. Last, for a tree under `connect` constraints alone (Cassie), the whole acceleration as
one FFI call (the terms and the same solve): the library's kernel (`ukjax/_robots/kernels.cc`,
which `simulate_batch` runs), the solve alone in `lanes_kernel/uk_lanes.cc` (its `Solver`),
compiled here with `g++ -O3 -march=native`, and left out without a compiler.

Every array is `(count, components…, B)`: products over components written out, sums over
bodies and coordinates as products with the tree's 0/1 topology matrices (GEMMs), contractions
over a middle axis as einsums (a broadcast product and a sum was materialized by XLA CPU:
48 against 1.7 µs per member for Cassie's Gram), and gathers along the node axis replaced by
slices or 0/1 products (XLA CPU gathers rows one by one: 34 against 5 µs per member in
Cassie's factorization).

    python benchmarks/batch_last.py [--batch 256 1024] [--steps 200] [--cases ...] [--no-parts]

Prints first the cost of mapping the one-call acceleration over single states with `jax.vmap`
(`single_state`: a batching rule that transposes at the boundary) on Cassie; then, for `ukjax
bench`'s gripper and Cassie and each batch: µs per member (best of 5) and
compile seconds of each part and of the whole acceleration, lanes against `vmap` of the
single-state route (batch first), on one device, with the largest difference between the
routes' accelerations relative to the largest; then RK4 steps per second (best of 3) on the
four-bar, the coordinated robots, the gripper and Cassie (1 ms, from the case's start at rest,
the batch split over one CPU device per core) of `simulate_batch`, of the lanes with each solve,
of the one-call acceleration, and of MuJoCo's `rollout` on every core, with each route's compile
time and its loops' closure after the run.
"""

import argparse
import ctypes
import functools
import itertools
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from jaxtyping import Array, Float

import ukjax
from ukjax import _bench as bench, models
from ukjax._bench import DT
from ukjax._constraints import stack_rows
from ukjax._linalg import negligible, rank_tolerance
from ukjax._robots.actuators import Actuated
from ukjax._robots import kernels
from ukjax._robots.equalities import Connect
from ukjax._robots.joints import SIZES, topology, topology_of
from ukjax._robots.spatial import put
from ukjax._robots.tree import NORM_GAINS, RigidBodyTree


class LaneDynamics(NamedTuple):
    """`M`, `Q` and the stabilized rows `A q̈ = b` of `B` states, the batch last."""

    M: Float[Array, "n n B"]
    Q: Float[Array, "n B"]
    A: Float[Array, "p n B"]
    b: Float[Array, "p B"]


def lanes(fn, *args: Array):
    """`fn` of single states mapped over the last axis of each argument, its outputs with the
    batch last: the transposition at the boundary for terms without a lane version."""
    return jax.vmap(fn, in_axes=-1, out_axes=-1)(*args)


class _Levels(NamedTuple):
    """The elimination tree of `M` (each coordinate's parent: the nearest coordinate above it
    that `M` couples it to) by depth levels, numbered in level order."""

    order: np.ndarray  # coordinates in level order
    inverse: np.ndarray
    # per level: its slice in level order, and the (row, column) of `M` entry (k, a-th ancestor
    # of k) for a = 0 … d, shape (d + 1, n_d) each
    slices: tuple[slice, ...]
    entries: tuple[tuple[np.ndarray, np.ndarray], ...]
    # ancestors[d][a - 1]: the index within level d − a of the a-th ancestor of each node of d
    ancestors: tuple[tuple[np.ndarray, ...], ...]
    # descendants[(l, d)]: for each node of level l its descendants in level d, as indices
    # within d padded with n_d (a zero row), shape (n_l, w)
    descendants: dict


@functools.lru_cache(maxsize=64)
def _levels(parents: tuple[int, ...]) -> _Levels:
    n = len(parents)
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    order = np.array(sorted(range(n), key=lambda k: (depth[k], k)), dtype=int)
    inverse = np.argsort(order)
    sizes = np.bincount(np.array(depth, dtype=int), minlength=1) if n else np.zeros(0, int)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    slices = tuple(slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:]))
    entries, ancestors, descendants = [], [], {}
    for d, level in enumerate(slices):
        nodes = order[level]
        chain, columns, local = nodes.copy(), [nodes], []
        for a in range(1, d + 1):
            chain = np.array([parents[k] for k in chain])
            columns.append(chain)
            local.append(inverse[chain] - starts[d - a])
        entries.append((np.broadcast_to(inverse[nodes], (d + 1, nodes.size)), inverse[np.stack(columns)]))
        ancestors.append(tuple(local))
        for a, index in enumerate(local, start=1):
            groups = [[] for _ in range(sizes[d - a])]
            for i, j in enumerate(index):
                groups[j].append(i)
            width = max(map(len, groups))
            descendants[(d - a, d)] = np.array([g + [nodes.size] * (width - len(g)) for g in groups], dtype=int)
    return _Levels(order, inverse, slices, tuple(entries), tuple(ancestors), descendants)


def _gather_sum(x, index):
    """`x` (n_d, …, B) summed into (n_l, …, B) over the groups `index` (n_l, w), padded with
    n_d: a slice where each group is one of a run of consecutive rows, else a product with the
    groups' 0/1 matrix (one GEMM). XLA CPU gathers rows one by one: on Cassie's factorization
    the gathers took 34 µs per member, the products 5."""
    rows = x.shape[0]
    if index.shape[1] == 1 and np.array_equal(index[:, 0], index[0, 0] + np.arange(index.shape[0])) and index[-1, 0] < rows:
        return x[index[0, 0] : index[-1, 0] + 1]
    groups = np.zeros((index.shape[0], rows + 1))
    np.put_along_axis(groups, index, 1.0, axis=1)
    return jnp.tensordot(jnp.asarray(groups[:, :rows], x.dtype), x, axes=1)


def _along(column, x):
    """Per-node factors (n_d, B) shaped to multiply `x` (n_d, …, B)."""
    return column.reshape(column.shape[:1] + (1,) * (x.ndim - 2) + column.shape[1:])


def _factor(lv: _Levels, M):
    """`M = Lᵀ D L` following the elimination tree, leaves first, a level at a time (no fill-in:
    MuJoCo's `mj_factorM`). Returns `L` per level, (n_d, d, B) with column a − 1 the entries at
    the a-th ancestors, and `D⁻¹` per level, (n_d, B)."""
    P = [jnp.swapaxes(M[rows, columns], 0, 1) for rows, columns in lv.entries]  # (n_d, d + 1, B)
    L, inverse = [None] * len(P), [None] * len(P)
    for d in range(len(P) - 1, -1, -1):
        inverse[d] = 1 / P[d][:, 0]
        L[d] = P[d][:, 1:] * inverse[d][:, None]
        for a in range(1, d + 1):
            update = L[d][:, a - 1, None] * P[d][:, a:]
            P[d - a] = P[d - a] - _gather_sum(update, lv.descendants[(d - a, d)])
    return L, inverse


def _solve_transposed(lv: _Levels, L, x):
    """`L⁻ᵀ x` on per-level parts (n_d, …, B): leaves first."""
    x = list(x)
    for d in range(len(x) - 1, 0, -1):
        for a in range(1, d + 1):
            x[d - a] = x[d - a] - _gather_sum(_along(L[d][:, a - 1], x[d]) * x[d], lv.descendants[(d - a, d)])
    return x


def _solve(lv: _Levels, L, x):
    """`L⁻¹ x` on per-level parts: root first."""
    x = list(x)
    for d in range(1, len(x)):
        for a in range(1, d + 1):
            x[d] = x[d] - _along(L[d][:, a - 1], x[d]) * _gather_sum(x[d - a], lv.ancestors[d][a - 1][:, None])
    return x


def _gram_solve(G: Float[Array, "p p B"], r: Float[Array, "p B"], n: int) -> Float[Array, "p B"]:
    """A solution of `G λ = r` for the positive semi-definite Gram matrix `G` of `p` rows of
    length `n`, by `LDLᵀ` of the normalised `Ĝ = N⁻¹ G N⁻¹` (`N` the square roots of the
    diagonal, the rows' norms: those below `negligible` of the longest count as zero) with the
    pivots at or below `rank_tolerance` left out: the minimum-norm `Aᵀλ` when the rows are
    consistent."""
    p = G.shape[0]
    diagonal = jnp.stack([G[i, i] for i in range(p)])
    largest = jnp.max(diagonal, axis=0)
    nonzero = diagonal > negligible(p, n, G.dtype) ** 2 * largest
    scale = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, diagonal, 1.0)), 1.0)
    G = jnp.where(nonzero[:, None] & nonzero[None], G / (scale[:, None] * scale[None]), 0.0)
    floor = rank_tolerance(p, G.dtype)
    columns, inverse = [], []
    for j in range(p):
        pivot = G[0, 0]
        keep = pivot > floor
        inverse.append(jnp.where(keep, 1 / jnp.where(keep, pivot, 1.0), 0.0))
        column = jnp.where(keep, G[1:, 0] / jnp.where(keep, pivot, 1.0), 0.0)
        G = G[1:, 1:] - column[:, None] * G[None, 0, 1:]
        columns.append(column)
    y = list(r / scale)
    for j, column in enumerate(columns):
        for i in range(column.shape[0]):
            y[j + 1 + i] = y[j + 1 + i] - column[i] * y[j]
    y = [part * i for part, i in zip(y, inverse)]
    for j in range(p - 2, -1, -1):
        y[j] = y[j] - sum(columns[j][i] * y[j + 1 + i] for i in range(columns[j].shape[0]))
    return jnp.stack(y) / scale


def lane_solve(d: LaneDynamics, parents: tuple[int, ...]) -> Float[Array, "n B"]:
    """The U-K acceleration of `B` states from their `LaneDynamics`.

    **Arguments:**

    - `d`: the states' dynamics.
    - `parents`: `M`'s elimination tree (`AbstractSystem._lane_parents`): each coordinate's
      nearest coordinate above it that `M` may couple it to, `-1` for none. `M` must have no
      other entries than those between a coordinate and its ancestors.

    **Returns:**

    `q̈`, shape (n, B).
    """
    lv = _levels(parents)
    order = lv.order
    split = lambda x: [x[level] for level in lv.slices]  # noqa: E731
    L, inverse = _factor(lv, d.M[order][:, order])
    y = _solve_transposed(lv, L, split(d.Q[order]))
    x = jnp.concatenate(_solve(lv, L, [part * i for part, i in zip(y, inverse)]))
    if not d.A.shape[0]:
        return x[lv.inverse]
    root = jnp.sqrt(jnp.concatenate(inverse))
    A = d.A[:, order]
    # W = D^{-1/2} L⁻ᵀ Aᵀ, (n, p, B); contractions over a middle axis as einsums: written as
    # a broadcast product and a sum, XLA CPU materialized the product (48 against 1.7 µs per
    # member for Cassie's Gram)
    W = jnp.concatenate(_solve_transposed(lv, L, split(jnp.swapaxes(A, 0, 1)))) * root[:, None]
    G = jnp.einsum("niB,njB->ijB", W, W)
    lam = _gram_solve(G, d.b - jnp.einsum("pnB,nB->pB", A, x), A.shape[1])
    z = jnp.einsum("npB,pB->nB", W, lam) * root
    return (x + jnp.concatenate(_solve(lv, L, split(z))))[lv.inverse]


def _mm(A, B):
    """`A @ B` of two stacks of 3 × 3 matrices, shapes (k, 3, 3, B) (either may broadcast)."""
    return jnp.stack(
        [jnp.stack([A[:, i, 0] * B[:, 0, j] + A[:, i, 1] * B[:, 1, j] + A[:, i, 2] * B[:, 2, j] for j in range(3)], 1)
         for i in range(3)],
        1,
    )


def _mv(A, x):
    """`A @ x` of stacks of 3 × 3 matrices and 3-vectors, shapes (k, 3, 3, B) and (k, 3, B)."""
    return jnp.stack([A[:, i, 0] * x[:, 0] + A[:, i, 1] * x[:, 1] + A[:, i, 2] * x[:, 2] for i in range(3)], 1)


def _transpose(A):
    return jnp.swapaxes(A, 1, 2)


def _cross(a, b):
    return jnp.stack(
        [a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1], a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2], a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]],
        1,
    )


def _dot(a, b):
    """Dot products over axis 1 of two stacks of vectors of any length."""
    return sum(a[:, i] * b[:, i] for i in range(a.shape[1]))


def _sum_into(matrix: np.ndarray, x: Array) -> Array:
    """`matrix @ x` over the leading axis: a 0/1 topology matrix (r, k) summing rows of `x`
    (k, …, B) into r rows, as one matrix product."""
    return jnp.tensordot(jnp.asarray(matrix, x.dtype), x, axes=1)


def _spatial(w, v):
    return jnp.concatenate([w, v], 1)


def _split(S):
    return S[:, :3], S[:, 3:]


def _motion_cross(V, S):
    (w, v), (sw, sv) = _split(V), _split(S)
    return _spatial(_cross(w, sw), _cross(w, sv) + _cross(v, sw))


def _force_cross(V, F):
    (w, v), (n, f) = _split(V), _split(F)
    return _spatial(_cross(w, n) + _cross(v, f), _cross(w, f))


def _apply_inertia(m, h, inertia_o, S):
    """A spatial inertia `(m, h = m c, Ī about the origin)` times a twist, stacked."""
    w, v = _split(S)
    return _spatial(_mv(inertia_o, w) + _cross(h, v), m[:, None, None] * v + _cross(w, h))


def _quaternion_matrix(u):
    """Rotations of the quaternions `u/‖u‖`, shape (k, 4, B) → (k, 3, 3, B)."""
    u = u / jnp.sqrt(_dot(u, u))[:, None]
    w, x, y, z = (u[:, i] for i in range(4))
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(row, 1) for row in rows], 1)


def _rate_map(u):
    """`E(u)` of `spatial.rate_map`, shape (k, 4, B) → (k, 3, 4, B)."""
    w, x, y, z = (u[:, i] for i in range(4))
    rows = [[-x, w, z, -y], [-y, -z, w, x], [-z, y, -x, w]]
    return jnp.stack([jnp.stack(row, 1) for row in rows], 1)


def _skew(a):
    """The cross-product matrices of unbatched axes (k, 3) → (k, 3, 3)."""
    x, y, z = a[:, 0], a[:, 1], a[:, 2]
    zero = jnp.zeros_like(x)
    return jnp.stack([jnp.stack(r, 1) for r in [[zero, -z, y], [z, zero, -x], [-y, x, zero]]], 1)


def _dense(shape: tuple[int, int], rows, cols, values: Array) -> Array:
    """A (r, c, B) matrix with `values` (e, B) at the distinct entries `(rows, cols)` and zeros
    elsewhere, as one gather (XLA CPU turns a scatter into a loop of its own)."""
    source = np.zeros(shape, int)
    source[rows, cols] = 1 + np.arange(len(rows))
    padded = jnp.concatenate([jnp.zeros_like(values[:1]), values])
    return padded[source]


class Structure(NamedTuple):
    """What the lane algorithms need of a tree's structure, beyond `joints.Topology`: the joints
    and coordinates of each kind, and where each coordinate's twist comes from."""

    kinds: dict[str, np.ndarray]
    # the joints in the order their motions are stacked (hinges, slides, quaternions), inverted
    joint_order: np.ndarray
    # quaternion joints (ball, free) in joint order, and the rows of their four coordinates (k, 4)
    quaternion_joints: np.ndarray
    quaternion_rows: np.ndarray
    # per coordinate: its row among the stacked twists (hinge, slide, quaternion, translation)
    twist_rows: np.ndarray
    # coordinates with unit entries in G (hinges, slides, free translations) and their dofs
    unit_coordinates: np.ndarray
    unit_dofs: np.ndarray
    # the dofs of each quaternion's three angular velocities (k, 3)
    quaternion_dofs: np.ndarray
    # M's entries that the tree can make non-zero: (j, k) with k ≤ j on j's path to the world
    lower_rows: np.ndarray
    lower_cols: np.ndarray
    springs: np.ndarray  # per coordinate: 1 where a spring acts (hinges and slides)
    # M's elimination tree: each coordinate's nearest coordinate on its path to the world
    parents: tuple[int, ...]


def structure(tree) -> Structure:
    """The `Structure` of a [`ukjax.models.RigidBodyTree`][] (cached per structure)."""
    return _structure(tree.parents, tree.joint_bodies, tree.joint_kinds)


@functools.lru_cache(maxsize=64)
def _structure(parents: tuple[int, ...], joint_bodies: tuple[int, ...], joint_kinds: tuple[str, ...]) -> Structure:
    kinds_of = np.array(joint_kinds, dtype=object)
    kinds = {kind: np.flatnonzero(kinds_of == kind) for kind in ("hinge", "slide", "ball", "free")}
    quaternion_joints = np.flatnonzero((kinds_of == "ball") | (kinds_of == "free"))
    order = np.concatenate([kinds["hinge"], kinds["slide"], quaternion_joints]).astype(int)
    sizes = np.array([SIZES[kind] for kind in joint_kinds], dtype=int).reshape(-1, 2)
    coords, dofs = (np.cumsum(sizes, axis=0) - sizes).T
    free = np.array([kinds_of[j] == "free" for j in quaternion_joints], dtype=int)
    quaternion_rows = (coords[quaternion_joints] + 3 * free)[:, None] + np.arange(4)
    quaternion_dofs = (dofs[quaternion_joints] + 3 * free)[:, None] + np.arange(3)
    h, s, k = len(kinds["hinge"]), len(kinds["slide"]), len(quaternion_joints)
    n = int(sizes[:, 0].sum())
    twist_rows = np.zeros(n, int)
    twist_rows[coords[kinds["hinge"]]] = np.arange(h)
    twist_rows[coords[kinds["slide"]]] = h + np.arange(s)
    twist_rows[quaternion_rows.ravel()] = h + s + np.arange(4 * k)
    translations = coords[kinds["free"]][:, None] + np.arange(3)
    twist_rows[translations.ravel()] = h + s + 4 * k + np.arange(translations.size)
    units = np.concatenate([coords[kinds["hinge"]], coords[kinds["slide"]], translations.ravel()]).astype(int)
    unit_dofs = np.concatenate(
        [dofs[kinds["hinge"]], dofs[kinds["slide"]], (dofs[kinds["free"]][:, None] + np.arange(3)).ravel()]
    ).astype(int)
    lower = topology_of(parents, joint_bodies, joint_kinds).lower
    rows, cols = np.nonzero(lower)
    parents = tuple(int(max(np.flatnonzero(lower[j, :j]), default=-1)) for j in range(n))
    springs = np.zeros(n)
    springs[np.concatenate([coords[kinds["hinge"]], coords[kinds["slide"]]]).astype(int)] = 1.0
    return Structure(
        kinds, np.argsort(order), quaternion_joints, quaternion_rows, twist_rows, units, unit_dofs,
        quaternion_dofs, rows, cols, springs, parents,
    )


class Kinematics(NamedTuple):
    """`joints.Kinematics` for a batch: rotations (b, 3, 3, B), positions (b, 3, B), twists
    (n, 6, B)."""

    rotations: Float[Array, "b 3 3 B"]
    positions: Float[Array, "b 3 B"]
    twists: Float[Array, "n 6 B"]


def _joint_motions(tree, st: Structure, q):
    """Every joint's motion `(R_j, t_j)` (the frame after it in the frame before it), each kind
    by its own formula on its own joints: (J, 3, 3, B) and (J, 3, B)."""
    B, dtype = q.shape[-1], q.dtype
    eye = jnp.eye(3, dtype=dtype)[None, :, :, None]
    coords = np.array(tree.joint_coordinates, dtype=int)
    Rs, ts = [], []
    h, s = st.kinds["hinge"], st.kinds["slide"]
    if h.size:
        angle = q[coords[h]] - tree.reference[coords[h]][:, None]
        K = _skew(tree.joint_axes[h])
        sin, cos = jnp.sin(angle)[:, None, None], jnp.cos(angle)[:, None, None]
        R = eye + sin * K[..., None] + (1 - cos) * (K @ K)[..., None]
        anchor = tree.joint_anchors[h][..., None]
        Rs.append(R)
        ts.append(anchor - _mv(R, anchor))
    if s.size:
        angle = q[coords[s]] - tree.reference[coords[s]][:, None]
        Rs.append(jnp.broadcast_to(eye, (s.size, 3, 3, B)))
        ts.append(tree.joint_axes[s][..., None] * angle[:, None])
    k = st.quaternion_joints
    if k.size:
        # a ball turns about its anchor; a free joint's translation is its first coordinates
        R = _quaternion_matrix(q[st.quaternion_rows])
        anchor = tree.joint_anchors[k][..., None]
        free = np.array([kind == "free" for kind in np.array(tree.joint_kinds)[k]])
        position = q[np.minimum(coords[k][:, None] + np.arange(3), q.shape[0] - 1)]
        Rs.append(R)
        ts.append(jnp.where(free[:, None, None], position, anchor - _mv(R, anchor)))
    return jnp.concatenate(Rs)[st.joint_order], jnp.concatenate(ts)[st.joint_order]


def kinematics(tree, q: Float[Array, "n B"]) -> Kinematics:
    """Body frames and coordinate twists of `B` configurations (as `joints.kinematics`)."""
    top, st = topology(tree), structure(tree)
    b, J = len(tree.parents), len(tree.joint_kinds)
    B, dtype = q.shape[-1], q.dtype
    eye = jnp.eye(3, dtype=dtype)
    free_bodies = np.zeros(b, dtype=bool)
    free_bodies[np.array(tree.joint_bodies, dtype=int)[top.free]] = True
    R_local = jnp.broadcast_to(jnp.where(free_bodies[:, None, None], eye, tree.body_rotations)[..., None], (b, 3, 3, B))
    p_local = jnp.broadcast_to(jnp.where(free_bodies[:, None], 0.0, tree.body_positions)[..., None], (b, 3, B))
    if J:
        R_joint, t_joint = _joint_motions(tree, st, q)
        R_after, p_after = jnp.zeros((J, 3, 3, B), dtype), jnp.zeros((J, 3, B), dtype)
        for bodies, joints in top.slots:  # a body's joints apply in order
            R, p = R_local[bodies], p_local[bodies]
            R_new, p_new = _mm(R, R_joint[joints]), p + _mv(R, t_joint[joints])
            R_local, p_local = put(R_local, bodies, R_new), put(p_local, bodies, p_new)
            R_after, p_after = put(R_after, joints, R_new), put(p_after, joints, p_new)
    # world frames level by level; index b is the world
    R_world = jnp.concatenate([R_local, jnp.broadcast_to(eye[None, :, :, None], (1, 3, 3, B))])
    p_world = jnp.concatenate([p_local, jnp.zeros((1, 3, B), dtype)])
    for bodies, parents in top.levels:
        R = R_world[parents]
        R_world = put(R_world, bodies, _mm(R, R_local[bodies]))
        p_world = put(p_world, bodies, p_world[parents] + _mv(R, p_local[bodies]))
    if not J:
        return Kinematics(R_world[:b], p_world[:b], jnp.zeros((0, 6, B), dtype))
    R_parent = R_world[top.joint_parents]
    R = _mm(R_parent, R_after)
    p = p_world[top.joint_parents] + _mv(R_parent, p_after)
    anchors = jnp.where(top.free[:, None], 0.0, tree.joint_anchors)[..., None]
    axis = _mv(R, tree.joint_axes[..., None])
    anchor = p + _mv(R, anchors)
    h, s, k = st.kinds["hinge"], st.kinds["slide"], st.quaternion_joints
    twists = [_spatial(axis[h], _cross(anchor[h], axis[h])), _spatial(jnp.zeros_like(axis[s]), axis[s])]
    if k.size:
        # a quaternion's four twists: the body's rotations about the anchor, combined by 2 E(u)
        E = _rate_map(q[st.quaternion_rows])
        W = jnp.stack([2 * _mv(R[k], E[:, :, c]) for c in range(4)], 1).reshape(4 * k.size, 3, B)
        twists.append(_spatial(W, _cross(jnp.repeat(anchor[k], 4, axis=0), W)))
        units = np.tile(np.concatenate([np.zeros((3, 3)), np.eye(3)], 1), (len(st.kinds["free"]), 1))
        twists.append(jnp.broadcast_to(jnp.asarray(units, dtype)[..., None], (units.shape[0], 6, B)))
    return Kinematics(R_world[:b], p_world[:b], jnp.concatenate(twists)[st.twist_rows])


def _inertias(tree, kin: Kinematics):
    """Every body's spatial inertia about the world origin: m (b,), h (b, 3, B), Ī (b, 3, 3, B)."""
    R, m = kin.rotations, tree.masses
    c = kin.positions + _mv(R, tree.coms[..., None])
    inertia_c = _mm(_mm(R, tree.inertias[..., None]), _transpose(R))
    eye = jnp.eye(3, dtype=c.dtype)[None, :, :, None]
    parallel = _dot(c, c)[:, None, None] * eye - c[:, :, None] * c[:, None, :]
    return m, m[:, None, None] * c, inertia_c + m[:, None, None, None] * parallel


def _quaternion_metric(st: Structure, q, weights):
    """`4 Eᵀ diag(w) E` of every quaternion, shape (k, 4, 4, B)."""
    E = _rate_map(q[st.quaternion_rows])
    w = weights[st.quaternion_dofs][..., None, None, None]
    return 4 * sum(w[:, i] * E[:, i, :, None] * E[:, i, None, :] for i in range(3))


def _metric(tree, st: Structure, q, weights):
    """`Gᵀ diag(weights) G` (as `joints.dof_metric`), shape (n, n, B)."""
    n, B = q.shape
    units, blocks = st.unit_coordinates, st.quaternion_rows
    values = [jnp.broadcast_to(weights[st.unit_dofs][:, None], (units.size, B))]
    rows, cols = [units], [units]
    if blocks.size:
        values.append(_quaternion_metric(st, q, weights).reshape(-1, B))
        rows.append(np.repeat(blocks, 4, axis=1).ravel())
        cols.append(np.tile(blocks, (1, 4)).ravel())
    return _dense((n, n), np.concatenate(rows), np.concatenate(cols), jnp.concatenate(values))


def dynamics(tree, q: Float[Array, "n B"], qd: Float[Array, "n B"], norm_gains: tuple[float, float]):
    """`M` and `Q` of `B` states, the quaternions' norm rows folded in as `RigidBodyTree.dynamics`
    folds them (the auxiliary system `M + γAᵀA`, `Q + γAᵀb`; `norm_gains` their Baumgarte
    gains).

    **Returns:**

    `(M, Q, norm_rows, motion)`: shapes (n, n, B) and (n, B), the norm rows' `(A, b, phi,
    phid)` with shapes (k, n, B), (k, B), (k, B), (k, B) (`k = 0` without quaternions), and
    `(kinematics, V, A)`: the bodies' twists and accelerations at `q̈ = 0` (gravity left out),
    each (b, 6, B), for the rows of `connect` constraints.
    """
    top, st = topology(tree), structure(tree)
    n, B = q.shape
    kin = kinematics(tree, q)
    S = kin.twists
    m, h, inertia_o = _inertias(tree, kin)
    # M by composite rigid bodies: each coordinate's body with its subtree, then Mⱼₖ = Sₖ·(I_c Sⱼ)
    D = top.subtree[top.coordinate_bodies]
    composite = (jnp.asarray(D, m.dtype) @ m, _sum_into(D, h), _sum_into(D, inertia_o))
    F = _apply_inertia(*composite, S)
    lower = _dot(S[st.lower_cols], F[st.lower_rows])
    diagonal = st.lower_rows == st.lower_cols
    rows = np.concatenate([st.lower_rows, st.lower_cols[~diagonal]])
    cols = np.concatenate([st.lower_cols, st.lower_rows[~diagonal]])
    M = _dense((n, n), rows, cols, jnp.concatenate([lower, lower[~diagonal]]))
    C = tree.tendon_coefficients
    M = M + (C.T @ (tree.tendon_armature[:, None] * C))[..., None] + _metric(tree, st, q, tree.armature)
    # bias forces by recursive Newton–Euler, with sums over the tree as products with its
    # topology matrices; gravity as an upward acceleration of the base
    rates = S * qd[:, None]
    V = _sum_into(top.moves, rates)
    A = _sum_into(top.moves, _motion_cross(_sum_into(top.before, rates), rates))
    motion = (kin, V, A)
    A = A - jnp.concatenate([jnp.zeros(3, A.dtype), tree.gravity])[:, None]
    wrenches = _apply_inertia(m, h, inertia_o, A) + _force_cross(V, _apply_inertia(m, h, inertia_o, V))
    bias = _dot(S, _sum_into(top.subtree, wrenches)[top.coordinate_bodies])
    Q = -bias - _damping(tree, st, q, qd) - (st.springs * tree.stiffness)[:, None] * (q - tree.spring_reference[:, None])
    if C.shape[0]:
        L, low, high = C @ q, tree.tendon_lengthspring[:, :1], tree.tendon_lengthspring[:, 1:]
        stretch = jnp.where(L > high, L - high, 0.0) + jnp.where(L < low, L - low, 0.0)
        Q = Q + C.T @ (-tree.tendon_stiffness[:, None] * stretch - tree.tendon_damping[:, None] * (C @ qd))
    k = len(st.quaternion_joints)
    if not k:
        zeros = jnp.zeros((0, B), q.dtype)
        return M, Q, (jnp.zeros((0, n, B), q.dtype), zeros, zeros, zeros), motion
    u, ud = q[st.quaternion_rows], qd[st.quaternion_rows]
    phi, phid = _dot(u, u) - 1, 2 * _dot(u, ud)
    alpha, beta = norm_gains
    b = -2 * _dot(ud, ud) - alpha * phid - beta * phi
    blocks = st.quaternion_rows
    A_rows = _dense((k, n), np.repeat(np.arange(k), 4), blocks.ravel(), (2 * u).reshape(-1, B))
    # M is singular along each quaternion: γ of the size of the block the row completes
    gamma = sum(M[blocks[:, i], blocks[:, i]] for i in range(4)) / 4
    block_M = 4 * gamma[:, None, None] * u[:, :, None] * u[:, None, :]
    M = M + _dense((n, n), np.repeat(blocks, 4, axis=1).ravel(), np.tile(blocks, (1, 4)).ravel(), block_M.reshape(-1, B))
    Q = Q + _dense((n, 1), blocks.ravel(), np.zeros(4 * k, int), (2 * gamma[:, None] * b[:, None] * u).reshape(-1, B))[:, 0]
    return M, Q, (A_rows, b, phi, phid), motion


def _damping(tree, st: Structure, q, qd):
    """`Gᵀ diag(d) G q̇`, the joints' damping forces (as `dof_metric(tree, q, damping) @ q̇`)."""
    units = st.unit_coordinates
    force = _dense((q.shape[0], 1), units, np.zeros(units.size, int), tree.damping[st.unit_dofs][:, None] * qd[units])[:, 0]
    if not st.quaternion_rows.size:
        return force
    block = _quaternion_metric(st, q, tree.damping)
    rate = sum(block[:, :, j] * qd[st.quaternion_rows][:, None, j] for j in range(4))
    blocks = st.quaternion_rows.ravel()
    return force + _dense((q.shape[0], 1), blocks, np.zeros(blocks.size, int), rate.reshape(-1, q.shape[1]))[:, 0]

def _points(tree, motion, bodies: tuple[str, ...], points):
    """Body-fixed points' position (k, 3, B), Jacobian (k, n, 3, B), acceleration at `q̈ = 0`
    (k, 3, B), and their bodies' rotation (k, 3, 3, B), angular velocity (k, 3, B), angular
    Jacobian (k, n, 3, B) and angular acceleration (k, 3, B), as `algorithms.points_motion`."""
    kin, V, A = motion
    b, (n, _, B) = len(tree.parents), kin.twists.shape
    dtype = V.dtype
    # the world as body b: a fixed frame at the origin that no coordinate moves
    index = np.array([b if i < 0 else i for i in map(tree.body_index, bodies)], dtype=int)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=dtype)[None, :, :, None], (1, 3, 3, B))
    R = jnp.concatenate([kin.rotations, eye])[index]
    p = jnp.concatenate([kin.positions, jnp.zeros((1, 3, B), dtype)])[index]
    V, A = (jnp.concatenate([x, jnp.zeros((1, 6, B), dtype)])[index] for x in (V, A))
    moves = np.concatenate([topology(tree).moves, np.zeros((1, n))])[index][:, :, None, None]
    x = p + _mv(R, points[..., None])
    k = index.size
    S = jnp.broadcast_to(kin.twists[None], (k, n, 6, B)).reshape(k * n, 6, B)
    J = (S[:, 3:] + _cross(S[:, :3], jnp.repeat(x, n, axis=0))).reshape(k, n, 3, B) * moves
    velocity = V[:, 3:] + _cross(V[:, :3], x)
    bias = A[:, 3:] + _cross(A[:, :3], x) + _cross(V[:, :3], velocity)
    return x, J, bias, R, V[:, :3], S[:, :3].reshape(k, n, 3, B) * moves, A[:, :3]


def _connect_rows(tree, motion, constraints, qd):
    """The rows of `k` `Connect` constraints at once, as `Connect._rows`: A (3k, n, B), b (3k, B)."""
    one = _points(tree, motion, tuple(c.body1 for c in constraints), jnp.stack([c.anchor1 for c in constraints]))
    two = _points(tree, motion, tuple(c.body2 for c in constraints), jnp.stack([c.anchor2 for c in constraints]))
    (x1, J1, b1, R1, w, Jw, alpha), (x2, J2, b2, *_) = one, two
    k, n, _, B = J1.shape
    r, Jr = x1 - x2, J1 - J2
    rd = jnp.einsum("kncB,nB->kcB", Jr, qd)
    columns = Jr.reshape(k * n, 3, B) + _cross(jnp.repeat(r, n, axis=0), Jw.reshape(k * n, 3, B))
    Rt = _transpose(R1)
    A = _mv(jnp.repeat(Rt, n, axis=0), columns).reshape(k, n, 3, B).swapaxes(1, 2).reshape(3 * k, n, B)
    bias = b1 - b2 + _cross(r, alpha) - 2 * _cross(w, rd) + _cross(w, _cross(w, r))
    return A, -_mv(Rt, bias).reshape(3 * k, B)


def lane_dynamics(system, t, q, qd, motion_out: list | None = None) -> LaneDynamics:
    """`LaneDynamics` of `B` states: the tree's terms and `connect` rows in lanes, everything
    else mapped (`motion_out` receives the tree's motion, for the rows above it)."""
    if isinstance(system, RigidBodyTree):
        M, Q, (A, b, _, _), motion = dynamics(system, q, qd, NORM_GAINS)
        if motion_out is not None:
            motion_out.append((system, motion))
        return LaneDynamics(M, Q, A, b)
    if isinstance(system, Actuated):
        inner = lane_dynamics(system.system, t, q, qd, motion_out)
        return inner._replace(Q=inner.Q + lanes(lambda q, qd: system._actuation(t, q, qd), q, qd))
    if isinstance(system, ukjax.ConstrainedSystem) and not system.sequential and system.nonideal is None:
        motion = []
        inner = lane_dynamics(system.system, t, q, qd, motion)
        As, bs = [inner.A], [inner.b]
        for kind, group in itertools.groupby(system.constraints, type):
            group = list(group)
            if kind is Connect and motion and system.stabilization is None:
                A, b = _connect_rows(*motion[0], group, qd)
            else:
                rows = lanes(lambda q, qd, group=group: stack_rows(group, system.system, t, q, qd), q, qd)
                if system.stabilization is not None:
                    raise NotImplementedError("Baumgarte gains on lanes")
                A, b = rows.A, rows.b
            As.append(A)
            bs.append(b)
        if motion_out is not None:
            motion_out += motion
        return inner._replace(A=jnp.concatenate(As), b=jnp.concatenate(bs))
    raise NotImplementedError(type(system).__name__)


def _tree(system) -> RigidBodyTree:
    while not isinstance(system, RigidBodyTree):
        system = system.system
    return system


def lane_parents(system) -> tuple[int, ...]:
    return structure(_tree(system)).parents


_KERNELS = Path(__file__).resolve().parent / "lanes_kernel" / "uk_lanes.cc"
_CHUNK = 32  # the kernels' lanes per chunk: batches are padded to a multiple


@functools.cache
def build_kernel() -> bool:
    """Build the library's tree kernel (`ukjax/_robots/kernels.cc`, registered by the library)
    and `lanes_kernel/uk_lanes.cc`, its solve alone, registered here as the XLA FFI target
    `uk_lanes`, once per process; False, with a line that says why, where that fails."""
    if not kernels._built():
        print("the library's kernel was not built; the FFI rows are left out")
        return False
    out = Path(tempfile.mkdtemp()) / "uk_lanes.so"
    command = ["g++", "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w",
               f"-I{jax.ffi.include_dir()}", str(_KERNELS), "-o", str(out)]
    try:
        subprocess.run(command, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"the FFI solve was not built ({error}); its rows are left out")
        return False
    library = ctypes.cdll.LoadLibrary(str(out))
    jax.ffi.register_ffi_target("uk_lanes", jax.ffi.pycapsule(library.UkLanes), platform="cpu")
    return True


def kernel_solve(d: LaneDynamics, parents: tuple[int, ...]) -> Float[Array, "n B"]:
    """`lane_solve` as one FFI call (the batch padded to a multiple of the kernel's chunk)."""
    (n, B), p = d.Q.shape, d.A.shape[0]
    size = -(-B // _CHUNK) * _CHUNK
    padded = [jnp.concatenate([x, jnp.repeat(x[..., -1:], size - B, axis=-1)], -1) for x in d]
    # the results batch first, as the library's kernel writes them
    shapes = (jax.ShapeDtypeStruct((size, n), d.Q.dtype),) * 2 + (jax.ShapeDtypeStruct((size, 2), d.Q.dtype),)
    floor = np.float64(rank_tolerance(max(p, 1), d.Q.dtype))
    zero_row = np.float64(negligible(p, n, d.Q.dtype) ** 2)
    call = jax.ffi.ffi_call("uk_lanes", shapes)
    return call(*padded, jnp.asarray(parents, jnp.int64), floor=floor, zero_row=zero_row)[0][:B].T


def tree_kernel(system):
    """The library's acceleration as one FFI call (`ukjax/_robots/kernels.cc`, what
    `simulate_batch` runs) with what it does not model evaluated in XLA under `vmap`: a function
    `(q, qd) -> q̈` of (n, B) states, or None for a system it does not take."""
    parts = kernels.covered(system)
    if parts is None:
        return None

    def acceleration(q, qd):
        q, qd = q.T, qd.T  # the library's kernel takes the batch first
        outside = jax.vmap(lambda q, qd: kernels._outside(parts, 0.0, q, qd))(q, qd)
        return kernels._call(parts, q, qd, outside)[0].T

    return acceleration


def single_state(acceleration):
    """`acceleration` of (n, B) states as a function of one state `(q, qd)`, (n,) each, which
    `jax.vmap` maps by a transposition at the boundary (a batching rule): the batch goes to the
    last axis, the kernel runs once on all of it, the result comes back batch first."""

    @jax.custom_batching.custom_vmap
    def one(q, qd):
        return acceleration(q[:, None], qd[:, None])[:, 0]

    @one.def_vmap
    def _(size, batched, q, qd):
        q, qd = (x if b else jnp.broadcast_to(x, (size, *x.shape)) for x, b in zip((q, qd), batched))
        return acceleration(q.T, qd.T).T, True

    return one


def boundary(batches: list[int]):
    """µs per member of Cassie's one-call acceleration given the batch last, and mapped over
    single states with `jax.vmap` through `single_state`'s batching rule (batch first)."""
    _, system, q0, *_ = bench.cassie()
    whole, n = tree_kernel(system), system.num_coordinates
    single = single_state(whole)
    rng = np.random.default_rng(0)
    print(f"\nCassie's one FFI call, µs per member: {'batch':>5s} {'batch last':>11s} {'vmap, batch first':>18s}")
    for B in batches:
        q = jnp.asarray(np.asarray(q0)[:, None] + 1e-3 * rng.standard_normal((n, B)))
        qd = jnp.asarray(rng.standard_normal((n, B)))
        last, _, t_last = _time(whole, q, qd)
        first, _, t_first = _time(jax.vmap(single), q.T, qd.T)
        assert np.array_equal(np.asarray(last), np.asarray(first).T)
        print(f"{'':37s} {B:5d} {1e6 * t_last / B:11.2f} {1e6 * t_first / B:18.2f}")


def fastest(system):
    """The fastest lane route for `system`, a function `(q, qd) -> q̈` of (n, B) states: the one
    FFI call for a tree under `connect` constraints alone, else the lanes with the FFI solve,
    None where neither applies or the kernels are not built."""
    if not build_kernel():
        return None
    whole = tree_kernel(system)
    if whole is not None:
        return whole
    state = jax.ShapeDtypeStruct((system.num_coordinates, 1), jnp.float64)
    try:
        jax.eval_shape(lambda q: lane_dynamics(system, 0.0, q, q), state)
    except NotImplementedError:
        return None
    parents = lane_parents(system)
    return lambda q, qd: kernel_solve(lane_dynamics(system, 0.0, q, qd), parents)


def _time(f, *args, repeats=5):
    f = jax.jit(f)
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    compile_s = time.perf_counter() - start
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - start)
    return out, compile_s - best, best


def rk4_step(accel, h: float, state):
    """One classical Runge–Kutta step of `h` of `q̈ = accel(q, q̇)` from `state = (q, q̇)`."""
    q, qd = state
    k1q, k1v = qd, accel(q, qd)
    k2q, k2v = qd + h / 2 * k1v, accel(q + h / 2 * k1q, qd + h / 2 * k1v)
    k3q, k3v = qd + h / 2 * k2v, accel(q + h / 2 * k2q, qd + h / 2 * k2v)
    k4q, k4v = qd + h * k3v, accel(q + h * k3q, qd + h * k3v)
    return q + h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q), qd + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)


def rk4_lanes(accel, q0, qd0, h: float, saves: int, every: int, chunk: int):
    """RK4 steps of `h` from `(q0, qd0)`, (n, B) each, the batch last, split over the CPU devices
    (as `simulate_batch` splits it) and on each into chunks of `chunk` members run one after the
    other (their arrays then stay in the cache).

    **Returns:**

    `(q, qd)`: `q` at the start and after every `every` steps, `saves` times, shape
    (saves + 1, n, B), and the last `qd` (n, B).
    """
    mesh = Mesh(np.array(jax.devices()), ("batch",))

    def local(q, qd):
        def save(state, _):
            state = jax.lax.scan(lambda state, _: (rk4_step(accel, h, state), None), state, None, length=every)[0]
            return state, state[0]

        def run(part):
            (_, qd), qs = jax.lax.scan(save, part, None, length=saves)
            return jnp.concatenate([part[0][None], qs]), qd

        n, B = q.shape
        width = min(chunk, B)
        parts = tuple(x.reshape(n, B // width, width).swapaxes(0, 1) for x in (q, qd))
        qs, qd = jax.lax.map(run, parts)
        return qs.transpose(1, 2, 0, 3).reshape(saves + 1, n, B), qd.swapaxes(0, 1).reshape(n, B)

    spec = PartitionSpec(None, "batch")
    return jax.shard_map(
        local, mesh=mesh, in_specs=(spec, spec), out_specs=(PartitionSpec(None, None, "batch"), spec), check_vma=False
    )(q0, qd0)


def fourbar():
    """`examples/fourbar.xml` read by both, from rest at its `swinging` keyframe's angles, its
    motor off: a case as `ukjax bench`'s."""
    import mujoco

    path = ukjax.examples.path("fourbar.xml")
    m = models.from_mjcf(path, keyframe="swinging")
    xml = path.read_text().replace(
        '<option gravity="0 0 -9.81">', f'<option gravity="0 0 -9.81" timestep="{DT}" integrator="RK4">'
    )
    violation = bench._equality_violation(mujoco.MjModel.from_xml_string(xml))
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    return "four-bar, one MJCF file", system, m.q0, xml, np.asarray(m.q0), np.zeros(1), violation


def coordinated():
    """`ukjax bench`'s coordinated robots with ukjax reading MuJoCo's file too (a tree of five
    hinges and a `connect` to the world), so that the lanes apply."""
    _, _, _, xml, qpos, ctrl, violation = bench.coordinated()
    path = Path(tempfile.mkdtemp()) / "coordinated.xml"
    path.write_text(xml)
    m = models.from_mjcf(path)
    q0, _ = m.state_from_mujoco(qpos, np.zeros_like(qpos))
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    return "coordinated robots, one MJCF file", system, q0, xml, qpos, ctrl, violation


CASES = {"four-bar": fourbar, "coordinated": coordinated, "gripper": bench.gripper, "Cassie": bench.cassie}


def steps_per_second(batch: int, steps: int, kernel: bool, chunk: int, cases: list[str]):
    """RK4 steps per second on `CASES` (1 ms, from rest): `simulate_batch` (today's route), the
    lanes with the XLA solve and with the FFI solve, the whole acceleration as one FFI call (a
    tree under `connect` constraints alone), MuJoCo's `rollout`; each lane route's compile time
    and closure."""
    print(
        f"\nRK4 at {DT * 1e3:g} ms, {steps} steps, batch {batch}, {len(jax.devices())} devices, lanes in chunks of "
        f"{chunk}; steps per second"
    )
    routes = ("simulate_batch", "lanes, XLA", "lanes, FFI", "FFI, whole", "MuJoCo")
    print(f"{'case':11s} " + " ".join(f"{r:>14s}" for r in routes) + f" {'best/MuJoCo':>11s}  compile s; closure")
    for name in cases:
        case = CASES[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # limits named, keyframes projected
            _, system, q0, xml, qpos, ctrl, violation = case()
        parents = lane_parents(system)
        whole = tree_kernel(system) if kernel else None
        accelerations = {
            "lanes, XLA": lambda q, qd: lane_solve(lane_dynamics(system, 0.0, q, qd), parents),
            "lanes, FFI": (lambda q, qd: kernel_solve(lane_dynamics(system, 0.0, q, qd), parents)) if kernel else None,
            "FFI, whole": whole,
        }
        rates, compiles, closure = {}, {}, {}
        # best of 3 for every route: the two cores are shared
        runs = [bench.run_ukjax(system, q0, batch, steps) for _ in range(3)]
        rates["simulate_batch"], compiles["simulate_batch"] = max(r[0] for r in runs), runs[0][2]
        start = jnp.broadcast_to(jnp.asarray(q0)[:, None], (q0.shape[0], batch))
        for label, accel in accelerations.items():
            if accel is None:
                continue
            (q, qd), compiles[label], elapsed = _time(
                lambda q, accel=accel: rk4_lanes(accel, q, jnp.zeros_like(q), DT, 1, steps, chunk), start, repeats=3
            )
            q = q[-1]
            rates[label] = batch * steps / elapsed
            phi, _ = jax.vmap(lambda q, qd: system.violation(0.0, q, qd))(q.T, qd.T)
            closure[label] = float(jnp.max(jnp.abs(phi)))
        rates["MuJoCo"] = max(bench.run_mujoco(xml, qpos, ctrl, batch, steps, violation)[0] for _ in range(3))
        best = max(v for k, v in rates.items() if k not in ("MuJoCo", "simulate_batch"))
        print(
            f"{name:11s} " + " ".join(f"{rates.get(r, np.nan):14.3g}" for r in routes) + f" {best / rates['MuJoCo']:11.2f}  "
            + " / ".join(f"{c:.1f}" for c in compiles.values()) + "; " + " / ".join(f"{c:.1e}" for c in closure.values())
        )


def _dynamics(system, q, qd):
    """`M`, `Q` and the rows of one state, the single-state route."""
    d = system.dynamics(0.0, q, qd)
    return d.M, d.Q, d.levels[-1].rows.A, d.levels[-1].rows.b


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--steps", type=int, default=200, help="RK4 steps of the per-step comparison (0: none)")
    parser.add_argument("--chunk", type=int, default=128, help="lanes per chunk in the per-step comparison")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="the per-step comparison's")
    parser.add_argument("--parts", action=argparse.BooleanOptionalAction, default=True, help="the part-by-part table")
    args = parser.parse_args()
    jax.config.update("jax_num_cpu_devices", bench.CORES)
    jax.config.update("jax_enable_x64", True)
    kernel = build_kernel()
    if kernel:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # limits named, keyframe projected
            boundary(args.batch)
    print(f"{'case':8s} {'batch':>5s} {'part':28s} {'lanes µs':>9s} {'vmap µs':>8s} {'lanes s':>8s} {'vmap s':>7s}")
    for name, case in (("gripper", bench.gripper), ("Cassie", bench.cassie)) if args.parts else ():
        _, system, q0, *_ = case()
        tree, parents, n = _tree(system), lane_parents(system), system.num_coordinates
        rng = np.random.default_rng(0)
        start = system.project(0.0, q0, jnp.zeros(n)).q
        for B in args.batch:
            q = np.asarray(start)[:, None] + 1e-3 * rng.standard_normal((n, B))
            qd = rng.standard_normal((n, B))

            def row(part, lane, mapped):
                (lo, lc, lt), (vo, vc, vt) = lane, mapped
                print(f"{name:8s} {B:5d} {part:28s} {1e6 * lt / B:9.2f} {1e6 * vt / B:8.2f} {lc:8.1f} {vc:7.1f}")
                return lo, vo

            # one device: the parts are single programs
            one = jax.devices()[0]
            q, qd = jax.device_put(q, one), jax.device_put(qd, one)
            row("kinematics", _time(lambda q: kinematics(tree, q), q), _time(jax.vmap(tree.kinematics), q.T))
            row("tree M, Q", _time(lambda q, qd: dynamics(tree, q, qd, NORM_GAINS)[:2], q, qd),
                _time(jax.vmap(lambda q, qd: tree.dynamics(0.0, q, qd)[:2]), q.T, qd.T))
            d, _ = row("M, Q, rows", _time(lambda q, qd: lane_dynamics(system, 0.0, q, qd), q, qd),
                       _time(jax.vmap(lambda q, qd: _dynamics(system, q, qd)), q.T, qd.T))
            # the single-state route's solve and acceleration timed once, each lane route's
            # row beside them
            solve = _time(jax.vmap(ukjax.udwadia_kalaba), *[jnp.moveaxis(x, -1, 0) for x in d])
            reference = row("U-K solve", _time(lambda d: lane_solve(d, parents), d), solve)[1]
            if kernel:
                out = row("U-K solve, FFI", _time(lambda d: kernel_solve(d, parents), d), solve)[0]
                scale = np.max(np.abs(reference))
                print(f"{name:8s} {B:5d} kernel's agreement: {np.max(np.abs(np.asarray(out).T - reference)) / scale:.1e}")
            whole = tree_kernel(system) if kernel else None
            routes = {
                "acceleration": lambda q, qd: lane_solve(lane_dynamics(system, 0.0, q, qd), parents),
                "acceleration, FFI solve": (
                    (lambda q, qd: kernel_solve(lane_dynamics(system, 0.0, q, qd), parents)) if kernel else None
                ),
                "acceleration, one FFI call": whole,
            }
            single = _time(jax.vmap(lambda q, qd: system.acceleration(0.0, q, qd)), q.T, qd.T)
            for label, accel in routes.items():
                if accel is None:
                    continue
                lane, mapped = row(label, _time(accel, q, qd), single)
                scale = np.max(np.abs(mapped))
                print(f"{name:8s} {B:5d} agreement: {np.max(np.abs(np.asarray(lane).T - mapped)) / scale:.1e} of max|q̈| {scale:.1e}")
    if args.steps:
        for B in args.batch:
            steps_per_second(B, args.steps, kernel, args.chunk, args.cases)


if __name__ == "__main__":
    main()
