"""A capsule's axis and a box's edges against a cylinder (`SegmentShapeContacts`), a
cylinder's rims against a box's faces (`RimFaceContacts`): their gaps against MuJoCo's
distance between the geoms at random poses, their rows against closed forms differentiated
automatically (the nearest point sliding along the segment or the rim included), a capsule
dropped across a lying cylinder resting on its middle, which its end spheres alone let fall
through, and (slow) a can lying on a table on its rims' lowest points."""

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from ukjax._constraints import _time_derivative, holonomic_rows
from ukjax._robots.contacts import tangent_basis
from ukjax.models import RimFaceContacts, SegmentShapeContacts, ShapeContacts

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
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every pair here is met exactly: nothing to say
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
    """At 300 random poses, the least gap of each pair's rows (the segments', the rims' against
    the faces and the points') against `mujoco.mj_geomDistance` where the geoms are apart: a
    capsule or a box and a cylinder agree to 1e-9 (MuJoCo's own distance is good to about
    1e-10), whichever of their features are nearest."""
    model = pairs
    tree = model.system
    (segments,) = [u for u in model.unilateral if isinstance(u, SegmentShapeContacts)]
    (rims,) = [u for u in model.unilateral if isinstance(u, RimFaceContacts)]
    (points,) = [u for u in model.unilateral if isinstance(u, ShapeContacts)]
    assert segments.names == ("cap–cyl[axis]",) + tuple(f"box–cyl[edge {i}]" for i in range(12))
    assert len(rims.names) == 12 and rims.names[0] == "cyl–box[bottom rim, face 0]"
    parts = (segments, rims, points)
    gaps = jax.jit(lambda q: [u.contact_rows(tree, 0.0, q, jnp.zeros_like(q)).normal.phi for u in parts])
    mjm = mujoco.MjModel.from_xml_string(PAIRS)
    data = mujoco.MjData(mjm)
    geom = {name: mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, name) for name in ("cyl", "cap", "box")}
    rng = np.random.default_rng(0)
    checked = {"cap": 0, "box": 0, "faces": 0}
    for _ in range(300):
        q = _random_pose(rng, model.q0)
        data.qpos[:] = q
        mujoco.mj_forward(mjm, data)
        ours = [np.asarray(x) for x in gaps(jnp.asarray(q))]
        for shape in ("cap", "box"):
            reference = mujoco.mj_geomDistance(mjm, data, geom[shape], geom["cyl"], 1.0, None)
            if not 1e-6 < reference < 0.9:
                continue
            mine = [x[[i for i, n in enumerate(u.names) if shape in n and "cyl" in n]] for x, u in zip(ours, parts)]
            least = min(float(np.min(x)) for x in mine if x.size)
            assert abs(least - reference) < 1e-9
            checked[shape] += 1
            checked["faces"] += shape == "box" and float(np.min(mine[1])) == least
    # a rim against a face nearest in about one pose in twenty
    assert checked["cap"] > 150 and checked["box"] > 150 and checked["faces"] > 5


def _agree(rows, normal, v, rate, At):
    """A contact's rows against the reference: its normal rows (`holonomic_rows` of the gap),
    the slip, its rate and its rows, to 1e-9."""
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
        _agree(ours(q, qd), *reference(q, qd))


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


def test_a_rims_rows_on_a_face_follow_its_nearest_point_as_automatic_differentiation_does(pairs):
    """The cylinder's bottom rim against the box's top face (`+e_z`): its gap, the gap's rate
    and rows, and the slip and its rate, against the closed form of the rim's point nearest
    the face's plane written from the poses and differentiated automatically, at states where
    that point is over the face, both bodies turning and moving at random."""
    model = pairs
    tree = model.system
    (every,) = [u for u in model.unilateral if isinstance(u, RimFaceContacts)]
    k = every.names.index("cyl–box[bottom rim, face 4]")
    pick = lambda x: x[k : k + 1]  # noqa: E731
    one = RimFaceContacts(
        tree, every.bodies[k : k + 1], pick(every.centres), pick(every.axes), pick(every.radii), pick(every.tubes),
        every.shape_bodies[k : k + 1], pick(every.positions), pick(every.rotations), pick(every.sizes), (4,), 0.5,
        names=every.names[k : k + 1],
    )
    i_cyl, i_box = (tree.body_names.index(b) for b in ("cyl", "box"))
    half = np.array([0.05, 0.08, 0.12])

    def nearest(q):
        """The rim's point nearest the face's plane, in the world and in the box's frame."""
        kin = tree.kinematics(q)
        Rc, pc, Rb, pb = kin.rotations[i_cyl], kin.positions[i_cyl], kin.rotations[i_box], kin.positions[i_box]
        centre = Rb.T @ (pc - H * Rc[:, 2] - pb)
        axis = Rb.T @ Rc[:, 2]
        normal = jnp.array([0.0, 0.0, 1.0])
        across = normal - (normal @ axis) * axis
        local = centre - R * across / jnp.linalg.norm(across)
        return pb + Rb @ local, local

    def gap(t, q):
        return (nearest(q)[1][2] - half[2])[None]

    def slip(t, q, qd):
        c, _ = nearest(q)  # the material points there, held fixed while differentiating
        kin0 = tree.kinematics(q)
        fixed = [kin0.rotations[b].T @ (c - kin0.positions[b]) for b in (i_cyl, i_box)]

        def points(q):
            kin = tree.kinematics(q)
            return jnp.stack([kin.positions[b] + kin.rotations[b] @ fixed[j] for j, b in enumerate((i_cyl, i_box))])

        velocity = jax.jvp(points, (q,), (qd,))[1]
        normal = tree.kinematics(q).rotations[i_box][:, 2]
        return tangent_basis(normal[None])[0] @ (velocity[0] - velocity[1])

    @jax.jit
    def reference(q, qd):
        v, rate = _time_derivative(slip, jnp.asarray(0.0), q, qd)
        return holonomic_rows(gap, 0.0, q, qd), v, rate, jax.jacfwd(lambda qd: slip(0.0, q, qd))(qd)

    ours = jax.jit(lambda q, qd: one.contact_rows(tree, 0.0, q, qd))
    rng = np.random.default_rng(5)
    tried = 0
    while tried < 4:
        q = _random_pose(rng, model.q0)
        _, local = (np.asarray(x) for x in nearest(jnp.asarray(q)))
        if not (np.all(np.abs(local[:2]) < 0.8 * half[:2]) and 0.01 < local[2] - half[2] < 0.2):
            continue
        tried += 1
        qd = rng.normal(size=q.shape)
        for b in range(3):
            quat = q[7 * b + 3 : 7 * b + 7]
            qd[7 * b + 3 : 7 * b + 7] -= (qd[7 * b + 3 : 7 * b + 7] @ quat) * quat
        q, qd = jnp.asarray(q), jnp.asarray(qd)
        _agree(ours(q, qd), *reference(q, qd))


TABLE = f"""<mujoco><worldbody>
<geom name="table" type="box" size="0.4 0.4 0.1" pos="0 0 0.1" friction="0.8"/>
<body name="can" pos="0 0 {0.2 + R + 0.02}" euler="90 0 0"><freejoint/>
  <geom name="can" type="cylinder" size="{R} {H}" euler="0 0 45" mass="0.5" friction="0.8"/></body>
</worldbody></mujoco>"""


@pytest.mark.slow  # 55 s, most of it compile
def test_a_can_lying_on_a_table_rests_on_its_rims_lowest_points():
    """A cylinder on its side dropped 2 cm onto a box (its rims' six points turned so that none
    is lowest): it lands at the free fall's time and rests with its axis `R` above the box's
    top, still, each rim's point nearest the top carrying half its weight (on the rims' six
    points alone it sank 13 % of R, to R cos 30°)."""
    model = ukjax.models.from_mjcf(TABLE)
    sol = ukjax.simulate(model.full_system(), model.q0, model.qd0, 0.0, 0.4, ts=jnp.linspace(0.0, 0.4, 3))
    assert int(sol.status) == int(ukjax.Status.SUCCESS)
    np.testing.assert_allclose(float(np.asarray(sol.contacts.event_times)[0]), np.sqrt(2 * 0.02 / G), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(sol.q[-1, :3]), [0.0, 0.0, 0.2 + R], atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.qd[-1]), 0.0, atol=1e-9)
    names = sum((u.names for u in model.unilateral), ())
    forces = dict(zip(names, np.asarray(sol.contacts.normal[-1])))
    for side in ("bottom", "top"):
        np.testing.assert_allclose(forces[f"can–table[{side} rim, face 4]"], 0.5 * G / 2, rtol=1e-9)
    assert sum(abs(f) for n, f in forces.items() if "face 4" not in n) < 1e-12


def test_bad_segments_and_rims_are_refused(pairs):
    """A plane as a segment's shape, a segment of one point, a face outside 0..5 and an axis
    that is not a unit vector are said."""
    tree = pairs.system
    eye, size = np.eye(3)[None], np.array([[R, H, 0.0]])
    segment = np.array([[[0.0, 0.0, -L], [0.0, 0.0, L]]])
    with pytest.raises(ValueError, match="a segment meets a plane"):
        SegmentShapeContacts(tree, ["cap"], segment, [r], ["cyl"], ["plane"], np.zeros((1, 3)), eye, size, 0.5)
    with pytest.raises(ValueError, match="two distinct ends"):
        SegmentShapeContacts(tree, ["cap"], np.zeros((1, 2, 3)), [r], ["cyl"], ["cylinder"], np.zeros((1, 3)), eye, size, 0.5)
    rim = dict(centres=np.zeros((1, 3)), radii=[R], tubes=[0.0], shape_bodies=["box"], positions=np.zeros((1, 3)), rotations=eye, sizes=np.full((1, 3), 0.1))
    with pytest.raises(ValueError, match="one face in 0..5"):
        RimFaceContacts(tree, ["cyl"], axes=np.array([[0.0, 0.0, 1.0]]), faces=[7], friction=0.5, **rim)
    with pytest.raises(ValueError, match="unit vectors"):
        RimFaceContacts(tree, ["cyl"], axes=np.array([[0.0, 0.0, 2.0]]), faces=[0], friction=0.5, **rim)
