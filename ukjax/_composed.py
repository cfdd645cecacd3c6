"""Subsystems stacked into one system: block-diagonal `M`, stacked `Q`, every part's
constraints joined in the whole's U-K solve."""

import functools

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, Float

from ._animate import AbstractDrawn, join, sketch_of
from ._dynamics import ConstraintLevel, Dynamics, merge
from ._systems import AbstractSized, AbstractSystem, innermost, sizes_of, violation_of


def _embed(level: ConstraintLevel, where: slice, n: int) -> ConstraintLevel:
    """A part's level in the coordinates of the whole: its columns placed at `where`."""
    rows = level.rows
    c = None if level.nonideal is None else jnp.zeros(n, level.nonideal.dtype).at[where].set(level.nonideal)

    def widen(rows):
        return eqx.tree_at(lambda r: r.A, rows, jnp.zeros((rows.A.shape[0], n), rows.A.dtype).at[:, where].set(rows.A))

    contacts = level.contacts
    if contacts is not None:
        contacts = eqx.tree_at(lambda c: (c.normal, c.tangent), contacts, (widen(contacts.normal), widen(contacts.tangent)))
    return ConstraintLevel(widen(rows), c, level.method, contacts, level.kernel)


class ComposedSystem(AbstractSystem, AbstractSized, AbstractDrawn):
    """Subsystems stacked into one: block-diagonal `M`, stacked `Q`, named coordinate slices.
    Connect them with constraints (the parallel-robot paper [1] §2, the redundant-manipulator paper [4]). Constrained parts keep their
    constraints: they join the whole system's U-K solve.

    **Arguments:**

    - `parts`: a mapping from names to systems, in coordinate order.
    - `sizes`: the number of coordinates of each part; read from a part's `num_coordinates`
      where it has one.
    """

    # Names and systems in coordinate order: a dict leaf would come back from a JAX transform
    # with its keys sorted, pairing the slices with the wrong parts.
    names: tuple[str, ...] = eqx.field(static=True)
    systems: tuple[AbstractSystem, ...]
    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, parts: dict[str, AbstractSystem], sizes: dict[str, int] | None = None):
        sizes = {} if sizes is None else dict(sizes)
        for name, part in parts.items():
            if not isinstance(part, AbstractSystem):
                raise TypeError(f"part {name!r} must be a ukjax system, got {type(part).__name__}.")
            if name not in sizes:
                if not isinstance(innermost(part), AbstractSized):
                    raise ValueError(f"Give the number of coordinates of part {name!r} in sizes.")
                sizes[name] = sizes_of(part)[0]
        self.names = tuple(parts)
        self.systems = tuple(parts.values())
        self.sizes = tuple(int(sizes[name]) for name in parts)

    @property
    def parts(self) -> dict[str, AbstractSystem]:
        """The parts by name, in coordinate order."""
        return dict(zip(self.names, self.systems))

    @property
    def num_coordinates(self) -> int:
        return sum(self.sizes)

    @property
    def num_velocities(self) -> int:
        # a part that does not say is taken to have as many velocities as coordinates
        known = lambda p, n: sizes_of(p)[1] if isinstance(innermost(p), AbstractSized) else n  # noqa: E731
        return sum(known(p, n) for p, n in zip(self.systems, self.sizes))

    def slice(self, name: str) -> slice:
        """The coordinates of part `name` within `q`."""
        if name not in self.names:
            raise KeyError(f"No part {name!r}; the parts are {list(self.names)}.")
        k = self.names.index(name)
        start = sum(self.sizes[:k])
        return slice(start, start + self.sizes[k])

    def part(self, q: Float[Array, " n"], name: str) -> Float[Array, " m"]:
        """The coordinates (or velocities) of part `name`."""
        return q[self.slice(name)]

    def _check(self, q) -> None:
        if q.shape != (self.num_coordinates,):
            raise ValueError(
                f"The composed system has {self.num_coordinates} coordinates ({dict(zip(self.names, self.sizes))}), "
                f"but q has shape {q.shape}."
            )

    def sketch(self, t, q):
        return join(*(sketch_of(p, t, self.part(q, name)) for name, p in self.parts.items()))

    def mass_matrix(self, t, q):
        self._check(q)
        return jsl.block_diag(*(p.mass_matrix(t, self.part(q, name)) for name, p in self.parts.items()))

    def forces(self, t, q, qd):
        self._check(q)
        return jnp.concatenate(
            [p.forces(t, self.part(q, name), self.part(qd, name)) for name, p in self.parts.items()]
        )

    def _aligned(self, parts: list[tuple[slice, tuple[ConstraintLevel, ...]]]) -> tuple[ConstraintLevel, ...]:
        """The parts' levels in the whole's coordinates, aligned at the last one, so that every
        part's own joint solve lands in the last level, which a constraint on the whole joins."""
        n = self.num_coordinates
        depth = max(len(levels) for _, levels in parts)
        out = []
        for k in range(depth):
            members = [
                _embed(levels[k + len(levels) - depth], where, n)
                for where, levels in parts
                if k + len(levels) >= depth
            ]
            # one solve over independent blocks: the robust route if any part asked for it
            method = "svd" if any(level.method == "svd" for level in members) else "cholesky"
            out.append(merge(members, method))
        return tuple(out)

    def constraint_levels(self, t, q, qd):
        self._check(q)
        return self._aligned(
            [
                (self.slice(name), p.constraint_levels(t, self.part(q, name), self.part(qd, name)))
                for name, p in self.parts.items()
            ]
        )

    def dynamics(self, t, q, qd):
        self._check(q)
        parts = [
            (self.slice(name), p.dynamics(t, self.part(q, name), self.part(qd, name)))
            for name, p in self.parts.items()
        ]
        levels = self._aligned([(where, d.levels) for where, d in parts])
        M = jsl.block_diag(*(d.M for _, d in parts))
        # a part's own inconsistency (a controlled part's servo constraints) is the whole's
        own = [d.inconsistency for _, d in parts if d.inconsistency is not None]
        inconsistency = functools.reduce(jnp.maximum, own) if own else None
        return Dynamics(M, jnp.concatenate([d.Q for _, d in parts]), levels, inconsistency)

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))
