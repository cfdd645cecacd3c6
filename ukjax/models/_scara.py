"""The SCARA arm of the SCARA paper [2] (Xu & Liu 2017): closed-form dynamics and trajectory constraints."""


import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._animate import AbstractDrawn, Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint, AbstractHolonomic
from .._robots.model import Model
from .._systems import AbstractUnconstrainedSystem
from ._serial import SerialChain, prismatic, revolute


class ScaraArm(AbstractUnconstrainedSystem, AbstractDrawn):
    """SCARA arm (three revolute joints about z, one prismatic along z), `q = (q1, q2, q3, q4)`,
    with the closed-form `M`, `C q̇` and `G` of the SCARA paper [2] eq. 34–36 (`G = [0, 0, 0, m4 g]`).

    **Arguments:** link masses `m` (4,), lengths `l0, l1, l2`, centre-of-mass distances
    `r1, r2`, inertias about z `Iz` (4,), gravity `g`. Defaults are the SCARA paper's values.
    """

    m: Float[Array, "4"] = eqx.field(converter=as_inexact, default=(20.0, 15.0, 15.0, 0.5))
    l0: Float[Array, ""] = eqx.field(converter=as_inexact, default=0.0)
    l1: Float[Array, ""] = eqx.field(converter=as_inexact, default=0.2)
    l2: Float[Array, ""] = eqx.field(converter=as_inexact, default=0.25)
    r1: Float[Array, ""] = eqx.field(converter=as_inexact, default=0.1)
    r2: Float[Array, ""] = eqx.field(converter=as_inexact, default=0.125)
    Iz: Float[Array, "4"] = eqx.field(converter=as_inexact, default=(0.27, 0.31, 0.02, 0.0001))
    g: Float[Array, ""] = eqx.field(converter=as_inexact, default=9.81)

    def _coefficients(self):
        m1, m2, m3, m4 = self.m
        I1, I2, I3, I4 = self.Iz
        l1, l2 = self.l1, self.l2
        alpha = I1 + self.r1**2 * m1 + l1**2 * (m2 + m3 + m4)
        beta = I2 + I3 + I4 + l2**2 * (m3 + m4) + m2 * self.r2**2
        gamma = l1 * l2 * (m3 + m4) + l1 * m2 * self.r2
        delta = I3 + I4
        return alpha, beta, gamma, delta

    def mass_matrix(self, t, q):
        alpha, beta, gamma, delta = self._coefficients()
        c2 = jnp.cos(q[1])
        zero = jnp.zeros_like(c2)
        return jnp.array(
            [
                [alpha + beta + 2 * gamma * c2, beta + gamma * c2, delta, zero],
                [beta + gamma * c2, beta + zero, delta, zero],
                [delta + zero, delta, delta, zero],
                [zero, zero, zero, self.m[3] + zero],
            ]
        )

    def forces(self, t, q, qd):
        _, _, gamma, _ = self._coefficients()
        s2 = jnp.sin(q[1])
        coriolis = jnp.stack(
            [
                -gamma * s2 * qd[1] * qd[0] - gamma * s2 * (qd[0] + qd[1]) * qd[1],
                gamma * s2 * qd[0] ** 2,
                jnp.zeros_like(s2),
                jnp.zeros_like(s2),
            ]
        )
        gravity = jnp.stack([0 * s2, 0 * s2, 0 * s2, self.m[3] * self.g + 0 * s2])
        return -coriolis - gravity

    def sketch(self, t, q):
        """The column, the two arms at the column's top and the tool's slide down to the tool."""
        top = self.l0 + jnp.zeros_like(q[0])
        elbow = jnp.stack([-self.l1 * jnp.sin(q[0]), self.l1 * jnp.cos(q[0]), top])
        tool = self.end_effector(q)
        P = jnp.stack([jnp.zeros(3, q.dtype), jnp.stack([0 * top, 0 * top, top]), elbow, tool.at[2].set(top), tool])
        return Sketch(jnp.stack([P[:-1], P[1:]], axis=1), P)

    def end_effector(self, q: Float[Array, " 4"]) -> Float[Array, " 3"]:
        """Tool position `p(q)` of eq. 39."""
        q1, q12 = q[0], q[0] + q[1]
        return jnp.stack(
            [
                -self.l1 * jnp.sin(q1) - self.l2 * jnp.sin(q12),
                self.l1 * jnp.cos(q1) + self.l2 * jnp.cos(q12),
                self.l0 + q[3],
            ]
        )


def scara_reference(t) -> Float[Array, " 3"]:
    """The desired tool path of the SCARA paper [2] eq. 40."""
    w = 0.4 * jnp.pi
    return jnp.stack([0.05 * jnp.sin(w * t), 0.35 + 0.05 * jnp.cos(w * t), 0.02 * t])


class ScaraTrajectory(AbstractHolonomic, AbstractDrawnConstraint):
    """The SCARA paper [2] eq. 48: the tool follows eq. 40 with fixed orientation `q1 + q2 + q3 = 0`.
    Rows: x, y, orientation, z."""

    arm: ScaraArm

    def residual(self, t, q):
        p = self.arm.end_effector(q) - scara_reference(t)
        return jnp.stack([p[0], p[1], q[0] + q[1] + q[2], p[2]])

    def sketch(self, system, t, q):
        """The path up to `t` (a part of its own), the tool's gap to the path point it should be
        at, the path point drawn."""
        target = scara_reference(t).astype(q.dtype)
        path = jax.vmap(scara_reference)(t * jnp.linspace(0.0, 1.0, 65, dtype=q.dtype)).astype(q.dtype)
        return Sketch(
            jnp.stack([path[:-1], path[1:]], axis=1), target[None], jnp.stack([self.arm.end_effector(q), target])[None]
        )


def scara(arm: ScaraArm | None = None) -> Model:
    """SCARA arm of the SCARA paper [2] with its trajectory constraint (eq. 47).

    The printed `q1(0) = 30°, q3(0) = 24°` contradict eq. 47; the start consistent with the
    trajectory and the printed velocities is `q(0) = (−30°, 55°, −24°, 0 m)`.

    **Arguments:**

    - `arm`: the arm's parameters (default: the SCARA paper's).

    **Returns:**

    A `Model` with the arm, the constraint and the paper's (inconsistent) initial state.
    """
    arm = ScaraArm() if arm is None else arm
    q0 = jnp.deg2rad(jnp.array([-30.0, 55.0, -24.0, 0.0])).at[3].set(0.0)
    qd0 = jnp.array([-0.157, 0.0001, 0.157, 0.0195])
    return Model(arm, (ScaraTrajectory(arm),), q0, qd0)


def scara_chain(arm: ScaraArm | None = None) -> SerialChain:
    """The SCARA arm built from its joint twists (the SCARA paper [2] eq. 33) by the product of
    exponentials, with the parameters of `arm` (default: the SCARA paper's).

    **Returns:**

    A [`ukjax.models.SerialChain`][]; its `M` equals eq. 34.
    """
    arm = ScaraArm() if arm is None else arm
    l1, l2 = arm.l1, arm.l2
    joints = [
        revolute((0.0, 0.0, 1.0), jnp.array([0.0, 0.0, 1.0])),
        revolute((0.0, 0.0, 1.0), jnp.stack([0.0, l1, 0.0])),
        revolute((0.0, 0.0, 1.0), jnp.stack([0.0, l1 + l2, 0.0])),
        prismatic((0.0, 0.0, 1.0)),
    ]
    centres = jnp.stack(
        [
            jnp.stack([0.0, arm.r1, 0.0]),
            jnp.stack([0.0, l1 + arm.r2, 0.0]),
            jnp.stack([0.0, l1 + l2, 0.0]),
            jnp.stack([0.0, l1 + l2, arm.l0]),
        ]
    )
    frames = jnp.broadcast_to(jnp.eye(4), (4, 4, 4)).at[:, :3, 3].set(centres)
    # only the z inertias enter: every rotation is about z
    inertias = jax.vmap(lambda iz: jnp.diag(jnp.stack([0.0, 0.0, iz])))(arm.Iz)
    return SerialChain(joints, frames, arm.m, inertias, jnp.stack([0.0, 0.0, -arm.g]))
