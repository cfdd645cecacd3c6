"""`Model`: a ready mechanism, what the MJCF/URDF importer and the source papers' builders
return (the system, its constraints, a start, and what drives it)."""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._constraints import AbstractConstraint, Baumgarte
from .._systems import AbstractSystem, ConstrainedSystem
from .._unilateral import AbstractUnilateral
from .actuators import Actuated, Actuators
from .tree import RigidBodyTree


class Model(NamedTuple):
    """A ready mechanism.

    **Attributes:**

    - `system`: the unconstrained system.
    - `constraints`: its passive constraints (a closed chain) or, for a trajectory to follow
      by constraint forces alone (the SCARA paper [2]), that trajectory.
    - `q0`, `qd0`: the default initial state.
    - `servo`: servo constraints of the paper's control task (empty if none).
    - `actuation`: the actuation matrix `B_u` (n, m) of the control task, or None.
    - `actuators`: an imported file's actuators as MuJoCo applies them
      ([`ukjax.models.Actuators`][]), or None; see `controlled`.
    - `unilateral`: an imported file's joint limits and contacts as exact unilateral
      constraints ([`ukjax.models.JointLimits`][], [`ukjax.models.PlaneContacts`][],
      [`ukjax.models.ShapeContacts`][]); kept
      apart from `constraints` because they change how a simulation runs (event by event);
      `full_system()` includes them.
    - `ctrl`: an imported file's controls at the start (its keyframe's `ctrl`, zero without
      one), or None without actuators.
    - `timestep`: an imported file's `<option timestep>` (MuJoCo's default 0.002 where it
      gives none), the step `ukjax simulate FILE` takes by time-stepping; None for a model
      not from a file.
    """

    system: AbstractSystem
    constraints: tuple[AbstractConstraint, ...]
    q0: Float[Array, " n"]
    qd0: Float[Array, " n"]
    servo: tuple[AbstractConstraint, ...] = ()
    actuation: Float[Array, "n m"] | None = None
    actuators: Actuators | None = None
    unilateral: tuple[AbstractUnilateral, ...] = ()
    ctrl: Float[Array, " m"] | None = None
    timestep: float | None = None

    def full_system(self, stabilization: Baumgarte | None = None, *, unilateral: bool = True) -> AbstractSystem:
        """The whole system a file describes, as MuJoCo runs it: the tree under its
        equalities, its joint limits and its contacts, driven by its actuators held at
        `ctrl` (a keyframe's controls) where it has any.

        **Arguments:**

        - `stabilization`: optional [`ukjax.Baumgarte`][] gains over the equality rows.
        - `unilateral`: False leaves the limits and contacts out (a smooth run, on the
          compiled kernel where the tree is covered).

        **Returns:**

        A [`ukjax.ConstrainedSystem`][] (the driven tree itself where nothing constrains it).
        """
        system = self.system
        if self.actuators is not None:
            ctrl = jnp.asarray(self.ctrl)
            system = self.controlled(lambda t, q, qd: ctrl)
        constraints = self.constraints + (self.unilateral if unilateral else ())
        return ConstrainedSystem(system, constraints, stabilization) if constraints else system

    def controlled(self, control: Callable) -> AbstractSystem:
        """The system driven by its actuators under `control(t, q, qd) -> (m,)` (MuJoCo's
        `ctrl`): applied forces include MuJoCo's `qfrc_actuator`, gains, biases and clamps
        included. Constrain it like the system itself.

        **Returns:**

        A [`ukjax.models.Actuated`][] system.
        """
        if self.actuators is None:
            raise ValueError("This model has no actuators (controlled() needs an imported model with some).")
        return Actuated(self.system, self.actuators, control)

    def state_from_mujoco(self, qpos: Float[ArrayLike, " n"], qvel: Float[ArrayLike, " v"]):
        """`(q, q̇)` from MuJoCo's `(qpos, qvel)` (a keyframe, a logged state): quaternion
        rates from angular velocities for an imported tree, the identity otherwise.

        **Returns:**

        `(q, qd)`.
        """
        if isinstance(self.system, RigidBodyTree):
            return self.system.state_from_mujoco(qpos, qvel)
        return jnp.asarray(qpos), jnp.asarray(qvel)

    def state_to_mujoco(self, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]):
        """MuJoCo's `(qpos, qvel)` from `(q, q̇)`, the inverse of `state_from_mujoco`.

        **Returns:**

        `(qpos, qvel)`.
        """
        if isinstance(self.system, RigidBodyTree):
            return self.system.state_to_mujoco(q, qd)
        return jnp.asarray(q), jnp.asarray(qd)
