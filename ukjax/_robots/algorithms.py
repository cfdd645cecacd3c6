"""The algorithms of a rigid-body tree, in world-frame spatial vectors: the bodies' spatial
inertias, `M` by the composite-rigid-body algorithm, the bodies' motion, the bias forces by
recursive Newton–Euler, and the motion of body-fixed points (what the equalities' rows are
built from). Each reads one `Kinematics`."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .joints import Kinematics, dof_metric, topology
from .spatial import add, apply_inertia, force_cross, mm, motion_cross, mv


class BodyMotion(NamedTuple):
    """A body-fixed point's motion and its body's, or those of `k` points stacked
    (`points_motion`)."""

    x: Float[Array, "*k 3"]
    velocity: Float[Array, "*k 3"]
    bias: Float[Array, "*k 3"]
    rotation: Float[Array, "*k 3 3"]
    omega: Float[Array, "*k 3"]
    alpha: Float[Array, "*k 3"]
    # which coordinates move the body (1) and which do not (0): with the joints' twists the
    # rows at any point and along any direction (`directional_rows`)
    moves: Float[np.ndarray, "*k n"]


def spatial_inertias(tree, kin: Kinematics):
    """Every body's spatial inertia `(m, m c, Ī)` about the world origin, stacked: shapes
    (b,), (b, 3), (b, 3, 3)."""
    R, m = kin.rotations, tree.masses
    c = kin.positions + mv(R, tree.coms)
    inertia_c = mm(mm(R, tree.inertias), jnp.swapaxes(R, 1, 2))
    parallel = jnp.einsum("bi,bi->b", c, c)[:, None, None] * jnp.eye(3, dtype=c.dtype) - c[:, :, None] * c[:, None, :]
    return m, m[:, None] * c, inertia_c + m[:, None, None] * parallel


def mass_matrix(tree, q, kin: Kinematics):
    """`M` by the composite-rigid-body algorithm, plus the tendons' and the joints' armature."""
    top = topology(tree)
    m, h, inertia_o = spatial_inertias(tree, kin)
    # composite inertias of the coordinates' bodies (each subtree summed); then
    # Mⱼₖ = Sₖ · I_c(body of j) Sⱼ for k on j's path to the world: one spatial force per
    # coordinate and one product of all twists with all forces
    D = top.subtree[top.coordinate_bodies]
    composite = (D @ m, D @ h, jnp.einsum("jb,bkl->jkl", D, inertia_o))
    forces = jnp.concatenate(apply_inertia(composite, (kin.twists[:, :3], kin.twists[:, 3:])), axis=1)
    below = jnp.where(top.lower, forces @ kin.twists.T, 0.0)
    M = below + below.T - jnp.diag(jnp.diagonal(below))
    C = tree.tendon_coefficients
    M = M + C.T @ (tree.tendon_armature[:, None] * C)
    return M + dof_metric(tree, q, tree.armature)


def motion(tree, kin: Kinematics, qd):
    """Every body's twist `V` and spatial acceleration at `q̈ = 0` (gravity left out), shapes
    (b, 6) and (b, 6): in world-frame spatial vectors both are sums over the coordinates
    that move the body, `V = Σ Sₖ q̇ₖ` and `A = Σ V₍before k₎ ×ₘ Sₖ q̇ₖ`."""
    top = topology(tree)
    motion = kin.twists * qd[:, None]
    before = top.before @ motion
    rate = jnp.concatenate(motion_cross((before[:, :3], before[:, 3:]), (motion[:, :3], motion[:, 3:])), 1)
    return top.moves @ motion, top.moves @ rate


def bias_forces(tree, qd, kin: Kinematics):
    """`C(q, q̇) q̇ + G(q)` per coordinate by recursive Newton–Euler (MuJoCo's `qfrc_bias`)."""
    if not tree.joint_kinds:
        return jnp.zeros(0, qd.dtype)
    top = topology(tree)
    V, A = motion(tree, kin, qd)
    # gravity as an upward acceleration of the base, which every body shares
    V, A = (V[:, :3], V[:, 3:]), (A[:, :3], A[:, 3:] - tree.gravity)
    inertias = spatial_inertias(tree, kin)
    wrenches = jnp.concatenate(
        add(apply_inertia(inertias, A), force_cross(V, apply_inertia(inertias, V))), axis=1
    )
    # each subtree's total wrench, projected on the twists of the coordinates that carry it
    totals = top.subtree @ wrenches
    return jnp.sum(kin.twists * totals[top.coordinate_bodies], axis=1)


def body_indices(tree, bodies: tuple[str, ...]) -> np.ndarray:
    """Each body's index, the world as the tree's body count (as `points_motion` takes them)."""
    b = len(tree.parents)
    return np.array([b if i < 0 else i for i in map(tree.body_index, bodies)], dtype=int)


def points_motion(
    tree, kin: Kinematics, motion, bodies: tuple[str, ...] | Int[Array, " k"], points: Float[Array, "k 3"]
) -> BodyMotion:
    """The motion of `k` body-fixed points at once (`BodyMotion`, each field with a leading
    axis `k`), from the kinematics and the bodies' motion (`motion`), which all of them share.
    `bodies` by name, or by index (`body_indices`; an array chosen during the run: the pairs
    a broadphase keeps)."""
    dtype = kin.positions.dtype
    b, n = len(tree.parents), kin.twists.shape[0]
    points = points.astype(dtype)
    # the world as body b: a fixed frame at the origin that no coordinate moves; every body's
    # frame and motion side by side, gathered at once (each gather is a kernel of its own)
    index = body_indices(tree, bodies) if isinstance(bodies, tuple) else bodies
    frames = jnp.concatenate([kin.rotations.reshape(b, 9), kin.positions, *motion], axis=1)
    world = jnp.concatenate([jnp.eye(3, dtype=dtype).reshape(1, 9), jnp.zeros((1, 15), dtype)], axis=1)
    every = jnp.concatenate([frames, world])[index]
    rotations, positions = every[:, :9].reshape(-1, 3, 3), every[:, 9:12]
    V, A = every[:, 12:18], every[:, 18:]
    moves = np.concatenate([topology(tree).moves, np.zeros((1, n))])
    moves = moves[index] if isinstance(index, np.ndarray) else jnp.asarray(moves, dtype)[index]
    x = positions + mv(rotations, points)
    velocity = V[:, 3:] + jnp.cross(V[:, :3], x)
    # a body-fixed point: ẍ = a_O + α × x + ω × ẋ (spatial acceleration (α, a_O))
    bias = A[:, 3:] + jnp.cross(A[:, :3], x) + jnp.cross(V[:, :3], velocity)
    return BodyMotion(x, velocity, bias, rotations, V[:, :3], A[:, :3], moves)


def directional_rows(
    twists: Float[Array, "n 6"],
    moves: Float[np.ndarray, "k n"],
    points: Float[Array, "k 3"],
    directions: Float[Array, "k r 3"],
) -> Float[Array, "k r n"]:
    """The rows `d · v(x)`: along each of `r` directions `d`, the velocity at each point `x`
    of a body's material point per unit rate of each coordinate (`moves` the `BodyMotion`'s;
    the difference of two bodies' for the velocity of one relative to the other). With
    `v(x) = v₀ + ω × x`, `d · v(x) = (x × d, d) · (ω, v₀)`: one product with the joints'
    twists (world-frame, `Kinematics.twists`) for every row."""
    wrench = jnp.concatenate([jnp.cross(points[:, None, :], directions), directions], axis=-1)
    return jnp.einsum("krj,nj->krn", wrench, twists) * moves[:, None, :]
