"""Rings against planes fixed in the world: a cylinder's rims (and a disc's edge, a wheel's
tread) touching a floor at their lowest points, rows in closed form."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._animate import Sketch
from .._arrays import as_inexact
from .._constraints import AbstractDrawnConstraint, ConstraintRows
from .._unilateral import AbstractUnilateral, ContactRows, _per_contact, unit
from . import algorithms
from .contacts import _check_shapes, _dot, tangent_basis
from .equalities import tree_of
from .spatial import mv


class RingContacts(AbstractUnilateral, AbstractDrawnConstraint):
    """Rings fixed to bodies of a tree against planes fixed in the world: the circle of radius
    `R` about the centre `c` in the plane normal to the axis `a`, swept by a tube of radius `r`
    (0 for a cylinder's rim), stays on the positive side of the plane `n · x = d` at its lowest
    point, `g = n · c − R ‖n − (n · a) a‖ − r − d ≥ 0`, with Coulomb friction there. The
    lowest point moves over the ring as the body turns (a cylinder rolling on its side, a coin
    rolling on its edge); the rows follow it (its rate along the ring included). Where the ring
    lies flat on the plane every point of it is lowest: `g` has a corner there, and a face
    resting on the plane is carried by points of its rim besides (a
    [`ukjax.models.PlaneContacts`][] of radius 0 each, as the importer builds them).

    **Arguments:**

    - `system`: the tree (or a system wrapping it), to check the bodies' names.
    - `bodies`: the body of each ring (`k` names).
    - `centres`: each ring's centre in its body's frame, shape (k, 3).
    - `axes`: each ring's unit axis in its body's frame, shape (k, 3).
    - `radii`: each ring's radius `R`, shape (k,).
    - `tubes`: each tube's radius `r`, shape (k,) (a file's geom margin; 0 for a rim).
    - `normals`: each plane's unit normal in the world, shape (k, 3).
    - `offsets`: each plane's `d`, shape (k,).
    - `friction`: Coulomb's `μ` per contact (or a scalar).
    - `restitution`: Newton's `e` per contact (or a scalar; default 0).
    - `names`: a label per contact.
    """

    bodies: tuple[str, ...] = eqx.field(static=True)
    centres: Float[Array, "k 3"]
    axes: Float[Array, "k 3"]
    radii: Float[Array, " k"]
    tubes: Float[Array, " k"]
    normals: Float[Array, "k 3"]
    offsets: Float[Array, " k"]
    friction: Float[Array, "*k"]
    restitution: Float[Array, "*k"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        system,
        bodies,
        centres,
        axes,
        radii,
        tubes,
        normals,
        offsets,
        friction,
        restitution=0.0,
        names=None,
    ):
        tree = tree_of(system)
        self.bodies = tuple(bodies)
        for body in self.bodies:
            tree.body_index(body)  # raises for an unknown body
        k = len(self.bodies)
        self.centres, self.radii, self.tubes = as_inexact(centres), as_inexact(radii), as_inexact(tubes)
        axes, normals = as_inexact(axes), as_inexact(normals)
        given = [np.asarray(x) for x in (axes, normals) if not isinstance(x, jax.core.Tracer)]
        if not all(np.all(np.linalg.norm(x.reshape(-1, x.shape[-1]), axis=-1) > 0) for x in given if x.ndim):
            raise ValueError("RingContacts axes and normals must be nonzero vectors (they are made unit).")
        self.axes = axes / jnp.linalg.norm(axes, axis=-1, keepdims=True)
        self.normals = normals / jnp.linalg.norm(normals, axis=-1, keepdims=True)
        self.offsets = as_inexact(offsets)
        _check_shapes(self, k, centres=(3,), axes=(3,), radii=(), tubes=(), normals=(3,), offsets=())
        self.friction, self.restitution = as_inexact(friction), as_inexact(restitution)
        self.names = (
            tuple(names) if names is not None else tuple(f"{body}[{i}]" for i, body in enumerate(self.bodies))
        )

    def _lowest(self, a: Float[Array, "k 3"], a_rate: Float[Array, "k 3"], n: Float[Array, "k 3"]):
        """The unit direction `u` in each ring's plane toward its highest point (the lowest is
        `c − R u`; zero where the ring lies flat), and its rate as the axis turns at `ȧ`."""

        def up(a):
            # n − (n · a) a as a × (n × a): the difference loses the direction to round-off
            # as the ring nears flat (a relative error eps / sin θ), the products do not.
            # Flat on the plane every point of the ring is lowest and `u` is zero: the rows
            # at the ring's centre, inside the face that touches
            return unit(jnp.cross(a, jnp.cross(n, a)))

        return jax.jvp(up, (a,), (a_rate,))

    def labels(self):
        return self.names

    def contact_rows(self, system, t, q, qd):
        tree = tree_of(system)
        kin, motion = tree._motion(q, qd)
        m = algorithms.points_motion(tree, kin, motion, self.bodies, self.centres)
        n = self.normals.astype(q.dtype)
        R, r = self.radii.astype(q.dtype)[:, None], self.tubes.astype(q.dtype)[:, None]
        a = mv(m.rotation, self.axes.astype(q.dtype))
        u, u_rate = self._lowest(a, jnp.cross(m.omega, a), n)
        # the touching point p = c − R u − r n, and the body's material point there: its
        # velocity v(p) = ċ + ω × (p − c), its acceleration at q̈ = 0 the centre's and
        # α × (p − c) + ω × (ω × (p − c))
        arm = -R * u - r * n
        p = m.x + arm
        bias = m.bias + jnp.cross(m.alpha, arm) + jnp.cross(m.omega, jnp.cross(m.omega, arm))
        # the point also runs along the ring relative to the body, at ṗ − v(p) = −R (u̇ − ω × u)
        # + r ω × n, which adds ω × (ṗ − v(p)) to the rate of v at the moving point
        running = -R * (u_rate - jnp.cross(m.omega, u)) + r * jnp.cross(m.omega, n)
        rate = bias + jnp.cross(m.omega, running)
        A = algorithms.directional_rows(kin.twists, m.moves, p, n[:, None])[:, 0]
        gap = (
            _dot(n, m.x) - self.radii.astype(q.dtype) * _dot(n, u) - self.tubes.astype(q.dtype) - self.offsets
        )
        normal = ConstraintRows(A, -_dot(n, rate), gap, A @ qd)
        T = tangent_basis(n)
        At = algorithms.directional_rows(kin.twists, m.moves, p, T).reshape(-1, q.shape[0])
        bt = -jnp.einsum("kdj,kj->kd", T, rate).reshape(-1)
        k = len(self.bodies)
        return ContactRows(
            normal,
            ConstraintRows(At, bt, jnp.zeros_like(bt), At @ qd),
            _per_contact(self.friction, k, "RingContacts friction"),
            _per_contact(self.restitution, k, "RingContacts restitution"),
        )

    def sketch(self, system, t, q):
        """Each ring's centre joined to its lowest point, and those points."""
        tree = tree_of(system)
        kin, motion = tree._motion(q, jnp.zeros_like(q))
        m = algorithms.points_motion(tree, kin, motion, self.bodies, self.centres)
        n = self.normals.astype(q.dtype)
        u, _ = self._lowest(mv(m.rotation, self.axes.astype(q.dtype)), jnp.zeros_like(m.x), n)
        lowest = m.x - self.radii[:, None] * u - self.tubes[:, None] * n
        return Sketch(jnp.stack([m.x, lowest], axis=1), lowest)
