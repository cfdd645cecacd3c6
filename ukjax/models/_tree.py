"""Spatial rigid-body trees of hinge, slide, ball and free joints: the composite-rigid-body
algorithm for `M` and recursive Newton–Euler for the bias forces, in world-frame spatial vectors.

Ball and free joints keep MuJoCo's unit quaternion `u = (w, x, y, z)` as four coordinates (the
U-K-native route): the body's angular velocity is `ω = 2 E(u) u̇` in its own frame, the
rotational mass block `4 EᵀJE` is singular along `u`, and `uᵀu = 1` is a constraint row of
the tree itself. The acceleration is that of the auxiliary system `M + γAᵀA`, `Q + γAᵀb`
over the norm rows (Udwadia & Phohomsiri 2006: the same motion wherever `[M; A]` has full
column rank), so no special solver is needed."""

import abc
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._animate import Sketch
from .._constraints import AbstractSystemConstraint, ConstraintRows, as_inexact, holonomic_rows
from .._jit import jit
from .._systems import AbstractUnconstrainedSystem, ConstraintLevel, Dynamics

# Coordinates and velocities of each joint kind (MuJoCo's nq and nv per joint).
_SIZES = {"hinge": (1, 1), "slide": (1, 1), "ball": (4, 3), "free": (7, 6)}
# Critically damped Baumgarte gains [1/s, 1/s²] of the quaternions' norm rows: the norm does
# not enter the motion (rotations use u/‖u‖), so holding it costs no accuracy, and a rate of
# 10/s stays far inside any explicit solver's stability region at mechanical step sizes.
_NORM_GAINS = (20.0, 100.0)

# Spatial vectors are pairs (angular, linear) of 3-vectors at the world origin: a twist
# (ω, v) has v the velocity of the body-fixed point at the origin, a wrench (n, f) has n the
# moment about the origin. Everything is expressed in the world frame, so that a joint's
# twist and the bodies' inertias need no transforms between frames.


def _motion_cross(V, S):
    """`V ×ₘ S`: the rate of change of a twist `S` carried by a body moving with twist `V`."""
    (w, v), (sw, sv) = V, S
    return jnp.cross(w, sw), jnp.cross(w, sv) + jnp.cross(v, sw)


def _force_cross(V, F):
    """`V ×_f F`: the rate of change of a wrench `F` carried by a body moving with twist `V`."""
    (w, v), (n, f) = V, F
    return jnp.cross(w, n) + jnp.cross(v, f), jnp.cross(w, f)


def _apply_inertia(inertia, S):
    """The spatial inertia `(m, h = m c, Ī = rotational inertia about the origin)` times `S`
    (for one body, or stacked over bodies along a leading axis)."""
    m, h, inertia_o = inertia
    w, v = S
    return _mv(inertia_o, w) + jnp.cross(h, v), m[..., None] * v + jnp.cross(w, h)


def _add(X, Y):
    return X[0] + Y[0], X[1] + Y[1]


def _mm(A, B):
    """`A @ B` over stacks of 3 × 3 matrices `A` and 3-row matrices `B`, as one broadcast product
    whose three slices are added: as fast as XLA's dot on CPU (a dot with several batch
    dimensions, a vmapped batch of vmapped simulations, was turned into an invalid program by
    XLA's layout pass), faster than `jnp.sum` over the size-3 axis (13–33 % on Cassie and a
    loop file), and few operations to trace."""
    P = A[..., :, :, None] * B[..., None, :, :]
    return P[..., 0, :] + P[..., 1, :] + P[..., 2, :]


def _mv(A, x):
    """`A @ x` over stacks of 3 × 3 matrices and 3-vectors (as `_mm`)."""
    P = A * x[..., None, :]
    return P[..., 0] + P[..., 1] + P[..., 2]


def _put(x: Array, index: np.ndarray | tuple[np.ndarray, ...], values: ArrayLike) -> Array:
    """`x.at[index].set(values)` for distinct indices known when tracing (an array into the
    first axis, or a tuple of arrays into as many leading axes), as one gather from `x` and
    `values` side by side. XLA's CPU backend turns every such scatter into a loop of its own:
    Cassie's `simulate` program had 68, and without them it has 37% fewer fused kernels and
    compiles in about four fifths of the time."""
    axes = len(index) if isinstance(index, tuple) else 1
    flat = np.ravel_multi_index(np.broadcast_arrays(*index), x.shape[:axes]) if axes > 1 else np.asarray(index)
    rest = x.shape[axes:]
    values = jnp.broadcast_to(jnp.asarray(values, x.dtype), flat.shape + rest).reshape(-1, *rest)
    source = np.arange(np.prod(x.shape[:axes], dtype=int))
    source[flat.ravel()] = source.size + np.arange(flat.size)
    return jnp.concatenate([x.reshape(-1, *rest), values])[source].reshape(x.shape)


def _matrix(rows):
    """A stack of small matrices from nested lists of same-shaped arrays (entries last)."""
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


# The three helpers below take stacks (leading axes) as well as single ones: written on
# arrays rather than vmapped, they trace in a fraction of the time.


def _axis_angle(axis: Float[Array, "*j 3"], angle: Float[Array, "*j"]) -> Float[Array, "*j 3 3"]:
    """Rotation by `angle` about the unit `axis` (Rodrigues)."""
    x, y, z = (axis[..., i] for i in range(3))
    zero = jnp.zeros_like(x)
    K = _matrix([[zero, -z, y], [z, zero, -x], [-y, x, zero]])
    s, c = jnp.sin(angle)[..., None, None], jnp.cos(angle)[..., None, None]
    return jnp.eye(3, dtype=axis.dtype) + s * K + (1 - c) * _mm(K, K)


def _quaternion_matrix(u: Float[Array, "*j 4"]) -> Float[Array, "*j 3 3"]:
    """The rotation of the unit quaternion `u/‖u‖`, `u = (w, x, y, z)`."""
    u = u / jnp.sqrt(jnp.sum(u * u, axis=-1, keepdims=True))
    w, x, y, z = (u[..., i] for i in range(4))
    return _matrix(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _rate_map(u: Float[Array, "*j 4"]) -> Float[Array, "*j 3 4"]:
    """`E(u)` with `ω = 2 E(u) u̇` the angular velocity in the rotated (body) frame; `E(u) u = 0`,
    `E Eᵀ = I` for a unit `u`, and `E(u̇) u̇ = 0`, so that `ω̇ = 2 E(u) ü`."""
    w, x, y, z = (u[..., i] for i in range(4))
    return _matrix([[-x, w, z, -y], [-y, -z, w, x], [-z, y, -x, w]])


class _Topology(NamedTuple):
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
def _topology(parents: tuple[int, ...], joint_bodies: tuple[int, ...], joint_kinds: tuple[str, ...]) -> _Topology:
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
    sizes = [_SIZES[kind][0] for kind in joint_kinds]
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
    return _Topology(
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


class _BodyMotion(NamedTuple):
    """A body-fixed point's motion and its body's rotation (`RigidBodyTree._body_motion`), or
    those of `k` points stacked (`RigidBodyTree._points_motion`)."""

    x: Float[Array, "*k 3"]
    J: Float[Array, "*k 3 n"]
    bias: Float[Array, "*k 3"]
    rotation: Float[Array, "*k 3 3"]
    omega: Float[Array, "*k 3"]
    J_omega: Float[Array, "*k 3 n"]
    alpha: Float[Array, "*k 3"]


class RigidBodyTree(AbstractUnconstrainedSystem):
    """A spatial tree of rigid bodies joined by hinge, slide, ball and free joints, in MuJoCo's
    conventions (one or more joints per body, applied in order; hinge and slide coordinates
    measured from `reference`). A ball joint has MuJoCo's four quaternion coordinates (the
    rotation relative to the body frame, about the joint's anchor), a free joint seven (the
    body's world position, then its world orientation); velocities in MuJoCo's terms (`qvel`:
    angular velocities in the body frame) are `velocity_map(q) @ q̇`.

    `M` by the composite-rigid-body algorithm plus the joints' armature, and `Q = −(C q̇ + G)`
    by recursive Newton–Euler, minus joint damping `d q̇` and springs `k (q − q_spring)`. Every
    numeric field is an array leaf, so `jax.grad` and [`ukjax.fit_least_squares`][] reach
    masses, inertias, damping and geometry alike. Usually built by
    [`ukjax.models.from_mjcf`][] or [`ukjax.models.from_urdf`][].

    **Arguments:**

    - `parents`: each body's parent body index, `-1` for the world; parents come first.
    - `joint_bodies`: the body each joint moves, in coordinate order (grouped by body, in body
      order).
    - `joint_kinds`: `"hinge"`, `"slide"`, `"ball"` or `"free"` per joint (a free joint alone
      on a body hung from the world).
    - `body_positions`, `body_rotations`: each body's frame in its parent's at `q = reference`
      before its joints move it, shapes (b, 3) and (b, 3, 3).
    - `joint_axes`, `joint_anchors`: each joint's axis and a point on it, in its body's frame,
      shapes (n, 3).
    - `masses` (b,), `coms` (b, 3) in the body frame, `inertias` (b, 3, 3) about the centre of
      mass in the body's axes.
    - `reference`: the configuration at which the body frames are given, shape (n,) (one entry
      per coordinate; read for hinges and slides only).
    - `armature`, `damping`: per degree of freedom (MuJoCo's `nv`: three for a ball joint, six
      for a free one), default zero.
    - `stiffness`, `spring_reference`: per coordinate, shape (n,) (default zero and
      `reference`; springs act on hinges and slides).
    - `gravity`: shape (3,), default `(0, 0, −9.81)`.
    - `body_names`, `joint_names`: names for lookups (default `body0…`, `joint0…`).
    - `sites`: `{name: (body index, position in the body frame)}` for named points (body
      index −1: a point fixed in the world).
    - `tendons`: fixed tendons (MJCF `<fixed>`), `{name: coefficients}` with one coefficient
      per coordinate: the tendon's length is `L = c · q` (hinges and slides only).
    - `tendon_stiffness`, `tendon_damping`, `tendon_armature` (t,), `tendon_lengthspring`
      (t, 2): the passive tendon force `−k (L − L_spring) − d L̇` (no force while `L` lies
      between the two spring lengths, MuJoCo's dead band) and `armature` added to `M` as
      `a cᵀc`.
    """

    parents: tuple[int, ...] = eqx.field(static=True)
    joint_bodies: tuple[int, ...] = eqx.field(static=True)
    joint_kinds: tuple[str, ...] = eqx.field(static=True)
    body_names: tuple[str, ...] = eqx.field(static=True)
    joint_names: tuple[str, ...] = eqx.field(static=True)
    site_names: tuple[str, ...] = eqx.field(static=True)
    site_bodies: tuple[int, ...] = eqx.field(static=True)
    # first coordinate and first degree of freedom of each joint, and their totals
    joint_coordinates: tuple[int, ...] = eqx.field(static=True)
    joint_dofs: tuple[int, ...] = eqx.field(static=True)
    num_coordinates: int = eqx.field(static=True)
    num_velocities: int = eqx.field(static=True)
    body_positions: Float[Array, "b 3"]
    body_rotations: Float[Array, "b 3 3"]
    joint_axes: Float[Array, "n 3"]
    joint_anchors: Float[Array, "n 3"]
    masses: Float[Array, " b"]
    coms: Float[Array, "b 3"]
    inertias: Float[Array, "b 3 3"]
    reference: Float[Array, " n"]
    armature: Float[Array, " v"]
    damping: Float[Array, " v"]
    stiffness: Float[Array, " n"]
    spring_reference: Float[Array, " n"]
    gravity: Float[Array, " 3"]
    site_positions: Float[Array, "s 3"]
    tendon_names: tuple[str, ...] = eqx.field(static=True)
    tendon_coefficients: Float[Array, "t n"]
    tendon_stiffness: Float[Array, " t"]
    tendon_damping: Float[Array, " t"]
    tendon_armature: Float[Array, " t"]
    tendon_lengthspring: Float[Array, "t 2"]

    def __init__(
        self,
        parents: Sequence[int],
        joint_bodies: Sequence[int],
        joint_kinds: Sequence[str],
        body_positions: Float[ArrayLike, "b 3"],
        body_rotations: Float[ArrayLike, "b 3 3"],
        joint_axes: Float[ArrayLike, "n 3"],
        joint_anchors: Float[ArrayLike, "n 3"],
        masses: Float[ArrayLike, " b"],
        coms: Float[ArrayLike, "b 3"],
        inertias: Float[ArrayLike, "b 3 3"],
        *,
        reference: Float[ArrayLike, " n"] | None = None,
        armature: Float[ArrayLike, " v"] | None = None,
        damping: Float[ArrayLike, " v"] | None = None,
        stiffness: Float[ArrayLike, " n"] | None = None,
        spring_reference: Float[ArrayLike, " n"] | None = None,
        gravity: Float[ArrayLike, " 3"] = (0.0, 0.0, -9.81),
        body_names: Sequence[str] | None = None,
        joint_names: Sequence[str] | None = None,
        sites: dict[str, tuple[int, Float[ArrayLike, " 3"]]] | None = None,
        tendons: dict[str, Float[ArrayLike, " n"]] | None = None,
        tendon_stiffness: Float[ArrayLike, " t"] | None = None,
        tendon_damping: Float[ArrayLike, " t"] | None = None,
        tendon_armature: Float[ArrayLike, " t"] | None = None,
        tendon_lengthspring: Float[ArrayLike, "t 2"] | None = None,
    ):
        b, joints = len(parents), len(joint_bodies)
        self.parents = tuple(int(p) for p in parents)
        self.joint_bodies = tuple(int(j) for j in joint_bodies)
        self.joint_kinds = tuple(joint_kinds)
        if any(not -1 <= p < i for i, p in enumerate(self.parents)):
            raise ValueError(
                f"Each body's parent must come before it (or be -1, the world); got parents {self.parents}."
            )
        if list(self.joint_bodies) != sorted(self.joint_bodies) or any(
            not 0 <= j < b for j in self.joint_bodies
        ):
            raise ValueError(
                f"joint_bodies must be body indices in body order; got {self.joint_bodies} for {b} bodies."
            )
        if len(self.joint_kinds) != joints or set(self.joint_kinds) - set(_SIZES):
            raise ValueError(
                f"joint_kinds must give one of {list(_SIZES)} for each of the {joints} joints; got "
                f"{self.joint_kinds}."
            )
        for body, kind in zip(self.joint_bodies, self.joint_kinds):
            if kind == "free" and (self.parents[body] != -1 or self.joint_bodies.count(body) != 1):
                raise ValueError(
                    f"A free joint must be the only joint of a body hung from the world (body {body})."
                )
        sizes = [_SIZES[kind] for kind in self.joint_kinds]
        self.joint_coordinates = tuple(int(x) for x in np.cumsum([0] + [c for c, _ in sizes])[:-1])
        self.joint_dofs = tuple(int(x) for x in np.cumsum([0] + [d for _, d in sizes])[:-1])
        n = self.num_coordinates = sum(c for c, _ in sizes)
        v = self.num_velocities = sum(d for _, d in sizes)
        self.body_names = tuple(body_names) if body_names is not None else tuple(f"body{i}" for i in range(b))
        self.joint_names = (
            tuple(joint_names) if joint_names is not None else tuple(f"joint{i}" for i in range(joints))
        )
        sites = {} if sites is None else sites
        self.site_names = tuple(sites)
        self.site_bodies = tuple(int(body) for body, _ in sites.values())
        self.site_positions = as_inexact(
            jnp.reshape(jnp.asarray([pos for _, pos in sites.values()], dtype=float), (-1, 3))
        )
        self.body_positions = as_inexact(body_positions)
        self.body_rotations = as_inexact(body_rotations)
        axes = as_inexact(joint_axes)
        norms = jnp.linalg.norm(axes, axis=-1, keepdims=True)
        if axes.shape == (joints, 3) and not isinstance(norms, jax.core.Tracer) and not bool(jnp.all(norms > 0)):
            raise ValueError(f"Joint axes must be non-zero; got {axes}.")
        self.joint_axes = axes / norms
        self.joint_anchors = as_inexact(joint_anchors)
        self.masses = as_inexact(masses)
        self.coms = as_inexact(coms)
        self.inertias = as_inexact(inertias)
        zeros, dof_zeros = jnp.zeros(n, self.masses.dtype), jnp.zeros(v, self.masses.dtype)
        self.reference = zeros if reference is None else as_inexact(reference)
        self.armature = dof_zeros if armature is None else as_inexact(armature)
        self.damping = dof_zeros if damping is None else as_inexact(damping)
        self.stiffness = zeros if stiffness is None else as_inexact(stiffness)
        self.spring_reference = self.reference if spring_reference is None else as_inexact(spring_reference)
        self.gravity = as_inexact(gravity)
        tendons = {} if tendons is None else tendons
        self.tendon_names = tuple(tendons)
        t = len(tendons)
        self.tendon_coefficients = as_inexact(
            jnp.reshape(jnp.asarray(list(tendons.values()), dtype=self.masses.dtype), (t, n))
        )
        t_zeros = jnp.zeros(t, self.masses.dtype)
        self.tendon_stiffness = t_zeros if tendon_stiffness is None else as_inexact(tendon_stiffness)
        self.tendon_damping = t_zeros if tendon_damping is None else as_inexact(tendon_damping)
        self.tendon_armature = t_zeros if tendon_armature is None else as_inexact(tendon_armature)
        self.tendon_lengthspring = (
            jnp.zeros((t, 2), self.masses.dtype) if tendon_lengthspring is None else as_inexact(tendon_lengthspring)
        )
        expected = {
            "body_positions": (b, 3),
            "body_rotations": (b, 3, 3),
            "joint_axes": (joints, 3),
            "joint_anchors": (joints, 3),
            "masses": (b,),
            "coms": (b, 3),
            "inertias": (b, 3, 3),
            "reference": (n,),
            "armature": (v,),
            "damping": (v,),
            "stiffness": (n,),
            "spring_reference": (n,),
            "gravity": (3,),
            "tendon_stiffness": (t,),
            "tendon_damping": (t,),
            "tendon_armature": (t,),
            "tendon_lengthspring": (t, 2),
        }
        wrong = {
            k: getattr(self, k).shape for k, shape in expected.items() if getattr(self, k).shape != shape
        }
        if wrong:
            raise ValueError(
                f"RigidBodyTree with {b} bodies, {n} coordinates and {v} degrees of freedom expects "
                f"{expected}; got {wrong}."
            )

    def inertial(self) -> tuple[Float[Array, " b"], Float[Array, "b 3"], Float[Array, "b 3 3"]]:
        """Masses, centres of mass and inertias (about the centres of mass) in the body frames."""
        return self.masses, self.coms, self.inertias

    def with_inertial(self, masses, coms, inertias) -> "RigidBodyTree":
        """The tree with other masses, centres of mass and inertias (in the body frames)."""
        return eqx.tree_at(lambda t: (t.masses, t.coms, t.inertias), self, (masses, coms, inertias))

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        """One name per coordinate: the joint's, with `.x`, `.y`, `.z` and `.qw`, `.qx`, `.qy`,
        `.qz` appended for the coordinates of free and ball joints."""
        parts = {"hinge": [""], "slide": [""], "ball": [".qw", ".qx", ".qy", ".qz"]}
        parts["free"] = [".x", ".y", ".z"] + parts["ball"]
        return tuple(name + p for name, kind in zip(self.joint_names, self.joint_kinds) for p in parts[kind])

    def _quaternions(self) -> list[int]:
        """The first coordinate of every quaternion (ball and free joints)."""
        return [
            self.joint_coordinates[j] + (3 if kind == "free" else 0)
            for j, kind in enumerate(self.joint_kinds)
            if kind in ("ball", "free")
        ]

    def _index(self, names: tuple[str, ...], name: str, what: str) -> int:
        if name not in names:
            raise KeyError(f"No {what} named {name!r}; the model has {list(names)}.")
        return names.index(name)

    def body_index(self, name: str) -> int:
        """The index of the body `name` (`-1` for `"world"`)."""
        return -1 if name == "world" else self._index(self.body_names, name, "body")

    def joint_index(self, name: str) -> int:
        """The index of the (first) coordinate of the joint `name`."""
        return self.joint_coordinates[self._index(self.joint_names, name, "joint")]

    @property
    def _topology(self) -> _Topology:
        return _topology(self.parents, self.joint_bodies, self.joint_kinds)

    def kinematics(self, q: Float[Array, " n"]) -> Kinematics:
        """Body frames and joint twists at `q`."""
        top, dtype = self._topology, q.dtype
        b, J, n = len(self.parents), len(self.joint_kinds), q.shape[0]
        eye = jnp.eye(3, dtype=dtype)
        free_bodies = np.zeros(b, dtype=bool)
        free_bodies[np.array(self.joint_bodies, dtype=int)[top.free]] = True
        # each body's frame in its parent's, before its joints (MuJoCo places a free body by its
        # joint alone)
        R_local = jnp.where(free_bodies[:, None, None], eye, self.body_rotations)
        p_local = jnp.where(free_bodies[:, None], 0.0, self.body_positions)
        R_after, p_after = jnp.zeros((J, 3, 3), dtype), jnp.zeros((J, 3), dtype)
        if J:
            # every joint's motion at once, each kind from its own formula: (R_j, t_j) maps the
            # frame before the joint to the frame after it, (R, p) ↦ (R R_j, p + R t_j)
            coords = np.array(self.joint_coordinates, dtype=int)
            angle = q[coords] - self.reference[coords]
            axes, anchors = self.joint_axes, jnp.where(top.free[:, None], 0.0, self.joint_anchors)
            quaternion_rows = np.minimum(top.quaternion_starts[:, None] + np.arange(4), n - 1)
            identity = jnp.array([1.0, 0.0, 0.0, 0.0], dtype)
            u = jnp.where(top.quaternion[:, None], q[quaternion_rows], identity)
            R_joint = jnp.where(
                top.hinge[:, None, None],
                _axis_angle(axes, angle),
                jnp.where(top.quaternion[:, None, None], _quaternion_matrix(u), eye),
            )
            position = q[np.minimum(coords[:, None] + np.arange(3), n - 1)]
            t_joint = jnp.where(
                top.slide[:, None],
                axes * angle[:, None],
                jnp.where(top.free[:, None], position, anchors - _mv(R_joint, anchors)),
            )
            for bodies, joints in top.slots:  # a body's joints apply in order
                R, p = R_local[bodies], p_local[bodies]
                R_new, p_new = _mm(R, R_joint[joints]), p + _mv(R, t_joint[joints])
                R_local, p_local = _put(R_local, bodies, R_new), _put(p_local, bodies, p_new)
                R_after, p_after = _put(R_after, joints, R_new), _put(p_after, joints, p_new)
        # world frames level by level; index b is the world
        R_world = jnp.concatenate([R_local, eye[None]])
        p_world = jnp.concatenate([p_local, jnp.zeros((1, 3), dtype)])
        for bodies, parents in top.levels:
            R, p = R_world[parents], p_world[parents]
            R_world = _put(R_world, bodies, _mm(R, R_local[bodies]))
            p_world = _put(p_world, bodies, p + _mv(R, p_local[bodies]))
        if not J:
            return Kinematics(R_world[:b], p_world[:b], jnp.zeros((0, 6), dtype))
        # every joint's frame after it moved, in the world: a hinge turns about its own axis and
        # a ball about its anchor, so both are fixed in that frame
        R_parent = R_world[top.joint_parents]
        R = _mm(R_parent, R_after)
        p = p_world[top.joint_parents] + _mv(R_parent, p_after)
        axis = _mv(R, axes)
        anchor = p + _mv(R, anchors)
        single = jnp.where(
            top.hinge[:, None],
            jnp.concatenate([axis, jnp.cross(anchor, axis)], 1),
            jnp.concatenate([jnp.zeros_like(axis), axis], 1),
        )
        # a quaternion's four twists: the body's rotations about the anchor, combined by 2 E(u)
        W = 2 * jnp.sum(R[:, :, :, None] * _rate_map(u)[:, None, :, :], axis=2).swapaxes(1, 2)
        rotations = jnp.concatenate([W, jnp.cross(anchor[:, None, :], W)], 2)
        translations = jnp.concatenate([jnp.zeros((3, 3), dtype), eye], 1)
        candidates = jnp.concatenate([single, rotations.reshape(4 * J, 6), translations])
        return Kinematics(R_world[:b], p_world[:b], candidates[top.twist_rows])

    def _inertias(self, kin: Kinematics):
        """Every body's spatial inertia `(m, m c, Ī)` about the world origin, stacked: shapes
        (b,), (b, 3), (b, 3, 3)."""
        R, m = kin.rotations, self.masses
        c = kin.positions + _mv(R, self.coms)
        inertia_c = _mm(_mm(R, self.inertias), jnp.swapaxes(R, 1, 2))
        parallel = jnp.einsum("bi,bi->b", c, c)[:, None, None] * jnp.eye(3, dtype=c.dtype) - c[:, :, None] * c[:, None, :]
        return m, m[:, None] * c, inertia_c + m[:, None, None] * parallel

    def _velocity_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Where `G` has its entries: (dof, coordinate) of each unit entry (hinges, slides, free
        translations), and the first (dof, coordinate) of each quaternion's `2 E(u)` block."""
        ones, blocks = [], []
        for j, kind in enumerate(self.joint_kinds):
            c, d = self.joint_coordinates[j], self.joint_dofs[j]
            if kind in ("hinge", "slide"):
                ones.append((d, c))
                continue
            if kind == "free":
                ones += [(d + i, c + i) for i in range(3)]
                c, d = c + 3, d + 3
            blocks.append((d, c))
        return np.array(ones, dtype=int).reshape(-1, 2), np.array(blocks, dtype=int).reshape(-1, 2)

    def _rate_maps(self, q, blocks):
        """`E(u)` of every quaternion, shape (k, 3, 4)."""
        return _rate_map(q[blocks[:, 1:] + np.arange(4)])

    # The three conversions below are compiled as one program each: op by op, each of their
    # operations compiles on its own (0.6 s of importing a four-bar file went to `velocity_map`).
    @jit
    def velocity_map(self, q: Float[Array, " n"]) -> Float[Array, "v n"]:
        """`G(q)`, MuJoCo's velocities from coordinate rates: `qvel = G(q) q̇` (the identity for
        hinges and slides, `2 E(u)` for a quaternion: the angular velocity in the body frame).

        **Returns:**

        `G`, shape (v, n) with `v` MuJoCo's `nv`.
        """
        ones, blocks = self._velocity_layout()
        G = _put(jnp.zeros((self.num_velocities, self.num_coordinates), q.dtype), (ones[:, 0], ones[:, 1]), 1.0)
        d, c = blocks[:, :1, None], blocks[:, 1:, None]
        return _put(G, (d + np.arange(3)[:, None], c + np.arange(4)), 2 * self._rate_maps(q, blocks))

    @jit
    def state_from_mujoco(
        self, qpos: Float[ArrayLike, " n"], qvel: Float[ArrayLike, " v"]
    ) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
        """`(q, q̇)` from MuJoCo's `(qpos, qvel)`: the same coordinates, and each quaternion's
        rate `u̇ = ½ E(u)ᵀ ω` from its body-frame angular velocity.

        **Returns:**

        `(q, qd)`, each shape (n,).
        """
        q, qvel = as_inexact(qpos), as_inexact(qvel)
        if q.shape != (self.num_coordinates,) or qvel.shape != (self.num_velocities,):
            raise ValueError(
                f"qpos and qvel must have shapes ({self.num_coordinates},) and ({self.num_velocities},), "
                f"got {q.shape} and {qvel.shape}."
            )
        # G's quaternion blocks are 2E with E Eᵀ = I: their pseudo-inverse is ¼ of their transpose
        scale = jnp.ones(self.num_coordinates, q.dtype)
        for c in self._quaternions():
            scale = scale.at[c : c + 4].set(0.25)
        return q, scale * (self.velocity_map(q).T @ qvel)

    @jit
    def state_to_mujoco(
        self, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
    ) -> tuple[Float[Array, " n"], Float[Array, " v"]]:
        """MuJoCo's `(qpos, qvel)` from `(q, q̇)`: quaternions normalised, `qvel = G(q) q̇`.

        **Returns:**

        `(qpos, qvel)`, shapes (n,) and (v,).
        """
        q, qd = as_inexact(q), as_inexact(qd)
        qpos = q
        for c in self._quaternions():
            qpos = qpos.at[c : c + 4].set(q[c : c + 4] / jnp.linalg.norm(q[c : c + 4]))
        return qpos, self.velocity_map(q) @ qd

    def _dof_metric(self, q, weights):
        """`Gᵀ diag(weights) G`, shape (n, n), for per-degree-of-freedom weights (armature,
        damping: MuJoCo applies them per degree of freedom): diagonal for hinges, slides and
        translations, `4 Eᵀ diag(w) E` over each quaternion."""
        ones, blocks = self._velocity_layout()
        n = q.shape[0]
        W = _put(jnp.zeros((n, n), q.dtype), (ones[:, 1], ones[:, 1]), weights[ones[:, 0]])
        E = self._rate_maps(q, blocks)
        w = weights[blocks[:, :1] + np.arange(3)]
        quadratic = 4 * sum(w[:, k, None, None] * E[:, k, :, None] * E[:, k, None, :] for k in range(3))
        c = blocks[:, 1:, None]
        return _put(W, (c + np.arange(4)[:, None], c + np.arange(4)), quadratic)

    def mass_matrix(self, t, q):
        return self._mass_matrix(q, self.kinematics(q))

    def _mass_matrix(self, q, kin: Kinematics):
        top = self._topology
        m, h, inertia_o = self._inertias(kin)
        # composite inertias of the coordinates' bodies (each subtree summed); then
        # Mⱼₖ = Sₖ · I_c(body of j) Sⱼ for k on j's path to the world: one spatial force per
        # coordinate and one product of all twists with all forces
        D = top.subtree[top.coordinate_bodies]
        composite = (D @ m, D @ h, jnp.einsum("jb,bkl->jkl", D, inertia_o))
        forces = jnp.concatenate(_apply_inertia(composite, (kin.twists[:, :3], kin.twists[:, 3:])), axis=1)
        below = jnp.where(top.lower, forces @ kin.twists.T, 0.0)
        M = below + below.T - jnp.diag(jnp.diagonal(below))
        C = self.tendon_coefficients
        M = M + C.T @ (self.tendon_armature[:, None] * C)
        return M + self._dof_metric(q, self.armature)

    def _motion(self, kin: Kinematics, qd):
        """Every body's twist `V` and spatial acceleration at `q̈ = 0` (gravity left out), shapes
        (b, 6) and (b, 6): in world-frame spatial vectors both are sums over the coordinates
        that move the body, `V = Σ Sₖ q̇ₖ` and `A = Σ V₍before k₎ ×ₘ Sₖ q̇ₖ`."""
        top = self._topology
        motion = kin.twists * qd[:, None]
        before = top.before @ motion
        rate = jnp.concatenate(_motion_cross((before[:, :3], before[:, 3:]), (motion[:, :3], motion[:, 3:])), 1)
        return top.moves @ motion, top.moves @ rate

    def bias_forces(self, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " n"]:
        """`C(q, q̇) q̇ + G(q)`: Coriolis, centrifugal and gravity forces (MuJoCo's `qfrc_bias`,
        here per coordinate), by recursive Newton–Euler."""
        return self._bias_forces(qd, self.kinematics(q))

    def _bias_forces(self, qd, kin: Kinematics):
        if not self.joint_kinds:
            return jnp.zeros(0, qd.dtype)
        top = self._topology
        V, A = self._motion(kin, qd)
        # gravity as an upward acceleration of the base, which every body shares
        V, A = (V[:, :3], V[:, 3:]), (A[:, :3], A[:, 3:] - self.gravity)
        inertias = self._inertias(kin)
        wrenches = jnp.concatenate(
            _add(_apply_inertia(inertias, A), _force_cross(V, _apply_inertia(inertias, V))), axis=1
        )
        # each subtree's total wrench, projected on the twists of the coordinates that carry it
        totals = top.subtree @ wrenches
        return jnp.sum(kin.twists * totals[top.coordinate_bodies], axis=1)

    def forces(self, t, q, qd):
        return self._forces(q, qd, self.kinematics(q))

    def _forces(self, q, qd, kin: Kinematics):
        springs = self.stiffness * (q - self.spring_reference)
        for c in self._quaternions():  # springs act on hinges and slides
            springs = springs.at[c : c + 4].set(0.0)
        return -self._bias_forces(qd, kin) - self._dof_metric(q, self.damping) @ qd - springs + self._tendon_forces(q, qd)

    def tendon_lengths(self, q: Float[Array, " n"]) -> Float[Array, " t"]:
        """The fixed tendons' lengths `L = C q`, shape (t,)."""
        return self.tendon_coefficients @ q

    def tendon_index(self, name: str) -> int:
        """The index of the tendon `name`."""
        return self._index(self.tendon_names, name, "tendon")

    def _tendon_forces(self, q, qd):
        """`Cᵀ (−k (L − L_spring) − d L̇)`, with no spring force inside the dead band."""
        C = self.tendon_coefficients
        if not C.shape[0]:
            return jnp.zeros_like(q)
        L, low, high = C @ q, self.tendon_lengthspring[:, 0], self.tendon_lengthspring[:, 1]
        stretch = jnp.where(L > high, L - high, 0.0) + jnp.where(L < low, L - low, 0.0)
        return C.T @ (-self.tendon_stiffness * stretch - self.tendon_damping * (C @ qd))

    def norm_rows(self, q: Float[Array, " n"], qd: Float[Array, " n"]) -> ConstraintRows:
        """`uᵀu − 1 = 0` for every quaternion, Baumgarte-stabilized (`_NORM_GAINS`): the rows
        the tree adds to every U-K solve (none without ball or free joints).

        **Returns:**

        A `ConstraintRows` with one row per quaternion.
        """
        starts = self._quaternions()
        A = jnp.zeros((len(starts), q.shape[0]), q.dtype)
        phi, phid, b = [], [], []
        for row, c in enumerate(starts):
            u, ud = q[c : c + 4], qd[c : c + 4]
            A = A.at[row, c : c + 4].set(2 * u)
            phi.append(u @ u - 1)
            phid.append(2 * u @ ud)
            b.append(-2 * ud @ ud)
        phi, phid, b = jnp.stack(phi), jnp.stack(phid), jnp.stack(b)
        alpha, beta = _NORM_GAINS
        return ConstraintRows(A, b - alpha * phid - beta * phi, phi, phid)

    def constraint_levels(self, t, q, qd):
        return (ConstraintLevel(self.norm_rows(q, qd), None, "svd"),) if self._quaternions() else ()

    def dynamics(self, t, q, qd):
        # one evaluation of the kinematics for M and Q
        kin = self.kinematics(q)
        M, Q = self._mass_matrix(q, kin), self._forces(q, qd, kin)
        if not self._quaternions():
            return Dynamics(M, Q, ())
        rows = self.norm_rows(q, qd)
        # M is singular along each quaternion: the auxiliary system M + γAᵀA, Q + γAᵀb moves
        # as the constrained one does, with γ of the size of the block the row completes
        gamma = jnp.stack([jnp.trace(M[c : c + 4, c : c + 4]) / 4 for c in self._quaternions()])
        return Dynamics(
            M + rows.A.T @ (gamma[:, None] * rows.A),
            Q + rows.A.T @ (gamma * rows.b),
            (ConstraintLevel(rows, None, "svd"),),
        )

    def sketch(self, t, q):
        """Each body's origin joined to its parent's, one part per branch below a root body
        (Cassie's legs); the ground link joining the points fixed in the world (hinged and
        ball-jointed roots' anchors, world sites) as a part of its own; the origins and the
        sites as points."""
        kin = self.kinematics(q)
        children = [i for i, p in enumerate(self.parents) if p >= 0]
        parents = np.array([self.parents[i] for i in children], dtype=int)
        links = jnp.stack([kin.positions[parents], kin.positions[np.array(children, dtype=int)]], axis=1)
        parts = [self._branch(i) for i in children]
        numbers = {branch: k for k, branch in enumerate(dict.fromkeys(parts))}
        # sites from the same kinematics (body −1: fixed in the world)
        bodies = np.array(self.site_bodies, dtype=int)
        moved = kin.positions[bodies] + _mv(kin.rotations[bodies], self.site_positions)
        sites = jnp.where((bodies >= 0)[:, None], moved, self.site_positions)
        ground = [
            kin.positions[body] + kin.rotations[body] @ self.joint_anchors[j]
            for body in range(len(self.parents))
            if self.parents[body] < 0 and (j := self._first_joint(body)) is not None
            and all(self.joint_kinds[k] in ("hinge", "ball") for k, b in enumerate(self.joint_bodies) if b == body)
        ] + [sites[k] for k in np.flatnonzero(bodies < 0)]
        if len(ground) > 1:
            fixed = jnp.stack(ground)
            links = jnp.concatenate([links, jnp.stack([fixed[:-1], fixed[1:]], axis=1)])
            parts = [numbers[p] for p in parts] + [len(numbers)] * (len(ground) - 1)
        else:
            parts = [numbers[p] for p in parts]
        return Sketch(links, jnp.concatenate([kin.positions, sites]), parts=parts)

    def _branch(self, body: int) -> int:
        """The body below a root body whose subtree holds `body` (a branch to draw alike)."""
        while self.parents[body] >= 0 and self.parents[self.parents[body]] >= 0:
            body = self.parents[body]
        return body

    def _first_joint(self, body: int) -> int | None:
        """The first joint of `body`, or None for a body welded to its parent."""
        return next((j for j, b in enumerate(self.joint_bodies) if b == body), None)

    def body_pose(self, q: Float[Array, " n"], body: str) -> tuple[Float[Array, "3 3"], Float[Array, " 3"]]:
        """The rotation and position of the body `name` (its frame, not its centre of mass)."""
        return self._body_poses(q, body)[0]

    def _body_poses(self, q, *bodies: str) -> list[tuple[Array, Array]]:
        """`body_pose` of several bodies from one evaluation of the kinematics (traced once:
        a residual reading two bodies is differentiated twice)."""
        indices = [self.body_index(body) for body in bodies]
        kin = self.kinematics(q) if max(indices) >= 0 else None
        world = (jnp.eye(3, dtype=q.dtype), jnp.zeros(3, q.dtype))
        return [world if i < 0 else (kin.rotations[i], kin.positions[i]) for i in indices]

    def point_position(
        self, q: Float[Array, " n"], body: str, point: Float[ArrayLike, " 3"]
    ) -> Float[Array, " 3"]:
        """The world position of `point`, given in the frame of the body `body`."""
        R, p = self.body_pose(q, body)
        return p + R @ as_inexact(point)

    def site(self, name: str) -> tuple[str, Float[Array, " 3"]]:
        """The body the site `name` is fixed to (`"world"` for a fixed site), and its position in
        that body's frame."""
        index = self._index(self.site_names, name, "site")
        body = self.site_bodies[index]
        return "world" if body < 0 else self.body_names[body], self.site_positions[index]

    def site_position(self, q: Float[Array, " n"], site: str) -> Float[Array, " 3"]:
        """The world position of the site `site`."""
        return self.point_position(q, *self.site(site))

    def site_jacobian(self, q: Float[Array, " n"], site: str) -> Float[Array, "3 n"]:
        """`∂x/∂q` of the site `site`."""
        return self.point_motion(q, jnp.zeros_like(q), *self.site(site))[1]

    def point_motion(
        self, q: Float[Array, " n"], qd: Float[Array, " n"], body: str, point: Float[ArrayLike, " 3"]
    ) -> tuple[Float[Array, " 3"], Float[Array, "3 n"], Float[Array, " 3"]]:
        """A body-fixed point's position `x`, its Jacobian `J = ∂x/∂q` and its acceleration at
        `q̈ = 0`, `J̇ q̇`, from the joint twists along the body's chain (no automatic
        differentiation: the rows of [`ukjax.models.Connect`][] and
        [`ukjax.models.SiteConstraint`][] come from here).

        **Arguments:**

        - `q`, `qd`: the state.
        - `body`: the body's name (`"world"`: a fixed point).
        - `point`: the point in the body's frame.

        **Returns:**

        `(x, J, J̇ q̇)`, shapes (3,), (3, n), (3,).
        """
        return self._body_motion(q, qd, body, point)[:3]

    def _body_motion(self, q, qd, body, point) -> _BodyMotion:
        """`point_motion` with the body's own rotation `R`, angular velocity `ω`, angular
        Jacobian `∂ω/∂q̇` and angular acceleration at `q̈ = 0` (world frame)."""
        kin = self.kinematics(q)
        one = self._points_motion(kin, self._motion(kin, qd), (body,), as_inexact(point)[None])
        return _BodyMotion(*(x[0] for x in one))

    def _points_motion(
        self, kin: Kinematics, motion, bodies: tuple[str, ...], points: Float[Array, "k 3"]
    ) -> _BodyMotion:
        """`_body_motion` of `k` points at once (each field with a leading axis `k`), from the
        kinematics and the bodies' motion (`_motion`), which all of them share."""
        dtype = kin.positions.dtype
        b, n = len(self.parents), kin.twists.shape[0]
        points = points.astype(dtype)
        # the world as body b: a fixed frame at the origin that no coordinate moves
        index = np.array([b if i < 0 else i for i in map(self.body_index, bodies)], dtype=int)
        rotations = jnp.concatenate([kin.rotations, jnp.eye(3, dtype=dtype)[None]])[index]
        positions = jnp.concatenate([kin.positions, jnp.zeros((1, 3), dtype)])[index]
        V, A = (jnp.concatenate([x, jnp.zeros((1, 6), dtype)])[index] for x in motion)
        moves = np.concatenate([self._topology.moves, np.zeros((1, n))])[index][:, None, :]
        x = positions + _mv(rotations, points)
        # every column at once: the velocity of each point per unit rate of each coordinate
        # that moves its body
        J = (kin.twists[None, :, 3:] + jnp.cross(kin.twists[None, :, :3], x[:, None, :])).swapaxes(1, 2) * moves
        velocity = V[:, 3:] + jnp.cross(V[:, :3], x)
        # a body-fixed point: ẍ = a_O + α × x + ω × ẋ (spatial acceleration (α, a_O))
        bias = A[:, 3:] + jnp.cross(A[:, :3], x) + jnp.cross(V[:, :3], velocity)
        return _BodyMotion(x, J, bias, rotations, V[:, :3], kin.twists[:, :3].T * moves, A[:, :3])


def _tree_of(system) -> RigidBodyTree:
    """The rigid-body tree inside `system` (through `Forced`/`ConstrainedSystem` wrappers)."""
    while not isinstance(system, RigidBodyTree):
        inner = getattr(system, "system", None)
        if inner is None:
            raise TypeError(
                f"Expected a RigidBodyTree (or a system wrapping one), got {type(system).__name__}."
            )
        system = inner
    return system


class Connect(AbstractSystemConstraint):
    """A point fixed in `body1` coincides with a point fixed in `body2` (MJCF `connect`: a ball
    joint closing a loop; 3 rows). `body2 = "world"` pins the point in space. The gap is
    written in `body1`'s frame, `R₁ᵀ (x₁ − x₂)` (Pinocchio's local frame; MuJoCo's `efc_pos`
    is `R₁` times it): a planar loop then has one row that is zero and stays zero off the
    loop, where in world axes that row is zero only on the loop and an integrator's drift
    would make its right side contradict it. Its rows come from the tree's joint twists
    ([`ukjax.models.RigidBodyTree.point_motion`][]), read from the system it constrains when
    evaluated.

    **Arguments:**

    - `tree`: the [`ukjax.models.RigidBodyTree`][] (or a system wrapping it) whose body names
      are checked; it is not stored.
    - `body1`, `anchor1`: the first body's name and the point in its frame.
    - `body2`, `anchor2`: the second body's name (or `"world"`) and the point in its frame.
    """

    body1: str = eqx.field(static=True)
    body2: str = eqx.field(static=True)
    anchor1: Float[Array, " 3"]
    anchor2: Float[Array, " 3"]

    def __init__(
        self, tree, body1: str, anchor1: Float[ArrayLike, " 3"], body2: str, anchor2: Float[ArrayLike, " 3"]
    ):
        for name in (body1, body2):
            _tree_of(tree).body_index(name)  # raises for an unknown body
        self.body1, self.body2 = body1, body2
        self.anchor1, self.anchor2 = as_inexact(anchor1), as_inexact(anchor2)

    def residual(self, system, t, q: Float[Array, " n"]) -> Float[Array, " 3"]:
        """The gap between the two points on `system`, in `body1`'s axes."""
        tree = _tree_of(system)
        (R1, p1), (R2, p2) = tree._body_poses(q, self.body1, self.body2)
        return self.anchor1 - R1.T @ (p2 + R2 @ self.anchor2 - p1)

    def system_rows(self, system, t, q, qd):
        return self.stacked_rows([self], system, t, q, qd)[0]

    @classmethod
    def stacked_rows(cls, constraints, system, t, q, qd):
        # one evaluation of the tree's kinematics, and one of every loop's rows at once
        tree = _tree_of(system)
        kin = tree.kinematics(q)
        motion = tree._motion(kin, qd)
        ends = [
            tree._points_motion(kin, motion, bodies, jnp.stack(points))
            for bodies, points in (
                (tuple(c.body1 for c in constraints), [c.anchor1 for c in constraints]),
                (tuple(c.body2 for c in constraints), [c.anchor2 for c in constraints]),
            )
        ]
        rows = cls._rows(*ends, qd)
        return [jax.tree.map(lambda x: x[k], rows) for k in range(len(constraints))]

    @staticmethod
    def _rows(one: _BodyMotion, two: _BodyMotion, qd) -> ConstraintRows:
        """The rows of `k` loops at once (leading axis `k`)."""
        # s = R₁ᵀ r with r = x₁ − x₂ and Ṙ₁ = [ω]× R₁:
        # s̈ = R₁ᵀ (r̈ − ω̇ × r − 2 ω × ṙ + ω × (ω × r))
        r, Jr = one.x - two.x, one.J - two.J
        rd, w = jnp.sum(Jr * qd, axis=-1), one.omega
        Rt = one.rotation.swapaxes(1, 2)
        A = _mm(Rt, Jr + jnp.cross(r[:, None, :], one.J_omega.swapaxes(1, 2)).swapaxes(1, 2))
        bias = one.bias - two.bias + jnp.cross(r, one.alpha) - 2 * jnp.cross(w, rd) + jnp.cross(w, jnp.cross(w, r))
        return ConstraintRows(A, -_mv(Rt, bias), _mv(Rt, r), jnp.sum(A * qd, axis=-1))

    def sketch(self, system, t, q):
        """Each body's origin joined to its anchor, and the gap between the anchors."""
        return _two_point_sketch(_tree_of(system), q, (self.body1, self.anchor1), (self.body2, self.anchor2))


def _two_point_sketch(tree: RigidBodyTree, q, *ends: tuple[str, Float[Array, " 3"]]) -> Sketch:
    """Links from two bodies' origins to a point fixed in each, and the gap between the points."""
    poses = tree._body_poses(q, *(body for body, _ in ends))
    points = [p + R @ point for (R, p), (_, point) in zip(poses, ends)]
    links = jnp.stack([jnp.stack([p, x]) for (_, p), x in zip(poses, points)])
    return Sketch(links, jnp.stack(points), jnp.stack(points)[None])


def _rotation_error(E: Float[Array, "3 3"]) -> Float[Array, " 3"]:
    """The vector part of the unit quaternion of the rotation `E`, taken with a non-negative
    scalar part: `sin(θ/2)` times the axis, zero only at the identity and of norm 1 at a half
    turn (MuJoCo's weld error). Shepperd's choice of the largest of `4w², 4x², 4y², 4z²`
    (one of them is at least 1) keeps every branch finite, so none needs discarding."""
    trace = E[0, 0] + E[1, 1] + E[2, 2]
    squares = jnp.stack([1 + trace, 1 + 2 * E[0, 0] - trace, 1 + 2 * E[1, 1] - trace, 1 + 2 * E[2, 2] - trace])
    s = jnp.sqrt(jnp.maximum(squares, 1.0))
    skew = jnp.stack([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])  # 4w (x, y, z)
    sym = jnp.stack([E[1, 2] + E[2, 1], E[0, 2] + E[2, 0], E[0, 1] + E[1, 0]])  # 4 (yz, xz, xy)
    # (w, x, y, z) from each choice of the largest component
    candidates = jnp.stack(
        [
            jnp.concatenate([s[:1] / 2, skew / (2 * s[0])]),
            jnp.stack([skew[0], s[1] ** 2, sym[2], sym[1]]) / (2 * s[1]),
            jnp.stack([skew[1], sym[2], s[2] ** 2, sym[0]]) / (2 * s[2]),
            jnp.stack([skew[2], sym[1], sym[0], s[3] ** 2]) / (2 * s[3]),
        ]
    )
    quaternion = candidates[jnp.argmax(squares)]
    return jnp.where(quaternion[0] < 0, -1.0, 1.0) * quaternion[1:]


class _AbstractSystemHolonomic(AbstractSystemConstraint):
    """A holonomic constraint whose residual reads the system, differentiated twice."""

    @abc.abstractmethod
    def residual(self, system, t, q: Float[Array, " n"]) -> Float[Array, " p"]:
        """`φ` on `system` at `(t, q)`."""

    def system_rows(self, system, t, q, qd):
        return holonomic_rows(lambda t, q: self.residual(system, t, q), t, q, qd)


class Weld(_AbstractSystemHolonomic):
    """`body2` is fixed to `body1` (MJCF `weld`; 6 rows): the point `anchor` of `body2`
    stays at `position` in `body1`'s frame, and `body2`'s axes stay at `rotation` relative
    to `body1`'s. Rows: the position error, then MuJoCo's rotation error, the vector part of
    the quaternion of `R₂ᵀ R₁ rotation` (`sin(θ/2)` times the axis: zero only where the
    bodies are welded, 1 at a half turn).

    **Arguments:**

    - `tree`: the [`ukjax.models.RigidBodyTree`][] (or a system wrapping it) whose body names
      are checked; it is not stored.
    - `body1`, `body2`: body names (`"world"` allowed).
    - `anchor`: a point in `body2`'s frame, shape (3,).
    - `position`: where it belongs in `body1`'s frame, shape (3,).
    - `rotation`: `body2`'s axes in `body1`'s frame, shape (3, 3).
    """

    body1: str = eqx.field(static=True)
    body2: str = eqx.field(static=True)
    anchor: Float[Array, " 3"]
    position: Float[Array, " 3"]
    rotation: Float[Array, "3 3"]

    def __init__(self, tree, body1: str, body2: str, anchor, position, rotation):
        for name in (body1, body2):
            _tree_of(tree).body_index(name)  # raises for an unknown body
        self.body1, self.body2 = body1, body2
        self.anchor, self.position, self.rotation = (
            as_inexact(anchor),
            as_inexact(position),
            as_inexact(rotation),
        )

    def sketch(self, system, t, q):
        """Each body's origin joined to where the anchor is and where it belongs, and the gap
        between the two."""
        return _two_point_sketch(_tree_of(system), q, (self.body1, self.position), (self.body2, self.anchor))

    def residual(self, system, t, q):
        """The position error (3) and the rotation error (3) on `system`."""
        tree = _tree_of(system)
        (R1, p1), (R2, p2) = tree._body_poses(q, self.body1, self.body2)
        rotation = _rotation_error(R2.T @ R1 @ self.rotation)
        return jnp.concatenate([p1 + R1 @ self.position - (p2 + R2 @ self.anchor), rotation])


class _AbstractCoupling(_AbstractSystemHolonomic):
    """MuJoCo's polynomial equality `x₁ = Σₖ cₖ x₂ᵏ` (k = 0…4) between two offsets from the
    tree's reference (`x₁ = c₀` without a second)."""

    coefficients: eqx.AbstractVar[Float[Array, " 5"]]

    def __check_init__(self):
        if self.coefficients.shape != (5,):
            raise ValueError(
                f"{type(self).__name__} needs 5 polynomial coefficients, got shape {self.coefficients.shape}."
            )

    @abc.abstractmethod
    def offsets(self, tree: RigidBodyTree, q: Float[Array, " n"]) -> tuple[Array, Array | None]:
        """`(x₁, x₂)` on `tree` (`x₂` None without a second joint or tendon)."""

    def residual(self, system, t, q):
        """`x₁ − Σₖ cₖ x₂ᵏ` on `system`, shape (1,)."""
        x1, x2 = self.offsets(_tree_of(system), q)
        if x2 is None:
            return (x1 - self.coefficients[0])[None]
        return (x1 - jnp.polyval(self.coefficients[::-1], x2))[None]


class JointCoupling(_AbstractCoupling):
    """MJCF `joint` equality: `q₁ − r₁ = Σₖ cₖ (q₂ − r₂)ᵏ` (k = 0…4), with `rᵢ` the joints'
    reference positions (read from the system it constrains); without `joint2`,
    `q₁ − r₁ = c₀` (1 row).

    **Arguments:**

    - `tree`: the [`ukjax.models.RigidBodyTree`][] (or a system wrapping it) whose joint names
      are checked; it is not stored.
    - `joint1`, `joint2`: joint names (`joint2` may be None).
    - `coefficients`: `c₀…c₄`, shape (5,).
    """

    joint1: str = eqx.field(static=True)
    joint2: str | None = eqx.field(static=True)
    coefficients: Float[Array, " 5"]

    def __init__(self, tree, joint1: str, joint2: str | None, coefficients: Float[ArrayLike, " 5"]):
        for name in (joint1,) if joint2 is None else (joint1, joint2):
            _tree_of(tree).joint_index(name)  # raises for an unknown joint
        self.joint1, self.joint2 = joint1, joint2
        self.coefficients = as_inexact(coefficients)

    def offsets(self, tree, q):
        def offset(name):
            i = tree.joint_index(name)
            return q[i] - tree.reference[i]

        return offset(self.joint1), None if self.joint2 is None else offset(self.joint2)


class TendonCoupling(_AbstractCoupling):
    """MJCF `tendon` equality: `L₁ − L₁⁰ = Σₖ cₖ (L₂ − L₂⁰)ᵏ` (k = 0…4) for fixed tendons, with
    `Lᵢ⁰` the lengths at the tree's `reference`; without `tendon2`, `L₁ − L₁⁰ = c₀` (1 row).

    **Arguments:**

    - `tree`: the [`ukjax.models.RigidBodyTree`][] (or a system wrapping it) whose tendon names
      are checked; it is not stored.
    - `tendon1`, `tendon2`: tendon names (`tendon2` may be None).
    - `coefficients`: `c₀…c₄`, shape (5,).
    """

    tendon1: str = eqx.field(static=True)
    tendon2: str | None = eqx.field(static=True)
    coefficients: Float[Array, " 5"]

    def __init__(self, tree, tendon1: str, tendon2: str | None, coefficients: Float[ArrayLike, " 5"]):
        for name in (tendon1,) if tendon2 is None else (tendon1, tendon2):
            _tree_of(tree).tendon_index(name)  # raises for an unknown tendon
        self.tendon1, self.tendon2 = tendon1, tendon2
        self.coefficients = as_inexact(coefficients)

    def offsets(self, tree, q):
        lengths = tree.tendon_lengths(q) - tree.tendon_lengths(tree.reference)
        first = lengths[tree.tendon_index(self.tendon1)]
        return first, None if self.tendon2 is None else lengths[tree.tendon_index(self.tendon2)]


class SiteConstraint(AbstractSystemConstraint):
    """The site `site` follows a path: `x_site(q) = target(t)` (3 rows), or the components
    in `axes` only. Its rows come from the tree's joint twists (read from the system it
    constrains when evaluated) and the path's derivatives.

    **Arguments:**

    - `tree`: the [`ukjax.models.RigidBodyTree`][] (or a system wrapping it) whose site names
      are checked; it is not stored.
    - `site`: the site's name.
    - `target`: `target(t) -> (3,)`, the path in world coordinates (differentiable in `t`).
    - `axes`: which world components to prescribe (default all three).
    """

    site: str = eqx.field(static=True)
    target: Callable
    axes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, tree, site: str, target: Callable, axes: Sequence[int] = (0, 1, 2)):
        _tree_of(tree).site(site)  # raises for an unknown site
        self.site, self.target, self.axes = site, target, tuple(axes)

    def system_rows(self, system, t, q, qd):
        tree = _tree_of(system)
        x, J, bias = tree.point_motion(q, qd, *tree.site(self.site))
        t = jnp.asarray(t, dtype=q.dtype)

        def path_and_rate(t):
            return jax.jvp(lambda t: jnp.asarray(self.target(t), q.dtype), (t,), (jnp.ones_like(t),))

        (path, rate), (_, accel) = jax.jvp(path_and_rate, (t,), (jnp.ones_like(t),))
        keep = np.asarray(self.axes)
        return ConstraintRows(J[keep], (accel - bias)[keep], (x - path)[keep], (J @ qd - rate)[keep])
