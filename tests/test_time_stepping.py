"""The time-stepping route (`ukjax.TimeStepping`, `ukjax.step`) against closed forms (a bounce's
apexes by Newton's law, a slide under Coulomb friction and its derivative in μ), against the
event-driven route on the same scene, its first order, and its loop closure on a file."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax import models

G = 9.81


class Point(ukjax.AbstractUnconstrainedSystem):
    """A point mass in the plane, `q = (x, y)`, under gravity."""

    mass: jax.Array

    def mass_matrix(self, t, q):
        return self.mass * jnp.eye(2)

    def forces(self, t, q, qd):
        return jnp.stack([jnp.zeros_like(self.mass), -G * self.mass])


def _floor(friction=0.0, restitution=0.0):
    return ukjax.Unilateral(lambda t, q: q[1], restitution=restitution, friction=friction, slip=lambda t, q, qd: qd[:1])


def _apexes(sol):
    y = np.asarray(sol.q[:, 1])
    return [y[i] for i in range(1, len(y) - 1) if y[i - 1] <= y[i] > y[i + 1] and y[i] > 1e-3]


def test_a_bounce_converges_at_first_order_to_newtons_law():
    """A ball dropped from 1 m with e = 0.5: its apexes tend to e²ⁿ h₀ at first order in the
    step, it never enters the floor, and it stays on it when it rests (e = 0)."""
    system = ukjax.ConstrainedSystem(Point(jnp.asarray(1.0)), _floor(restitution=0.5))
    ts = jnp.linspace(0.0, 1.6, 3201)
    errors = []
    for h in (2e-3, 1e-3):
        sol = ukjax.simulate(system, jnp.array([0.0, 1.0]), jnp.zeros(2), 0.0, 1.6, ts=ts, solver=ukjax.TimeStepping(), dt0=h)
        assert sol.status == ukjax.Status.SUCCESS and int(sol.stats["num_steps"]) == round(1.6 / h)
        assert float(sol.contacts.penetration) <= 1e-9
        errors.append(max(abs(a - 0.25**n) for n, a in enumerate(_apexes(sol)[:2], start=1)))
    assert errors[1] < 0.6 * errors[0] and errors[1] < 5e-3
    inelastic = ukjax.ConstrainedSystem(Point(jnp.asarray(1.0)), _floor())
    sol = ukjax.simulate(inelastic, jnp.array([0.0, 0.3]), jnp.zeros(2), 0.0, 1.0, solver=ukjax.TimeStepping(), dt0=2e-3)
    assert abs(float(sol.q[-1, 1])) <= 1e-12 and abs(float(sol.qd[-1, 1])) <= 1e-12
    np.testing.assert_allclose(sol.contacts.normal[-1, 0], G, rtol=1e-12)  # the average force: its weight


def test_a_slide_under_coulomb_friction_is_its_closed_form():
    """A block launched at 2 m/s on a floor with μ = 0.5: `x = v₀t − μ g t²/2` until it stops
    at `v₀/(μ g)`, then at rest, stuck exactly; the floor bears `m g` and friction `μ m g`."""
    v0, mu, m = 2.0, 0.5, 2.0
    system = ukjax.ConstrainedSystem(Point(jnp.asarray(m)), _floor(friction=mu))
    ts = jnp.linspace(0.0, 0.6, 61)
    stop = v0 / (mu * G)
    x = np.where(ts < stop, v0 * ts - 0.5 * mu * G * ts**2, v0 * stop - 0.5 * mu * G * stop**2)
    errors = []
    for h in (2e-3, 1e-3):
        sol = ukjax.simulate(system, jnp.zeros(2), jnp.array([v0, 0.0]), 0.0, 0.6, ts=ts, solver=ukjax.TimeStepping(), dt0=h)
        errors.append(float(np.max(np.abs(sol.q[:, 0] - x))))
        assert float(jnp.max(jnp.abs(sol.q[:, 1]))) <= 1e-12 and float(sol.qd[-1, 0]) == 0.0
    assert errors[1] < 0.6 * errors[0] and errors[1] < 2e-3
    np.testing.assert_allclose(sol.contacts.normal[10, 0], m * G, rtol=1e-12)
    np.testing.assert_allclose(sol.contacts.tangent[10, 0, 0], -mu * m * G, rtol=1e-12)


def test_step_is_differentiable_in_both_modes_against_the_closed_form():
    """`ukjax.step` in a `lax.scan` of 50 steps of 2 ms, jitted: while the block slides, `∂x(T)/∂μ = −g T²/2 + O(h)`, by `jax.jvp` and
    `jax.grad`, both against central differences of the same map."""
    system = ukjax.ConstrainedSystem(Point(jnp.asarray(2.0)), _floor(friction=0.5))
    h, steps = 2e-3, 50

    def final_x(mu):
        edited = eqx.tree_at(lambda s: s.constraints[0].friction, system, mu)

        def one(state, _):
            out = ukjax.step(edited, 0.0, *state, h)
            return (out.q, out.qd), out.converged

        (q, _), converged = jax.lax.scan(one, (jnp.zeros(2), jnp.array([3.0, 0.0])), None, length=steps)
        return q[0], jnp.all(converged)

    mu = jnp.asarray(0.3)
    run = jax.jit(final_x)
    assert bool(run(mu)[1])
    T = h * steps
    value = lambda mu: final_x(mu)[0]  # noqa: E731
    forward = jax.jit(lambda mu: jax.jvp(value, (mu,), (jnp.ones_like(mu),))[1])(mu)
    reverse = jax.jit(jax.grad(value))(mu)
    eps = 1e-6
    central = (run(mu + eps)[0] - run(mu - eps)[0]) / (2 * eps)
    np.testing.assert_allclose(forward, central, rtol=1e-6)
    np.testing.assert_allclose(reverse, central, rtol=1e-6)
    np.testing.assert_allclose(forward, -0.5 * G * T**2, rtol=0.02)

    # the same map through simulate: reverse mode through its checkpointed loops (the
    # projection's own nested in the steps'), forward mode through ForwardMode's
    def simulated_x(mu, adjoint):
        edited = eqx.tree_at(lambda s: s.constraints[0].friction, system, mu)
        options = dict(ts=jnp.array([T]), solver=ukjax.TimeStepping(), dt0=h, adjoint=adjoint)
        return ukjax.simulate(edited, jnp.zeros(2), jnp.array([3.0, 0.0]), 0.0, T, **options).q[-1, 0]

    np.testing.assert_allclose(jax.jit(lambda mu: simulated_x(mu, diffrax.RecursiveCheckpointAdjoint()))(mu), run(mu)[0], atol=1e-14)
    through = jax.jit(jax.grad(lambda mu: simulated_x(mu, diffrax.RecursiveCheckpointAdjoint())))(mu)
    along = jax.jit(lambda mu: jax.jvp(lambda m: simulated_x(m, diffrax.ForwardMode()), (mu,), (jnp.ones_like(mu),))[1])(mu)
    np.testing.assert_allclose(through, central, rtol=1e-6)
    np.testing.assert_allclose(along, central, rtol=1e-6)


class Skater(ukjax.AbstractUnconstrainedSystem):
    """A point mass on a floor, `q = (x, y, z)`, pushed sideways (along y) by `push` N."""

    push: jax.Array

    def mass_matrix(self, t, q):
        return 0.5 * jnp.eye(3)

    def forces(self, t, q, qd):
        return jnp.stack([jnp.zeros_like(self.push), self.push, jnp.full_like(self.push, -0.5 * G)])


def test_a_slides_turning_direction_is_differentiated():
    """The skater sliding at (1, 0.5) m/s with μ = 0.4 and pushed sideways: its slip turns,
    and friction with it, so `∂x(T)/∂(push)` is not zero (it was: each step's sliding
    direction, its slip's, carried no derivative); `ukjax.step` in a `lax.scan` of 100 steps
    of 2 ms by `jax.jvp` and `jax.grad`, against central differences of the same map."""
    floor = ukjax.Unilateral(lambda t, q: q[2:3], friction=0.4, slip=lambda t, q, qd: qd[None, :2])

    def final_x(push):
        system = ukjax.ConstrainedSystem(Skater(push), [floor])

        def one(state, _):
            out = ukjax.step(system, 0.0, *state, 2e-3)
            return (out.q, out.qd), out.mode[0]

        (q, _), modes = jax.lax.scan(one, (jnp.zeros(3), jnp.array([1.0, 0.5, 0.0])), None, length=100)
        return q[0], modes

    push = jnp.asarray(1.0)
    run = jax.jit(final_x)
    assert np.all(np.asarray(run(push)[1]) == 1)  # sliding at every step
    value = lambda push: final_x(push)[0]  # noqa: E731
    forward = jax.jit(lambda p: jax.jvp(value, (p,), (jnp.ones_like(p),))[1])(push)
    reverse = jax.jit(jax.grad(value))(push)
    eps = 1e-6
    central = (run(push + eps)[0] - run(push - eps)[0]) / (2 * eps)
    assert float(central) > 1e-3
    np.testing.assert_allclose(forward, central, rtol=1e-6)
    np.testing.assert_allclose(reverse, central, rtol=1e-6)


def test_the_files_scene_follows_the_event_driven_route_at_first_order():
    """`examples/contacts.xml` (a pendulum onto its limit; a sphere, a box and a rod on a
    floor), 0.4 s: the time-stepping states approach the event-driven route's (rtol = atol =
    1e-10) at first order in the step, with no penetration past round-off."""
    model = models.from_mjcf(ukjax.examples.path("contacts.xml"), keyframe="launched")
    scene = model.full_system()
    ts = jnp.linspace(0.0, 0.4, 5)
    exact = ukjax.simulate(scene, model.q0, model.qd0, 0.0, 0.4, ts=ts, rtol=1e-10, atol=1e-10)
    errors = []
    for h in (2e-3, 1e-3):
        sol = ukjax.simulate(scene, model.q0, model.qd0, 0.0, 0.4, ts=ts, solver=ukjax.TimeStepping(), dt0=h)
        assert sol.status == ukjax.Status.SUCCESS
        assert float(sol.contacts.penetration) <= 1e-9
        errors.append(float(jnp.max(jnp.abs(sol.q - exact.q))))
    assert errors[1] < 0.7 * errors[0] and errors[1] < 2e-2


def test_a_loop_stays_closed_and_a_batch_is_its_members():
    """The four-bar from its file under time-stepping: the loop closed at every save to
    1e-9 m (each step ends on it); a batch of three starts equals the three runs."""
    model = models.from_mjcf(ukjax.examples.path("fourbar.xml"))
    system = model.full_system()
    q0 = jnp.stack([model.q0] * 3)
    qd0 = jnp.stack([model.qd0 * s for s in (0.5, 1.0, 1.5)])
    options = dict(ts=jnp.linspace(0.0, 0.5, 11), solver=ukjax.TimeStepping(), dt0=1e-3)
    batch = ukjax.simulate_batch(system, q0, qd0, 0.0, 0.5, **options)
    assert bool(jnp.all(batch.status == ukjax.Status.SUCCESS))
    assert float(jnp.max(jnp.abs(batch.phi))) <= 1e-9
    one = ukjax.simulate(system, q0[2], qd0[2], 0.0, 0.5, **options)
    np.testing.assert_allclose(batch.q[2], one.q, atol=1e-12)


def test_a_batch_taken_in_chunks_is_its_members(monkeypatch):
    """A batch large enough that a CPU takes it in chunks (256 tumbling scenes did) runs as
    its members: this route's event records have no size, and mapping them in chunks divided
    by zero. Three balls dropped on a floor, taken two at a time."""
    from ukjax import _batch

    system = ukjax.ConstrainedSystem(Point(jnp.asarray(1.0)), _floor())
    monkeypatch.setattr(_batch, "_CHUNK_BYTES", 2 * 8 * 2 * 2)
    assert _batch._chunk(3, 2, jnp.float64, "cpu") == 2
    q0 = jnp.array([[0.0, 0.3], [0.1, 0.5], [0.2, 0.0]])
    qd0 = jnp.array([[1.0, 0.0], [0.0, -1.0], [0.5, 0.0]])
    options = dict(ts=jnp.linspace(0.0, 0.5, 6), solver=ukjax.TimeStepping(), dt0=1e-3)
    batch = ukjax.simulate_batch(system, q0, qd0, 0.0, 0.5, **options)
    assert [ukjax.Status(int(s)) for s in batch.status] == [ukjax.Status.SUCCESS] * 3
    assert batch.contacts.event_times.shape == (3, 0)
    for i in range(3):
        one = ukjax.simulate(system, q0[i], qd0[i], 0.0, 0.5, **options)
        np.testing.assert_allclose(batch.q[i], one.q, atol=1e-12)
        np.testing.assert_allclose(batch.contacts.normal[i], one.contacts.normal, atol=1e-12)
    # they landed and rest on the floor (y = 0 is the floor's contact)
    np.testing.assert_allclose(batch.q[:, -1, 1], 0.0, atol=1e-9)


def test_bad_calls_are_refused():
    system = ukjax.ConstrainedSystem(Point(jnp.asarray(1.0)), _floor())
    start = (jnp.array([0.0, 1.0]), jnp.zeros(2))
    with pytest.raises(ValueError, match="dt0"):
        ukjax.simulate(system, *start, 0.0, 1.0, solver=ukjax.TimeStepping())
    with pytest.raises(ValueError, match="before t0"):
        ukjax.simulate(system, *start, 1.0, 0.0, solver=ukjax.TimeStepping(), dt0=-1e-3)
    with pytest.raises(ValueError, match="longer than the run"):
        ukjax.simulate(system, *start, 0.0, 1.0, solver=ukjax.TimeStepping(), dt0=2.0)
    # a step that does not divide the run: whole steps of at most dt0 (4 of 0.025 s here)
    cut = ukjax.simulate(system, *start, 0.0, 0.1, solver=ukjax.TimeStepping(), dt0=0.03)
    even = ukjax.simulate(system, *start, 0.0, 0.1, solver=ukjax.TimeStepping(), dt0=0.025, adaptive=False)
    assert int(cut.stats["num_steps"]) == 4
    np.testing.assert_array_equal(cut.q, even.q)
    # a member whose force turns NaN is flagged, the others kept
    pushed = ukjax.ConstrainedSystem(
        ukjax.Forced(Point(jnp.asarray(1.0)), lambda t, q, qd: jnp.where(q[0] > 0.5, jnp.nan, 0.0) * jnp.ones(2)), _floor()
    )
    batch = ukjax.simulate_batch(
        pushed, jnp.array([[0.0, 1.0], [0.4, 1.0]]), jnp.array([[0.0, 0.0], [2.0, 0.0]]), 0.0, 0.2,
        solver=ukjax.TimeStepping(), dt0=1e-3,
    )
    assert [ukjax.Status(int(s)) for s in batch.status] == [ukjax.Status.SUCCESS, ukjax.Status.NONFINITE_STATE]
    # the good member falls freely: the step's own closed form, y_N = y₀ − g h² N (N + 1) / 2
    np.testing.assert_allclose(batch.q[0, -1, 1], 1.0 - G * 1e-6 * 200 * 201 / 2, atol=1e-12)
    still = ukjax.simulate(system, *start, 0.5, 0.5, solver=ukjax.TimeStepping(), dt0=1e-3)
    assert still.status == ukjax.Status.SUCCESS and bool(jnp.all(still.q == start[0]))
    with pytest.raises(ValueError, match="positive"):
        ukjax.step(system, 0.0, *start, 0.0)
    with pytest.raises(ValueError, match="entries"):
        ukjax.step(system, 0.0, jnp.zeros(3), jnp.zeros(3), 1e-3)


def _box_on_slope(mu, degrees=20.0, half=(0.1, 0.07, 0.04)):
    """A 2 kg box resting flat on a plane tilted by `degrees` about y, both of friction `mu`."""
    theta = np.radians(degrees)
    centre = half[2] * np.array([np.sin(theta), 0.0, np.cos(theta)])
    xml = f"""<mujoco><worldbody>
  <geom type="plane" size="5 5 0.1" euler="0 {degrees} 0" friction="{mu}"/>
  <body pos="{centre[0]} {centre[1]} {centre[2]}" euler="0 {degrees} 0"><freejoint/>
    <geom type="box" size="{half[0]} {half[1]} {half[2]}" mass="2" friction="{mu}"/></body>
</worldbody></mujoco>"""
    return models.from_mjcf(xml), theta, half


@pytest.mark.parametrize("mu", [0.2, 0.5])
def test_a_box_on_a_slope_is_the_discrete_schemes_closed_form(mu):
    """A box flat on a 20° slope, on four corners (a redundant set): below `μ = tan 20°` it
    slides as the scheme's closed form, `vₙ = n h a` with `a = g (sin θ − μ cos θ)` and so
    `sₙ = h² a n (n + 1)/2`; above it stays exactly. Either way it does not turn, the normal
    forces sum to `m g cos θ` and their difference front to back balances friction's moment
    about the centre (at the box's half height below it)."""
    model, theta, half = _box_on_slope(mu)
    h, ts = 2e-3, jnp.linspace(0.0, 0.5, 26)
    sol = ukjax.simulate(model.full_system(), model.q0, model.qd0, 0.0, 0.5, ts=ts, solver=ukjax.TimeStepping(), dt0=h)
    assert sol.status == ukjax.Status.SUCCESS
    downhill = np.array([np.cos(theta), 0.0, -np.sin(theta)])
    travelled = (np.asarray(sol.q[:, :3]) - np.asarray(model.q0[:3])) @ downhill
    n = np.round(np.asarray(ts) / h)
    a = G * (np.sin(theta) - mu * np.cos(theta))
    np.testing.assert_allclose(travelled, h * h * max(a, 0.0) * n * (n + 1) / 2, rtol=0, atol=1e-14)
    np.testing.assert_allclose(sol.q[:, 3:], jnp.broadcast_to(model.q0[3:], (26, 4)), rtol=0, atol=1e-14)
    assert float(sol.contacts.penetration) <= 1e-12
    m, closed = 2.0, np.asarray(sol.contacts.mode[-1]) != 0
    normal = np.asarray(sol.contacts.normal[-1])
    assert closed.sum() == 4 and (np.asarray(sol.contacts.mode[-1])[closed] == (1 if a > 0 else 2)).all()
    np.testing.assert_allclose(normal.sum(), m * G * np.cos(theta), rtol=1e-12)
    friction = min(mu * np.cos(theta), np.sin(theta)) * m * G
    loads = np.sort(normal[closed]).reshape(2, 2)  # two corners uphill, two down, each pair alike
    np.testing.assert_allclose(loads[:, 0], loads[:, 1], rtol=1e-12)
    np.testing.assert_allclose(2 * (loads[1, 0] - loads[0, 0]) * half[0], friction * half[2], rtol=1e-9)


def test_a_step_too_long_for_its_constraint_is_a_failure_not_an_open_loop():
    """A point on a unit circle at 10 m/s: at 1 ms every step ends on the circle (to 1e-9);
    at 0.2 s a step leaves it by more than three Gauss–Newton steps bring back, and the run
    stops there with `Status.SOLVER_FAILED` instead of going on off the circle."""
    circle = ukjax.ConstrainedSystem(Point(jnp.asarray(1.0)), [ukjax.Holonomic(lambda t, q: q @ q - 1)])
    q0, qd0 = jnp.array([1.0, 0.0]), jnp.array([0.0, 10.0])
    short = ukjax.simulate(circle, q0, qd0, 0.0, 1.0, ts=jnp.linspace(0, 1, 11), solver=ukjax.TimeStepping(), dt0=1e-3)
    assert short.status == ukjax.Status.SUCCESS
    assert float(jnp.max(jnp.abs(short.phi))) <= 1e-9
    long = ukjax.simulate(circle, q0, qd0, 0.0, 1.0, ts=jnp.linspace(0, 1, 11), solver=ukjax.TimeStepping(), dt0=0.2,
                          throw=False)
    assert long.status == ukjax.Status.SOLVER_FAILED
    assert int(long.stats["num_steps"]) == 0
    out = ukjax.step(circle, 0.0, q0, qd0, 0.2)
    assert not bool(out.projected) and bool(out.converged)
