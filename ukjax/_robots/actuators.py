"""MuJoCo's actuators on a rigid-body tree: affine gain and bias through joints or fixed tendons,
with MuJoCo's clamps, and the system they drive."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._arrays import as_inexact
from .._animate import sketch_of
from .._systems import AbstractSystem, AbstractWrapper, violation_of
from .equalities import tree_of
from .tree import RigidBodyTree


class Actuators(eqx.Module):
    """Actuators as MuJoCo applies them without activation dynamics (`motor`, `position`,
    `velocity`, `general` with fixed or affine gain and affine bias): with `L = g · (q or the
    tendon's length)` the actuator's length, `L̇` its velocity, `u` the control clamped to
    `ctrlrange`, the force is `f = (a₀ + a₁L + a₂L̇) u + b₀ + b₁L + b₂L̇`, clamped to
    `forcerange`, and acts through the transmission's moment (the gear at a joint, the gear
    times the tendon's coefficients).

    **Arguments:**

    - `names`: one per actuator.
    - `targets`: `("joint", coordinate)` or `("tendon", tendon index)` per actuator.
    - `gear` (m,), `gain` (m, 3), `bias` (m, 3): MuJoCo's `gear[0]`, `gainprm[:3]` (zeros past
      the first for a fixed gain) and `biasprm[:3]` (zeros without bias).
    - `ctrlrange`, `forcerange` (m, 2), with `ctrl_limited`, `force_limited` (m,) saying which
      apply.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    targets: tuple[tuple[str, int], ...] = eqx.field(static=True)
    ctrl_limited: tuple[bool, ...] = eqx.field(static=True)
    force_limited: tuple[bool, ...] = eqx.field(static=True)
    gear: Float[Array, " m"]
    gain: Float[Array, "m 3"]
    bias: Float[Array, "m 3"]
    ctrlrange: Float[Array, "m 2"]
    forcerange: Float[Array, "m 2"]

    def __init__(
        self,
        names,
        targets,
        gear: Float[ArrayLike, " m"],
        gain: Float[ArrayLike, "m 3"],
        bias: Float[ArrayLike, "m 3"],
        ctrlrange: Float[ArrayLike, "m 2"],
        forcerange: Float[ArrayLike, "m 2"],
        ctrl_limited,
        force_limited,
    ):
        self.names, self.targets = tuple(names), tuple((str(k), int(i)) for k, i in targets)
        self.ctrl_limited, self.force_limited = tuple(map(bool, ctrl_limited)), tuple(map(bool, force_limited))
        self.gear, self.gain, self.bias = as_inexact(gear), as_inexact(gain), as_inexact(bias)
        self.ctrlrange, self.forcerange = as_inexact(ctrlrange), as_inexact(forcerange)
        m = len(self.names)
        for name, x, shape in (
            ("targets", self.targets, None),
            ("gear", self.gear, (m,)),
            ("gain", self.gain, (m, 3)),
            ("bias", self.bias, (m, 3)),
            ("ctrlrange", self.ctrlrange, (m, 2)),
            ("forcerange", self.forcerange, (m, 2)),
        ):
            if (len(x) != m) if shape is None else (x.shape != shape):
                raise ValueError(f"Actuators: {name} must have one entry per actuator ({m}).")

    def moments(self, tree: RigidBodyTree, q: Float[Array, " n"]) -> Float[Array, "m n"]:
        """`∂L/∂q` of every actuator (the tendons' coefficients read from `tree`)."""
        rows = []
        for (kind, index), gear in zip(self.targets, self.gear):
            if kind == "joint":
                rows.append(gear * jnp.zeros_like(q).at[index].set(1.0))
            else:
                rows.append(gear * tree.tendon_coefficients[index])
        return jnp.stack(rows) if rows else jnp.zeros((0, q.shape[0]), q.dtype)

    def forces(
        self, tree: RigidBodyTree, q: Float[Array, " n"], qd: Float[Array, " n"], ctrl: Float[Array, " m"]
    ) -> Float[Array, " n"]:
        """MuJoCo's `qfrc_actuator` (per coordinate) for the controls `ctrl`.

        **Returns:**

        The generalized actuator forces, shape (n,).
        """
        ctrl = jnp.asarray(ctrl, q.dtype)
        if ctrl.shape != self.gear.shape:
            raise ValueError(f"The controls must have shape {self.gear.shape}, one per actuator; got {ctrl.shape}.")
        # A joint's actuator moves one coordinate: its length and its force are gathered and
        # scattered there, not carried by a matrix product (an operation of its own in every
        # evaluation, three of a small arm's dozen between its kernel's calls).
        joint = np.array([kind == "joint" for kind, _ in self.targets], bool)
        at = np.array([index if kind == "joint" else 0 for kind, index in self.targets], int)
        tendons = self.moments(tree, q) * ~joint[:, None] if not joint.all() else None

        def along(x):
            own = self.gear * x[at]
            return own if tendons is None else jnp.where(joint, own, tendons @ x)

        length, velocity = along(q), along(qd)
        limited = jnp.array(self.ctrl_limited, bool)
        ctrl = jnp.where(limited, jnp.clip(ctrl, self.ctrlrange[:, 0], self.ctrlrange[:, 1]), ctrl)
        g, b = self.gain, self.bias
        force = (g[:, 0] + g[:, 1] * length + g[:, 2] * velocity) * ctrl + b[:, 0] + b[:, 1] * length + b[:, 2] * velocity
        limited = jnp.array(self.force_limited, bool)
        force = jnp.where(limited, jnp.clip(force, self.forcerange[:, 0], self.forcerange[:, 1]), force)
        own = jnp.where(joint, self.gear * force, 0.0)
        coordinates = at[joint]
        if len(set(coordinates.tolist())) == coordinates.size:
            # each coordinate driven by one joint actuator at most: its force gathered from the
            # actuators' (the last entry a zero), which fuses with what surrounds it
            driver = np.full(q.shape[0], len(at), int)
            driver[coordinates] = np.flatnonzero(joint)
            applied = jnp.append(own, 0.0)[driver]
        else:
            applied = jnp.zeros_like(q).at[at].add(own)
        return applied if tendons is None else applied + tendons.T @ force


class Actuated(AbstractWrapper):
    """A system driven by its [`ukjax.models.Actuators`][] under controls `control(t, q, qd)`
    (shape (m,)): applied forces `Q + qfrc_actuator`. Made by `Model.controlled`.

    **Arguments:**

    - `system`: the rigid-body tree (or a system wrapping one).
    - `actuators`: its actuators.
    - `control`: `control(t, q, qd) -> (m,)`.
    """

    system: AbstractSystem
    actuators: Actuators
    control: Callable

    def sketch(self, t, q):
        return sketch_of(self.system, t, q)

    def actuation(self, t, q, qd):
        """The actuators' generalized forces (MuJoCo's `qfrc_actuator`) under the controls at
        `(t, q, q̇)`."""
        return self.actuators.forces(tree_of(self.system), q, qd, self.control(t, q, qd))

    def mass_matrix(self, t, q):
        return self.system.mass_matrix(t, q)

    def forces(self, t, q, qd):
        return self.system.forces(t, q, qd) + self.actuation(t, q, qd)

    def constraint_levels(self, t, q, qd):
        return self.system.constraint_levels(t, q, qd)

    def violation(self, t, q, qd):
        return violation_of(self.constraint_levels(t, q, qd))

    def dynamics(self, t, q, qd):
        inner = self.system.dynamics(t, q, qd)
        return inner._replace(Q=inner.Q + self.actuation(t, q, qd))
