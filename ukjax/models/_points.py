"""Points of chains, and the constraints that connect them (the parallel-robot paper [1] §2, the redundant-manipulator paper [4])."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._animate import Sketch
from .._composed import ComposedSystem
from .._constraints import AbstractDrawnConstraint, AbstractHolonomic
from .._systems import AbstractSystem, innermost
from ._planar import PlanarChain


class JointPoint(eqx.Module):
    """A joint of a chain: 0 is the base, `k` the tip of a `k`-link chain. `part` names the
    chain within a `ComposedSystem` (or is None for a single chain).

    Called as `point(system, q)`, it gives the joint's position.
    """

    joint: int = eqx.field(static=True)
    part: str | None = eqx.field(static=True, default=None)

    def __call__(self, system: AbstractSystem, q: Float[Array, " n"]) -> Float[Array, " d"]:
        if self.part is not None:
            if not isinstance(system, ComposedSystem):
                raise TypeError(f"JointPoint with part={self.part!r} needs a ComposedSystem.")
            system, q = system.parts[self.part], system.part(q, self.part)
        # A constrained or forced chain has the joints of the chain it wraps.
        system = innermost(system)
        if not isinstance(system, PlanarChain):
            raise TypeError(f"JointPoint needs a ukjax.models.PlanarChain, got {type(system).__name__}.")
        return system.joint_positions(q)[self.joint]


class PointConstraint(AbstractHolonomic, AbstractDrawnConstraint):
    """Point `a` coincides with point `b`, or with a fixed location `b`.

    **Arguments:**

    - `system`: the system whose coordinates the points depend on.
    - `a`: a [`ukjax.models.JointPoint`][].
    - `b`: another `JointPoint`, or a fixed location (array).
    """

    system: AbstractSystem
    a: JointPoint
    b: JointPoint | Float[Array, " d"]

    def residual(self, t, q):
        return self.a(self.system, q) - self._target(q)

    def _target(self, q):
        return self.b(self.system, q) if isinstance(self.b, JointPoint) else jnp.asarray(self.b, q.dtype)

    def sketch(self, system, t, q):
        """The gap between the two points (the fixed location drawn as a point)."""
        a, b = self.a(self.system, q), self._target(q)
        return Sketch(jnp.zeros((0, 2, a.shape[0]), q.dtype), b[None], jnp.stack([a, b])[None])
