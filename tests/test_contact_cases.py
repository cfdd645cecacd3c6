"""Contacts in the cases an outside review found wrong: bodies that must not pass through
thin shapes between two steps, capsules met across an edge or another capsule, coefficients out of range (under `vmap`, and the impacts and
light bodies beside heavy ones: test_contacts.py's batch)."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax

pytestmark = pytest.mark.xdist_group("contact_cases")

# One scene, one program, its parts kept apart by contype/conaffinity. A ball thrown at 5 m/s
# at a resting ball 0.4 m ahead, the two then at a wall 2 cm thick (all plastic, MuJoCo's
# default), on horizontal slides (free joints meet the same contact rows, in a program that
# compiles four times longer): steps that grow without bound over the force-free flight
# carried the balls through each other and the wall. A 1 m rod dropped across a 10 cm beam
# (its end spheres off the beam: only its middle meets the beam's two top edges), on a slide
# and a hinge about the beam's axis, its centre of mass 2 cm off the beam's middle, frictionless
# (friction below the hinge would share the weight's moment indeterminately); a stick on
# a slide dropped across a bar (the two capsules' axes crossed, neither's end over the other).
SCENE = """
<mujoco>
  <worldbody>
    <geom name="wall" type="box" pos="1 0 0" size="0.01 0.5 0.5"/>
    <body name="cue"><joint type="slide" axis="1 0 0"/><geom type="sphere" size="0.05" mass="1"/></body>
    <body name="ball" pos="0.5 0 0"><joint type="slide" axis="1 0 0"/><geom type="sphere" size="0.05" mass="1"/></body>
    <geom name="beam" type="box" pos="0 3 0.25" size="1 0.05 0.25" contype="2" conaffinity="2" condim="1"/>
    <body name="rod" pos="0.5 3 0.8">
      <joint type="slide" axis="0 0 1"/><joint type="hinge" axis="1 0 0"/>
      <geom name="rod" type="capsule" fromto="0 -0.48 0 0 0.52 0" size="0.05" mass="1" contype="2" conaffinity="2" condim="1"/>
    </body>
    <geom name="bar" type="capsule" fromto="0 5 0.3 0 6 0.3" size="0.03" contype="4" conaffinity="4"/>
    <body name="stick" pos="0 5.5 0.7">
      <joint type="slide" axis="0 0 1"/>
      <geom name="stick" type="capsule" fromto="-0.4 0 0 0.4 0 0" size="0.02" mass="0.3" contype="4" conaffinity="4"/>
    </body>
  </worldbody>
  <keyframe><key name="thrown" qpos="0 0 0 0 0" qvel="5 0 0 0 0"/></keyframe>
</mujoco>
"""
G = 9.81
MEET, STOP = 0.08, 0.08 + 0.44 / 2.5  # the cue ball at the resting one, the two at the wall
ROD, STICK = np.sqrt(2 * 0.25 / G), np.sqrt(2 * 0.35 / G)  # the landings


@pytest.fixture(scope="module")
def scene():
    model = ukjax.models.from_mjcf(SCENE, keyframe="thrown")
    return model, ukjax.simulate(model.full_system(), model.q0, model.qd0, 0.0, 0.5, ts=jnp.linspace(0.0, 0.5, 11))


def test_no_ball_passes_through_another_or_a_thin_wall(scene):
    """The cue ball meets the resting ball at t = 0.4 / 5 and the two go on together at
    2.5 m/s (a plastic impact conserves momentum); the front ball meets the wall 0.44 m on
    (x = 1 − 0.01 − 0.05) and both stop there, the cue ball touching it. Every gap stays
    closed to 1e-9 m, and the run's four events are where the closed forms put them."""
    _, sol = scene
    assert int(sol.status) == ukjax.Status.SUCCESS
    t = np.asarray(sol.ts)
    front = np.where(t < MEET, 0.5, np.minimum(0.5 + 2.5 * (t - MEET), 0.94))
    cue = np.where(t < MEET, 5 * t, front - 0.1)
    # slide coordinates are measured from the bodies' places in the file
    np.testing.assert_allclose(np.asarray(sol.q[:, :2]), np.stack([cue, front - 0.5], axis=1), atol=1e-9)
    events = np.asarray(sol.contacts.event_times)
    np.testing.assert_allclose(events[np.isfinite(events)], [MEET, ROD, STOP, STICK], rtol=1e-10)
    assert float(sol.contacts.penetration) <= 1e-9


def test_capsules_across_an_edge_or_another_capsule_rest_on_them(scene):
    """The rod falls 0.25 m onto the beam's top edges and stops there level (a plastic impact
    on both edges at once), its axis one radius above the beam, the edges carrying 0.3 m g and
    0.7 m g (its weight's moment about its centre balanced); the stick falls 0.35 m onto the
    bar and rests one radius of each above its axis on that one contact. Before segments were
    met, both fell through (a free rod to z = −0.53 m by 0.5 s, the issue's case)."""
    model, sol = scene
    names = sum((u.names for u in model.unilateral), ())
    t = np.asarray(sol.ts)
    np.testing.assert_allclose(np.asarray(sol.q[:, 2]), np.where(t < ROD, -0.5 * G * t**2, -0.25), atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.q[:, 3]), 0.0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.q[:, 4]), np.where(t < STICK, -0.5 * G * t**2, -0.35), atol=1e-9)
    # the beam's top edges run along x at y = ±0.05 from its middle
    normal = dict(zip(names, np.asarray(sol.contacts.normal[-1])))
    edges = {name: force for name, force in normal.items() if name.startswith("rod–beam[edge") and force > 0}
    np.testing.assert_allclose(sorted(edges.values()), [0.3 * G, 0.7 * G], rtol=1e-9)
    np.testing.assert_allclose(normal["bar–stick[axes]"], 0.3 * G, rtol=1e-9)


@pytest.mark.parametrize(
    "friction, restitution, bad",
    [(0.5, 1.5, "restitution"), (0.5, -0.1, "restitution"), (0.5, np.nan, "restitution"),
     (-0.1, 0.5, "friction"), (np.inf, 0.5, "friction"), (np.nan, 0.5, "friction")],
)
def test_coefficients_out_of_range_are_refused(friction, restitution, bad):
    """Restitution outside [0, 1], friction negative or not finite: a clear error where the
    constraint is built, and where a valid one is edited into an invalid one (`eqx.tree_at`)
    and simulated."""
    floor = dict(gap=lambda t, q: q[1], slip=lambda t, q, qd: qd[0])
    with pytest.raises(ValueError, match="friction coefficients that are finite"):
        ukjax.Unilateral(**floor, friction=friction, restitution=restitution)
    good = ukjax.Unilateral(**floor, friction=0.5, restitution=0.5)
    edited = eqx.tree_at(lambda u: getattr(u, bad), good, jnp.asarray(friction if bad == "friction" else restitution))
    system = ukjax.ConstrainedSystem(
        ukjax.ExplicitSystem(M=lambda t, q: jnp.eye(2), Q=lambda t, q, qd: jnp.array([0.0, -9.81])), edited
    )
    with pytest.raises(ValueError, match="restitution coefficients in"):
        ukjax.simulate(system, jnp.array([0.0, 1.0]), jnp.zeros(2), 0.0, 1.0)


class _Pushed(ukjax.AbstractUnconstrainedSystem):
    """A unit point mass on the floor z = 0, pushed along it by F = (3, 5t) N."""

    def mass_matrix(self, t, q):
        return jnp.eye(3, dtype=q.dtype)

    def forces(self, t, q, qd):
        return jnp.stack([3.0 + 0 * t, 5.0 * t, -9.81]).astype(q.dtype)


def test_a_slide_from_rest_under_a_turning_force_against_dop853():
    """With μ = 0.5 the mass sticks until |F| = μ m g (t = 0.776 s), then slides in the
    direction of the force that broke the cone and turns with its slip: q(2 s) against
    scipy's DOP853 at 1e-13 on `v̇ = F − μ m g v/|v|` from there, to 1e-6 m at the default
    tolerances (it was 2.2e-3 m off, in 7.9e4 steps, where `v/|v|` of a slip below the
    tolerance set the direction; 1.5e-6 m where it switched to `v/|v|` at 1e3 atol), in under
    2 000 steps."""
    from scipy.integrate import solve_ivp

    floor = ukjax.Unilateral(lambda t, q: q[2], friction=0.5, slip=lambda t, q, qd: qd[None, :2])
    system = ukjax.ConstrainedSystem(_Pushed(), floor)
    sol = ukjax.simulate(system, jnp.zeros(3), jnp.zeros(3), 0.0, 2.0)
    weight = 0.5 * 9.81
    onset = np.sqrt((weight**2 - 9) / 25)
    # the event fires where the cone is passed by 2e-6 of the contact's force scale (24.5 N
    # here: its weight twice, its friction), 1.2e-5 s late under a force rising at 4 N/s
    assert 0 < float(sol.contacts.event_times[0]) - onset < 2e-5

    def sliding(t, y):
        force, v = np.array([3.0, 5.0 * t]), y[2:]
        return np.r_[v, force - weight * v / np.linalg.norm(v)]

    # v/|v| is singular at the onset: the reference starts 1e-4 s later from the leading
    # terms, v = k τ²/2 and q = k τ³/6 along the force (k = d|F|/dt), off by O(τ⁴)
    tau, force = 1e-4, np.array([3.0, 5.0 * onset])
    rate = 25 * onset / weight
    start = np.r_[rate * tau**3 / 6 * force / weight, rate * tau**2 / 2 * force / weight]
    reference = solve_ivp(sliding, (onset + tau, 2.0), start, method="DOP853", rtol=1e-12, atol=1e-15).y[:2, -1]
    np.testing.assert_allclose(np.asarray(sol.q[-1, :2]), reference, atol=1e-6)
    assert int(sol.stats["num_steps"]) < 2000 and float(sol.q[-1, 2]) == 0.0


def test_a_slide_slowing_to_a_stop_turns_its_friction_continuously():
    """A slide whose slip has turned 30° from the direction it started in, slowing through
    the speed below which `v/|v|` is noise: the friction's direction must not jump there
    (it switched to the starting direction, and a box's corner stopping after an impact was
    held at that speed by friction across its slip below and against it above, until
    max_steps). Below, it turns into the starting direction; a slip turned back keeps it."""
    from ukjax._constraints import ConstraintRows
    from ukjax._unilateral import SLIDING, ContactRows, Modes, sliding_now

    rest, d = 1e-5, np.array([1.0, 0.0])
    modes = Modes(jnp.array([SLIDING]), jnp.asarray(d[None]), jnp.ones(1))
    zero = jnp.zeros((2, 3))

    def direction(speed, angle=np.pi / 6):
        v = speed * np.array([np.cos(angle), np.sin(angle)])
        tangent = ConstraintRows(zero, jnp.zeros(2), jnp.zeros(2), jnp.asarray(v))
        normal = ConstraintRows(zero[:1], jnp.zeros(1), jnp.zeros(1), jnp.zeros(1))
        contacts = ContactRows(normal, tangent, jnp.ones(1), jnp.zeros(1))
        return np.asarray(sliding_now(modes, contacts, rest).direction[0])

    slip = np.array([np.cos(np.pi / 6), np.sin(np.pi / 6)])
    np.testing.assert_allclose(direction(2 * rest), slip, atol=1e-15)
    np.testing.assert_allclose(direction(rest * (1 + 1e-9)), direction(rest * (1 - 1e-9)), atol=1e-6)
    np.testing.assert_allclose(direction(1e-3 * rest), d, atol=1e-4)
    np.testing.assert_allclose(direction(rest, angle=np.pi * 0.9), d, atol=0)


HALF = 0.5  # the rod's half length


class _Rod(ukjax.AbstractUnconstrainedSystem):
    """A unit-mass rod in the plane, `(x, y, θ)` of its centre and its angle to the floor."""

    def mass_matrix(self, t, q):
        return jnp.diag(jnp.array([1.0, 1.0, HALF**2 / 3])).astype(q.dtype)

    def forces(self, t, q, qd):
        return jnp.array([0.0, -9.81, 0.0]).astype(q.dtype)


def _rod_end(t, q):
    return q[1] - HALF * jnp.sin(q[2])


def _rod_slip(t, q, qd):
    return qd[0] + HALF * jnp.sin(q[2]) * qd[2]


def test_painleves_paradox_is_said():
    """A rod at θ = atan 2 whose lower end slides back along the floor: its normal force
    solves `N (1 + 3 cos²θ − 3 μ sin θ cos θ) = m g`. With μ = 0.5 the factor is 1 and N = m g
    at the start; with μ = 2 it is −0.8, no mode solves the problem (Painlevé), and the run
    says so with CONTACT_UNRESOLVED (the search re-closed the contact frictionless and called
    it solved)."""
    theta = np.arctan(2.0)
    q0, qd0 = jnp.array([0.0, HALF * np.sin(theta), theta]), jnp.array([-1.0, 0.0, 0.0])

    def run(mu):
        end = ukjax.Unilateral(_rod_end, friction=mu, slip=_rod_slip)  # one program for both
        return ukjax.simulate(ukjax.ConstrainedSystem(_Rod(), end), q0, qd0, 0.0, 0.1, throw=False)

    sliding = run(0.5)
    assert int(sliding.status) == ukjax.Status.SUCCESS and int(sliding.contacts.mode[0, 0]) == 1
    np.testing.assert_allclose(float(sliding.contacts.normal[0, 0]), 9.81, rtol=1e-12)
    assert int(run(2.0).status) == ukjax.Status.CONTACT_UNRESOLVED


def test_an_impact_takes_in_every_touching_contact():
    """A plank lying on a floor, its left end leaving it at 1e-8 m/s (the drift an
    integration leaves), its right end hitting it at 1 m/s: the impulse at the right end
    alone would drive the left end into the floor at 2 m/s (a free rod's ends: J/m ∓ 3 J/m),
    so both ends take part in the impact, and the plank stops lying on the floor. Left out,
    the left end was closed approaching the floor and sank at that speed unseen."""
    plank = """
    <mujoco>
      <worldbody>
        <geom name="floor" type="plane" size="2 2 0.1" condim="1"/>
        <body name="plank" pos="0 0 0.05">
          <joint name="z" type="slide" axis="0 0 1"/><joint name="tilt" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="-0.5 0 0 0.5 0 0" size="0.05" mass="1" condim="1"/>
        </body>
      </worldbody>
    </mujoco>
    """
    model = ukjax.models.from_mjcf(plank)
    # ends at x = ∓0.5: ż ± 0.5 θ̇ (a hinge about +y lowers +x as θ grows), left +1e-8, right −1
    zd, thetad = (1e-8 - 1.0) / 2, (1e-8 + 1.0) / 2 / 0.5
    sol = ukjax.simulate(model.full_system(), model.q0, jnp.array([zd, thetad]), 0.0, 0.2, ts=jnp.linspace(0.0, 0.2, 5))
    assert int(sol.status) == ukjax.Status.SUCCESS
    assert float(sol.contacts.penetration) <= 1e-9
    np.testing.assert_allclose(sol.q[-1], model.q0, atol=1e-9)


def test_a_landing_beside_a_sliding_corner_finds_its_modes():
    """`tumbling.py`'s second box, alone, landing on a corner while another slides on the
    floor (the impact's velocity-level problem as `_events._transition` posed it, saved in
    tests/data/box_landing.npz): the search of the worst violation first went round eight
    mode sets, one corner opened for a pull of 1e-11 and closed again for the other's
    penetration, and the run stopped with CONTACT_UNRESOLVED. The modes found must meet
    Coulomb's and Newton's laws read off the rows themselves, and take no energy in."""
    from ukjax._constraints import ConstraintRows
    from ukjax._unilateral import OPEN, SLIDING, STICKING, ContactRows, select_modes

    data = dict(np.load(Path(__file__).parent / "data" / "box_landing.npz"))

    def rows(name):
        return ConstraintRows(*(data[f"{name}_{x}"] for x in ("A", "b", "phi", "phid")))

    contacts = ContactRows(rows("n"), rows("t"), data["friction"], data["restitution"])
    M, qd, candidates = data["M"], data["qd"], data["candidates"]
    modes, jump, converged = jax.jit(select_modes)(
        M, data["Q"], rows("eq"), contacts, candidates, data["slipping"], slack=data["slack"]
    )
    mode, x, normal, tangent = (np.asarray(v) for v in (modes.mode, jump.x, jump.normal, jump.tangent))
    assert bool(converged)
    closed = candidates & (mode != OPEN)
    rate = data["n_A"] @ x - data["n_b"]  # ġ⁺ + e ġ⁻: zero where closed, not negative where open
    slip = (data["t_A"] @ (qd + x)).reshape(-1, 2)
    assert closed.any()
    np.testing.assert_allclose(rate[closed], 0.0, atol=1e-12)
    assert np.all(rate[candidates & ~closed] >= -1e-12) and np.all(normal[closed] >= 0)
    cone = np.linalg.norm(tangent, axis=1) - data["friction"] * normal
    sliding, sticking = closed & (mode == SLIDING), closed & (mode == STICKING)
    np.testing.assert_allclose(cone[sliding], 0.0, atol=1e-12)
    assert np.all(np.einsum("kd,kd->k", tangent, slip)[sliding] <= 1e-15)  # against the slip after
    assert np.all(cone[sticking] <= data["slack"][sticking]) and np.all(np.abs(slip[sticking]) <= 1e-12)
    assert (qd + x) @ M @ (qd + x) <= qd @ M @ qd
