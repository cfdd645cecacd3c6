"""A capsule's axis and a box's edges against a cylinder (`SegmentShapeContacts`): their gaps
against MuJoCo's distance between the geoms at random poses, their rows against the closed
form of a segment crossing a cylinder's side differentiated automatically (the nearest point
sliding along the segment included), and a capsule dropped across a lying cylinder resting on
its middle, which its end spheres alone let fall through."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from ukjax._constraints import _time_derivative, holonomic_rows
from ukjax._robots.contacts import tangent_basis
from ukjax.models import SegmentShapeContacts, ShapeContacts

pytestmark = pytest.mark.xdist_group("segment_shapes")

G = 9.81
R, H, r, L = 0.1, 0.3, 0.04, 0.25  # the cylinder's radius and half length, the capsule's
PAIRS = f"""<mujoco><worldbody>
<body name="cyl" pos="0 0 0.3"><freejoint/><geom name="cyl" type="cylinder" size="{R} {H}" mass="1"/></body>
<body name="cap" pos="0 0 0.6"><freejoint/><geom name="cap" type="capsule" size="{r} {L}" mass="0.3"/></body>
<body name="box" pos="0.8 0 0.6"><freejoint/><geom name="box" type="box" size="0.05 0.08 0.12" mass="0.3"/></body>
</worldbody><contact><exclude body1="cap" body2="box"/></contact></mujoco>"""


@pytest.fixture(scope="module")
def pairs():
    with pytest.warns(UserWarning, match="rims against a box's faces"):
        model = ukjax.models.from_mjcf(PAIRS)
    return model


def _random_pose(rng, q0):
    """Both moving bodies turned at random and moved by 0.2 m; the cylinder at the origin."""
    q = np.asarray(q0).copy()
    for b in range(3):
        u = rng.normal(size=4)
        q[7 * b + 3 : 7 * b + 7] = u / np.linalg.norm(u)
        q[7 * b : 7 * b + 3] = 0.0 if b == 0 else rng.normal(size=3) * 0.2
    return q


def test_a_capsule_and_a_box_against_a_cylinder_at_mujocos_distance(pairs):
    """At 300 random poses, the least gap of each pair's rows (the segments' and the points')
    against `mujoco.mj_geomDistance` where the geoms are apart: a capsule and a cylinder
    agree to 1e-10; a box's rows are never nearer than MuJoCo's distance (no contact where
    there is none, to MuJoCo's precision) and agree to 1e-9 where MuJoCo's nearest point of the box is on an edge
    or a corner (a rim against a face is met at six points of it, as the importer warns)."""
    model = pairs
    tree = model.system
    (segments,) = [u for u in model.unilateral if isinstance(u, SegmentShapeContacts)]
    (points,) = [u for u in model.unilateral if isinstance(u, ShapeContacts)]
    assert segments.names == ("cap–cyl[axis]",) + tuple(f"box–cyl[edge {i}]" for i in range(12))
    gaps = jax.jit(
        lambda q: [u.contact_rows(tree, 0.0, q, jnp.zeros_like(q)).normal.phi for u in (segments, points)]
    )
    mjm = mujoco.MjModel.from_xml_string(PAIRS)
    data = mujoco.MjData(mjm)
    geom = {name: mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, name) for name in ("cyl", "cap", "box")}
    rng = np.random.default_rng(0)
    checked = {"cap": 0, "box": 0}
    for _ in range(300):
        q = _random_pose(rng, model.q0)
        data.qpos[:] = q
        mujoco.mj_forward(mjm, data)
        ours = [np.asarray(x) for x in gaps(jnp.asarray(q))]
        for shape in ("cap", "box"):
            fromto = np.zeros(6)
            reference = mujoco.mj_geomDistance(mjm, data, geom[shape], geom["cyl"], 1.0, fromto)
            if not 1e-6 < reference < 0.9:
                continue
            least = min(
                float(np.min(x[[i for i, n in enumerate(u.names) if shape in n and "cyl" in n]]))
                for x, u in zip(ours, (segments, points))
            )
            if shape == "cap":
                assert abs(least - reference) < 1e-10
            else:
                assert least > reference - 1e-9  # MuJoCo's own distance to about 1e-10
                # MuJoCo's nearest point of the box in the box's frame: on an edge where two of
                # its coordinates are at the half sizes
                local = data.geom_xmat[geom["box"]].reshape(3, 3).T @ (fromto[:3] - data.geom_xpos[geom["box"]])
                if np.sum(np.abs(np.abs(local) - mjm.geom_size[geom["box"]]) < 1e-7) >= 2:
                    assert abs(least - reference) < 1e-9
                    checked["edges"] = checked.get("edges", 0) + 1
            checked[shape] += 1
    assert checked["cap"] > 150 and checked["box"] > 150 and checked["edges"] > 50


def _crossing(q, i_cyl, i_cap):
    """The closed form where the capsule's nearest point lies between its ends and the
    cylinder's on its side: the distance between the two axes' lines less both radii, and the
    two lines' nearest points."""

    def frame(b):
        quat = q[7 * b + 3 : 7 * b + 7]
        w, x, y, z = quat / jnp.linalg.norm(quat)
        axis = jnp.array([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)])
        return q[7 * b : 7 * b + 3], axis

    (c, a), (p, u) = frame(i_cyl), frame(i_cap)
    w = p - c
    b, d, e = a @ u, a @ w, u @ w
    s = (b * d - e) / (1 - b * b)  # along the capsule's axis, from its centre
    t = (d - b * e) / (1 - b * b)  # along the cylinder's
    return jnp.linalg.norm(w + s * u - t * a) - R - r, s, t


def test_rows_follow_the_nearest_point_as_automatic_differentiation_does(pairs):
    """The capsule's row (its gap, the gap's rate and its rows `A q̈ = b`, the slip and its
    rate at the touching point) against the closed form of two crossing axes written from the
    poses and differentiated automatically, at states where the nearest point lies between the
    capsule's ends and on the cylinder's side, both bodies turning and moving at random: the
    nearest point slides along the capsule as they turn, which a point held fixed on it misses
    (its `b` is off by the term the slide adds)."""
    model = pairs
    tree = model.system
    (every,) = [u for u in model.unilateral if isinstance(u, SegmentShapeContacts)]
    one = SegmentShapeContacts(
        tree, every.bodies[:1], every.segments[:1], every.radii[:1], every.shape_bodies[:1], every.kinds[:1],
        every.positions[:1], every.rotations[:1], every.sizes[:1], 0.5, names=every.names[:1],
    )
    i_cyl, i_cap = (tree.body_names.index(b) for b in ("cyl", "cap"))

    def gap(t, q):
        return _crossing(q, i_cyl, i_cap)[0][None]

    def touching(q):
        """The touching point on the capsule's surface and the normal, in the world."""
        _, s, _ = _crossing(q, i_cyl, i_cap)
        kin = tree.kinematics(q)
        p, Rc = kin.positions[i_cap], kin.rotations[i_cap]
        c, Ry = kin.positions[i_cyl], kin.rotations[i_cyl]
        x = p + s * Rc[:, 2]
        t = (x - c) @ Ry[:, 2]
        n = (x - c - t * Ry[:, 2]) / jnp.linalg.norm(x - c - t * Ry[:, 2])
        return x - r * n, n

    def slip(t, q, qd):
        c, n = touching(q)  # the material points there, held fixed while differentiating

        def points(q):
            kin = tree.kinematics(q)
            return jnp.stack([kin.positions[b] + kin.rotations[b] @ (kin_local[j]) for j, b in enumerate((i_cap, i_cyl))])

        kin0 = tree.kinematics(q)
        kin_local = [kin0.rotations[b].T @ (c - kin0.positions[b]) for b in (i_cap, i_cyl)]
        velocity = jax.jvp(points, (q,), (qd,))[1]
        T = tangent_basis(n[None])[0]
        return T @ (velocity[0] - velocity[1])

    @jax.jit
    def reference(q, qd):
        v, rate = _time_derivative(slip, jnp.asarray(0.0), q, qd)
        return holonomic_rows(gap, 0.0, q, qd), v, rate, jax.jacfwd(lambda qd: slip(0.0, q, qd))(qd)

    ours = jax.jit(lambda q, qd: one.contact_rows(tree, 0.0, q, qd))
    rng = np.random.default_rng(3)
    tried = 0
    while tried < 4:
        q = _random_pose(rng, model.q0)
        distance, s, t = (float(x) for x in _crossing(jnp.asarray(q), i_cyl, i_cap))
        if not (abs(s) < 0.8 * L and abs(t) < 0.8 * H and 0.01 < distance < 0.2):
            continue
        tried += 1
        qd = rng.normal(size=q.shape)
        for b in range(3):
            quat = q[7 * b + 3 : 7 * b + 7]
            qd[7 * b + 3 : 7 * b + 7] -= (qd[7 * b + 3 : 7 * b + 7] @ quat) * quat
        q, qd = jnp.asarray(q), jnp.asarray(qd)
        rows = ours(q, qd)
        normal, v, rate, At = reference(q, qd)
        for got, want in (
            (rows.normal.phi, normal.phi),
            (rows.normal.phid, normal.phid),
            (rows.normal.A, normal.A),
            (rows.normal.b, normal.b),
            (rows.tangent.phid, v),
            (rows.tangent.A, At),
            (rows.tangent.b, -rate),
        ):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-9 * np.abs(want).max())


LOG = f"""<mujoco><worldbody>
<geom name="log" type="cylinder" size="{R} {H}" euler="90 0 0" friction="0.8"/>
<body name="cap" pos="0 0 {R + r + 0.05}"><freejoint/>
  <geom name="cap" type="capsule" size="{r} {L}" euler="0 90 0" mass="0.3" friction="0.8"/></body>
</worldbody></mujoco>"""


def test_a_capsule_dropped_across_a_lying_cylinder_rests_on_its_middle():
    """A capsule across a fixed log (its axis along x, the log's along y), 5 cm above it: it
    lands at the free fall's time and rests with its axis `R + r` above the log's, still, its
    weight on the row of its axis (its end spheres, 0.25 m out, never touch: they alone let it
    fall through the log, as the importer built it before)."""
    model = ukjax.models.from_mjcf(LOG)
    system = model.full_system()
    sol = ukjax.simulate(system, model.q0, model.qd0, 0.0, 0.5, ts=jnp.linspace(0.0, 0.5, 3))
    assert int(sol.status) == int(ukjax.Status.SUCCESS)
    first = float(np.asarray(sol.contacts.event_times)[0])
    np.testing.assert_allclose(first, np.sqrt(2 * 0.05 / G), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(sol.q[-1, :3]), [0.0, 0.0, R + r], atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.qd[-1]), 0.0, atol=1e-9)
    names = sum((u.names for u in model.unilateral), ())
    forces = dict(zip(names, np.asarray(sol.contacts.normal[-1])))
    np.testing.assert_allclose(forces["cap–log[axis]"], 0.3 * G, rtol=1e-9)
    assert all(abs(f) < 1e-12 for n, f in forces.items() if n != "cap–log[axis]")
