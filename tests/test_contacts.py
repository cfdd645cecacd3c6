"""Unilateral constraints: closed forms (a bouncing ball, a block on an incline, a pendulum on
its joint limit, a rod on its end), MuJoCo on the same file, batches and derivatives."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax

G = 9.81


class PointMass(ukjax.AbstractUnconstrainedSystem):
    """A point mass in the plane (x along a floor, y above it) under a gravity vector: on an
    incline of angle θ, gravity is g (sin θ, −cos θ) in the incline's axes."""

    mass: jax.Array
    gravity: jax.Array

    def mass_matrix(self, t, q):
        return self.mass * jnp.eye(2, dtype=q.dtype)

    def forces(self, t, q, qd):
        return self.mass * self.gravity.astype(q.dtype)


def _on_floor(mass, gravity, restitution, friction):
    floor = ukjax.Unilateral(
        lambda t, q: q[1], restitution=restitution, friction=friction, slip=lambda t, q, qd: qd[0]
    )
    return ukjax.ConstrainedSystem(PointMass(jnp.asarray(mass, float), jnp.asarray(gravity, float)), floor)


def _batch(values):
    """One system whose leaves carry a batch: the members' masses, gravities, coefficients."""
    return _on_floor(*(np.array(v, float) for v in zip(*values)))


H, E, THETA = 1.0, 0.5, 0.5
FALL = np.sqrt(2 * H / G)  # time of the first impact
# the ball's impacts at FALL (1 + 2e + 2e² + …), each apex e^n √(2gh)/g later
IMPACTS = FALL * (1 + 2 * np.cumsum(np.r_[0, E ** np.arange(1, 4)]))
APEXES = IMPACTS[:3] + E ** np.arange(1, 4) * FALL
TS = np.sort(np.r_[0.0, APEXES, 1.0, 1.5])


@pytest.fixture(scope="module")
def closed_forms():
    """Four members with their contacts at different times, simulated together: a ball
    dropped from H with e = 0.5 and with e = 0; a block on an incline of θ = 0.5 rad with
    μ = 0.7 > tan θ (sticks) and μ = 0.3 (slides)."""
    down, incline = (0.0, -G), (G * np.sin(THETA), -G * np.cos(THETA))
    members = [(2.0, down, E, 0.3), (2.0, down, 0.0, 0.3), (3.0, incline, 0.0, 0.7), (3.0, incline, 0.0, 0.3)]
    q0 = np.array([[0.0, H], [0.0, H], [0.0, 0.0], [0.0, 0.0]])
    sol = ukjax.simulate_batch(_batch(members), q0, np.zeros_like(q0), 0.0, 1.5, ts=TS, system_axes=0)
    return sol


def test_a_dropped_ball_bounces_to_e_to_the_2n_of_its_height(closed_forms):
    sol = closed_forms
    assert np.all(np.asarray(sol.status) == ukjax.Status.SUCCESS)
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
    np.testing.assert_allclose(np.asarray(sol.q[1, after]), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.contacts.normal[1, after, 0]), 2.0 * G, rtol=1e-12)


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
    assert np.max(np.abs(np.asarray(sol.q[2:, :, 1]))) <= 1e-12  # on the plane throughout
