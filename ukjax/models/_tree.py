"""Spatial rigid-body trees of hinge, slide, ball and free joints: the composite-rigid-body
algorithm for `M` and recursive Newton–Euler for the bias forces, in world-frame spatial vectors.

Ball and free joints keep MuJoCo's unit quaternion `u = (w, x, y, z)` as four coordinates (the
U-K-native route): the body's angular velocity is `ω = 2 E(u) u̇` in its own frame, the
rotational mass block `4 EᵀJE` is singular along `u`, and `uᵀu = 1` is a constraint row of
the tree itself. The acceleration is that of the auxiliary system `M + γAᵀA`, `Q + γAᵀb`
over the norm rows (Udwadia & Phohomsiri 2006: the same motion wherever `[M; A]` has full
column rank), so no special solver is needed."""

import abc
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._animate import Sketch
from .._constraints import AbstractSystemConstraint, ConstraintRows, as_inexact, holonomic_rows
from .._systems import AbstractUnconstrainedSystem, ConstraintLevel

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
    return jnp.einsum("...ij,...j->...i", inertia_o, w) + jnp.cross(h, v), m[..., None] * v + jnp.cross(w, h)


def _dot(S, F):
    return S[0] @ F[0] + S[1] @ F[1]


def _add(X, Y):
    return X[0] + Y[0], X[1] + Y[1]


def _twist_sum(twists, rates):
    """`Σₖ Sₖ q̇ₖ` as an (angular, linear) pair, for rows `Sₖ` of `twists`."""
    total = sum((S * rate for S, rate in zip(twists, rates)), start=jnp.zeros(6, twists[0].dtype))
    return total[:3], total[3:]


def _axis_angle(axis, angle):
    """Rotation by `angle` about the unit `axis` (Rodrigues)."""
    x, y, z = axis
    K = jnp.array([[0.0 * x, -z, y], [z, 0.0 * x, -x], [-y, x, 0.0 * x]])
    return jnp.eye(3, dtype=axis.dtype) + jnp.sin(angle) * K + (1 - jnp.cos(angle)) * (K @ K)


def _quaternion_matrix(u: Float[Array, " 4"]) -> Float[Array, "3 3"]:
    """The rotation of the unit quaternion `u/‖u‖`, `u = (w, x, y, z)`."""
    w, x, y, z = u / jnp.sqrt(u @ u)
    return jnp.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _rate_map(u: Float[Array, " 4"]) -> Float[Array, "3 4"]:
    """`E(u)` with `ω = 2 E(u) u̇` the angular velocity in the rotated (body) frame; `E(u) u = 0`,
    `E Eᵀ = I` for a unit `u`, and `E(u̇) u̇ = 0`, so that `ω̇ = 2 E(u) ü`."""
    w, x, y, z = u
    return jnp.array([[-x, w, z, -y], [-y, -z, w, x], [-z, y, -x, w]])


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
    """A body-fixed point's motion and its body's rotation (`RigidBodyTree._body_motion`)."""

    x: Float[Array, " 3"]
    J: Float[Array, "3 n"]
    bias: Float[Array, " 3"]
    rotation: Float[Array, "3 3"]
    omega: Float[Array, " 3"]
    J_omega: Float[Array, "3 n"]
    alpha: Float[Array, " 3"]


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

    def _joints_of(self, body: int) -> range:
        first = self.joint_bodies.index(body) if body in self.joint_bodies else 0
        return range(first, first + self.joint_bodies.count(body))

    def _groups(self, body: int) -> list[range]:
        """The body's coordinates in groups that move it together: one per hinge or slide, the
        three translations and the four quaternion coordinates of a free joint, the four of a
        ball joint. A group's twists are the body's own axes, so that their rate of change is
        the motion of the body before the group (`V ×ₘ S`)."""
        groups = []
        for j in self._joints_of(body):
            c = self.joint_coordinates[j]
            if self.joint_kinds[j] == "free":
                groups += [range(c, c + 3), range(c + 3, c + 7)]
            else:
                groups.append(range(c, c + _SIZES[self.joint_kinds[j]][0]))
        return groups

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

    def kinematics(self, q: Float[Array, " n"]) -> Kinematics:
        """Body frames and joint twists at `q`."""
        return self._kinematics(q, range(len(self.parents)))

    def _kinematics(self, q, bodies) -> Kinematics:
        """Frames and coordinate twists of `bodies` only (in body order, each with its parent)."""
        rotations, positions, twists = {}, {}, []
        for body in bodies:
            parent = self.parents[body]
            R_parent = jnp.eye(3, dtype=q.dtype) if parent < 0 else rotations[parent]
            p_parent = jnp.zeros(3, q.dtype) if parent < 0 else positions[parent]
            R = R_parent @ self.body_rotations[body]
            p = p_parent + R_parent @ self.body_positions[body]
            for j in self._joints_of(body):
                c, kind = self.joint_coordinates[j], self.joint_kinds[j]
                axis = R @ self.joint_axes[j]
                anchor = p + R @ self.joint_anchors[j]
                if kind == "hinge":
                    twists.append(jnp.concatenate([axis, jnp.cross(anchor, axis)]))
                    # rotate about the anchor, which stays where it is
                    R = R @ _axis_angle(self.joint_axes[j], q[c] - self.reference[c])
                    p = anchor - R @ self.joint_anchors[j]
                elif kind == "slide":
                    twists.append(jnp.concatenate([jnp.zeros_like(axis), axis]))
                    p = p + axis * (q[c] - self.reference[c])
                else:
                    if kind == "free":  # the world pose itself (MuJoCo ignores the body frame)
                        u, R, p = q[c + 3 : c + 7], _quaternion_matrix(q[c + 3 : c + 7]), q[c : c + 3]
                        anchor = p
                        twists += list(jnp.concatenate([jnp.zeros((3, 3), q.dtype), jnp.eye(3, dtype=q.dtype)], 1))
                    else:  # a ball turns the body about its anchor
                        u = q[c : c + 4]
                        R = R @ _quaternion_matrix(u)
                        p = anchor - R @ self.joint_anchors[j]
                    # the body's rotational twists about the anchor, combined by 2 E(u)
                    W = R @ (2 * _rate_map(u))
                    twists += list(jnp.concatenate([W, jnp.cross(anchor, W.T).T], 0).T)
            rotations[body], positions[body] = R, p
        empty = jnp.zeros((0, 6), q.dtype)
        return Kinematics(
            jnp.stack(list(rotations.values())),
            jnp.stack(list(positions.values())),
            jnp.stack(twists) if twists else empty,
        )

    def _inertias(self, kin: Kinematics):
        """Every body's spatial inertia `(m, m c, Ī)` about the world origin, stacked: shapes
        (b,), (b, 3), (b, 3, 3)."""
        R, m = kin.rotations, self.masses
        c = kin.positions + jnp.einsum("bij,bj->bi", R, self.coms)
        inertia_c = R @ self.inertias @ jnp.swapaxes(R, 1, 2)
        parallel = jnp.einsum("bi,bi->b", c, c)[:, None, None] * jnp.eye(3, dtype=c.dtype) - c[:, :, None] * c[:, None, :]
        return m, m[:, None] * c, inertia_c + m[:, None, None] * parallel

    def _subtrees(self) -> np.ndarray:
        """`D` with `Dᵢⱼ = 1` where body `j` is in the subtree of body `i` (itself included):
        `D @ x` sums a per-body quantity over each subtree (composite inertias, wrenches)."""
        b = len(self.parents)
        return np.array([[float(i in self._ancestors(j)) for j in range(b)] for i in range(b)])

    def _ancestors(self, body: int) -> set[int]:
        chain = set()
        while body >= 0:
            chain.add(body)
            body = self.parents[body]
        return chain

    def _coordinate_bodies(self) -> list[int]:
        return [b for j, b in enumerate(self.joint_bodies) for _ in range(_SIZES[self.joint_kinds[j]][0])]

    def velocity_map(self, q: Float[Array, " n"]) -> Float[Array, "v n"]:
        """`G(q)`, MuJoCo's velocities from coordinate rates: `qvel = G(q) q̇` (the identity for
        hinges and slides, `2 E(u)` for a quaternion: the angular velocity in the body frame).

        **Returns:**

        `G`, shape (v, n) with `v` MuJoCo's `nv`.
        """
        G = jnp.zeros((self.num_velocities, self.num_coordinates), q.dtype)
        for j, kind in enumerate(self.joint_kinds):
            c, d = self.joint_coordinates[j], self.joint_dofs[j]
            if kind in ("hinge", "slide"):
                G = G.at[d, c].set(1.0)
                continue
            if kind == "free":
                G = G.at[d : d + 3, c : c + 3].set(jnp.eye(3, dtype=q.dtype))
                c, d = c + 3, d + 3
            G = G.at[d : d + 3, c : c + 4].set(2 * _rate_map(q[c : c + 4]))
        return G

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

    def _per_dof(self, q, weights, x):
        """`Gᵀ diag(weights) G x` for `x` (n,) or (n, k) (armature, damping: MuJoCo applies them
        per degree of freedom); `diag(weights) x` where every joint is a hinge or a slide."""
        weights = weights.reshape(weights.shape + (1,) * (x.ndim - 1))
        if not self._quaternions():
            return weights * x
        G = self.velocity_map(q)
        return G.T @ (weights * (G @ x))

    def mass_matrix(self, t, q):
        kin = self.kinematics(q)
        D = self._subtrees()
        m, h, inertia_o = self._inertias(kin)
        bodies = np.array(self._coordinate_bodies(), dtype=int)
        # composite inertias of the coordinates' bodies, `D` summing each subtree; then
        # Mⱼₖ = Sₖ · I_c(body of j) Sⱼ for k on j's path to the world: one spatial force per
        # coordinate and one product of all twists with all forces, so that the traced program
        # grows like n, not n² (Cassie's 35 coordinates compiled 3× slower entry by entry)
        composite = (D[bodies] @ m, D[bodies] @ h, jnp.einsum("jb,bkl->jkl", D[bodies], inertia_o))
        forces = jnp.concatenate(_apply_inertia(composite, (kin.twists[:, :3], kin.twists[:, 3:])), axis=1)
        lower = np.array(
            [[k <= j and bodies[k] in self._ancestors(bodies[j]) for k in range(len(bodies))] for j in range(len(bodies))]
        )
        below = jnp.where(lower, forces @ kin.twists.T, 0.0)
        M = below + below.T - jnp.diag(jnp.diagonal(below))
        C = self.tendon_coefficients
        M = M + C.T @ (self.tendon_armature[:, None] * C)
        return M + self._per_dof(q, self.armature, jnp.eye(q.shape[0], dtype=q.dtype))

    def bias_forces(self, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " n"]:
        """`C(q, q̇) q̇ + G(q)`: Coriolis, centrifugal and gravity forces (MuJoCo's `qfrc_bias`,
        here per coordinate), by recursive Newton–Euler."""
        kin = self.kinematics(q)
        zero = jnp.zeros(3, q.dtype)
        # gravity as an upward acceleration of the base
        base_velocity, base_acceleration = (zero, zero), (zero, -self.gravity)
        velocities, accelerations = [], []
        for body, parent in enumerate(self.parents):
            V = base_velocity if parent < 0 else velocities[parent]
            A = base_acceleration if parent < 0 else accelerations[parent]
            for group in self._groups(body):
                motion = _twist_sum([kin.twists[k] for k in group], [qd[k] for k in group])
                A = _add(A, _motion_cross(V, motion))
                V = _add(V, motion)
            velocities.append(V)
            accelerations.append(A)
        if not self.joint_kinds:
            return jnp.zeros(0, q.dtype)
        # every body's wrench at once, then each subtree's total (`D`)
        inertias = self._inertias(kin)
        V = tuple(jnp.stack([x[i] for x in velocities]) for i in range(2))
        A = tuple(jnp.stack([x[i] for x in accelerations]) for i in range(2))
        wrenches = jnp.concatenate(
            _add(_apply_inertia(inertias, A), _force_cross(V, _apply_inertia(inertias, V))), axis=1
        )
        totals = self._subtrees() @ wrenches
        return jnp.sum(kin.twists * totals[np.array(self._coordinate_bodies(), dtype=int)], axis=1)

    def forces(self, t, q, qd):
        springs = self.stiffness * (q - self.spring_reference)
        for c in self._quaternions():  # springs act on hinges and slides
            springs = springs.at[c : c + 4].set(0.0)
        return -self.bias_forces(q, qd) - self._per_dof(q, self.damping, qd) - springs + self._tendon_forces(q, qd)

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
        d = super().dynamics(t, q, qd)
        if not d.levels:
            return d
        rows = d.levels[0].rows
        # M is singular along each quaternion: the auxiliary system M + γAᵀA, Q + γAᵀb moves
        # as the constrained one does, with γ of the size of the block the row completes
        gamma = jnp.stack([jnp.trace(d.M[c : c + 4, c : c + 4]) / 4 for c in self._quaternions()])
        return d._replace(M=d.M + rows.A.T @ (gamma[:, None] * rows.A), Q=d.Q + rows.A.T @ (gamma * rows.b))

    def sketch(self, t, q):
        """Each body's origin joined to its parent's; the origins and the sites as points."""
        kin = self.kinematics(q)
        children = np.array([i for i, p in enumerate(self.parents) if p >= 0], dtype=int)
        parents = np.array([self.parents[i] for i in children], dtype=int)
        links = jnp.stack([kin.positions[parents], kin.positions[children]], axis=1)
        # sites from the same kinematics (body −1: fixed in the world)
        bodies = np.array(self.site_bodies, dtype=int)
        moved = kin.positions[bodies] + jnp.einsum("sij,sj->si", kin.rotations[bodies], self.site_positions)
        sites = jnp.where((bodies >= 0)[:, None], moved, self.site_positions)
        return Sketch(links, jnp.concatenate([kin.positions, sites]))

    def body_pose(self, q: Float[Array, " n"], body: str) -> tuple[Float[Array, "3 3"], Float[Array, " 3"]]:
        """The rotation and position of the body `name` (its frame, not its centre of mass)."""
        index = self.body_index(body)
        if index < 0:
            return jnp.eye(3, dtype=q.dtype), jnp.zeros(3, q.dtype)
        # only the chain from the world to this body
        kin = self._kinematics(q, sorted(self._ancestors(index)))
        return kin.rotations[-1], kin.positions[-1]

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
        point = as_inexact(point)
        n = q.shape[0]
        zero, J = jnp.zeros(3, q.dtype), jnp.zeros((3, n), q.dtype)
        index = self.body_index(body)
        if index < 0:
            return _BodyMotion(point.astype(q.dtype), J, zero, jnp.eye(3, dtype=q.dtype), zero, J, zero)
        chain = sorted(self._ancestors(index))
        kin = self._kinematics(q, chain)
        x = kin.positions[-1] + kin.rotations[-1] @ point
        V, A = (zero, zero), (zero, zero)
        # the chain's coordinates in order: row i of `kin.twists` is coordinate `coordinates[i]`
        groups = [group for body in chain for group in self._groups(body)]
        coordinates = [k for group in groups for k in group]
        row = {k: i for i, k in enumerate(coordinates)}
        for group in groups:
            motion = _twist_sum([kin.twists[row[k]] for k in group], [qd[k] for k in group])
            A = _add(A, _motion_cross(V, motion))
            V = _add(V, motion)
        # every column at once: the velocity of the point per unit rate of each coordinate
        Jw = J
        if coordinates:
            columns = np.array(coordinates, dtype=int)
            J = J.at[:, columns].set((kin.twists[:, 3:] + jnp.cross(kin.twists[:, :3], x)).T)
            Jw = Jw.at[:, columns].set(kin.twists[:, :3].T)
        velocity = V[1] + jnp.cross(V[0], x)
        # a body-fixed point: ẍ = a_O + α × x + ω × ẋ (spatial acceleration (α, a_O))
        bias = A[1] + jnp.cross(A[0], x) + jnp.cross(V[0], velocity)
        return _BodyMotion(x, J, bias, kin.rotations[-1], V[0], Jw, A[0])


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
        R1, p1 = tree.body_pose(q, self.body1)
        return self.anchor1 - R1.T @ (tree.point_position(q, self.body2, self.anchor2) - p1)

    def system_rows(self, system, t, q, qd):
        tree = _tree_of(system)
        one = tree._body_motion(q, qd, self.body1, self.anchor1)
        x2, J2, a2 = tree.point_motion(q, qd, self.body2, self.anchor2)
        # s = R₁ᵀ r with r = x₁ − x₂ and Ṙ₁ = [ω]× R₁:
        # s̈ = R₁ᵀ (r̈ − ω̇ × r − 2 ω × ṙ + ω × (ω × r))
        r, Jr = one.x - x2, one.J - J2
        rd, w = Jr @ qd, one.omega
        A = one.rotation.T @ (Jr + jnp.cross(r, one.J_omega.T).T)
        bias = one.bias - a2 + jnp.cross(r, one.alpha) - 2 * jnp.cross(w, rd) + jnp.cross(w, jnp.cross(w, r))
        return ConstraintRows(A, -one.rotation.T @ bias, one.rotation.T @ r, A @ qd)

    def sketch(self, system, t, q):
        """Each body's origin joined to its anchor, and the gap between the anchors."""
        return _two_point_sketch(_tree_of(system), q, (self.body1, self.anchor1), (self.body2, self.anchor2))


def _two_point_sketch(tree: RigidBodyTree, q, *ends: tuple[str, Float[Array, " 3"]]) -> Sketch:
    """Links from two bodies' origins to a point fixed in each, and the gap between the points."""
    poses = [tree.body_pose(q, body) for body, _ in ends]
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
        R1, p1 = tree.body_pose(q, self.body1)
        R2, p2 = tree.body_pose(q, self.body2)
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
