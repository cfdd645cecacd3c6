"""The source papers' mechanisms built from the general builders."""

from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._animate import AbstractDrawn, Sketch
from .._arrays import as_inexact
from .._composed import ComposedSystem
from .._constraints import AbstractHolonomic
from .._robots.model import Model
from .._systems import AbstractSystem, AbstractUnconstrainedSystem, ConstrainedSystem
from ._planar import PlanarChain
from ._points import JointPoint, PointConstraint


class TwoMassSpring(AbstractUnconstrainedSystem, AbstractDrawn):
    """Two masses on a line joined by a spring (the servo-control paper [3] §IV, eq. 36–38), `q = (x1, x2)`."""

    m1: Float[Array, ""] = eqx.field(converter=as_inexact, default=1.0)
    m2: Float[Array, ""] = eqx.field(converter=as_inexact, default=2.0)
    k: Float[Array, ""] = eqx.field(converter=as_inexact, default=10.0)
    l: Float[Array, ""] = eqx.field(converter=as_inexact, default=1.0)

    def mass_matrix(self, t, q):
        return jnp.diag(jnp.stack([self.m1 + 0 * q[0], self.m2 + 0 * q[0]]))

    def forces(self, t, q, qd):
        f = self.k * (q[1] - q[0] - self.l)
        return jnp.stack([f, -f])

    def sketch(self, t, q):
        """The two masses on the x axis and the spring between them."""
        P = jnp.stack([q, jnp.zeros_like(q)], axis=1)
        return Sketch(P[None], P)


class SpringLength(AbstractHolonomic):
    """Servo constraint `x2 − x1 = length` (the servo-control paper [3] eq. 44 with `length = 2l`)."""

    length: Float[Array, ""] = eqx.field(converter=as_inexact)

    def residual(self, t, q):
        return q[1] - q[0] - self.length


def two_mass_spring(m1: float = 1.0, m2: float = 2.0, k: float = 10.0, l: float = 1.0) -> Model:
    """The servo-control paper [3] §IV: the force `F` on mass 1 must hold the spring at length `2l`.

    No passive constraints; servo constraint `x2 − x1 = 2l`; actuation `B = [1, 0]ᵀ`. The start
    `x = (0, 2l)` at rest satisfies the servo constraint. (The paper gives no numbers.)
    """
    system = TwoMassSpring(m1, m2, k, l)
    return Model(
        system,
        (),
        jnp.array([0.0, 2 * l]),
        jnp.zeros(2),
        servo=(SpringLength(2 * l),),
        actuation=jnp.array([[1.0], [0.0]]),
    )


class ObjectTrajectory(AbstractHolonomic):
    """The servo-control paper [3] eq. 64–65: the held object's centre at `(1.5 l, l(1 − cos t)/2)`, level."""

    chain: PlanarChain

    def residual(self, t, q):
        theta = self.chain.absolute_angles(q)
        l = self.chain.lengths
        centre = self.chain.joint_positions(q)[2] + 0.5 * l[2] * jnp.stack(
            [jnp.cos(theta[2]), jnp.sin(theta[2])]
        )
        return jnp.stack([centre[0] - 1.5 * l[0], centre[1] - 0.5 * l[0] * (1 - jnp.cos(t)), theta[2]])


def coordinated_robots(
    l: float = 1.0, m: float = 1.0, inertia: float = 1.0, g: float = 9.8, L: float = 3.0
) -> Model:
    """The servo-control paper [3] §V: two planar 3-link robots holding a common load, as one 5-link chain in
    absolute angles whose tip is hinged to the ground at `(L, 0)` (eq. 57–63); 6 actuators
    (eq. 70), 3 DOF. This is also the dual-arm system of the dual-arm paper [5] (two 3-link arms carrying a
    bar: 5 coordinates, 3 DOF, 6 joints).

    The start consistent with the text: `θ(0) = (60°, −60°, 0°, 60°, −60°)` at rest.
    """
    ones = jnp.ones(5)
    chain = PlanarChain(l * ones, m * ones, 0.5 * l * ones, inertia * ones, gravity=(0.0, -g), absolute=True)
    closure = PointConstraint(chain, JointPoint(5), jnp.array([L, 0.0]))
    actuation = jnp.array(
        [
            [1.0, -1.0, 0.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, -1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, -1.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, -1.0, 1.0],
        ]
    )
    q0 = jnp.deg2rad(jnp.array([60.0, -60.0, 0.0, 60.0, -60.0]))
    return Model(chain, (closure,), q0, jnp.zeros(5), servo=(ObjectTrajectory(chain),), actuation=actuation)


PARALLEL_2DOF_MJCF = Path(__file__).parent / "parallel_2dof.xml"
"""The parallel robot of `parallel_2dof` as an MJCF file (bases hinged to the ground, tips
joined by two site `connect`s, a motor at each base, keyframe "start" = the parallel-robot paper's
configuration), for [`ukjax.models.from_mjcf`][] and MuJoCo."""

PARALLEL_2DOF_LINKS = {
    "chain1": ((0.244, 0.1150, 1.2525, 0.0124), (0.244, 0.1621, 1.0771, 0.0098)),
    "chain2": ((0.244, 0.0657, 1.3663, 0.0122), (0.244, 0.1096, 0.4132, 0.0036)),
    "chain3": ((0.244, 0.0657, 1.3663, 0.0122), (0.244, 0.1096, 0.4132, 0.0036)),
}
"""The parallel-robot paper's Table 2: (length, centre-of-mass distance, mass, inertia about the centre of
mass) of links a (active, at the base) and b (passive) of chains 1–3."""


class PointTrajectory(AbstractHolonomic):
    """A point follows `centre + (amplitude cos t, 0)` (the parallel-robot paper [1] eq. 26: a horizontal
    back-and-forth line)."""

    system: AbstractSystem
    point: JointPoint
    centre: Float[Array, " 2"]
    amplitude: Float[Array, ""] = eqx.field(converter=as_inexact)

    def residual(self, t, q):
        return self.point(self.system, q) - self.centre - jnp.stack([self.amplitude * jnp.cos(t), 0.0 * t])


# (NumPy, so that it keeps float64 whatever JAX's mode at import)
PARALLEL_2DOF_Q0 = np.array(
    [1.3015, -2.1752, 0.0, 0.25, 2.9105, -1.4593, 0.43, 0.0, 2.981, 1.8776, 0.4269, 0.5005]
)
"""The parallel-robot paper [1] §4.1's start of the parallel robot as printed, `[qa_i, qb_i, xa_i, ya_i]` for
i = 1..3 (four digits: the tips miss each other by 3.5e-5 m)."""


def parallel_2dof() -> Model:
    """The parallel-robot paper [1] and the redundant-manipulator paper [4]: the planar 2-DOF redundantly actuated parallel robot, cut into three
    2-link chains with floating bases, `q = [qa_i, qb_i, xa_i, ya_i]` for i = 1..3 (12
    coordinates, no gravity: the robot lies in a horizontal plane). Constraints: each base
    fixed (6 rows) and the three tips joined at the end effector (4 rows); servo constraint:
    the end effector's trajectory of §4.2; actuation: the three base motors. Link parameters from
    the parallel-robot paper's Table 2. Its §4.1 prints `q0` to four digits, so that the tips miss each other
    by 3.5e-5 m: the default `q0` is the printed one projected onto the constraints (a change
    of at most 7e-5 in any coordinate); the bases sit where the printed `q0` puts them.
    """
    chains = {}
    for name, links in PARALLEL_2DOF_LINKS.items():
        lengths, com, masses, inertias = (jnp.array(column) for column in zip(*links))
        chains[name] = PlanarChain(lengths, masses, com, inertias, gravity=(0.0, 0.0), floating_base=True)
    system = ComposedSystem(chains)
    bases = tuple(
        PointConstraint(system, JointPoint(0, name), jnp.asarray(system.part(PARALLEL_2DOF_Q0, name)[2:]))
        for name in chains
    )
    tips = tuple(
        PointConstraint(system, JointPoint(2, "chain1"), JointPoint(2, name)) for name in ("chain2", "chain3")
    )
    constraints = bases + tips
    start = ConstrainedSystem(system, constraints).project(0.0, jnp.asarray(PARALLEL_2DOF_Q0), jnp.zeros(12))
    q0, qd0 = start.q, start.qd
    actuation = jnp.zeros((12, 3)).at[jnp.array([0, 4, 8]), jnp.arange(3)].set(1.0)  # motors at the bases
    # §4.2: x_E = x_e1 + 0.01 cos t, y_E = y_e1, with (x_e1, y_e1) placed so that the start is
    # on the trajectory (the paper leaves the reference point to be chosen from the start).
    amplitude = 0.01
    tip = JointPoint(2, "chain1")
    centre = tip(system, q0) - jnp.array([amplitude, 0.0])
    servo = (PointTrajectory(system, tip, centre, amplitude),)
    return Model(system, constraints, q0, qd0, servo=servo, actuation=actuation)
