"""Batches of simulations over every device: `vmap` inside a device, `shard_map` across them."""

import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from jaxtyping import ArrayLike, Float, Real

from ._arrays import as_input
from ._backends import _tree_kernel as kernels
from ._backends._backend import AutoBackend, TreeKernel, bound, check_backend
from ._events import warn_if_started_inside
from ._jit import jit
from ._simulate import DEFAULT_TOL, integrator_for, simulate, warn_if_started_off
from ._solution import Solution
from ._systems import AbstractSystem, check_state

_AXIS = "batch"


def _absent(x) -> bool:
    return x is None


def _leaf_axes(system: AbstractSystem, system_axes: Any) -> AbstractSystem:
    """`system_axes` (a prefix of `system`, as `vmap`'s `in_axes`) broadcast to every leaf."""
    try:
        return jax.tree.broadcast(system_axes, system, is_leaf=_absent)
    except ValueError as error:
        raise ValueError(
            "system_axes must be None, an integer, or a pytree prefix of the system with an "
            f"integer or None per part (as jax.vmap's in_axes): {error}"
        ) from None


def _pad(x: jax.Array, size: int) -> jax.Array:
    # Repeat the last member: padding is then a valid simulation, never a NaN that trips
    # a status or a slow path.
    return jnp.concatenate([x, jnp.repeat(x[-1:], size - x.shape[0], axis=0)])


# Numbers among `simulate`'s options: passed as arrays, so that new values do not recompile.
_NUMERIC = ("ts", "rtol", "atol", "dt0")


# On CPU a device simulates its members in chunks whose mass matrices take about this many
# bytes: the loop kernels sweep over every member's matrices at each of their n steps, and a
# batch whose matrices spill out of the cache runs at the speed of memory
# (`benchmarks/throughput.py --batch 2048`). A GPU takes its whole batch at once.
_CHUNK_BYTES = 2**18


def _chunk(per_device: int, n: int, dtype, platform: str) -> int:
    """How many members a device simulates at once: all of them, or on CPU, as many even
    chunks as keep each chunk's mass matrices within `_CHUNK_BYTES`."""
    largest = max(1, _CHUNK_BYTES // (n * n * jnp.dtype(dtype).itemsize))
    if platform != "cpu" or per_device <= largest:
        return per_device
    return -(-per_device // -(-per_device // largest))


def _empty(x) -> bool:
    """Whether `x` is an array (or its shape) of no elements."""
    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and 0 in x.shape


def _run(arrays, static, axes, q0, qd0, times, numeric, options, mesh, chunk, size, cut):
    # Padded, moved and (`cut`) cut back inside the program: each eager operation on the batch
    # costs as much as some hundred steps of a small robot.
    arrays = jax.tree.map(
        lambda x, axis: x if axis is None else _pad(jnp.moveaxis(x, axis, 0), size),
        arrays,
        axes,
        is_leaf=_absent,
    )
    axes = jax.tree.map(lambda axis: None if axis is None else 0, axes, is_leaf=_absent)
    q0, qd0 = _pad(q0, size), _pad(qd0.astype(q0.dtype), size)

    def local(arrays, q0, qd0, times, numeric):
        def one(arrays, q0, qd0):
            system = eqx.combine(arrays, static)
            return simulate(system, q0, qd0, *times, throw=False, **numeric, **options)

        if 1 < chunk == q0.shape[0]:
            return jax.vmap(one, in_axes=(axes, 0, 0))(arrays, q0, qd0)
        # the members' own leaves are mapped over, the shared ones closed over
        own = jax.tree.map(lambda x, axis: None if axis is None else x, arrays, axes, is_leaf=_absent)
        shared = jax.tree.map(lambda x, axis: x if axis is None else None, arrays, axes, is_leaf=_absent)

        def member(inputs):
            own, q0, qd0 = inputs
            return one(eqx.combine(own, shared), q0, qd0)

        # one at a time without `vmap` (a device's one member too): mapped over a batch of
        # one, every loop of the program carries the batched loops' selects, and compiles a
        # third longer (`benchmarks/contacts.py`, `ball_drop.py`). Outputs of no size (the
        # time-stepping route's event records) are made outside: `lax.map` in chunks
        # reshapes each output by its size and divides by zero on them.
        template = jax.eval_shape(member, jax.tree.map(lambda x: x[0], (own, q0, qd0)))
        mapped = jax.lax.map(
            lambda inputs: eqx.filter(member(inputs), _empty, inverse=True),
            (own, q0, qd0),
            batch_size=None if chunk == 1 else chunk,
        )
        absent = jax.tree.map(lambda x: jnp.zeros(q0.shape[:1] + x.shape, x.dtype), eqx.filter(template, _empty))
        return eqx.combine(mapped, absent)

    specs = jax.tree.map(
        lambda axis: PartitionSpec() if axis is None else PartitionSpec(_AXIS),
        axes,
        is_leaf=_absent,
    )
    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(specs, PartitionSpec(_AXIS), PartitionSpec(_AXIS), PartitionSpec(), PartitionSpec()),
        out_specs=PartitionSpec(_AXIS),
        check_vma=False,
    )
    solution = sharded(arrays, q0, qd0, times, numeric)
    return solution if cut is None else jax.tree.map(lambda x: x[:cut], solution)


@functools.lru_cache(maxsize=16)
def _mesh(devices: tuple[jax.Device, ...]) -> Mesh:
    """The batch's mesh over `devices`."""
    return Mesh(np.array(devices), (_AXIS,))


# the program of a batch, compiled as its route needs (`_jit.compiler_options`)
_RUNS = {events: jit(_run, events=events) for events in (False, True)}


def simulate_batch(
    system: AbstractSystem,
    q0: Float[ArrayLike, "batch n"],
    qd0: Float[ArrayLike, "batch n"],
    t0: Real[ArrayLike, ""],
    t1: Real[ArrayLike, ""],
    *,
    system_axes: Any = None,
    devices: Sequence[jax.Device] | None = None,
    **simulate_kwargs,
) -> Solution:
    """Simulate a batch on every device: `vmap` within a device, `shard_map` across devices.

    The batch is split evenly over `devices` (no more of them than members; padded with copies
    of its last member, which are dropped again). Each member gets its own `status`: a failed
    member is marked and the others are kept, so nothing raises. Compiled once per batch
    shape, system structure and devices. On CPU, split the cores into devices before the
    first computation (`jax.config.update("jax_num_cpu_devices", cores)`; see "Batches and
    devices" on the documentation site, docs/concepts/batches.md); each device then takes
    its members in chunks whose mass matrices stay in the cache, and a system with contacts or
    limits one member at a time, so that each pays for its own events only.

    **Arguments:**

    - `system`: any ukjax system.
    - `q0`, `qd0`: initial coordinates and velocities, shape `(batch, n)`.
    - `t0`, `t1`: start and end times, shared by the batch.
    - `system_axes`: which of the system's leaves carry the batch, as `jax.vmap`'s `in_axes`
      for it (None: one system for the whole batch; `0`: every array leaf has a leading batch
      axis; or a pytree prefix of the system, e.g. from `eqx.tree_at`).
    - `devices`: the devices to use (default `jax.devices()`, all of the default backend).
    - `**simulate_kwargs`: passed on to [`ukjax.simulate`][] (`ts`, `solver`, `dt0`, `adaptive`,
      `rtol`, ...); not `throw` or `progress_meter`.

    **Returns:**

    A [`ukjax.Solution`][] whose arrays have a leading batch axis, as `jax.vmap` of `simulate`
    would give.
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"system must be a ukjax system, got {type(system).__name__}.")
    for name in ("throw", "progress_meter"):
        if name in simulate_kwargs:
            raise TypeError(f"simulate_batch takes no {name}: each member's outcome is in Solution.status.")
    q0, qd0 = check_state(system, q0, qd0, batch=True, inputs=True)
    devices = tuple(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must name at least one device.")
    batch = q0.shape[0]
    # no more devices than members: a device of padding only would cost its copy of the system
    devices = devices[:batch]
    backend = simulate_kwargs.pop("backend", AutoBackend())
    check_backend(backend)
    platform = devices[0].platform
    backend, system, arrays, static, found = bound(backend, system, q0.dtype, platform)
    simulate_kwargs["backend"] = backend
    axes = _leaf_axes(arrays, system_axes)

    def check_axis(x, axis):
        if axis is not None and x.shape[axis] != batch:
            raise ValueError(
                f"A system leaf batched by system_axes has {x.shape[axis]} members; q0 has {batch}."
            )

    jax.tree.map(check_axis, arrays, axes, is_leaf=_absent)
    per_device = -(-batch // len(devices))
    shared = not any(axis is not None for axis in jax.tree.leaves(axes, is_leaf=_absent))
    integrator = integrator_for(system, simulate_kwargs.get("solver"), found)
    if platform == "cpu" and isinstance(backend, TreeKernel) and not integrator.lockstep:
        # With contacts and limits, one member at a time: in a batch the members step in
        # lockstep, each event pass lasting until every member's stretch has ended, and the
        # contact kernel solves the lanes one by one, the waiting ones too
        # (`benchmarks/tumbling.py`: four times longer in lockstep).
        chunk = 1
    elif shared and platform == "cpu" and kernels.runs(system) is not None:
        chunk = per_device  # the kernel takes the device's members in chunks of its own
    else:
        chunk = _chunk(per_device, q0.shape[1], q0.dtype, platform)
    size = -(-per_device // chunk) * chunk * len(devices)
    times = (as_input(t0, q0.dtype), as_input(t1, q0.dtype))
    numeric = {k: as_input(v, q0.dtype) for k, v in simulate_kwargs.items() if k in _NUMERIC and v is not None}
    options = {k: v for k, v in simulate_kwargs.items() if k not in numeric}
    mesh = _mesh(devices)
    run = _RUNS[integrator.events]
    # Cut back to the batch in the program within one process; across processes outside it,
    # where each process keeps its own members (a cut program would gather them all).
    cut = batch if jax.process_count() == 1 else None
    solution = run(arrays, static, axes, q0, qd0, times, numeric, options, mesh, chunk, size, cut)
    if cut is None:
        solution = jax.tree.map(lambda x: x[:batch], solution)
    # the deepest contacts named where the members share one system
    named = (system, t0, q0, qd0) if shared else ()
    warn_if_started_inside(solution, simulate_kwargs.get("atol", DEFAULT_TOL), *named)
    warn_if_started_off(
        solution, q0, qd0, t0, simulate_kwargs.get("rtol", DEFAULT_TOL), simulate_kwargs.get("atol", DEFAULT_TOL)
    )
    return solution
