"""The U-K solve of rigid-body trees as one compiled call.

XLA CPU runs a tree's algorithms as hundreds of small kernels whose intermediates go through
memory, with the batch on the slow axis (measured on a prototype, 2026-11-25: Cassie's
acceleration 59–67 µs per member under `vmap`, the machine's arithmetic allows 1–2).
`kernels.cc` computes the whole solve of a tree for `B` states in one XLA FFI call, the batch
as the minor axis of every value: 4–7 µs per member on Cassie. What it does not model is
evaluated in XLA and handed to it (`covered`).

It is built by `_native` (once per machine and source), for one state and for chunks of
`LANES`, and runs wherever `simulate` solves a covered system on a CPU in float64: one call per state,
and under `jax.vmap` (`simulate_batch`) one per batch. Derivatives, members with parameters of
their own, other devices and a machine without a compiler take the XLA route
(`system.solve`). `UKJAX_KERNELS=0` chooses the XLA route for the programs traced after it is
set.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._constraints import AbstractConstraint, Baumgarte, stack_rows
from .._core import UKSolution
from .._linalg import negligible, rank_tolerance
from .._native import LANES, built, enabled, tree_target
from .._systems import AbstractSystem, ConstrainedSystem, Forced
from .._unilateral import AbstractUnilateral
from .actuators import Actuated
from .equalities import Connect
from .tree import NORM_GAINS, RigidBodyTree

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
    total = parts.tree._tendon_forces(q, qd)
    for driver in parts.drivers:
        total = total + (
            driver.force(t, q, qd) if isinstance(driver, Forced) else driver._actuation(t, q, qd)
        )
    if not parts.others:
        return total, jnp.zeros((0, q.shape[0]), q.dtype), jnp.zeros(0, q.dtype)
    rows = stack_rows(parts.others, parts.driven, t, q, qd)
    return total, rows.A, rows.b if parts.stabilization is None else parts.stabilization.apply(rows)


def runs(system, dtype) -> Parts | None:
    """`covered(system)` where the kernel runs for it with states of `dtype`: every array of
    the system and the states in float64, the kernel not turned off (`UKJAX_KERNELS=0`) and
    built."""
    parts = covered(system)
    dtypes = {x.dtype for x in jax.tree.leaves(system) if eqx.is_inexact_array(x)} | {jnp.dtype(dtype)}
    if parts is None or dtypes != {jnp.dtype(jnp.float64)} or not enabled():
        return None
    return parts if built() else None


def _call(parts: Parts, q: Float[Array, "B n"], qd: Float[Array, "B n"], outside=None):
    """The kernel on `B` states, the batch first as `vmap` holds it, handed `outside = (F, A,
    b)`, shapes (B, n), (B, r, n), (B, r), as `_outside` gives them under `vmap` (default:
    nothing): `(q̈, constraint force)`, (B, n) each, and `(inconsistency, mass fault)`, (B, 2)."""
    B, n = q.shape
    if outside is None:
        outside = (jnp.zeros_like(q), jnp.zeros((B, 0, n), q.dtype), jnp.zeros((B, 0), q.dtype))
    lanes = 1 if B == 1 else LANES
    size = -(-B // lanes) * lanes
    q, qd, *outside = (jnp.concatenate([x, jnp.repeat(x[-1:], size - B, 0)]) for x in (q, qd, *outside))
    tree, connects = parts.tree, parts.connects
    i64 = functools.partial(np.asarray, dtype=np.int64)
    structure = (
        i64(tree.parents),
        i64(tree.joint_bodies),
        i64([_KINDS[kind] for kind in tree.joint_kinds]),
        i64(tree.joint_coordinates),
        i64(tree.joint_dofs),
        i64([[tree.body_index(c.body1), tree.body_index(c.body2)] for c in connects]).reshape(-1, 2),
    )
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
    p = len(tree._quaternions()) + 3 * len(connects) + outside[1].shape[0]
    outputs = (
        jax.ShapeDtypeStruct((size, n), q.dtype),
        jax.ShapeDtypeStruct((size, n), q.dtype),
        jax.ShapeDtypeStruct((size, 2), q.dtype),
    )
    alpha, beta = NORM_GAINS
    results = jax.ffi.ffi_call(tree_target(lanes), outputs)(
        *structure,
        *(x.astype(q.dtype) for x in parameters),
        q,
        qd,
        *outside,
        alpha=np.float64(alpha),
        beta=np.float64(beta),
        floor=np.float64(rank_tolerance(max(p, 1), q.dtype)),
        zero_row=np.float64(negligible(p, n, q.dtype) ** 2),
    )
    return tuple(x[:B] for x in results)


def _xla(system, t, q, qd):
    sol = system.solve(t, q, qd)
    return (
        sol.acceleration,
        sol.constraint_force,
        jnp.stack([sol.inconsistency, (~sol.mass_ok).astype(q.dtype)]),
    )


def _mapped(static):
    """The solve as a function of the system's arrays and one state, by the kernel for one
    state, with a batching rule that runs the kernel once over the batch as `vmap` holds it
    (the batch first: the kernel reads and writes its members in that layout); members with
    parameters of their own take the XLA route."""

    def kernel(arrays, t, q, qd):
        parts = covered(eqx.combine(arrays, static))  # read from the arrays this call traces
        outside = _outside(parts, t, q, qd)
        single = _call(parts, q[None], qd[None], tuple(x[None] for x in outside))
        return tuple(x[0] for x in single)

    one = jax.custom_batching.custom_vmap(kernel)

    @one.def_vmap
    def _(size, batched, arrays, t, q, qd):
        if any(jax.tree.leaves(batched[0])):
            axes = jax.tree.map(lambda b: 0 if b else None, batched)
            return jax.vmap(lambda a, *state: _xla(eqx.combine(a, static), *state), in_axes=axes)(
                arrays, t, q, qd
            ), (True, True, True)
        parts = covered(eqx.combine(arrays, static))
        axes = (0 if batched[1] else None, *(0 if b else None for b in batched[2:]))
        outside = jax.vmap(lambda t, q, qd: _outside(parts, t, q, qd), axes, axis_size=size)(t, q, qd)
        q, qd = (x if b else jnp.broadcast_to(x, (size, *x.shape)) for x, b in zip((q, qd), batched[2:]))
        return _call(parts, q, qd, outside), (True, True, True)

    return one


@eqx.filter_custom_jvp
def _solve(system, t, q, qd):
    arrays, static = eqx.partition(system, eqx.is_array)
    return _mapped(static)(arrays, t, q, qd)


@_solve.def_jvp
def _solve_jvp(primals, tangents):
    # the tangent from the XLA route (the kernel has no derivative), in every parameter
    _, (acceleration, force, _) = eqx.filter_jvp(_xla, primals, tangents)
    acceleration_force_health = _solve(*primals)
    return acceleration_force_health, (acceleration, force, jnp.zeros_like(acceleration_force_health[2]))


def solve(system, t, q: Float[Array, " n"], qd: Float[Array, " n"]) -> UKSolution:
    """`system.solve(t, q, qd)`, by the compiled kernel where it runs for `system` (`runs`) on
    a CPU: for one state, and under `jax.vmap` once for the whole batch. Derivatives come
    from the XLA route."""
    if jax.default_backend() != "cpu" or qd.dtype != q.dtype or runs(system, q.dtype) is None:
        return system.solve(t, q, qd)
    acceleration, force, (inconsistency, fault) = _solve(system, t, q, qd)
    return UKSolution(acceleration, force, inconsistency, fault == 0, jnp.array(True))
