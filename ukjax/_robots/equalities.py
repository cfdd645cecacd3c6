"""Equality constraints of a rigid-body tree (MJCF's `connect`, `weld`, `joint` and `tendon`,
and a site following a path). Each reads the tree it constrains whenever it is evaluated and
keeps no copy of it; `Connect` and `SiteConstraint` build their rows from the tree's joint
twists, the others from a residual differentiated twice."""

import abc
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint, AbstractSystemConstraint, ConstraintRows, holonomic_rows
from .._systems import innermost
from . import algorithms
from .algorithms import BodyMotion
from .spatial import mv
from .tree import RigidBodyTree


def tree_of(system) -> RigidBodyTree:
    """The rigid-body tree inside `system` (through `Forced`/`ConstrainedSystem` wrappers)."""
    tree = innermost(system)
    if not isinstance(tree, RigidBodyTree):
        raise TypeError(f"Expected a RigidBodyTree (or a system wrapping one), got {type(system).__name__}.")
    return tree


class Connect(AbstractSystemConstraint, AbstractDrawnConstraint):
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
            tree_of(tree).body_index(name)  # raises for an unknown body
        self.body1, self.body2 = body1, body2
        self.anchor1, self.anchor2 = as_inexact(anchor1), as_inexact(anchor2)

    def residual(self, system, t, q: Float[Array, " n"]) -> Float[Array, " 3"]:
        """The gap between the two points on `system`, in `body1`'s axes."""
        tree = tree_of(system)
        (R1, p1), (R2, p2) = tree._body_poses(q, self.body1, self.body2)
        return self.anchor1 - R1.T @ (p2 + R2 @ self.anchor2 - p1)

    def system_rows(self, system, t, q, qd):
        return self.stacked_rows([self], system, t, q, qd)[0]

    @classmethod
    def stacked_rows(cls, constraints, system, t, q, qd):
        # one evaluation of the tree's kinematics, and one of every loop's rows at once
        tree = tree_of(system)
        kin, motion = tree._motion(q, qd)
        ends = [
            algorithms.points_motion(tree, kin, motion, bodies, jnp.stack(points))
            for bodies, points in (
                (tuple(c.body1 for c in constraints), [c.anchor1 for c in constraints]),
                (tuple(c.body2 for c in constraints), [c.anchor2 for c in constraints]),
            )
        ]
        rows = cls._rows(kin.twists, *ends)
        return [jax.tree.map(lambda x: x[k], rows) for k in range(len(constraints))]

    @staticmethod
    def _rows(twists, one: BodyMotion, two: BodyMotion) -> ConstraintRows:
        """The rows of `k` loops at once (leading axis `k`; `twists` the joints', `Kinematics.twists`)."""
        # s = R₁ᵀ r with r = x₁ − x₂ and Ṙ₁ = [ω]× R₁:
        # s̈ = R₁ᵀ (r̈ − ω̇ × r − 2 ω × ṙ + ω × (ω × r))
        r, rd, w = one.x - two.x, one.velocity - two.velocity, one.omega
        Rt = one.rotation.swapaxes(1, 2)
        # ṡ = R₁ᵀ (v₁(x₂) − v₂(x₂)): body one's material point at x₂ against body two's
        A = algorithms.directional_rows(twists, one.moves - two.moves, two.x, Rt)
        bias = one.bias - two.bias + jnp.cross(r, one.alpha) - 2 * jnp.cross(w, rd) + jnp.cross(w, jnp.cross(w, r))
        return ConstraintRows(A, -mv(Rt, bias), mv(Rt, r), mv(Rt, rd - jnp.cross(w, r)))

    def sketch(self, system, t, q):
        """Each body's origin joined to its anchor, and the gap between the anchors."""
        return _two_point_sketch(tree_of(system), q, (self.body1, self.anchor1), (self.body2, self.anchor2))


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


class Weld(_AbstractSystemHolonomic, AbstractDrawnConstraint):
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
            tree_of(tree).body_index(name)  # raises for an unknown body
        self.body1, self.body2 = body1, body2
        self.anchor, self.position, self.rotation = (
            as_inexact(anchor),
            as_inexact(position),
            as_inexact(rotation),
        )

    def sketch(self, system, t, q):
        """Each body's origin joined to where the anchor is and where it belongs, and the gap
        between the two."""
        return _two_point_sketch(tree_of(system), q, (self.body1, self.position), (self.body2, self.anchor))

    def residual(self, system, t, q):
        """The position error (3) and the rotation error (3) on `system`."""
        tree = tree_of(system)
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
        x1, x2 = self.offsets(tree_of(system), q)
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
            tree_of(tree).joint_index(name)  # raises for an unknown joint
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
            tree_of(tree).tendon_index(name)  # raises for an unknown tendon
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
        tree_of(tree).site(site)  # raises for an unknown site
        self.site, self.target, self.axes = site, target, tuple(axes)

    def system_rows(self, system, t, q, qd):
        tree = tree_of(system)
        x, J, bias = tree.point_motion(q, qd, *tree.site(self.site))
        t = jnp.asarray(t, dtype=q.dtype)

        def path_and_rate(t):
            return jax.jvp(lambda t: jnp.asarray(self.target(t), q.dtype), (t,), (jnp.ones_like(t),))

        (path, rate), (_, accel) = jax.jvp(path_and_rate, (t,), (jnp.ones_like(t),))
        keep = np.asarray(self.axes)
        return ConstraintRows(J[keep], (accel - bias)[keep], (x - path)[keep], (J @ qd - rate)[keep])
