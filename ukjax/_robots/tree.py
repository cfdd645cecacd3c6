"""The rigid-body tree: bodies hung from the world by hinge, slide, ball and free joints in
MuJoCo's conventions, its parameters as array leaves, and everything it answers about itself
(`M`, the applied forces, the quaternions' norm rows, body and site poses, point motion, MuJoCo's
state). The algorithms it runs are in `algorithms.py`, its joint kinds in `joints.py`.

Ball and free joints keep MuJoCo's unit quaternion `u = (w, x, y, z)` as four coordinates (the
U-K-native route): the body's angular velocity is `ω = 2 E(u) u̇` in its own frame, the
rotational mass block `4 EᵀJE` is singular along `u`, and `uᵀu = 1` is a constraint row of
the tree itself. The acceleration is that of the auxiliary system `M + γAᵀA`, `Q + γAᵀb`
over the norm rows (Udwadia & Phohomsiri 2006: the same motion wherever `[M; A]` has full
column rank), so no special solver is needed."""

import abc
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._animate import AbstractDrawn, Sketch
from .._arrays import as_inexact
from .._constraints import ConstraintRows
from .._jit import jit
from .._dynamics import ConstraintLevel, Dynamics
from .._systems import AbstractSized, AbstractSystem, violation_of
from . import algorithms, joints
from .joints import SIZES, Kinematics
from .spatial import mv, put

# Critically damped Baumgarte gains [1/s, 1/s²] of the quaternions' norm rows: the norm does
# not enter the motion (rotations use u/‖u‖), so holding it costs no accuracy, and a rate of
# 10/s stays far inside any explicit solver's stability region at mechanical step sizes.
NORM_GAINS = (20.0, 100.0)


class AbstractTreeRoute(eqx.Module):
    """Where a tree's `M`, `Q` and the bodies' motion are computed, when not in XLA: set on
    the tree by a backend ([`ukjax.TreeKernel`][]'s `bind`), read by `dynamics` and the rows
    of loops and contacts. A tree holds None (XLA) unless a backend bound it."""

    @abc.abstractmethod
    def mass_and_forces(self, tree: "RigidBodyTree", q: Float[Array, " n"], qd: Float[Array, " n"]):
        """`M` and `Q` of `RigidBodyTree.dynamics`, its quaternions' norm rows folded in."""

    @abc.abstractmethod
    def motion(self, tree: "RigidBodyTree", q: Float[Array, " n"], qd: Float[Array, " n"]):
        """The kinematics at `q` and the bodies' motion at `(q, q̇)` (`algorithms.motion`)."""


class RigidBodyTree(AbstractSystem, AbstractSized, AbstractDrawn):
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
    route: AbstractTreeRoute | None

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
        if len(self.joint_kinds) != joints or set(self.joint_kinds) - set(SIZES):
            raise ValueError(
                f"joint_kinds must give one of {list(SIZES)} for each of the {joints} joints; got "
                f"{self.joint_kinds}."
            )
        for body, kind in zip(self.joint_bodies, self.joint_kinds):
            if kind == "free" and (self.parents[body] != -1 or self.joint_bodies.count(body) != 1):
                raise ValueError(
                    f"A free joint must be the only joint of a body hung from the world (body {body})."
                )
        sizes = [SIZES[kind] for kind in self.joint_kinds]
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
        self.route = None  # XLA, until a backend binds the tree (`AbstractTreeRoute`)
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

    def quaternion_starts(self) -> list[int]:
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
    def _topology(self) -> joints.Topology:
        return joints.topology(self)

    def kinematics(self, q: Float[Array, " n"]) -> Kinematics:
        """Body frames and joint twists at `q`."""
        return joints.kinematics(self, q)

    def _motion(self, q, qd) -> tuple[Kinematics, tuple[Float[Array, "b 6"], Float[Array, "b 6"]]]:
        """The kinematics at `q` and the bodies' motion at `(q, q̇)` (`algorithms.motion`), what
        rows are built from: in XLA, or by the route a backend bound the tree to."""
        if self.route is not None:
            return self.route.motion(self, q, qd)
        kin = self.kinematics(q)
        return kin, algorithms.motion(self, kin, qd)

    # The three conversions below are compiled as one program each: op by op, each of their
    # operations compiles on its own (`benchmarks/warm_start.py` times an import).
    @jit
    def velocity_map(self, q: Float[Array, " n"]) -> Float[Array, "v n"]:
        """`G(q)`, MuJoCo's velocities from coordinate rates: `qvel = G(q) q̇` (the identity for
        hinges and slides, `2 E(u)` for a quaternion: the angular velocity in the body frame).

        **Returns:**

        `G`, shape (v, n) with `v` MuJoCo's `nv`.
        """
        ones, blocks = joints.velocity_layout(self)
        G = put(jnp.zeros((self.num_velocities, self.num_coordinates), q.dtype), (ones[:, 0], ones[:, 1]), 1.0)
        d, c = blocks[:, :1, None], blocks[:, 1:, None]
        return put(G, (d + np.arange(3)[:, None], c + np.arange(4)), 2 * joints.rate_maps(q, blocks))

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
        for c in self.quaternion_starts():
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
        for c in self.quaternion_starts():
            qpos = qpos.at[c : c + 4].set(q[c : c + 4] / jnp.linalg.norm(q[c : c + 4]))
        return qpos, self.velocity_map(q) @ qd

    def mass_matrix(self, t, q):
        return algorithms.mass_matrix(self, q, self.kinematics(q))

    def bias_forces(self, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " n"]:
        """`C(q, q̇) q̇ + G(q)`: Coriolis, centrifugal and gravity forces (MuJoCo's `qfrc_bias`,
        here per coordinate), by recursive Newton–Euler."""
        return algorithms.bias_forces(self, qd, self.kinematics(q))

    def forces(self, t, q, qd):
        return self._forces(q, qd, self.kinematics(q))

    def _forces(self, q, qd, kin: Kinematics):
        springs = self.stiffness * (q - self.spring_reference)
        for c in self.quaternion_starts():  # springs act on hinges and slides
            springs = springs.at[c : c + 4].set(0.0)
        damping = joints.dof_metric(self, q, self.damping) @ qd
        return -algorithms.bias_forces(self, qd, kin) - damping - springs + self.tendon_forces(q, qd)

    def tendon_lengths(self, q: Float[Array, " n"]) -> Float[Array, " t"]:
        """The fixed tendons' lengths `L = C q`, shape (t,)."""
        return self.tendon_coefficients @ q

    def tendon_index(self, name: str) -> int:
        """The index of the tendon `name`."""
        return self._index(self.tendon_names, name, "tendon")

    def tendon_forces(self, q, qd):
        """`Cᵀ (−k (L − L_spring) − d L̇)`, with no spring force inside the dead band."""
        C = self.tendon_coefficients
        if not C.shape[0]:
            return jnp.zeros_like(q)
        L, low, high = C @ q, self.tendon_lengthspring[:, 0], self.tendon_lengthspring[:, 1]
        stretch = jnp.where(L > high, L - high, 0.0) + jnp.where(L < low, L - low, 0.0)
        return C.T @ (-self.tendon_stiffness * stretch - self.tendon_damping * (C @ qd))

    def norm_rows(self, q: Float[Array, " n"], qd: Float[Array, " n"]) -> ConstraintRows:
        """`uᵀu − 1 = 0` for every quaternion, Baumgarte-stabilized (`NORM_GAINS`): the rows
        the tree adds to every U-K solve (none without ball or free joints).

        **Returns:**

        A `ConstraintRows` with one row per quaternion.
        """
        starts = self.quaternion_starts()
        A = jnp.zeros((len(starts), q.shape[0]), q.dtype)
        phi, phid, b = [], [], []
        for row, c in enumerate(starts):
            u, ud = q[c : c + 4], qd[c : c + 4]
            A = A.at[row, c : c + 4].set(2 * u)
            phi.append(u @ u - 1)
            phid.append(2 * u @ ud)
            b.append(-2 * ud @ ud)
        phi, phid, b = jnp.stack(phi), jnp.stack(phid), jnp.stack(b)
        alpha, beta = NORM_GAINS
        return ConstraintRows(A, b - alpha * phid - beta * phi, phi, phid)

    def constraint_levels(self, t, q, qd):
        return (ConstraintLevel(self.norm_rows(q, qd), None, "svd"),) if self.quaternion_starts() else ()

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))

    def dynamics(self, t, q, qd):
        if self.route is not None:
            M, Q = self.route.mass_and_forces(self, q, qd)
        else:
            M, Q = self.mass_and_forces(q, qd, self.kinematics(q))
        if not self.quaternion_starts():
            return Dynamics(M, Q, ())
        return Dynamics(M, Q, (ConstraintLevel(self.norm_rows(q, qd), None, "svd"),))

    def mass_and_forces(self, q, qd, kin: Kinematics):
        """`M` and `Q` of `dynamics` in XLA from the kinematics at `q`, the quaternions' norm
        rows folded in."""
        M, Q = algorithms.mass_matrix(self, q, kin), self._forces(q, qd, kin)
        if not self.quaternion_starts():
            return M, Q
        rows = self.norm_rows(q, qd)
        # M is singular along each quaternion: the auxiliary system M + γAᵀA, Q + γAᵀb moves
        # as the constrained one does, with γ of the size of the block the row completes
        gamma = jnp.stack([jnp.trace(M[c : c + 4, c : c + 4]) / 4 for c in self.quaternion_starts()])
        return M + rows.A.T @ (gamma[:, None] * rows.A), Q + rows.A.T @ (gamma * rows.b)

    def sketch(self, t, q):
        """Each body's origin joined to its parent's, one part per branch below a root body
        (Cassie's legs); the ground link joining the points fixed in the world (the anchors of
        roots that turn about one hinge or ball, world sites) as a part of its own; the origins and the
        sites as points."""
        kin = self.kinematics(q)
        children = [i for i, p in enumerate(self.parents) if p >= 0]
        parents = np.array([self.parents[i] for i in children], dtype=int)
        links = jnp.stack([kin.positions[parents], kin.positions[np.array(children, dtype=int)]], axis=1)
        branches = [self._branch(i) for i in children]
        numbers = {branch: k for k, branch in enumerate(dict.fromkeys(branches))}
        parts = [numbers[branch] for branch in branches]
        # sites from the same kinematics (body −1: fixed in the world)
        bodies = np.array(self.site_bodies, dtype=int)
        moved = kin.positions[bodies] + mv(kin.rotations[bodies], self.site_positions)
        sites = jnp.where((bodies >= 0)[:, None], moved, self.site_positions)
        ground = [
            kin.positions[body] + kin.rotations[body] @ self.joint_anchors[j]
            for body in range(len(self.parents))
            if self.parents[body] < 0 and (j := self._pivot(body)) is not None
        ] + [sites[k] for k in np.flatnonzero(bodies < 0)]
        if len(ground) > 1:
            fixed = jnp.stack(ground)
            links = jnp.concatenate([links, jnp.stack([fixed[:-1], fixed[1:]], axis=1)])
            parts += [len(numbers)] * (len(ground) - 1)
        return Sketch(links, jnp.concatenate([kin.positions, sites]), parts=parts)

    def _branch(self, body: int) -> int:
        """The body below a root body whose subtree holds `body` (a branch to draw alike)."""
        while self.parents[body] >= 0 and self.parents[self.parents[body]] >= 0:
            body = self.parents[body]
        return body

    def _pivot(self, body: int) -> int | None:
        """The joint of `body` where it is its only one and a hinge or a ball: its anchor is
        then a point fixed in the parent's frame (None otherwise)."""
        joints = [j for j, b in enumerate(self.joint_bodies) if b == body]
        return joints[0] if len(joints) == 1 and self.joint_kinds[joints[0]] in ("hinge", "ball") else None

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
        kin, motion = self._motion(q, qd)
        one = algorithms.points_motion(self, kin, motion, (body,), as_inexact(point)[None])
        J = algorithms.directional_rows(kin.twists, one.moves, one.x, jnp.eye(3, dtype=one.x.dtype)[None])
        return one.x[0], J[0], one.bias[0]
