"""The route a simulation computes its accelerations by, as an object: pure XLA
(`XLABackend`), the compiled tree kernel where it covers the system (`TreeKernel`), or the
automatic choice between them (`AutoBackend`, the default), which says what it picked.

A backend binds a system (`bind`): it sets on the system's trees and constrained systems the
routes their `M`, `Q`, motion and contact solve are computed by (`RigidBodyTree.route`,
`ConstrainedSystem.contact_kernel`), as MJX's models hold their `impl`. Systems themselves
are pure XLA: a system no backend bound computes everything in jax.numpy.
"""

import abc
import weakref
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._robots.tree import RigidBodyTree
from .._systems import ConstrainedSystem
from .._unilateral import unilaterals
from ._build import KERNELS_DEFAULT
from ._contact_kernel import ContactKernel
from ._tree_kernel import TreeKernelRoute, can_run, contacts_covered, covered


def _bound(system, tree_route, contact_kernel):
    """`system` with every tree's route and every constrained system's contact solve set."""
    nodes = _nodes(system)
    if not nodes:
        return system
    where = lambda s: [n.route if isinstance(n, RigidBodyTree) else n.contact_kernel for n in _nodes(s)]  # noqa: E731
    values = [tree_route if isinstance(n, RigidBodyTree) else contact_kernel for n in nodes]
    return eqx.tree_at(where, system, values, is_leaf=lambda x: x is None)


def _nodes(system) -> list:
    """The trees and constrained systems in `system`, in `_bound`'s order."""
    is_node = lambda x: isinstance(x, (RigidBodyTree, ConstrainedSystem))  # noqa: E731
    nodes, found = [x for x in jax.tree.leaves(system, is_leaf=is_node) if is_node(x)], []
    while nodes:
        node = nodes.pop()
        found.append(node)
        if isinstance(node, ConstrainedSystem):
            inner = (node.system, node.constraints, node.stabilization, node.nonideal)
            nodes += [x for x in jax.tree.leaves(inner, is_leaf=is_node) if is_node(x)]
    return found


class AbstractBackend(eqx.Module):
    """Where a simulation computes its accelerations. Passed to [`ukjax.simulate`][],
    [`ukjax.simulate_batch`][] and the fits as `backend=`; the solution reports the one that
    ran (`Solution.backend`)."""

    @abc.abstractmethod
    def select(self, system, dtype, platform: str) -> "XLABackend | TreeKernel":
        """The backend that runs `system` with states of `dtype` on `platform` (`"cpu"` or
        `"gpu"`, as `jax.default_backend()` names them): this one, or (`AutoBackend`) the one
        it picks."""

    @abc.abstractmethod
    def bind(self, system, dtype, platform: str):
        """`system` as `select(system, dtype, platform)` runs it: its trees and constrained
        systems told their routes."""


class XLABackend(AbstractBackend):
    """Everything in jax.numpy, traced and compiled by XLA on any device and dtype: the
    reference route, and the one derivatives always take."""

    def select(self, system, dtype, platform: str) -> "XLABackend":
        return self

    def bind(self, system, dtype, platform: str):
        return _bound(system, None, None)


class TreeKernel(AbstractBackend):
    """The compiled kernel (`native/`, C++ on a CPU, CUDA on an NVIDIA GPU) wherever it
    covers the system, XLA for the rest: a rigid-body tree's whole U-K solve (its `Connect`
    loops, drivers and fixed tendons), its `M`, `Q` and motion for the rows of loops and
    contacts, its acceleration under joint limits and plane contacts in given modes, and any
    system's contact solve at fixed modes. Float64 only; built with the system's C++ compiler
    (`CXX`, default `g++`) on first use. Under `jax.vmap` one call for the whole batch;
    derivatives from the XLA route."""

    def select(self, system, dtype, platform: str) -> "TreeKernel":
        if not can_run(system, dtype, platform):
            raise ValueError(
                f"The tree kernel does not run here: it takes float64 states and parameters (these "
                f"are {jnp.dtype(dtype).name}) on a CPU or an NVIDIA GPU with its compiler "
                f"(here {platform}). Pass backend=ukjax.XLABackend() or ukjax.AutoBackend()."
            )
        return self

    def bind(self, system, dtype, platform: str):
        self.select(system, dtype, platform)
        return _bound(system, TreeKernelRoute(platform), ContactKernel())


class AutoBackend(AbstractBackend):
    """The tree kernel (`TreeKernel`) where the system has parts it covers (a robot tree, or
    unilateral constraints) and it runs (float64, a CPU or an NVIDIA GPU, the kernel built),
    else XLA (`XLABackend`). `select` says which; `Solution.backend` reports it.

    **Arguments:**

    - `kernels`: whether the kernel may be picked (default: yes, unless the environment
      variable `UKJAX_KERNELS` was `0` when ukjax was imported).
    """

    kernels: bool = eqx.field(static=True, default=KERNELS_DEFAULT)

    def select(self, system, dtype, platform: str) -> "XLABackend | TreeKernel":
        # the kernel is built only for systems it has something to do for
        wanted = (
            covered(system) is not None or contacts_covered(system) is not None or bool(unilaterals(system))
        )
        if self.kernels and wanted and can_run(system, dtype, platform):
            return TreeKernel()
        return XLABackend()

    def bind(self, system, dtype, platform: str):
        return self.select(system, dtype, platform).bind(system, dtype, platform)


def check_backend(backend) -> None:
    """A clear error for anything passed as `backend=` that is not a backend."""
    if not isinstance(backend, AbstractBackend):
        name = type(backend).__name__
        raise TypeError(f"backend must be a ukjax backend (ukjax.AutoBackend(), ...), got {name}.")


class Bound(NamedTuple):
    """A system as a backend runs it (`bound`): the backend `select` picked, the system it
    bound, that system's arrays and the rest (`eqx.partition`), and its unilateral
    constraints."""

    backend: "XLABackend | TreeKernel"
    system: Any
    arrays: Any
    static: Any
    unilaterals: tuple


# The last systems bound, by identity (an edit through `eqx.tree_at` is a new object, bound
# anew). Selecting, binding and partitioning walk the whole system, eagerly, a large part of a
# small robot's short fixed-step run (`benchmarks/arm_batches.py`). The bound system holds the
# caller's own arrays, so a value changed in place reaches it as it would the caller's system.
_RECENT: list[tuple[weakref.ref, tuple, Bound]] = []
_KEPT = 8


def bound(backend: AbstractBackend, system, dtype, platform: str) -> Bound:
    """`system` bound by the backend that `backend.select(system, dtype, platform)` picks,
    remembered for the last few systems outside every trace.

    **Arguments:**

    - `backend`: the backend asked for.
    - `system`: the system to run.
    - `dtype`, `platform`: the states' dtype and the platform (as `select` takes them).

    **Returns:**

    A `Bound`.
    """
    key = (backend, jnp.dtype(dtype), platform)
    for ref, known, found in _RECENT:
        if ref() is system and known == key:
            return found
    selected = backend.select(system, dtype, platform)
    system_ = selected.bind(system, dtype, platform)
    arrays, static = eqx.partition(system_, eqx.is_array)
    found = Bound(selected, system_, arrays, static, tuple(unilaterals(system_)))
    # a traced system lives in its trace only
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(arrays)):
        try:
            ref = weakref.ref(system)
        except TypeError:
            return found
        _RECENT[:] = [(ref, key, found)] + [entry for entry in _RECENT if entry[0]() is not None][: _KEPT - 1]
    return found
