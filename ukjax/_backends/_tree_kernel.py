"""The U-K solve of rigid-body trees as one compiled call (`native/kernels.cc`), the batch as
the minor axis of every value, where XLA runs a tree's algorithms as hundreds of small kernels
with the batch on the slow axis (`benchmarks/tree_profile.py`, `benchmarks/gpu.py`).

What the kernel does not model is evaluated in XLA and handed to it (`covered`). It gives a
tree's whole solve (`solve`), its `M` and `Q` alone with the kinematics and bodies' motion the
rows of loops and contacts read (`TreeKernelRoute`), and between events a tree's whole
acceleration under joint limits and spheres on planes in given modes (`in_modes`). It runs for
the systems a backend bound to it (`TreeKernel.bind`), in float64 on a CPU or an NVIDIA GPU:
one call per state, under `jax.vmap` one per batch. Derivatives and members with parameters of
their own take the XLA route.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._constraints import AbstractConstraint, Baumgarte, stack_rows
from .._core import UKSolution
from .._linalg import WELL_CONDITIONED, negligible, rank_tolerance
from .._narrow import solve_in
from ._build import LANES, SPACE, TAIL, TREE_CONTACTS, built_for, dynamics_target, tree_target
from .._systems import AbstractSystem, ConstrainedSystem, Forced
from .._unilateral import (
    PIVOT_FLOOR,
    SLOW_TURN,
    AbstractUnilateral,
    ContactSolution,
    ContactState,
    Modes,
    _per_contact,
    contact_state,
    sliding_now,
)
from .._robots.actuators import Actuated
from .._robots.contacts import JointLimits, PlaneContacts, tangent_basis
from .._robots.equalities import Connect
from .._robots import algorithms
from .._robots.joints import Kinematics
from .._robots.tree import NORM_GAINS, AbstractTreeRoute, RigidBodyTree

_KINDS = {"hinge": 0, "slide": 1, "ball": 2, "free": 3}


class Parts(NamedTuple):
    """A system as the kernel takes it: the tree; the wrappers that drive it (`Forced`,
    `Actuated`), outermost first, the last wrapping the tree, and the system they make
    (`driven`); the `Connect` constraints it models, the other equality constraints, whose rows
    are evaluated in XLA, and the Baumgarte gains over all of them."""

    tree: RigidBodyTree
    drivers: tuple[Forced | Actuated, ...]
    driven: AbstractSystem
    connects: tuple[Connect, ...]
    others: tuple[AbstractConstraint, ...]
    stabilization: Baumgarte | None


def covered(system) -> Parts | None:
    """`system` in the parts `kernels.cc` takes, or None. It takes a `RigidBodyTree` (fixed
    tendons included) under one `ConstrainedSystem` of equality constraints or none (joint
    solve by SVD, no non-ideal force), driven or not by forces (`Forced`, `Actuated`); what it
    does not model itself (applied forces, tendon forces, rows other than `Connect`'s, and
    all rows under Baumgarte gains given per row) is evaluated in XLA and handed to it."""
    constraints, stabilization = (), None
    if isinstance(system, ConstrainedSystem):
        constraints, stabilization = system.constraints, system.stabilization
        if (
            system.nonideal is not None
            or system.method != "svd"
            or system.sequential
            or any(isinstance(c, AbstractUnilateral) for c in constraints)
        ):
            return None
    driven = tree = system.system if isinstance(system, ConstrainedSystem) else system
    drivers = []
    while type(tree) in (Forced, Actuated):
        drivers.append(tree)
        tree = tree.system
    if type(tree) is not RigidBodyTree:
        return None
    if stabilization is not None and (stabilization.alpha.ndim or stabilization.beta.ndim):
        # gains per row follow the constraints' order, not the kernel's: all rows from XLA
        return Parts(tree, tuple(drivers), driven, (), constraints, stabilization)
    return Parts(
        tree,
        tuple(drivers),
        driven,
        tuple(c for c in constraints if type(c) is Connect),
        tuple(c for c in constraints if type(c) is not Connect),
        stabilization,
    )


def _outside(parts: Parts, t, q, qd):
    """What the kernel is handed for one state: the forces that the drivers and the tree's
    tendons apply, and the rows of the constraints it does not model, `(F, A, b)`."""
    total = parts.tree.tendon_forces(q, qd)
    for driver in parts.drivers:
        total = total + (
            driver.force(t, q, qd) if isinstance(driver, Forced) else driver.actuation(t, q, qd)
        )
    if not parts.others:
        return total, jnp.zeros((0, q.shape[0]), q.dtype), jnp.zeros(0, q.dtype)
    rows = stack_rows(parts.others, parts.driven, t, q, qd)
    return total, rows.A, rows.b if parts.stabilization is None else parts.stabilization.apply(rows)


def runs(system) -> Parts | None:
    """`covered(system)` where its tree is bound to the kernel (`TreeKernel.bind`), else None."""
    parts = covered(system)
    return parts if parts is not None and isinstance(parts.tree.route, TreeKernelRoute) else None


def can_run(system, dtype, platform: str) -> bool:
    """Whether the kernels run for `system` with states of `dtype` on `platform` (`"cpu"` or
    `"gpu"`, as `jax.default_backend()` names them): every array of the system and the states
    in float64, and the kernels built for the platform (on first use)."""
    dtypes = {x.dtype for x in jax.tree.leaves(system) if eqx.is_inexact_array(x)} | {jnp.dtype(dtype)}
    return dtypes == {jnp.dtype(jnp.float64)} and built_for(platform)


def _structure(tree: RigidBodyTree, connects: tuple[Connect, ...]) -> np.ndarray:
    """The tree's structure as `kernels.cc` reads it (`Section`): its sections one after another,
    after the places where each starts and the last ends."""
    kinds = [_KINDS[kind] for kind in tree.joint_kinds]
    sizes = [{2: 4, 3: 7}.get(kind, 1) for kind in kinds]  # coordinates per joint
    n = sum(sizes)
    parents = [int(i) for i in tree.parents]
    # per coordinate: its body and joint, its index within the joint
    body, joint, index = [0] * n, [0] * n, [0] * n
    for j, (b, size, first) in enumerate(zip(tree.joint_bodies, sizes, tree.joint_coordinates)):
        for i in range(size):
            body[first + i], joint[first + i], index[first + i] = int(b), j, i
    quaternions = [first + (3 if kind == 3 else 0) for kind, first in zip(kinds, tree.joint_coordinates) if kind >= 2]
    # the coordinates' tree: a body's first coordinate hangs from the last one at or above its
    # parent, the others from the coordinate before them
    below = [-1] * len(parents)
    for c in range(n):
        below[body[c]] = c
    for i, parent in enumerate(parents):
        if below[i] < 0 and parent >= 0:
            below[i] = below[parent]
    coordinate_parents = [
        c - 1 if c > 0 and body[c - 1] == body[c] else (below[parents[body[c]]] if parents[body[c]] >= 0 else -1)
        for c in range(n)
    ]

    def ancestors(parent):
        lists = []
        for c in range(n):
            chain, a = [], parent[c]
            while a >= 0:
                chain, a = chain + [a], parent[a]
            lists.append(chain)
        return lists

    def chain_of(i):
        while i >= 0:
            yield i
            i = parents[i]

    # "before" a coordinate: the motion of its body's parent and of its body's earlier joints (a
    # free joint's translations come before its rotation; a quaternion's coordinates are one motion)
    def group(c):
        return 2 * joint[c] + (kinds[joint[c]] == 3 and index[c] >= 3)

    free = [0] * len(parents)
    for b, kind in zip(tree.joint_bodies, kinds):
        free[int(b)] |= kind == 3
    sections = [
        parents,
        [int(b) for b in tree.joint_bodies],
        kinds,
        [int(c) for c in tree.joint_coordinates],
        [int(d) for d in tree.joint_dofs],
        [tree.body_index(name) for c in connects for name in (c.body1, c.body2)],
        body,
        free,
        quaternions,
    ]
    # M is factored following the coordinates' tree, or densely where tendons couple branches
    solve_parents = list(range(-1, n - 1)) if tree.tendon_armature.shape[0] else coordinate_parents
    solve_ancestors = ancestors(solve_parents)
    ends = [[{*chain_of(tree.body_index(name))} for name in (c1.body1, c1.body2)] for c1 in connects]
    loops = [[c for c in range(n) if body[c] in first | second] for first, second in ends]

    def closed(columns):
        # the columns a row of W = L⁻ᵀ Aᵀ can be nonzero on: A's, and their ancestors in M's factor
        return sorted({*columns, *(a for c in columns for a in solve_ancestors[c])})

    def ragged(lists):
        # two sections: where each list starts (and where the last ends), and their entries
        return [np.cumsum([0] + [len(x) for x in lists]), [a for x in lists for a in x]]

    rows = [closed(range(c, c + 4)) for c in quaternions] + [closed(loop) for loop in loops for _ in range(3)]
    sections += [
        *ragged(ancestors(coordinate_parents)),
        *ragged(solve_ancestors),
        *ragged([[c for c in range(n) if body[c] in set(chain_of(i))] for i in range(len(parents))]),
        *ragged([[l for l in range(n) if body[l] == body[c] and group(l) < group(c)] for c in range(n)]),
        *ragged(loops),
        [(body[c] in first) + 2 * (body[c] in second) for loop, (first, second) in zip(loops, ends) for c in loop],
        *ragged(rows),
        # per pair of those rows, i ≥ j in the order of a lower triangle's entries by rows: the
        # places in each row's columns of the columns both have, ascending (W's Gram matrix)
        *ragged(
            [
                [place for c in sorted({*rows[i]} & {*rows[j]}) for place in (rows[i].index(c), rows[j].index(c))]
                for i in range(len(rows))
                for j in range(i + 1)
            ]
        ),
    ]
    starts = np.cumsum([len(sections) + 1] + [len(x) for x in sections])
    return np.concatenate([starts, *(np.asarray(x, dtype=np.int64) for x in sections)]).astype(np.int64)


def _call(parts: Parts, q: Float[Array, "B n"], qd: Float[Array, "B n"], outside=None, lanes=None, space=SPACE):
    """The kernel on `B` states, the batch first as `vmap` holds it, handed `outside = (F, A,
    b)`, shapes (B, n), (B, r, n), (B, r), as `_outside` gives them under `vmap` (default:
    nothing): `(q̈, constraint force)`, (B, n) each, and `(inconsistency, mass fault)`, (B, 2).
    `lanes` picks the build: by default chunks of `LANES` (the rest in chunks of `TAIL`) for a
    batch on a CPU, else the build of one lane, which on a CPU runs the members one by one in
    the GPU's layout (one state in a compact one); `space` bounds that build's work space in
    bytes (the batch runs in slices that fit)."""
    B, n = q.shape
    shapes = ((n,), (n,), (2,))
    return _ffi(tree_target, shapes, parts, q, qd, outside, lanes, space)


def _dynamics_call(tree: RigidBodyTree, q: Float[Array, "B n"], qd: Float[Array, "B n"], applied, lanes=None):
    """`M` and `Q` of `tree` at `B` states as `RigidBodyTree.dynamics` gives them (its
    quaternions' norm rows folded in), shapes (B, n, n) and (B, n), then the kinematics and the
    bodies' motion they were computed from (`_xla_dynamics`), `applied` (B, n) the forces
    applied from outside the kernel (the tendons'); `lanes` as for `_call`."""
    n, b = q.shape[1], len(tree.parents)
    parts = Parts(tree, (), tree, (), (), None)
    outside = (applied, jnp.zeros((q.shape[0], 0, n), q.dtype), jnp.zeros((q.shape[0], 0), q.dtype))
    shapes = ((n, n), (n,), (b, 3, 3), (b, 3), (n, 6), (b, 6), (b, 6))
    return _ffi(dynamics_target, shapes, parts, q, qd, outside, lanes, SPACE)


def _ffi(target, shapes, parts: Parts, q, qd, outside, lanes, space, extra=(), **attributes):
    """`kernels.cc`'s handler `target(lanes)` on `B` states, its results of `shapes` per state;
    `extra` its further inputs and `attributes` its further attributes (a build of one lane)."""
    B, n = q.shape
    if outside is None:
        outside = (jnp.zeros_like(q), jnp.zeros((B, 0, n), q.dtype), jnp.zeros((B, 0), q.dtype))
    if lanes is None:
        lanes = LANES if B > 1 and parts.tree.route.platform == "cpu" else 1
    multiple = TAIL if lanes > 1 else 1
    size = -(-B // multiple) * multiple
    q, qd, *outside = (jnp.concatenate([x, jnp.repeat(x[-1:], size - B, 0)]) for x in (q, qd, *outside))
    tree, connects = parts.tree, parts.connects
    anchors = [jnp.stack([c.anchor1, c.anchor2]) for c in connects]
    parameters = (
        tree.body_positions,
        tree.body_rotations,
        tree.masses,
        tree.coms,
        tree.inertias,
        tree.joint_axes,
        tree.joint_anchors,
        tree.reference,
        tree.armature,
        tree.damping,
        tree.stiffness,
        tree.spring_reference,
        tree.gravity,
        jnp.stack(anchors) if anchors else jnp.zeros((0, 2, 3), q.dtype),
        tree.tendon_coefficients,
        tree.tendon_armature,
        # Baumgarte's α, β on the connect rows (zero: none)
        jnp.zeros(2)
        if parts.stabilization is None
        else jnp.stack([parts.stabilization.alpha, parts.stabilization.beta]),
    )
    p = len(tree.quaternion_starts()) + 3 * len(connects) + outside[2].shape[1]
    alpha, beta = NORM_GAINS
    # a batch the kernel's own batching rule does not see (a vmap around one that did): its
    # members one after another, each a call on its (B, n) states
    results = jax.ffi.ffi_call(
        target(lanes), tuple(jax.ShapeDtypeStruct((size, *x), q.dtype) for x in shapes), vmap_method="sequential"
    )(
        _structure(tree, tuple(connects)),
        *(x.astype(q.dtype) for x in parameters),
        q,
        qd,
        *outside,
        *extra,
        alpha=np.float64(alpha),
        beta=np.float64(beta),
        floor=np.float64(rank_tolerance(max(p, 1), q.dtype)),
        zero_row=np.float64(negligible(p, n, q.dtype) ** 2),
        p=np.int64(p),
        space=np.int64(space),
        **attributes,
    )
    return tuple(x[:B] for x in results)


def _xla(system, t, q, qd):
    sol = system.solve(t, q, qd)
    return (
        sol.acceleration,
        sol.constraint_force,
        jnp.stack([sol.inconsistency, (~sol.mass_ok).astype(q.dtype)]),
    )


def _mapped(static, prepare, run, xla, batches: bool = True):
    """A kernel as a function of a system's arrays and one state `(t, q, q̇, *more)` (`more`:
    further inputs per state, such as contact modes), with a batching rule that runs it once
    over the batch as `vmap` holds it (the batch first: the kernels read and write their members
    in that layout); members with parameters of their own take the XLA route, and every batch
    where `batches` is False. `prepare(system, t, q, qd, *more)` is what XLA evaluates for one
    state and hands to `run(system, q, qd, prepared)`, the kernel on a batch (B, n) of states;
    `xla(system, t, q, qd, *more)` the same results for one state by XLA."""

    def kernel(arrays, t, q, qd, *more):
        system = eqx.combine(arrays, static)  # read from the arrays this call traces
        prepared = jax.tree.map(lambda x: x[None], prepare(system, t, q, qd, *more))
        return jax.tree.map(lambda x: x[0], run(system, q[None], qd[None], prepared))

    one = jax.custom_batching.custom_vmap(kernel)

    @one.def_vmap
    def _(size, batched, arrays, t, q, qd, *more):
        state = (t, q, qd, *more)
        if not batches or any(jax.tree.leaves(batched[0])):
            axes = jax.tree.map(lambda b: 0 if b else None, tuple(batched))
            results = jax.vmap(lambda a, *state: xla(eqx.combine(a, static), *state), in_axes=axes)(arrays, *state)
        else:
            system = eqx.combine(arrays, static)
            axes = jax.tree.map(lambda b: 0 if b else None, tuple(batched[1:]))
            prepared = jax.vmap(lambda *state: prepare(system, *state), axes, axis_size=size)(*state)
            q, qd = (x if b else jnp.broadcast_to(x, (size, *x.shape)) for x, b in zip((q, qd), batched[2:4]))
            results = run(system, q, qd, prepared)
        return results, jax.tree.map(lambda _: True, results)

    return one


@eqx.filter_custom_jvp
def _solve(system, t, q, qd):
    arrays, static = eqx.partition(system, eqx.is_array)
    prepare = lambda system, t, q, qd: _outside(covered(system), t, q, qd)  # noqa: E731
    run = lambda system, q, qd, outside: _call(covered(system), q, qd, outside)  # noqa: E731
    return _mapped(static, prepare, run, _xla)(arrays, t, q, qd)


@_solve.def_jvp
def _solve_jvp(primals, tangents):
    # the tangent from the XLA route (the kernel has no derivative), in every parameter
    _, (acceleration, force, _) = eqx.filter_jvp(_xla, primals, tangents)
    acceleration_force_health = _solve(*primals)
    return acceleration_force_health, (acceleration, force, jnp.zeros_like(acceleration_force_health[2]))


def solve(system, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> UKSolution:
    """`system.solve(t, q, qd)`, by the compiled kernel where `system` is bound to it
    (`runs`): for one state, and under `jax.vmap` once for the whole batch. Derivatives come
    from the XLA route."""
    if qd.dtype != q.dtype or runs(system) is None:
        return system.solve(t, q, qd)
    acceleration, force, (inconsistency, fault) = _solve(system, t, q, qd)
    return UKSolution(acceleration, force, inconsistency, fault == 0, jnp.array(True))


def _xla_dynamics(tree, q, qd):
    kin = tree.kinematics(q)
    return (*tree.mass_and_forces(q, qd, kin), kin.rotations, kin.positions, kin.twists, *algorithms.motion(tree, kin, qd))


@eqx.filter_custom_jvp
def _dynamics(tree, q, qd, batches=True):
    arrays, static = eqx.partition(tree, eqx.is_array)
    # a tree's dynamics do not depend on time: the same call at every time of a program
    prepare = lambda tree, t, q, qd: tree.tendon_forces(q, qd)  # noqa: E731
    xla = lambda tree, t, q, qd: _xla_dynamics(tree, q, qd)  # noqa: E731
    return _mapped(static, prepare, _dynamics_call, xla, batches)(arrays, jnp.zeros((), q.dtype), q, qd)


@_dynamics.def_jvp
def _dynamics_jvp(primals, tangents):
    # the tangent from the XLA route (the kernel has no derivative), in every parameter
    _, tangent = eqx.filter_jvp(_xla_dynamics, primals[:3], tangents[:3])
    return _dynamics(*primals), tangent


class TreeKernelRoute(AbstractTreeRoute):
    """A tree's `M`, `Q` and motion by the compiled kernel (`UkTreeDynamics`) on a CPU: for one
    state, and under `jax.vmap` once for the whole batch; derivatives from the XLA route
    (`RigidBodyTree.mass_and_forces`). Set on a tree by `TreeKernel.bind`: a system without
    contacts takes its whole solve from the kernel (`solve`), one with contacts or limits,
    whose rows the contact solve takes, its `M` and `Q` from here. On a GPU (`platform`), the
    solve and the contact dynamics run on the kernel, `M` and `Q` alone in XLA."""

    platform: str = eqx.field(static=True)

    def _on_kernel(self, q, qd) -> bool:
        return qd.dtype == q.dtype and self.platform == "cpu"

    def mass_and_forces(self, tree, q, qd):
        if not self._on_kernel(q, qd):
            return tree.mass_and_forces(q, qd, tree.kinematics(q))
        return _dynamics(tree, q, qd)[:2]

    def motion(self, tree, q, qd) -> tuple[Kinematics, tuple]:
        # From the same call as `mass_and_forces` (XLA merges the identical calls of one
        # program: the dynamics and every family of rows share one evaluation). Under `vmap` in
        # XLA: a batch of rows alone costs less there than the kernel's whole dynamics of each
        # state (`_dynamics`' `batches`).
        if not self._on_kernel(q, qd):
            kin = tree.kinematics(q)
            return kin, algorithms.motion(tree, kin, qd)
        _, _, rotations, positions, twists, V, A = _dynamics(tree, q, qd, False)
        return Kinematics(rotations, positions, twists), (V, A)


def contacts_covered(system) -> tuple[Parts, tuple[JointLimits | PlaneContacts, ...]] | None:
    """`system` in the parts that `kernels.cc`'s contact dynamics (`UkTreeContacts`) takes,
    with its unilateral constraints, or None. It takes a `ConstrainedSystem` (no non-ideal
    force, not sequential) of a tree's `JointLimits` and `PlaneContacts`, with equality
    constraints as `covered` takes them."""
    if not isinstance(system, ConstrainedSystem) or system.nonideal is not None or system.sequential:
        return None
    unilateral = tuple(c for c in system.constraints if isinstance(c, AbstractUnilateral))
    if not unilateral or any(type(c) not in (JointLimits, PlaneContacts) for c in unilateral):
        return None
    equalities = tuple(c for c in system.constraints if not isinstance(c, AbstractUnilateral))
    # the contact solve reads no `method`: the equalities' parts as the tree kernel's solve takes them
    inner = system.system
    if equalities:
        inner = ConstrainedSystem(system.system, equalities, system.stabilization)
    parts = covered(inner)
    return None if parts is None else (parts, unilateral)


# `kernels.cc`'s `ContactKind`s, and the width of a contact's data
_LOWER, _UPPER, _PLANE = 0, 1, 2
_CONTACT_DATA = 14


def _contact_tables(tree: RigidBodyTree, unilateral, dtype):
    """The contacts as `UkTreeContacts` reads them, in `ConstrainedSystem.contact_rows`' order:
    each one's kind and its coordinate or body (`ContactKind`, (k, 2), a constant), its data
    ((k, 14): a limit's bound, or a sphere's centre, radius, its plane's normal and offset and
    tangents) and its friction ((k,))."""
    index, data, friction = [], [], []
    for c in unilateral:
        if isinstance(c, JointLimits):
            coordinates = [tree.joint_index(name) for name in c.joints]
            index += [(_LOWER, i) for i in coordinates] + [(_UPPER, i) for i in coordinates]
            bounds = jnp.concatenate([c.lower, c.upper]).astype(dtype)
            data.append(jnp.pad(bounds[:, None], ((0, 0), (0, _CONTACT_DATA - 1))))
            friction.append(jnp.zeros(bounds.shape, dtype))
        else:
            k = len(c.bodies)
            index += [(_PLANE, tree.body_index(body)) for body in c.bodies]
            normals = c.normals.astype(dtype)
            tangents = tangent_basis(normals).reshape(k, 6)
            columns = [c.centres, c.radii[:, None], normals, c.offsets[:, None], tangents]
            data.append(jnp.concatenate([x.astype(dtype) for x in columns], axis=1))
            friction.append(_per_contact(c.friction, k, "PlaneContacts friction").astype(dtype))
    return np.array(index, np.int64), jnp.concatenate(data), jnp.concatenate(friction)


def _xla_in_modes(system, t, q, qd, modes: Modes, rest):
    """`_in_modes` by XLA: `system.dynamics` and the contact solve narrowed to the closed
    contacts (`_narrow.solve_in`; the reference, and the derivatives)."""
    d = system.dynamics(t, q, qd)
    level = d.levels[-1]
    turned = sliding_now(modes, level.contacts, rest)
    sol = solve_in(d.M, d.Q, level.rows, level.contacts, turned, scales=False, kernel=level.kernel)
    state = contact_state(level.contacts)
    health = jnp.stack([sol.inconsistency, sol.mass_ok.astype(q.dtype), sol.solvable.astype(q.dtype)])
    return sol.x, sol.constraint_force, sol.normal, sol.tangent, sol.rate, health, state


def _contact_inputs(system, t, q, qd, modes: Modes, rest):
    """What `UkTreeContacts` is handed for one state besides it: the forces and rows from
    outside the kernel (`_outside`), the contacts' modes, sliding directions and weights, and
    `rest`, (1,)."""
    parts, _ = contacts_covered(system)
    per_state = (modes.mode, modes.direction, modes.weight, jnp.reshape(rest, (1,)))
    return (*_outside(parts, t, q, qd), *(x.astype(q.dtype) for x in per_state))


def _contacts_call(system, q: Float[Array, "B n"], qd: Float[Array, "B n"], inputs, tiles=0, space=SPACE):
    """`kernels.cc`'s contact dynamics (`UkTreeContacts`) of `system` on `B` states, handed
    `inputs` as `_contact_inputs` gives them under `vmap`: per state q̈ and the constraint force
    (n), the normal forces (k), tangential ones (k, 2), the normal rows' rates (k), the gaps (k),
    the slips (k, 2), and (inconsistency, mass positive definite, solvable) (3). `tiles` lays the
    members out as on a GPU (always so there; a CPU runs them so in the tests), in a work space
    of at most `space` bytes (the batch in slices that fit)."""
    parts, unilateral = contacts_covered(system)
    n, dtype = q.shape[1], q.dtype
    index, data, friction = _contact_tables(parts.tree, unilateral, dtype)
    k = index.shape[0]
    F, A, b, *per_state = inputs
    # the solve's rows: the equalities (the quaternions' norms, the connects', the caller's), then
    # k normal and 2k tangent
    P = len(parts.tree.quaternion_starts()) + 3 * len(parts.connects) + b.shape[1] + 3 * k
    shapes = ((n,), (n,), (k,), (k, 2), (k,), (k,), (k, 2), (3,))
    return _ffi(
        lambda _: TREE_CONTACTS,
        shapes,
        parts,
        q,
        qd,
        (F, A, b),
        1,
        space,
        extra=(index, data, friction, *per_state),
        rank_floor=np.float64(rank_tolerance(P, dtype)),
        cut=np.float64(negligible(P, n, dtype)),
        well=np.float64(WELL_CONDITIONED),
        pivot_floor=np.float64(PIVOT_FLOOR),
        slow_turn=np.float64(SLOW_TURN),
        tiles=np.int64(tiles),
    )


def _xla_contacts(system, t, q, qd, modes: Modes, rest):
    """`_contacts_call`'s results for one state by XLA."""
    x, force, normal, tangent, rate, health, state = _xla_in_modes(system, t, q, qd, modes, rest)
    return x, force, normal, tangent, rate, state.gap, state.slip, health


@eqx.filter_custom_jvp
def _in_modes(system, t, q, qd, modes: Modes, rest):
    arrays, static = eqx.partition(system, eqx.is_array)
    mapped = _mapped(static, _contact_inputs, _contacts_call, _xla_contacts)
    x, force, normal, tangent, rate, gap, slip, health = mapped(arrays, t, q, qd, modes, rest)
    parts, unilateral = contacts_covered(system)
    friction = _contact_tables(parts.tree, unilateral, q.dtype)[2]
    return x, force, normal, tangent, rate, health, ContactState(gap, slip, friction)


@_in_modes.def_jvp
def _in_modes_jvp(primals, tangents):
    # the tangent from the XLA route (the kernel has no derivative), in every parameter
    _, tangent = eqx.filter_jvp(_xla_in_modes, primals, tangents)
    return _in_modes(*primals), tangent


def contacts_run(system) -> bool:
    """Whether `in_modes` runs on the kernel for `system`: `contacts_covered(system)`, its tree
    bound to the kernel (`TreeKernel.bind`)."""
    covered = contacts_covered(system)
    return covered is not None and isinstance(covered[0].tree.route, TreeKernelRoute)


def in_modes(
    system, t, q: Float[Array, " n"], qd: Float[Array, " n"], modes: Modes, rest
) -> tuple[ContactSolution, ContactState] | None:
    """`system`'s contact solve at `(t, q, q̇)` in `modes` (sliding as `sliding_now` turns them
    with `rest`; no contact scales), and its contacts' `ContactState`, by one call of the tree
    kernel where it runs for `system` (`contacts_covered`, float64 on a CPU or an NVIDIA GPU,
    the kernels built for it), else None. Cassie standing: one call where XLA ran some 230
    small kernels around the tree kernel's `M`, `Q` and the contact solve's. Under `vmap` one
    call for the batch (on a GPU a thread a member); derivatives from the XLA route."""
    if qd.dtype != q.dtype or not contacts_run(system):
        return None
    x, force, normal, tangent, rate, (inconsistency, mass_ok, solvable), state = _in_modes(
        system, t, q, qd, modes, rest
    )
    scale = jnp.full_like(normal, jnp.nan)
    return ContactSolution(x, force, normal, tangent, rate, scale, inconsistency, mass_ok > 0, solvable > 0), state
