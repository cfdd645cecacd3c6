"""Unilateral constraints: closed forms (a bouncing ball, a block on an incline, a pendulum on
its joint limit, a rod on its end), MuJoCo on the same file, batches and derivatives."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax

# one worker per fixture: the tests that share a compiled simulation run where it is
pytestmark = pytest.mark.xdist_group("contacts")

G = 9.81


class PointMass(ukjax.AbstractUnconstrainedSystem):
    """Point masses in the plane (x along a floor, y above it; `(x₁, y₁, x₂, …)`) under a
    gravity vector, the first pushed by a force per unit mass growing as `ramp t`: on an
    incline of angle θ, gravity is g (sin θ, −cos θ) in the incline's axes."""

    mass: jax.Array
    gravity: jax.Array
    ramp: jax.Array

    def mass_matrix(self, t, q):
        return jnp.diag(jnp.repeat(jnp.atleast_1d(self.mass), 2)).astype(q.dtype)

    def forces(self, t, q, qd):
        masses = jnp.atleast_1d(self.mass)
        push = jnp.zeros_like(q).at[:2].set(self.ramp * t)
        return jnp.repeat(masses, 2) * (jnp.tile(self.gravity, masses.size) + push).astype(q.dtype)


def _height(t, q):
    return q[1::2]


def _slip(t, q, qd):
    return qd[0::2]


def _on_floor(mass, gravity, restitution, friction, ramp=(0.0, 0.0), companion=None):
    """The point on the floor, alone or beside a companion of mass `companion` that rests far
    away on the same floor (frictional enough to stick on any incline here, plastic; twice the
    coordinates compile in twice the time, so only the tests that need it have it)."""
    # the gap and slip as module-level functions: every such system has one structure, so one
    # compiled simulation serves the tests that share shapes
    pair = lambda a, b: jnp.stack(jnp.broadcast_arrays(jnp.asarray(a, float), jnp.asarray(b, float)), axis=-1)  # noqa: E731
    alone = lambda a, b: jnp.asarray(a, float)  # noqa: E731
    join = alone if companion is None else pair
    floor = ukjax.Unilateral(
        _height, restitution=join(restitution, 0.0), friction=join(friction, 1.0), slip=_slip
    )
    point = PointMass(join(mass, companion), jnp.asarray(gravity, float), jnp.asarray(ramp, float))
    return ukjax.ConstrainedSystem(point, floor)


def _batch(values):
    """One system whose leaves carry a batch: the members' masses, gravities, coefficients."""
    return _on_floor(*(np.array(v, float) for v in zip(*values)))


def _start(q, qd):
    """The point's start, the companion resting at x = 10 on the floor."""
    return np.r_[q, 10.0, 0.0], np.r_[qd, 0.0, 0.0]


H, E, THETA = 1.0, 0.5, 0.5
FALL = np.sqrt(2 * H / G)  # time of the first impact
# the ball's impacts at FALL (1 + 2e + 2e² + …), each apex e^n √(2gh)/g later
IMPACTS = FALL * (1 + 2 * np.cumsum(np.r_[0, E ** np.arange(1, 4)]))
APEXES = IMPACTS[:3] + E ** np.arange(1, 4) * FALL
TS = np.sort(np.r_[0.0, APEXES, 1.0, 1.5])


DOWN = (0.0, -G)
# a ball thrown along the floor: its mass, μ and e, and their central differences' step
THROWN, STEP = np.array([2.0, 0.2, 0.5]), 1e-6
THROWN_START = (np.array([0.0, H]), np.array([3.0, 0.0]))
# a ten-tonne mass on the floor, lifted by a force growing to twice its weight at t = 1
HEAVY, LIFT = 1e4, (0.0, 2 * G)
# a gram beside a tonne (on the incline) and beside a thousand tonnes (lifted)
GRAM, TONNE = 1e-3, 1e3
# a unit mass landing from H while moving along the floor at 1 m/s, with μ = 0.5
LANDING = (np.array([0.0, H]), np.array([1.0, 0.0]))
SLOPE = (G * np.sin(THETA), -G * np.cos(THETA))  # gravity in the incline's axes


@pytest.fixture(scope="module")
def closed_forms():
    """Members with their contacts at different times and in different modes, simulated
    together: a ball dropped from H with e = 0.5 and with e = 0; a block on an incline of
    θ = 0.5 rad with μ = 0.7 > tan θ (sticks) and μ = 0.3 (slides); the heavy mass lifted off;
    the thrown ball with each of its mass, μ and e moved by ±STEP (for the derivatives); the
    landing with e = 0 and e = 0.5; a gram sliding on the incline beside a resting tonne, and
    a gram lifted beside a thousand tonnes."""
    still = (0.0, 0.0)
    members = [
        (2.0, DOWN, E, 0.3, still),
        (2.0, DOWN, 0.0, 0.3, still),
        (3.0, SLOPE, 0.0, 0.7, still),
        (3.0, SLOPE, 0.0, 0.3, still),
        (HEAVY, DOWN, 0.0, 0.3, LIFT),
    ]
    starts = [(0.0, H), (0.0, H), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)]
    velocities = [(0.0, 0.0)] * 5
    for i in range(3):
        for sign in (1, -1):
            mass, mu, e = THROWN + sign * STEP * np.eye(3)[i]
            members.append((mass, DOWN, e, mu, still))
            starts.append(THROWN_START[0])
            velocities.append(THROWN_START[1])
    for e in (0.0, 0.5):
        members.append((1.0, DOWN, e, 0.5, still))
        starts.append(LANDING[0])
        velocities.append(LANDING[1])
    members += [(GRAM, SLOPE, 0.0, 0.3, still, TONNE), (GRAM, DOWN, 0.0, 0.3, LIFT, TONNE * 1e3)]
    starts += [(0.0, 0.0)] * 2
    velocities += [(0.0, 0.0)] * 2
    # a negative mass (M not positive definite); the first member again, its restitution
    # edited to 1.5 (read during the run)
    members += [(-2.0,) + members[0][1:], members[0]]
    starts += [starts[0]] * 2
    velocities += [velocities[0]] * 2
    members = [m + (1.0,) * (6 - len(m)) for m in members]
    q0, qd0 = (np.array(x) for x in zip(*map(_start, starts, velocities)))
    system = _batch(members)
    system = eqx.tree_at(lambda s: s.constraints[0].restitution, system, system.constraints[0].restitution.at[-1, 0].set(1.5))
    return ukjax.simulate_batch(system, q0, qd0, 0.0, 1.5, ts=TS, system_axes=0)


def test_a_dropped_ball_bounces_to_e_to_the_2n_of_its_height(closed_forms):
    sol = closed_forms
    assert np.all(np.asarray(sol.status[:15]) == ukjax.Status.SUCCESS)
    # the members went through different numbers of events, in one program
    assert len(set(np.asarray(sol.contacts.events).tolist())) >= 3
    times = np.asarray(sol.contacts.event_times[0])
    np.testing.assert_allclose(times[:4], IMPACTS, rtol=1e-10)
    apex = np.searchsorted(TS, APEXES)
    np.testing.assert_allclose(np.asarray(sol.q[0, apex, 1]), H * E ** (2 * np.arange(1, 4)), rtol=1e-8)
    # each impulse reverses the approach speed to e times it: m (1 + e) v
    speeds = np.sqrt(2 * G * H) * E ** np.arange(4)
    np.testing.assert_allclose(np.asarray(sol.contacts.impulses[0, :4, 0]), 2.0 * (1 + E) * speeds, rtol=1e-8)
    # bounces too slow to see end the sequence; then it rests on the floor, pressed by m g
    assert float(sol.contacts.penetration[0]) <= 1e-9
    assert int(sol.contacts.mode[0, -1, 0]) != 0
    np.testing.assert_allclose(float(sol.contacts.normal[0, -1, 0]), 2.0 * G, rtol=1e-12)


def test_with_e_zero_the_ball_rests_at_once(closed_forms):
    sol = closed_forms
    assert int(sol.contacts.events[1]) == 1
    np.testing.assert_allclose(float(sol.contacts.event_times[1, 0]), FALL, rtol=1e-10)
    after = TS > FALL
    np.testing.assert_allclose(np.asarray(sol.q[1, after, :2]), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.contacts.normal[1, after, 0]), 2.0 * G, rtol=1e-12)


def test_step_ends_read_the_event_value_off_the_last_stage_or_evaluate_it():
    """The bouncing ball with a solver whose state keeps the vector field at the step's end
    (Dopri5: the event's value is read off it) and with one that does not (Heun: the value is
    evaluated there): the same impacts, at their closed-form times."""
    import diffrax

    system = _on_floor(2.0, DOWN, E, 0.3)
    q0, qd0 = np.array([0.0, H]), np.zeros(2)
    for solver in (diffrax.Dopri5(), diffrax.Heun()):
        sol = ukjax.simulate(system, q0, qd0, 0.0, 1.0, ts=np.array([0.0, 1.0]), solver=solver)
        assert sol.status == ukjax.Status.SUCCESS, type(solver).__name__
        times = np.asarray(sol.contacts.event_times)[: len(IMPACTS[IMPACTS < 1.0])]
        np.testing.assert_allclose(times, IMPACTS[IMPACTS < 1.0], rtol=1e-10, err_msg=type(solver).__name__)


def test_a_run_out_of_events_says_so():
    """A ball allowed two events stops where a third would be (its third impact), with its
    status and the saves it reached; `throw` raises with what to do."""
    ball = _on_floor(2.0, DOWN, E, 0.3)
    sol = ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, 1.5, ts=TS, max_events=2, throw=False)
    assert int(sol.status) == ukjax.Status.MAX_EVENTS_REACHED and int(sol.contacts.events) == 2
    reached = TS <= IMPACTS[2]
    assert np.all(np.isfinite(np.asarray(sol.q[reached]))) and not np.any(np.isfinite(np.asarray(sol.q[~reached])))
    with pytest.raises(RuntimeError, match="raise max_events"):
        ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, 1.5, ts=TS, max_events=2)


def test_a_start_inside_the_floor_is_moved_out_and_said():
    """A ball started 0.5 m into the floor begins on it (its start projected out), and the run
    says so: a warning with the depth, and `start_penetration` (not counted in
    `penetration`). The program of the test above."""
    ball = _on_floor(2.0, DOWN, E, 0.3)
    with pytest.warns(RuntimeWarning, match="starts inside a contact or a joint limit .the run., by up to 5.00e-01"):
        sol = ukjax.simulate(ball, [0.0, -0.5], [0.0, 0.0], 0.0, 1.5, ts=TS, max_events=2, throw=False)
    assert int(sol.status) == ukjax.Status.SUCCESS
    np.testing.assert_allclose(float(sol.contacts.start_penetration), 0.5, rtol=1e-12)
    assert float(sol.contacts.penetration) <= 1e-9
    np.testing.assert_allclose(np.asarray(sol.q), 0.0, atol=1e-12)


def test_a_save_past_t1_by_rounding_is_made_and_one_past_it_by_more_is_refused():
    """A save an ulp past `t1` (a grid scaled as `linspace(0, 1) · t1 / T`) is snapped onto
    `t1`, not left unreached; saves outside `[t0, t1]` or out of order are refused. The second
    apex, reached after two events, is at H e⁴."""
    ball = _on_floor(2.0, DOWN, E, 0.3)
    t1 = APEXES[1]
    ts = np.linspace(0.0, t1, TS.size)
    ts[-1] = np.nextafter(t1, np.inf)
    sol = ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, t1, ts=ts, max_events=2)
    assert float(sol.ts[-1]) == t1 and int(sol.contacts.events) == 2
    np.testing.assert_allclose(float(sol.q[-1, 1]), H * E**4, rtol=1e-8)
    for bad, match in ((ts + 1e-3, "must lie between"), (ts[::-1], "sorted in the direction")):
        with pytest.raises(ValueError, match=match):
            ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, t1, ts=bad, max_events=2)


def test_an_event_that_cannot_be_located_says_so():
    """A gap that jumps from +0.5 to −0.5 (here, 0.5 above the floor) changes sign without
    crossing zero: the event's root finder cannot meet its tolerance on the value, and the
    run stops there with CONTACT_UNRESOLVED, not a solver failure."""
    jump = ukjax.Unilateral(lambda t, q: jnp.where(q[1] > 0.5, q[1], q[1] - 1.0))
    ball = ukjax.ConstrainedSystem(PointMass(jnp.asarray(2.0), jnp.asarray(DOWN), jnp.zeros(2)), jump)
    sol = ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, 1.0, ts=np.linspace(0, 1, 11), throw=False)
    assert int(sol.status) == ukjax.Status.CONTACT_UNRESOLVED
    reached = np.isfinite(np.asarray(sol.q[:, 1]))
    assert reached[0] and not reached[-1] and np.all(np.asarray(sol.q[reached, 1]) > 0.5)
    with pytest.raises(RuntimeError, match="could not be located"):
        ukjax.simulate(ball, [0.0, H], [0.0, 0.0], 0.0, 1.0, ts=np.linspace(0, 1, 11))


def test_a_heavy_mass_lifts_off_when_its_normal_force_reaches_zero(closed_forms):
    """The ten-tonne mass leaves the floor where the lifting force equals its weight (t =
    1/2): an event located on a normal force of 1e5 N, whose round-off stays far above the
    root finder's 1e-14. Then y = g (t − 1/2)³ / 3."""
    sol = closed_forms
    assert int(sol.status[4]) == ukjax.Status.SUCCESS and int(sol.contacts.events[4]) == 1
    np.testing.assert_allclose(float(sol.contacts.event_times[4, 0]), 0.5, rtol=1e-8)
    t = np.asarray(sol.ts[4])
    np.testing.assert_allclose(np.asarray(sol.q[4, :, 1]), G * np.maximum(t - 0.5, 0) ** 3 / 3, rtol=1e-8, atol=1e-9)
    resting = t < 0.5
    np.testing.assert_allclose(
        np.asarray(sol.contacts.normal[4, resting, 0]), HEAVY * G * (1 - 2 * t[resting]), rtol=1e-10
    )


def test_a_block_on_an_incline_sticks_or_slides_as_coulomb_says(closed_forms):
    sol = closed_forms
    t = np.asarray(sol.ts[2])
    # μ = 0.7 > tan θ = 0.546: stuck, held by a friction force of m g sin θ
    assert np.max(np.abs(np.asarray(sol.q[2, :, 0]))) < 1e-9
    assert np.all(np.asarray(sol.contacts.mode[2, :, 0]) == 2)
    np.testing.assert_allclose(np.asarray(sol.contacts.tangent[2, :, 0, 0]), -3.0 * G * np.sin(THETA), rtol=1e-12)
    # μ = 0.3: slides with g (sin θ − μ cos θ), the normal force m g cos θ
    a = G * (np.sin(THETA) - 0.3 * np.cos(THETA))
    np.testing.assert_allclose(np.asarray(sol.q[3, :, 0]), 0.5 * a * t**2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.contacts.normal[3, 1:, 0]), 3.0 * G * np.cos(THETA), rtol=1e-12)
    assert np.all(np.asarray(sol.contacts.mode[3, 1:, 0]) == 1)
    assert np.max(np.abs(np.asarray(sol.q[2:4, :, 1]))) <= 1e-12  # on the plane throughout


SCENE = str(ukjax.examples.path("contacts.xml"))
LIMIT, START, MU, V0 = np.deg2rad(-30), np.deg2rad(75), 0.4, 1.0


@pytest.fixture(scope="module")
def scene():
    """The MJCF scene simulated for 1 s: the pendulum released from 75° onto its −30° limit
    (restitution 0.5), the sphere and the box launched at 1 m/s along x, the rod at rest."""
    import mujoco

    model = ukjax.models.from_mjcf(SCENE, keyframe="launched")
    limits, contacts = model.unilateral
    limits = eqx.tree_at(lambda u: u.restitution, limits, jnp.asarray(0.5))
    system = ukjax.ConstrainedSystem(model.system, model.constraints + (limits, contacts))
    mj = mujoco.MjModel.from_xml_path(SCENE)
    ts = np.linspace(0, 1, 21)
    return model, system, mj, model.q0, ukjax.simulate(system, model.q0, model.qd0, 0.0, 1.0, ts=ts)


@pytest.mark.xdist_group("contacts_scene")
def test_mjcf_limits_and_contacts_are_read_with_mujocos_masses(scene):
    model, _, mj, _, _ = scene
    limits, contacts = model.unilateral
    assert limits.joints == ("swing",)
    np.testing.assert_allclose(np.asarray([limits.lower[0], limits.upper[0]]), np.deg2rad([-30, 80]), rtol=1e-15)
    # a sphere, a box's eight corners, a capsule's two end spheres; the pendulum's geom collides with nothing
    assert contacts.names[0] == "sphere–floor" and len(contacts.names) == 1 + 8 + 2
    np.testing.assert_allclose(np.asarray(contacts.friction), MU)
    # drawn: each sphere's lowest point (the sphere, the box's lower corners and the rod's
    # lower end on the floor at the start), and the floor
    sketch = jax.jit(lambda q: contacts.sketch(model.system, 0.0, q))(model.q0)
    np.testing.assert_allclose(np.sort(np.asarray(sketch.points[:, 2]))[:6], 0.0, atol=1e-15)
    assert sketch.links.shape == (11 + 4 * 11, 2, 3)
    # bodies without <inertial> weigh what their geoms do, as MuJoCo computes it
    np.testing.assert_allclose(np.asarray(model.system.masses[1:]), [1000 * 4 / 3 * np.pi * 0.1**3, 6.0, mj.body_mass[4]])


@pytest.mark.xdist_group("contacts_scene")
def test_a_pendulum_rebounds_from_its_limit_and_never_passes_it(scene):
    model, system, mj, q0, sol = scene
    theta = np.asarray(sol.q[:, 0])
    assert theta.min() >= LIMIT - 1e-9 and float(sol.contacts.penetration) <= 1e-9
    # the impact: the lower limit's impulse I (1 + e) ω⁻, ω⁻ from the energy fallen through
    inertia = float(jax.jit(lambda q: model.system.mass_matrix(0.0, q))(q0)[0, 0])
    drop = mj.body_mass[1] * G * 0.3 * (np.cos(LIMIT) - np.cos(START))
    speed = np.sqrt(2 * drop / inertia)
    impulses = np.asarray(sol.contacts.impulses[:, 0])
    hit = np.flatnonzero(impulses > 0)
    assert len(hit) == 1
    np.testing.assert_allclose(impulses[hit[0]], inertia * 1.5 * speed, rtol=1e-8)


@pytest.mark.xdist_group("contacts_scene")
def test_a_sphere_slides_then_rolls_and_a_box_slides_to_rest(scene):
    model, _, mj, _, sol = scene
    t = np.asarray(sol.ts)
    # the sphere: slip decelerates it at μ g and spins it up until v = 5/7 v0, at 2 v0 / (7 μ g)
    switch = 2 * V0 / (7 * MU * G)
    rolling = V0 * switch - 0.5 * MU * G * switch**2 + 5 / 7 * V0 * (t - switch)
    x = np.where(t < switch, V0 * t - 0.5 * MU * G * t**2, rolling)
    np.testing.assert_allclose(np.asarray(sol.q[:, 1]), x, atol=1e-9)
    # the box: decelerated at μ g to rest at v0 / (μ g), then held by its four corners
    stop = V0 / (MU * G)
    x = np.where(t < stop, V0 * t - 0.5 * MU * G * t**2, V0**2 / (2 * MU * G))
    np.testing.assert_allclose(np.asarray(sol.q[:, 8]), x, atol=1e-9)
    corners = np.asarray(sol.contacts.normal[-1, 3:11])  # after the two limit rows and the sphere
    np.testing.assert_allclose(np.sort(corners)[4:], 6.0 * G / 4, rtol=1e-9)
    assert np.all(corners[np.argsort(corners)[:4]] == 0)


@pytest.mark.xdist_group("contacts_scene")
def test_a_rod_on_its_end_stays_at_rest_held_by_m_g(scene):
    model, _, mj, q0, sol = scene
    rod = slice(15, 22)
    np.testing.assert_allclose(np.asarray(sol.q[:, rod]), np.broadcast_to(np.asarray(q0[rod]), (21, 7)), atol=1e-12)
    normal = np.asarray(sol.contacts.normal[:, 11:13])
    np.testing.assert_allclose(normal.max(axis=1), mj.body_mass[4] * G, rtol=1e-12)
    assert np.all(normal.min(axis=1) == 0)


@pytest.mark.xdist_group("contacts_scene")
def test_mujoco_on_the_same_file_agrees_to_its_softness(scene):
    """MuJoCo with a tight `solref` (0.002 s) and a 0.1 ms step: the sphere's and the box's
    paths agree to 0.1 mm; MuJoCo's floor gives by ~1e-5 m and its limit by degrees, ukjax's
    by nothing measurable."""
    import mujoco

    _, _, mj, _, sol = scene
    mj.geom_solref[:] = (0.002, 1.0)
    data = mujoco.MjData(mj)
    mujoco.mj_resetDataKeyframe(mj, data, mj.key("launched").id)
    path, penetration, lowest = [], 0.0, np.inf
    for step in range(10_001):
        if step % 500 == 0:
            path.append(data.qpos[[1, 8]].copy())
        mujoco.mj_step(mj, data)
        penetration = max(penetration, -data.contact.dist.min(initial=0))
        lowest = min(lowest, data.qpos[0])
    np.testing.assert_allclose(np.asarray(sol.q[:, [1, 8]]), np.array(path), atol=1e-4)
    assert penetration > 1e-6 and float(sol.contacts.penetration) <= 1e-9
    assert lowest < LIMIT - 0.01 and float(sol.q[:, 0].min()) >= LIMIT - 1e-9


def _box_on_a_plane(half, tilt, mu, lean):
    """A box of half-sizes `half` (kg: BOX_MASS) on a floor tilted by `tilt` about y, resting on
    its bottom face, or, leaning by `lean` about y, on its bottom edge at −x."""
    b, d, h = half
    normal = np.array([np.sin(tilt), 0.0, np.cos(tilt)])
    corner = np.array([-b, 0.0, -h])
    angle = tilt - lean
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    centre = -rotation @ corner if lean else h * normal
    xml = f"""<mujoco><worldbody>
      <geom name="floor" type="plane" size="5 5 0.1" euler="0 {np.degrees(tilt)} 0" friction="{mu} 0 0"/>
      <body name="box"><freejoint/><geom name="box" type="box" size="{b} {d} {h}" mass="{BOX_MASS}" friction="{mu} 0 0"/></body>
    </worldbody><keyframe>
      <key name="start" qpos="{centre[0]} 0 {centre[2]} {np.cos(angle / 2)} 0 {np.sin(angle / 2)} 0"/>
    </keyframe></mujoco>"""
    model = ukjax.models.from_mjcf(xml, keyframe="start")
    return ukjax.ConstrainedSystem(model.system, model.constraints + model.unilateral), model.q0


BOX_MASS = 2.0
ROCKING = dict(half=(0.1, 0.05, 0.2), tilt=0.0, mu=10.0, lean=0.05)
INCLINE = dict(half=(0.05, 0.05, 0.15), tilt=0.2, mu=0.21, lean=0.0)


@pytest.fixture(scope="module")
def boxes():
    """Two boxes in one batch, 1 s: one released leaning on an edge (it rocks), one at rest on
    an incline with μ a little above tan θ."""
    (rocking, q_rocking), (incline, q_incline) = (_box_on_a_plane(**case) for case in (ROCKING, INCLINE))
    system = jax.tree.map(lambda *x: jnp.stack(x), rocking, incline)
    q0 = jnp.stack([q_rocking, q_incline])
    return ukjax.simulate_batch(
        system, q0, jnp.zeros_like(q0), 0.0, 1.0, ts=np.linspace(0, 1, 5), system_axes=0, max_events=64
    )


@pytest.mark.xdist_group("contacts_boxes")
def test_a_rocking_block_loses_housners_share_per_impact_and_comes_to_rest(boxes):
    """A box (half-sizes b, h in the plane of rocking) released on one bottom edge, leaning by
    θ₀, rocks from edge to edge. Each plastic impact keeps r = 1 − 3/2 sin²α of the angular
    velocity, α = atan(b/h) (Housner 1963), so the impulses m b ω (1 + r) fall by r each time:
    an infinite series in finite time, which the event loop truncates (contacts an impact
    would lift off slower than √atol are held) to end at rest, flat."""
    sol = jax.tree.map(lambda x: x[0], boxes)
    (b, _, h), lean = ROCKING["half"], ROCKING["lean"]
    assert int(sol.status) == ukjax.Status.SUCCESS and int(sol.contacts.events) < 32
    R2 = b**2 + h**2
    r = 1 - 1.5 * b**2 / R2
    # the first impact's angular velocity from the energy of the fall about the edge (I = 4/3 m R²)
    omega = np.sqrt(2 * G * (b * np.sin(lean) + h * np.cos(lean) - h) / (4 / 3 * R2))
    impulses = np.asarray(sol.contacts.impulses).sum(axis=1)[: int(sol.contacts.events)]
    np.testing.assert_allclose(impulses[0], BOX_MASS * b * omega * (1 + r), rtol=1e-8)
    np.testing.assert_allclose(impulses[1:10] / impulses[:9], r, rtol=1e-6)
    # at rest on its bottom face
    np.testing.assert_allclose(np.asarray(sol.q[-1, 3:]), [1, 0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.qd[-1]), 0, atol=1e-9)
    bottom = np.asarray(sol.contacts.gap[-1]) < h
    assert bottom.sum() == 4 and np.max(np.abs(np.asarray(sol.contacts.gap[-1])[bottom])) <= 1e-9
    assert float(sol.contacts.penetration) <= 1e-9


@pytest.mark.xdist_group("contacts_boxes")
def test_a_box_sticks_on_an_incline_wherever_coulomb_allows_it(boxes):
    """A tall box on an incline with tan θ < μ sticks: its four bottom corners stick, with the
    normal forces of statics (the downhill pair pressing harder by H m g sin θ / 2b) and each
    corner's friction in proportion to its normal force (the sticking forces are
    indeterminate; shared uniformly, the light uphill corners' would leave their cones)."""
    sol = jax.tree.map(lambda x: x[1], boxes)
    (b, _, h), tilt, mu = INCLINE["half"], INCLINE["tilt"], INCLINE["mu"]
    assert int(sol.status) == ukjax.Status.SUCCESS and int(sol.contacts.events) == 0
    # it moves by rounding alone: 3e-14 to 1.2e-12 in 1 s over tilts of 0.05-0.2 and two
    # boxes, with a Cholesky factor of M or its factor from the leaves (measured, 2026-11-28)
    assert np.max(np.abs(np.asarray(sol.q - sol.q[0]))) < 1e-11
    bottom = np.asarray(sol.contacts.gap[0]) < h
    assert np.all(np.asarray(sol.contacts.mode)[:, bottom] == 2)
    normal, tangent = np.asarray(sol.contacts.normal)[:, bottom], np.asarray(sol.contacts.tangent)[:, bottom]
    weight = BOX_MASS * G
    pairs = np.sort(normal, axis=1)  # uphill, uphill, downhill, downhill
    np.testing.assert_allclose(pairs[:, :2].sum(axis=1) + pairs[:, 2:].sum(axis=1), weight * np.cos(tilt), rtol=1e-12)
    np.testing.assert_allclose(pairs[:, 2] - pairs[:, 1], h * weight * np.sin(tilt) / (2 * b), rtol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(tangent, axis=-1) / normal, np.tan(tilt), rtol=1e-7)
    # uniformly shared, each would carry m g sin θ / 4, past μ times the light corners' force
    assert weight * np.sin(tilt) / 4 > mu * pairs[0, 0]


def _thrown(parameters, adjoint, companion=None):
    """The thrown ball's position at t = 1 s (after two sliding impacts) for its mass, μ, e
    (alone, or beside its resting companion, as in the batch: it moves alike)."""
    mass, mu, e = parameters
    system = _on_floor(mass, DOWN, e, mu, companion=companion)
    start = THROWN_START if companion is None else _start(*THROWN_START)
    sol = ukjax.simulate(system, *start, 0.0, 1.5, ts=TS, adjoint=adjoint)
    return sol.q[TS.tolist().index(1.0), :2]


def _central(closed_forms):
    """∂q/∂(m, μ, e) of the thrown ball by central differences (the batch's six members after
    the first five)."""
    q = np.asarray(closed_forms.q[5:11, TS.tolist().index(1.0), :2])
    return (q[0::2] - q[1::2]).T / (2 * STEP)


def test_derivatives_through_impacts_and_sliding_match_central_differences(closed_forms):
    """The thrown ball at t = 1 s, after two sliding impacts: ∂q/∂(m, μ, e) in forward mode
    through the events against central differences."""
    import diffrax

    forward = np.asarray(jax.jacfwd(lambda p: _thrown(p, diffrax.ForwardMode()))(jnp.asarray(THROWN)))
    np.testing.assert_allclose(forward, _central(closed_forms), rtol=1e-6, atol=1e-8)
    # the mass changes nothing here (it scales every force alike); μ moves x, e both x and y
    assert min(abs(forward[0, 1]), abs(forward[0, 2]), abs(forward[1, 2])) > 1e-2
    assert np.max(np.abs(forward[:, 0])) < 1e-12


@pytest.mark.slow
def test_reverse_mode_through_impacts_and_sliding_matches_central_differences(closed_forms):
    """The same derivative in reverse mode (the default adjoint, what a fit of many parameters
    uses), of x + 2y. The ball's companion rests sticking with zero slip and zero friction
    force, where the norms' derivatives were NaN, and μ enters the modes' search, which reverse
    mode cannot pass through. Out of the default suite: its program compiles in about 150 s
    on 2 cores (`pytest -m slow` runs it)."""
    weights = np.array([1.0, 2.0])
    reverse = np.asarray(jax.grad(lambda p: _thrown(p, None, companion=1.0) @ weights)(jnp.asarray(THROWN)))
    np.testing.assert_allclose(reverse, weights @ _central(closed_forms), rtol=1e-6, atol=1e-8)
    assert min(abs(reverse[1]), abs(reverse[2])) > 1e-2


def test_a_landing_that_the_impulse_can_stop_sticks(closed_forms):
    """Coulomb's law for impulses: a unit mass landing from H at 1 m/s along a floor with
    μ = 0.5. The impulse that stops its slip (1 N s) is inside the cone (μ m √(2gH) = 2.2 N s),
    so it sticks at the impact and stays where it landed (e = 0), or bounces straight up
    (e = 0.5); a sliding impulse would have sent it back at −1.2 m/s."""
    sol = closed_forms
    for member, e in ((11, 0.0), (12, 0.5)):
        t = np.asarray(sol.ts[member])
        after = t > FALL
        assert int(sol.status[member]) == ukjax.Status.SUCCESS
        np.testing.assert_allclose(np.asarray(sol.contacts.event_times[member, 0]), FALL, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(sol.qd[member, after, 0]), 0.0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(sol.q[member, after, 0]), FALL, rtol=1e-10)
        impulse = np.sqrt(2 * G * H) * (1 + e)
        np.testing.assert_allclose(float(sol.contacts.impulses[member, 0, 0]), impulse, rtol=1e-8)
    # the bounce is straight up, to e² H at the first apex
    np.testing.assert_allclose(float(sol.q[12, TS.tolist().index(APEXES[0]), 1]), 0.25 * H, rtol=1e-8)


def test_bad_members_are_marked_where_they_start(closed_forms):
    """Coefficients under `vmap` are read during the run: the member whose restitution was
    edited to 1.5 ends INVALID_PARAMETERS where it starts (a bounce to 2.25 H otherwise).
    The member with a negative mass ends SINGULAR_MASS_MATRIX at its first step (it ran
    100 000 steps and ended MAX_STEPS_REACHED). The other members are kept (the first, the
    same ball with e = 0.5, bounces as it should)."""
    sol = closed_forms
    assert int(sol.status[-1]) == ukjax.Status.INVALID_PARAMETERS
    assert not np.any(np.isfinite(np.asarray(sol.q[-1])))
    assert int(sol.status[-2]) == ukjax.Status.SINGULAR_MASS_MATRIX and int(sol.stats["num_steps"][-2]) <= 2
    assert int(sol.status[0]) == ukjax.Status.SUCCESS


def test_a_light_body_moves_by_its_own_forces_beside_a_heavy_one(closed_forms):
    """Each contact's stick–slip and lift-off decisions scale with its own forces: a gram on
    the incline (μ = 0.3 < tan θ) slides with g (sin θ − μ cos θ) beside a resting tonne, and
    a gram lifted by a force growing to twice its weight leaves the floor at t = 1/2 beside a
    thousand tonnes, then rises as g (t − 1/2)³ / 3, as alone."""
    sol = closed_forms
    t = np.asarray(sol.ts[13])
    assert np.all(np.asarray(sol.status[13:15]) == ukjax.Status.SUCCESS)
    a = G * (np.sin(THETA) - 0.3 * np.cos(THETA))
    np.testing.assert_allclose(np.asarray(sol.q[13, :, 0]), 0.5 * a * t**2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(sol.contacts.event_times[14, 0]), 0.5, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(sol.q[14, :, 1]), G * np.maximum(t - 0.5, 0) ** 3 / 3, rtol=1e-8, atol=1e-9)
    # the heavy companions did not move
    np.testing.assert_allclose(np.asarray(sol.q[13:15, :, 2:]), np.broadcast_to([10.0, 0.0], (2, t.size, 2)), atol=1e-12)


@pytest.mark.xdist_group("contacts_scene")
def test_the_command_line_simulates_the_file_with_its_contacts(scene, tmp_path, capsys):
    """`ukjax simulate FILE --events`: the file's limits and contacts join the run by default
    (the program the scene above compiled: same structure, same options), and it reports
    them."""
    from ukjax.cli.main import main

    main(["--no-cache", "simulate", SCENE, "--keyframe", "launched", "--t1", "1", "--saves", "21",
          "--tol", "1e-8", "--out", str(tmp_path / "scene.png"), "--events"])
    text = capsys.readouterr().out
    assert "13 unilateral rows" in text and "status SUCCESS" in text and "3 contact events" in text, text
    penetration = float(text.split("largest penetration ")[1].split()[0])
    assert penetration <= 1e-9 and (tmp_path / "scene.png").stat().st_size > 10_000



def test_event_root_finder_against_closed_forms():
    """The events' root finder (Illinois) on crossings whose roots are known: a smooth one
    to round-off in a quarter of bisection's evaluations, a zero at the bracket's end at
    once, a flat triple root, and a jump across zero refused (no root to locate)."""
    import optimistix as optx

    from ukjax._stepping import FallingRoot

    def find(f, lower_value):
        return optx.root_find(
            lambda s, _: f(s),
            FallingRoot(rtol=1e-14, atol=1e-14),
            y0=jnp.array(1.0),
            options=dict(lower=0.0, upper=1.0, lower_value=lower_value),
            throw=False,
        )

    smooth = find(lambda s: 1e-6 * (0.3 - s**2), 0.3e-6)
    assert smooth.result == optx.RESULTS.successful
    assert abs(float(smooth.value) - np.sqrt(0.3)) < 1e-14 and int(smooth.stats["num_steps"]) <= 15
    at_end = find(lambda s: 1.0 - s, 1.0)
    assert float(at_end.value) == 1.0 and int(at_end.stats["num_steps"]) == 1
    triple = find(lambda s: 1e-6 * (0.5 - s) ** 3, 0.125e-6)
    assert triple.result == optx.RESULTS.successful and abs(float(triple.value) - 0.5) < 1e-12
    jump = find(lambda s: jnp.where(s < 0.3, 1e-6, -1e-6), 1e-6)
    assert jump.result != optx.RESULTS.successful and abs(float(jump.value) - 0.3) < 1e-13
    # a value that starts below atol (an open contact at its gap's offset beside another's
    # crossing) bisects: the secant leaning on it took 238 steps here, over 256 on a Panda
    plateau = find(lambda s: jnp.minimum(1e-18, 1e-6 * (0.3 - s**2)), 1e-18)
    assert plateau.result == optx.RESULTS.successful and float(plateau.value) > 0
    assert abs(float(plateau.value) - np.sqrt(0.3)) < 1e-13 and int(plateau.stats["num_steps"]) <= 60


def test_saved_normal_force_inside_a_circle_against_its_closed_form():
    """A particle sliding inside a circle of radius R (frictionless, gravity down) from its
    bottom at speed v₀: the wall pushes it with N = m v²/R − m g y/R, v² = v₀² − 2g(y + R),
    a force that varies along the run. The saved force is the rate of the dense output of the
    force's integral (fourth order in the step, as the saved state is): within 1e-7 of the
    exact force at the saved state at rtol = atol = 1e-10 (3.4e-8 measured), where a straight
    line between the steps' ends was 3e-3 off."""
    radius, mass, speed = 1.0, 2.0, 4.0
    wall = ukjax.Unilateral(lambda t, q: jnp.atleast_1d(radius - jnp.sqrt(q @ q)))
    particle = ukjax.ConstrainedSystem(PointMass(jnp.asarray(mass), jnp.asarray(DOWN), jnp.zeros(2)), wall)
    sol = ukjax.simulate(particle, [0.0, -radius], [speed, 0.0], 0.0, 0.5, ts=np.linspace(0, 0.5, 201), rtol=1e-10, atol=1e-10)
    y = np.asarray(sol.q[:, 1])
    exact = mass * (speed**2 - 2 * G * (y + radius)) / radius - mass * G * y / radius
    assert int(sol.contacts.events) == 0 and np.all(exact > 4.0)  # it stays on the wall
    np.testing.assert_allclose(np.asarray(sol.contacts.normal[:, 0]), exact, rtol=1e-7)


@pytest.mark.slow
def test_saved_normal_force_derivatives_in_both_modes_against_the_closed_form():
    """The particle inside the circle: its path does not depend on its mass and its normal
    force is proportional to it, so ∂N/∂m = N/m at every save, in reverse and forward mode
    (the forces read off the dense output's rate, each save's row written once). Out of the
    default suite: its reverse-mode program compiles in about a minute on 2 cores."""
    import diffrax

    radius, speed = 1.0, 4.0
    wall = ukjax.Unilateral(lambda t, q: jnp.atleast_1d(radius - jnp.sqrt(q @ q)))

    def normal(mass, adjoint):
        particle = ukjax.ConstrainedSystem(PointMass(mass, jnp.asarray(DOWN), jnp.zeros(2)), wall)
        q0, qd0 = jnp.array([0.0, -radius]), jnp.array([speed, 0.0])
        sol = ukjax.simulate(particle, q0, qd0, 0.0, 0.5, ts=jnp.linspace(0, 0.5, 3), rtol=1e-8, atol=1e-8, adjoint=adjoint)
        return sol.contacts.normal[:, 0]

    mass = jnp.asarray(2.0)
    expected = np.asarray(normal(mass, diffrax.ForwardMode())) / 2.0
    reverse = jax.jacrev(lambda m: normal(m, diffrax.RecursiveCheckpointAdjoint()))(mass)
    forward = jax.jacfwd(lambda m: normal(m, diffrax.ForwardMode()))(mass)
    for derivative in (reverse, forward):
        np.testing.assert_allclose(np.asarray(derivative), expected, rtol=1e-10)
