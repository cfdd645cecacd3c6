"""Cylinders: a point's signed distance to one against the nearest of many surface points, a
rim's rows against automatic differentiation, a cylinder rolling down an incline, a coin
falling flat and a coin slid on its rim until it rolls against their closed forms (and DOP853), a ball leaving a lying cylinder where
energy says, and a box resting on a standing one."""

import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import ukjax
from ukjax._constraints import _time_derivative, holonomic_rows
from ukjax._robots.contacts import tangent_basis
from ukjax._robots.shapes import distance
from ukjax.models import PlaneContacts, RingContacts, ShapeContacts

pytestmark = pytest.mark.xdist_group("cylinders")

G = 9.81
ALPHA = 0.3  # the incline, rad
RADIUS, HALF = 0.2, 0.1  # the rolling cylinder's


def _surface(R: float, h: float, k: int = 300) -> np.ndarray:
    """Points over a cylinder's side and caps, about 1 mm apart for R, h ~ 0.1."""
    phi = np.linspace(0, 2 * np.pi, k, endpoint=False)
    z = np.linspace(-h, h, k // 4)
    side = np.stack(np.broadcast_arrays(R * np.cos(phi)[:, None], R * np.sin(phi)[:, None], z[None]), -1)
    rho = np.linspace(0, R, k // 4)
    caps = [
        np.stack(np.broadcast_arrays(rho[:, None] * np.cos(phi), rho[:, None] * np.sin(phi), s * h), -1)
        for s in (-1, 1)
    ]
    return np.concatenate([x.reshape(-1, 3) for x in (side, *caps)])


def test_a_points_distance_to_a_cylinder_is_the_nearest_surface_points():
    """Outside (beside the side, over the caps, beyond the rims) the distance to the nearest
    of 90 000 surface points, to their spacing; inside minus the distance to the nearest
    face; the normal the direction from the nearest surface point outside, the nearest face's
    inside."""
    R, h = 0.1, 0.15
    rng = np.random.default_rng(0)
    y = rng.uniform(-0.3, 0.3, (200, 3))
    d, n = distance("cylinder", jnp.asarray(y), jnp.tile(jnp.array([R, h, 0.0]), (200, 1)))
    d, n = np.asarray(d), np.asarray(n)
    surface = _surface(R, h)
    rho = np.linalg.norm(y[:, :2], axis=1)
    inside = (rho < R) & (np.abs(y[:, 2]) < h)
    assert 5 < inside.sum() < 195
    gaps = np.linalg.norm(y[:, None] - surface[None], axis=-1)
    nearest = surface[np.argmin(gaps, axis=1)]
    out = ~inside
    np.testing.assert_allclose(d[out], gaps.min(axis=1)[out], atol=2e-3)
    np.testing.assert_allclose(d[inside], -np.minimum(R - rho, h - np.abs(y[:, 2]))[inside], atol=1e-15)
    far = out & (d > 0.02)  # where the surface's spacing is small beside the distance
    direction = (y - nearest) / np.linalg.norm(y - nearest, axis=1, keepdims=True)
    assert np.all(np.sum(n[far] * direction[far], axis=1) > 0.99)
    np.testing.assert_allclose(np.linalg.norm(n, axis=1), 1.0, rtol=1e-14)
    # the point itself less the distance along the normal lies on the surface
    foot = y - d[:, None] * n
    on = np.minimum(np.abs(np.linalg.norm(foot[:, :2], axis=1) - R), np.abs(np.abs(foot[:, 2]) - h))
    assert np.all(on < 1e-12)


# One scene, one program, its parts kept apart by contype/conaffinity: a cylinder lying on its
# side on a plane inclined by ALPHA about y (friction 1); a coin (R = 0.1 m, half thickness
# 0.01 m) tilted 0.5 rad on its rim on a frictionless floor; a ball (r = 0.05 m) 0.2 rad from
# the top of a fixed frictionless log lying along y (R = 0.1 m); a box wider than a standing
# post's top 5 cm above it.
COIN, THICK, COIN_MASS, TILT = 0.1, 0.01, 0.2, 0.5
LOG, BALL, START = 0.1, 0.05, 0.2
SCENE = f"""<mujoco><worldbody>
  <geom name="incline" type="plane" size="5 5 .1" quat="{np.cos(ALPHA / 2)} 0 {np.sin(ALPHA / 2)} 0" friction="1"
        contype="1" conaffinity="1"/>
  <body name="can" pos="{RADIUS * np.sin(ALPHA)} 0 {RADIUS * np.cos(ALPHA)}" euler="90 0 0"><freejoint/>
    <geom name="can" type="cylinder" size="{RADIUS} {HALF}" mass="1" friction="1" contype="1" conaffinity="1"/></body>
  <geom name="floor" type="plane" size="5 5 .1" condim="1" contype="2" conaffinity="2"/>
  <body name="coin" pos="0 2 {THICK * np.cos(TILT) + COIN * np.sin(TILT)}" euler="0 {np.degrees(TILT)} 0"><freejoint/>
    <geom name="coin" type="cylinder" size="{COIN} {THICK}" mass="{COIN_MASS}" condim="1" contype="2" conaffinity="2"/>
  </body>
  <geom name="log" type="cylinder" size="{LOG} 0.3" pos="0 4 0" euler="90 0 0" condim="1" contype="4" conaffinity="4"/>
  <body name="ball" pos="{(LOG + BALL) * np.sin(START)} 4 {(LOG + BALL) * np.cos(START)}"><freejoint/>
    <geom name="ball" type="sphere" size="{BALL}" mass="0.1" condim="1" contype="4" conaffinity="4"/></body>
  <geom name="post" type="cylinder" size="0.05 0.2" pos="0 6 0.2" contype="8" conaffinity="8"/>
  <body name="lid" pos="0 6 0.5"><freejoint/>
    <geom name="lid" type="box" size="0.1 0.1 0.05" mass="0.5" contype="8" conaffinity="8"/></body>
</worldbody></mujoco>"""
T1 = 1.5


def _dop853(rhs, y0, t1, event):
    """The reference: DOP853 at rtol 1e-12 to the terminal `event`."""
    event.terminal = True
    return solve_ivp(
        rhs, (0.0, t1), y0, method="DOP853", rtol=1e-12, atol=1e-14, events=event, dense_output=True
    )


def _coin():
    """The coin's tilt θ by DOP853: (m z'² + I) θ̈ + m z' z'' θ̇² + m g z' = 0, z = h cos θ +
    R sin θ its centre's height, to its landing flat."""
    R, h, m = COIN, THICK, COIN_MASS
    inertia = m * (3 * R**2 + 4 * h**2) / 12  # a solid cylinder about a diameter

    def rhs(t, y):
        theta, rate = y
        dz, ddz = R * np.cos(theta) - h * np.sin(theta), -R * np.sin(theta) - h * np.cos(theta)
        return [rate, -(m * dz * ddz * rate**2 + m * G * dz) / (m * dz**2 + inertia)]

    return _dop853(rhs, [TILT, 0.0], 1.0, lambda t, y: y[0])


def _ball():
    """The ball's angle from the log's top by DOP853, θ̈ = g sin θ / (R + r), to where
    cos θ = (2/3) cos θ₀: the normal force m g cos θ − m v² / (R + r) zero there."""
    leaves = np.arccos(2 / 3 * np.cos(START))
    return _dop853(
        lambda t, y: [y[1], G * np.sin(y[0]) / (LOG + BALL)], [START, 0.0], 2.0, lambda t, y: y[0] - leaves
    )


@pytest.fixture(scope="module")
def scene():
    with warnings.catch_warnings():
        # the lid (a box) on the post (a cylinder) is met exactly: nothing said of it
        warnings.simplefilter("error")
        model = ukjax.models.from_mjcf(SCENE)
    landing, off = float(_coin().t_events[0][0]), float(_ball().t_events[0][0])
    ts = np.unique(
        np.concatenate(
            [
                np.linspace(0, T1, 6),
                np.linspace(0, 0.95 * landing, 8),
                np.linspace(0, 0.95 * off, 6),
                [off + 0.1],
            ]
        )
    )
    sol = ukjax.simulate(
        model.full_system(), model.q0, model.qd0, 0.0, T1, ts=jnp.asarray(ts), rtol=1e-10, atol=1e-10
    )
    return model, sol


def _part(model, sol, body: str):
    """The save times, and the body's free joint's coordinates and their rates there (each body
    of the scene has one, in the bodies' order)."""
    i = model.system.body_names.index(body)
    return (
        np.asarray(sol.ts),
        np.asarray(sol.q[:, 7 * i : 7 * i + 7]),
        np.asarray(sol.qd[:, 7 * i : 7 * i + 7]),
    )


def _forces(model, sol, prefix: str) -> dict:
    """The normal forces at the end of the run of the contacts whose names start with `prefix`."""
    names = sum((u.names for u in model.unilateral), ())
    return {n: f for n, f in zip(names, np.asarray(sol.contacts.normal[-1])) if n.startswith(prefix)}


def test_the_importer_builds_a_cylinders_rims_and_their_points(scene):
    """A cylinder on a plane is its two rims at their lowest points and six points of each
    rim."""
    model, _ = scene
    rims = [u for u in model.unilateral if isinstance(u, RingContacts)]
    assert len(rims) == 1
    assert rims[0].names[:2] == ("can–incline[bottom rim]", "can–incline[top rim]")
    points = next(u for u in model.unilateral if isinstance(u, PlaneContacts))
    can = np.array([n.startswith("can–incline[") for n in points.names])
    assert can.sum() == 12
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(points.centres)[can], axis=1), np.hypot(RADIUS, HALF), rtol=1e-14
    )
    shapes = next(u for u in model.unilateral if isinstance(u, ShapeContacts))
    assert shapes.kinds.count("cylinder") == 1 + 8  # the ball and the lid's corners against a cylinder


def test_a_cylinder_rolls_down_an_incline_at_two_thirds_g_sin_alpha(scene):
    """Rolling without slipping (μ = 1 holds the (1/3) m g sin α it needs): the centre runs
    (1/3) g sin α t² down the slope in 1.5 s (1.7 turns), each rim carrying m g cos α / 2,
    on the plane to 1e-12 m; every point of the rims passes the bottom."""
    model, sol = scene
    assert int(sol.status) == ukjax.Status.SUCCESS
    t, q, _ = _part(model, sol, "can")
    down = np.array([np.cos(ALPHA), 0.0, -np.sin(ALPHA)])
    run = (q[:, :3] - q[0, :3]) @ down
    np.testing.assert_allclose(run, G * np.sin(ALPHA) / 3 * t**2, atol=1e-10)
    assert run[-1] / RADIUS > 2 * np.pi
    assert float(sol.contacts.penetration) <= 1e-9
    rims = _forces(model, sol, "can–incline[")
    np.testing.assert_allclose(
        [rims["can–incline[bottom rim]"], rims["can–incline[top rim]"]], G * np.cos(ALPHA) / 2, rtol=1e-8
    )


def test_a_coin_on_its_rim_falls_flat_as_its_one_degree_of_freedom_says(scene):
    """The coin let go on its rim: its centre stays above the same point, its tilt follows
    the closed-form equation of motion (DOP853); it lands flat where that says, all its rim
    at once, and rests on its face."""
    model, sol = scene
    ref = _coin()
    landing = float(ref.t_events[0][0])
    t, q, qd = _part(model, sol, "coin")
    x, y = q[:, 4], q[:, 5]
    theta = np.arccos(np.clip(1 - 2 * (x**2 + y**2), -1, 1))
    before = t < landing
    np.testing.assert_allclose(theta[before], ref.sol(t[before])[0], atol=1e-7)
    np.testing.assert_allclose(q[:, :2], np.broadcast_to([0.0, 2.0], (len(q), 2)), atol=1e-12)
    events = np.asarray(sol.contacts.event_times)
    assert np.min(np.abs(events[np.isfinite(events)] - landing)) <= 1e-7 * landing
    np.testing.assert_allclose([q[-1, 2], theta[-1]], [THICK, 0.0], atol=1e-9)
    np.testing.assert_allclose(qd[-1], 0.0, atol=1e-9)


def test_a_ball_leaves_a_lying_cylinder_where_its_weight_no_longer_holds_it(scene):
    """The ball runs on the circle of radius R + r about the log's axis to where its weight
    no longer holds it, at the time DOP853 gives, then flies free from there."""
    model, sol = scene
    ref = _ball()
    off = float(ref.t_events[0][0])
    theta, rate = ref.y_events[0][0]
    L = LOG + BALL
    t, q, _ = _part(model, sol, "ball")
    on = t < off
    angle = ref.sol(t[on])[0]
    np.testing.assert_allclose(q[on][:, [0, 2]], L * np.stack([np.sin(angle), np.cos(angle)], 1), atol=1e-8)
    events = np.asarray(sol.contacts.event_times)
    assert np.min(np.abs(events[np.isfinite(events)] - off)) <= 1e-6 * off
    k = int(np.argmin(np.abs(t - (off + 0.1))))
    v = L * rate * np.array([np.cos(theta), -np.sin(theta)])
    flown = L * np.array([np.sin(theta), np.cos(theta)]) + v * 0.1 - np.array([0.0, G * 0.1**2 / 2])
    np.testing.assert_allclose(q[k, [0, 2]], flown, atol=1e-6)
    np.testing.assert_allclose(q[:, 1], 4.0, atol=1e-12)


def test_a_box_rests_on_a_standing_cylinder_by_its_rim(scene):
    """The box falls 5 cm: no corner of it meets the post, the points of the post's top rim
    do, and it rests on them, its centre the post's height and its own half height up, the
    rim's points carrying its weight."""
    model, sol = scene
    _, q, qd = _part(model, sol, "lid")
    drop = np.sqrt(2 * 0.05 / G)
    events = np.asarray(sol.contacts.event_times)
    assert np.min(np.abs(events[np.isfinite(events)] - drop)) <= 1e-8 * drop
    np.testing.assert_allclose(q[-1, :3], [0.0, 6.0, 0.45], atol=1e-9)
    np.testing.assert_allclose(qd[-1], 0.0, atol=1e-9)
    lid = _forces(model, sol, "")
    carried = {n: f for n, f in lid.items() if ("lid" in n or "post" in n) and f > 1e-9}
    assert carried and all(n.startswith("post–lid") for n in carried)
    np.testing.assert_allclose(sum(carried.values()), 0.5 * G, rtol=1e-9)


def test_a_coin_slid_on_its_rim_starts_rolling_when_its_closed_form_says():
    """A coin stood on its rim and slid at v₀ without spin, μ = 0.5: friction slows it at μg and
    spins it up at 2μg/R until its rims roll, at t* = v₀ / (3μg), and it rolls on at 2v₀/3
    (a disc's I = mR²/2), its rims carrying its weight and no friction. One event, at t*."""
    R, mu, v0, m = 0.05, 0.5, 1.0, 0.1
    xml = f"""<mujoco><option gravity="0 0 -{G}"/><worldbody>
      <geom name="floor" type="plane" size="0 0 1" friction="{mu}"/>
      <body name="coin" pos="0 0 {R}"><freejoint/>
        <geom name="disc" type="cylinder" size="{R} 0.01" quat="1 1 0 0" mass="{m}" friction="{mu}"/></body>
      </worldbody></mujoco>"""
    model = ukjax.models.from_mjcf(xml)
    stick = v0 / (3 * mu * G)
    ts = jnp.array([0.0, 0.5 * stick, 0.2])
    # at a tight tolerance: the coin's turn lives in its quaternion, integrated to the tolerance
    # (at 1e-8 the slip ends 1.5e-9 late, relatively)
    tight = dict(rtol=1e-11, atol=1e-11)
    sol = ukjax.simulate(model.full_system(), model.q0, jnp.zeros(7).at[0].set(v0), 0.0, 0.2, ts=ts, **tight)
    (when,) = np.asarray(sol.contacts.event_times)[np.isfinite(sol.contacts.event_times)]
    assert abs(when - stick) < 1e-9 * stick
    np.testing.assert_allclose(sol.qd[:, 0], [v0, v0 - mu * G * 0.5 * stick, 2 * v0 / 3], rtol=1e-9)
    np.testing.assert_allclose(sol.q[:, 2], R, atol=1e-12)
    assert float(sol.contacts.penetration) < 1e-12
    np.testing.assert_allclose(jnp.sum(sol.contacts.normal[-1]), m * G, rtol=1e-9)
    assert float(jnp.max(jnp.abs(sol.contacts.tangent[-1]))) < 1e-9


@pytest.mark.slow
def test_the_rolling_runs_derivative_in_both_modes_against_its_closed_form():
    """d(run at 0.5 s)/dα = (1/3) g cos α t² for the rolling cylinder alone, the incline
    turned through its planes' normals (rims and points alike) and the start kept on it:
    forward and reverse mode against the closed form and central differences. Slow: the
    forward program compiles in 90 s, the reverse in 350 s (2 cores)."""
    xml = SCENE[: SCENE.index('<geom name="floor"')] + "</worldbody></mujoco>"
    model = ukjax.models.from_mjcf(xml)
    system, T = model.full_system(), 0.5

    def run(alpha, adjoint=None):
        normal = jnp.stack([jnp.sin(alpha), 0.0, jnp.cos(alpha)])
        down = jnp.stack([jnp.cos(alpha), 0.0, -jnp.sin(alpha)])
        turned = eqx.tree_at(
            lambda s: [c.normals for c in s.constraints], system, [jnp.tile(normal, (k, 1)) for k in (12, 2)]
        )
        q0 = jnp.asarray(model.q0).at[:3].set(RADIUS * normal)
        sol = ukjax.simulate(
            turned, q0, model.qd0, 0.0, T, ts=jnp.array([0.0, T]), adjoint=adjoint, throw=False
        )
        return (sol.q[-1, :3] - q0[:3]) @ down

    want = G * np.cos(ALPHA) / 3 * T**2
    value, forward = jax.jvp(
        lambda a: run(a, diffrax.ForwardMode()), (jnp.asarray(ALPHA),), (jnp.asarray(1.0),)
    )
    reverse = jax.grad(run)(jnp.asarray(ALPHA))
    step = 1e-5
    central = (run(jnp.asarray(ALPHA + step)) - run(jnp.asarray(ALPHA - step))) / (2 * step)
    np.testing.assert_allclose(float(value), G * np.sin(ALPHA) / 3 * T**2, rtol=1e-12)
    np.testing.assert_allclose([float(forward), float(reverse)], want, rtol=1e-9)
    np.testing.assert_allclose(float(central), want, rtol=1e-7)


def test_a_rims_rows_equal_automatic_differentiation(scene):
    """The rims' gap against the lowest of 20 000 points of each rim, and their rows (the gap's
    and the slip's rates, the lowest point running along the rim included) against the same
    written from the poses and differentiated automatically, at three random states (the
    cylinder turned at random, its velocity tangent to the unit quaternions)."""
    model, _ = scene
    tree = model.system
    (every,) = [u for u in model.unilateral if isinstance(u, RingContacts)]
    assert every.bodies == ("can", "can", "coin", "coin")
    rims = RingContacts(
        tree,
        every.bodies[:2],
        every.centres[:2],
        every.axes[:2],
        every.radii[:2],
        every.tubes[:2],
        every.normals[:2],
        every.offsets[:2],
        every.friction[:2],
        names=every.names[:2],
    )
    i = tree.body_names.index("can")
    n, d = np.asarray(rims.normals), np.asarray(rims.offsets)
    phi = np.linspace(0, 2 * np.pi, 20_000, endpoint=False)

    def frame(q):
        kin = tree.kinematics(q)
        return kin.rotations[i], kin.positions[i]

    def lowest(q):  # each rim's lowest point in the body's frame, by the closed form's direction
        R, _ = frame(q)
        a = R @ rims.axes.T
        along = n - jnp.sum(n * a.T, axis=1)[:, None] * a.T
        u = along / jnp.linalg.norm(along, axis=1, keepdims=True)
        return rims.centres - rims.radii[:, None] * (u @ R)

    def gap(t, q):
        R, p = frame(q)
        return jnp.sum(n * (p + lowest(q) @ R.T), axis=1) - d

    def slip(t, q, qd):
        on = lowest(q)  # the material points there, held fixed while differentiating

        def points(q):
            R, p = frame(q)
            return p + on @ R.T

        velocity = jax.jvp(points, (q,), (qd,))[1]
        T = tangent_basis(jnp.asarray(n))
        return jnp.einsum("kdj,kj->kd", T, velocity).reshape(-1)

    @jax.jit
    def reference(q, qd):
        v, rate = _time_derivative(slip, jnp.asarray(0.0), q, qd)
        return holonomic_rows(gap, 0.0, q, qd), v, rate, jax.jacfwd(lambda qd: slip(0.0, q, qd))(qd)

    ours = jax.jit(lambda q, qd: rims.contact_rows(tree, 0.0, q, qd))
    rng = np.random.default_rng(1)
    for _ in range(3):
        q, qd = np.asarray(model.q0).copy(), np.zeros(len(model.q0))
        u = rng.normal(size=4)
        q[7 * i + 3 : 7 * i + 7] = u / np.linalg.norm(u)
        qd[7 * i : 7 * i + 7] = rng.normal(size=7)
        qd[7 * i + 3 : 7 * i + 7] -= (qd[7 * i + 3 : 7 * i + 7] @ q[7 * i + 3 : 7 * i + 7]) * q[
            7 * i + 3 : 7 * i + 7
        ]
        q, qd = jnp.asarray(q), jnp.asarray(qd)
        rows = ours(q, qd)
        R, p = (np.asarray(x) for x in frame(q))
        a = R @ np.asarray(rims.axes).T
        for k in range(2):
            e1 = np.cross(a[:, k], [0.3, 0.5, 0.7])
            e1 /= np.linalg.norm(e1)
            ring = (
                p
                + R @ np.asarray(rims.centres[k])
                + float(rims.radii[k])
                * (np.cos(phi)[:, None] * e1 + np.sin(phi)[:, None] * np.cross(a[:, k], e1))
            )
            np.testing.assert_allclose(float(rows.normal.phi[k]), np.min(ring @ n[k]) - d[k], atol=1e-8)
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
            np.testing.assert_allclose(
                np.asarray(got), np.asarray(want), rtol=1e-11, atol=1e-11 * np.abs(want).max()
            )


def test_bad_rings_are_refused(scene):
    """An unknown body, a zero axis or normal, and shapes that do not match are said."""
    model, _ = scene
    good = dict(
        bodies=["can"], centres=np.zeros((1, 3)), axes=np.eye(3)[2:], radii=np.ones(1), tubes=np.zeros(1),
        normals=np.eye(3)[2:], offsets=np.zeros(1), friction=0.5,
    )
    RingContacts(model.system, **good)
    for change, match in (
        (dict(bodies=["nowhere"]), "No body named 'nowhere'"),
        (dict(axes=np.zeros((1, 3))), "nonzero vectors"),
        (dict(normals=np.zeros((1, 3))), "nonzero vectors"),
        (dict(radii=np.ones(2)), r"radii must have shape \(1,\)"),
    ):
        with pytest.raises((ValueError, KeyError), match=match):
            RingContacts(model.system, **{**good, **change})
