"""A parallel-jaw gripper and a box (examples/grasp.xml): contacts between boxes read from the
file, their rows against automatic differentiation, the jaws stopping at the box, and the box
held with no creep, or sliding as Coulomb says; MuJoCo on the same file creeps."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax._constraints import _time_derivative, holonomic_rows
from ukjax.models import PlaneContacts, SegmentContacts, ShapeContacts

# one worker: the module's simulations are a fixture its tests share
pytestmark = pytest.mark.xdist_group("grasp")

GRASP = str(ukjax.examples.path("grasp.xml"))
G, SQUEEZE, PAD, BOX = 9.81, 4.0, 0.05, 0.1  # m/s², the motor's force (N), masses (kg)
GAP = 0.02  # between each pad and the box in the "open" keyframe
HELD, SLIPS = 0.5, 0.24  # μ: 2 μ (F/2) above and below m g
T1 = 0.25  # before the slipping box reaches the floor 9 mm below


def _load(keyframe):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every contact of the file is built, box against box by corners (said)
        warnings.filterwarnings("ignore", "Contacts between boxes are met at their corners only")
        return ukjax.models.from_mjcf(GRASP, keyframe=keyframe)


@pytest.fixture(scope="module")
def grasp():
    """The box held (μ = 0.5), the box slipping (μ = 0.24), and the jaws closing on the box on
    the floor, each squeezed by the motor with SQUEEZE (the keyframes' `ctrl`: the file's whole
    system as `full_system` builds it), for T1: one program run three times (the members'
    results stacked), which compiles in two thirds of a batch's time."""
    model, opened = _load("holding"), _load("open")
    np.testing.assert_array_equal(np.asarray(model.ctrl), [SQUEEZE])
    system = model.full_system()
    ts = np.linspace(0, T1, 11)
    runs = [
        ukjax.simulate(
            eqx.tree_at(lambda s: s.constraints[-1].friction, system, jnp.full(32, mu)), q0, jnp.zeros_like(q0), 0.0, T1, ts=ts
        )
        for mu, q0 in ((HELD, model.q0), (SLIPS, model.q0), (HELD, opened.q0))
    ]
    return model, np.stack([model.q0, model.q0, opened.q0]), ts, jax.tree.map(lambda *x: jnp.stack(x), *runs)


def test_the_files_contacts_are_built(grasp):
    model = grasp[0]
    limits, floor, pads = model.unilateral
    assert limits.joints == ("left", "right")
    # the box's corners on the floor; the pads neither touch the floor (contype) nor each other
    # (<exclude>); each pad's corners against the box and the box's corners against each pad
    assert isinstance(floor, PlaneContacts) and floor.names == tuple(f"box–floor[{i}]" for i in range(8))
    assert isinstance(pads, ShapeContacts) and len(pads.names) == 32
    assert set(pads.kinds) == {"box"} and set(pads.bodies) == set(pads.shape_bodies) == {"left", "right", "box"}
    assert pads.names[0] == "left_pad–box[0]" and pads.names[8] == "box–left_pad[0]"


def _reference(contacts, tree):
    """The gap and the slip written directly from poses and differentiated automatically:
    `ShapeContacts` by the shapes' distance functions, `SegmentContacts` by closest points found
    among the interior stationary point and the best point on each side of the square of
    parameters (Ericson's clamping in the library)."""
    from ukjax._robots.contacts import tangent_basis
    from ukjax._robots.shapes import distance as _distance

    b = len(tree.parents)
    shapes = isinstance(contacts, ShapeContacts)
    others = contacts.shape_bodies if shapes else contacts.other_bodies
    index = [np.array([b if i < 0 else i for i in map(tree.body_index, names)]) for names in (contacts.bodies, others)]
    mv = lambda R, x: jnp.einsum("kij,kj->ki", R, x)  # noqa: E731

    def frames(q):  # each contact's two frames (a shape's own frame)
        kin = tree.kinematics(q)
        R = jnp.concatenate([kin.rotations, jnp.eye(3)[None]])
        p = jnp.concatenate([kin.positions, jnp.zeros((1, 3))])
        one, two = index
        if not shapes:
            return R[one], p[one], R[two], p[two]
        return R[one], p[one], jnp.einsum("kij,kjl->kil", R[two], contacts.rotations), p[two] + mv(R[two], contacts.positions)

    def shape_geometry(q):
        R, p, R_shape, p_shape = frames(q)
        x = p + mv(R, contacts.centres)
        y = jnp.einsum("kji,kj->ki", R_shape, x - p_shape)
        d, n = jnp.zeros(len(contacts.kinds)), jnp.zeros_like(y)
        for kind in set(contacts.kinds):
            i = np.array([j for j, x in enumerate(contacts.kinds) if x == kind])
            d_kind, n_kind = _distance(kind, y[i], contacts.sizes[i])
            d, n = d.at[i].set(d_kind), n.at[i].set(n_kind)
        n = mv(R_shape, n)
        return d - contacts.radii, x - contacts.radii[:, None] * n, n

    def segment_geometry(q):
        R, p, R_other, p_other = frames(q)
        a0, a1 = (p + mv(R, contacts.segments[:, i]) for i in (0, 1))
        b0, b1 = (p_other + mv(R_other, contacts.other_segments[:, i]) for i in (0, 1))
        d1, d2, r = a1 - a0, b1 - b0, a0 - b0
        dot = lambda u, v: jnp.sum(u * v, axis=-1)  # noqa: E731
        a, e = dot(d1, d1), dot(d2, d2)
        # the stationary point of |r + s d1 − t d2|², then each side with the other parameter
        # at its best, clamped
        s_in, t_in = jnp.moveaxis(
            jnp.linalg.solve(jnp.stack([jnp.stack([a, -dot(d1, d2)], -1), jnp.stack([dot(d1, d2), -e], -1)], -2),
                             jnp.stack([-dot(d1, r), -dot(d2, r)], -1)[..., None])[..., 0], -1, 0)
        inside = (s_in >= 0) & (s_in <= 1) & (t_in >= 0) & (t_in <= 1)
        candidates = [(s_in, t_in)]
        for s in (0.0, 1.0):
            candidates.append((jnp.full_like(a, s), jnp.clip(dot(d2, r + s * d1) / e, 0, 1)))
        for t in (0.0, 1.0):
            candidates.append((jnp.clip(-dot(d1, r - t * d2) / a, 0, 1), jnp.full_like(a, t)))
        gaps = [jnp.linalg.norm(r + s[:, None] * d1 - t[:, None] * d2, axis=-1) for s, t in candidates]
        gaps[0] = jnp.where(inside, gaps[0], jnp.inf)
        best = jnp.argmin(jnp.stack(gaps), axis=0)
        s, t = (jnp.choose(best, [c[i] for c in candidates], mode="clip") for i in (0, 1))
        d = r + s[:, None] * d1 - t[:, None] * d2
        n = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
        gap = jnp.linalg.norm(d, axis=-1) - contacts.radii - contacts.other_radii
        return gap, a0 + s[:, None] * d1 - contacts.radii[:, None] * n, n

    geometry = shape_geometry if shapes else segment_geometry

    def slip(t, q, qd):
        _, touching, n = geometry(q)
        R, p, R_other, p_other = frames(q)
        on_one = jnp.einsum("kji,kj->ki", R, touching - p)
        on_two = jnp.einsum("kji,kj->ki", R_other, touching - p_other)

        def points(q):  # the two bodies' material points at the touching point
            R, p, R_other, p_other = frames(q)
            return p + mv(R, on_one) - p_other - mv(R_other, on_two)

        return jnp.einsum("kdj,kj->kd", tangent_basis(n), jax.jvp(points, (q,), (qd,))[1]).reshape(-1)

    def rows(q, qd):
        normal = holonomic_rows(lambda t, q: geometry(q)[0], 0.0, q, qd)
        v, rate = _time_derivative(slip, jnp.asarray(0.0), q, qd)
        return normal, jax.jacfwd(lambda qd: slip(0.0, q, qd))(qd), -rate, v

    return rows


def _check_rows(model, contacts: ShapeContacts | SegmentContacts, rng):
    """The closed-form rows (gap, slip, and their rates with the touching point moving over
    both surfaces) against the same quantities differentiated automatically, at three states
    with every quaternion drawn at random and the velocity tangent to the unit quaternions."""
    tree = model.system
    reference = jax.jit(_reference(contacts, tree))
    ours = jax.jit(lambda q, qd: contacts.contact_rows(tree, 0.0, q, qd))
    n = model.q0.shape[0]
    for _ in range(3):
        q, qd = np.asarray(model.q0) + rng.normal(0, 0.01, n), rng.normal(size=n)
        for i in tree.quaternion_starts():
            u = rng.normal(size=4)
            q[i : i + 4] = u / np.linalg.norm(u)
            qd[i : i + 4] -= (qd[i : i + 4] @ q[i : i + 4]) * q[i : i + 4]
        normal, At, bt, v = reference(jnp.asarray(q), jnp.asarray(qd))
        rows = ours(jnp.asarray(q), jnp.asarray(qd))
        for got, want in (
            (rows.normal.phi, normal.phi),
            (rows.normal.phid, normal.phid),
            (rows.normal.A, normal.A),
            (rows.normal.b, normal.b),
            (rows.tangent.phid, v),
            (rows.tangent.A, At),
            (rows.tangent.b, bt),
        ):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-11, atol=1e-11 * np.abs(want).max())


def test_box_contact_rows_equal_automatic_differentiation(grasp):
    """The pads' and the box's corners against each other, the box turned at random (corners
    over faces, edges and corners, inside and out)."""
    model = grasp[0]
    _check_rows(model, model.unilateral[-1], np.random.default_rng(0))
def test_the_jaws_stop_at_the_box(grasp):
    """Closing from 2 cm at F / (2 m_pad) (the jaws coupled), they reach the box at
    √(4 m_pad d / F) and stop there without pushing it; the pads then press with F in all."""
    _, q0, _, sol = grasp
    assert int(sol.status[2]) == ukjax.Status.SUCCESS
    np.testing.assert_allclose(float(sol.contacts.event_times[2, 0]), np.sqrt(4 * PAD * GAP / SQUEEZE), rtol=1e-9)
    assert np.isinf(sol.contacts.event_times[2, 1])  # one event: both jaws at once, plastic
    q = np.asarray(sol.q[2])
    np.testing.assert_allclose(q[-5:, :2], GAP, atol=1e-9)
    np.testing.assert_allclose(q[:, 2:], np.broadcast_to(q0[2, 2:], (11, 7)), atol=1e-12)
    assert float(sol.contacts.penetration[2]) <= 1e-9
    pads = np.asarray(sol.contacts.normal[2, -1, 12:])  # after the limits' 4 rows and the floor's 8
    np.testing.assert_allclose(pads.sum(), SQUEEZE, rtol=1e-9)


def test_the_box_is_held_with_no_creep_where_mujoco_creeps(grasp):
    """μ = 0.5: 2 μ (F/2) = 2 N of friction can hold m g = 0.98 N, and every pad's corners stick:
    the box does not move (MuJoCo's soft contacts let it creep down: measured on the same file)."""
    import mujoco

    _, q0, ts, sol = grasp
    assert int(sol.status[0]) == ukjax.Status.SUCCESS
    np.testing.assert_allclose(np.asarray(sol.q[0]), np.broadcast_to(q0[0], (11, 9)), atol=1e-12)
    normal, tangent = np.asarray(sol.contacts.normal[0, -1, 12:]), np.asarray(sol.contacts.tangent[0, -1, 12:])
    # each pad presses with F/2 (the left pad's contacts first), and the friction, vertical
    # in each contact's own tangent axes, carries the weight
    np.testing.assert_allclose([normal[:16].sum(), normal[16:].sum()], SQUEEZE / 2, rtol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(tangent, axis=1).sum(), BOX * G, rtol=1e-9)
    assert np.all(np.asarray(sol.contacts.mode[0, -1, 12:])[normal > 0] == 2)  # sticking
    mj = mujoco.MjModel.from_xml_path(GRASP)
    data = mujoco.MjData(mj)
    mujoco.mj_resetDataKeyframe(mj, data, mj.key("holding").id)
    for _ in range(round(T1 / mj.opt.timestep)):
        mujoco.mj_step(mj, data)
    assert q0[0, 4] - data.qpos[4] > 1e-6


def test_the_box_slips_at_g_minus_mu_f_over_m(grasp):
    """μ = 0.24: the pads' friction μ F = 0.96 N falls short of m g, and the box slides down
    between them at g − μ F / m."""
    _, q0, ts, sol = grasp
    assert int(sol.status[1]) == ukjax.Status.SUCCESS
    z = q0[1, 4] - 0.5 * (G - SLIPS * SQUEEZE / BOX) * ts**2
    np.testing.assert_allclose(np.asarray(sol.q[1, :, 4]), z, atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.q[1, :, :4]), np.broadcast_to(q0[1, :4], (11, 4)), atol=1e-9)
    assert float(sol.contacts.penetration[1]) <= 1e-9
    # no event while it slips, nor while the other box is held: the pads' tangent axes, chosen
    # for normals along a world axis, do not flip with round-off
    assert np.all(np.isinf(np.asarray(sol.contacts.event_times[:2])))


SHAPES = """<mujoco><worldbody>
  <geom name="post" type="capsule" fromto="0.3 0 0 0.3 0 0.4" size="0.03"/>
  <geom name="table" type="box" pos="-0.3 0 0.1" size="0.1 0.2 0.1" euler="0 0 20"/>
  <body name="ball" pos="0 0 0.5"><freejoint/><geom name="ball" size="0.05" mass="1"/></body>
  <body name="pellet" pos="0.1 0.1 0.5"><freejoint/><geom name="pellet" size="0.02" mass="0.2"/></body>
  <body name="rod" pos="0 0.3 0.5"><freejoint/><geom name="rod" type="capsule" fromto="-0.1 0 0 0.1 0 0.05" size="0.02" mass="0.5"/></body>
  <body name="brick" pos="0 -0.3 0.5" euler="10 20 30"><freejoint/>
    <geom name="brick" type="box" pos="0.01 0 0" size="0.05 0.03 0.02" euler="0 30 0" mass="0.7"/></body>
</worldbody></mujoco>"""


def test_every_shape_pair_from_a_file_and_its_rows():
    """Spheres, capsules and boxes on free bodies and fixed in the world, every pair: a sphere's
    centre against the other shape; a capsule's end spheres against the other shape and its
    axis against the other capsule's axis or the box's edges; boxes' corners both ways. The rows
    in closed form against automatic differentiation at random states."""
    with pytest.warns(UserWarning, match=r"boxes are met at their corners only.*\(1 geom pairs: table–brick\)"):
        model = ukjax.models.from_mjcf(SHAPES)
    shapes, segments = model.unilateral
    assert set(shapes.kinds) == {"sphere", "capsule", "box"}
    assert "ball–pellet" in shapes.names and "pellet–ball" not in shapes.names  # one contact
    assert sum(name.startswith("rod–brick") for name in shapes.names) == 2  # the rod's ends
    assert not any(name.startswith("brick–rod") for name in shapes.names)  # the edges met instead
    assert sum(name.startswith("ball–") for name in shapes.names) == 5  # the pellet, rod, brick, post, table
    assert sum(name.startswith("rod–brick[edge") for name in segments.names) == 12
    assert "post–rod[axes]" in segments.names and np.all(np.asarray(segments.other_radii)[-1] == 0)
    _check_rows(model, shapes, np.random.default_rng(1))
    _check_rows(model, segments, np.random.default_rng(2))


@pytest.mark.filterwarnings("ignore:Contacts between boxes are met")
def test_bad_shape_and_segment_contacts_are_refused():
    tree = ukjax.models.from_mjcf(SHAPES).system
    good = dict(
        bodies=["ball"], centres=np.zeros((1, 3)), radii=np.zeros(1), shape_bodies=["world"], kinds=["box"],
        positions=np.zeros((1, 3)), rotations=np.eye(3)[None], sizes=np.ones((1, 3)), friction=0.5,
    )
    ShapeContacts(tree, **good)
    for change, match in (
        (dict(kinds=["ellipsoid"]), "kinds must be among"),
        (dict(shape_bodies=["nowhere"]), "No body named 'nowhere'"),
        (dict(shape_bodies=["world", "world"]), "one shape body and one kind per sphere"),
        (dict(rotations=np.eye(3)), r"rotations must have shape \(1, 3, 3\)"),
    ):
        with pytest.raises((ValueError, KeyError), match=match):
            ShapeContacts(tree, **{**good, **change})
    rod = np.array([[[0.0, 0, 0], [1, 0, 0]]])
    good = dict(
        bodies=["rod"], segments=rod, radii=[0.02], other_bodies=["world"], other_segments=rod + 1, other_radii=[0.0],
        friction=0.5,
    )
    SegmentContacts(tree, **good)
    for change, match in (
        (dict(other_bodies=["nowhere"]), "No body named 'nowhere'"),
        (dict(other_bodies=["world", "world"]), "one other body per segment"),
        (dict(other_segments=rod[0]), r"other_segments must have shape \(1, 2, 3\)"),
        (dict(segments=np.zeros((1, 2, 3))), "two distinct ends"),
        (dict(friction=-1.0), "friction coefficients that are finite"),
    ):
        with pytest.raises((ValueError, KeyError), match=match):
            SegmentContacts(tree, **{**good, **change})


@pytest.mark.filterwarnings("ignore:Contacts between boxes are met")
def test_condim_as_mujoco_mixes_it():
    """The larger `condim` of the two geoms is the pair's: 1 on both makes it frictionless; 4
    and 6 (torsional and rolling friction, not modelled) are named in the warning, the sliding
    friction kept."""
    one = SHAPES.replace('<geom name="ball" size="0.05"', '<geom name="ball" size="0.05" condim="1"')
    contacts, _ = ukjax.models.from_mjcf(one.replace('<geom name="pellet"', '<geom name="pellet" condim="1"')).unilateral
    friction = dict(zip(contacts.names, np.asarray(contacts.friction)))
    assert friction["ball–pellet"] == 0 and friction["ball–post"] == friction["pellet–post"] == 1
    with pytest.warns(UserWarning, match=r"torsional and rolling friction \(condim 4 or 6\) of 5 geom pair"):
        ukjax.models.from_mjcf(SHAPES.replace('<geom name="ball" size="0.05"', '<geom name="ball" size="0.05" condim="6"'))


FLOOR = """<mujoco><worldbody>
  <body name="ground" pos="0 0 -0.2" euler="0 0 30"><geom name="floor" type="plane" size="5 5 0.1" friction="0.7"/></body>
  <body name="ball" pos="0 0 0.5"><freejoint/><geom name="ball" size="0.1" mass="1" friction="0.7"/></body>
</worldbody>{contact}</mujoco>"""


def test_a_plane_on_a_static_body_and_an_explicit_pair_as_mujoco_reads_them():
    """A plane on a body without joints is welded to the world (MuJoCo's static body): it is the
    ball's floor, at its world height (it was dropped, and the ball fell through). An explicit
    `<pair>` of the same two geoms replaces their dynamic contact, as in MuJoCo (one contact,
    the pair's frictionless `condim="1"`), where both were imported."""
    import mujoco

    (floor,) = ukjax.models.from_mjcf(FLOOR.format(contact="")).unilateral
    assert isinstance(floor, PlaneContacts) and floor.names == ("ball–floor",)
    np.testing.assert_allclose(np.asarray(floor.normals), [[0, 0, 1]], atol=1e-15)
    np.testing.assert_allclose(np.asarray(floor.offsets), [-0.2], atol=1e-15)
    np.testing.assert_allclose(np.asarray(floor.friction), [0.7])
    paired = FLOOR.format(contact='<contact><pair geom1="floor" geom2="ball" condim="1"/></contact>')
    (floor,) = ukjax.models.from_mjcf(paired).unilateral
    mj = mujoco.MjModel.from_xml_string(paired)
    data = mujoco.MjData(mj)
    data.qpos[2] = -0.11  # the ball into the floor: MuJoCo's contacts there
    mujoco.mj_forward(mj, data)
    assert data.ncon == 1 and data.contact[0].dim == 1
    assert floor.names == ("ball–floor",) and float(floor.friction[0]) == 0.0


MARGINS = """<mujoco><worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="ball" pos="0 0 0.3"><freejoint/><geom name="ball" size="0.1" mass="1" margin="0.05" gap="0.01"/></body>
<body name="arm" pos="2 0 1"><joint name="h" type="hinge" axis="0 1 0" range="-30 30" margin="0.1"/>
  <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.02" mass="1" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""


def test_margins_move_the_surfaces_and_limits_as_in_mujoco():
    """A geom's `margin` moves its surface out (the sphere is 0.05 m larger against the floor;
    its `gap` moves nothing in MuJoCo), a joint's limit `margin` moves its limits in (±30°
    becomes ±(30° − 0.1 rad)); MuJoCo, run to rest on the same file, sits there to its
    softness. A negative `solref` (stiffness and damping given directly) has no exact
    counterpart and is named."""
    import mujoco

    limits, floor = ukjax.models.from_mjcf(MARGINS).unilateral
    np.testing.assert_allclose(np.asarray(floor.radii), [0.15])
    np.testing.assert_allclose(np.asarray(limits.upper), np.deg2rad(30) - 0.1)
    np.testing.assert_allclose(np.asarray(limits.lower), -np.deg2rad(30) + 0.1)
    mj = mujoco.MjModel.from_xml_string(MARGINS)
    data = mujoco.MjData(mj)
    while data.time < 3:
        mujoco.mj_step(mj, data)
    assert abs(data.qpos[2] - 0.15) < 1e-3 and abs(data.qpos[7] - (np.deg2rad(30) - 0.1)) < 2e-3
    with pytest.warns(UserWarning, match="negative solref .1 geom pairs: floor–ball"):
        ukjax.models.from_mjcf(MARGINS.replace('margin="0.05" gap="0.01"', 'solref="-10000 -10"'))
