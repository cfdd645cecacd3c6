"""The contact solve narrowed to the contacts that can act (`ukjax._narrow`): a scene with
more contacts than the narrowed solve holds runs as the same scene without the ones far away,
and more touching contacts than it holds are reported, not solved wrong."""

import jax.numpy as jnp
import numpy as np

import ukjax
from ukjax._narrow import capacity


class Ball(ukjax.AbstractUnconstrainedSystem):
    """A point mass in space under gravity, pushed along x by a force growing as `push t`."""

    def mass_matrix(self, t, q):
        return 0.5 * jnp.eye(3, dtype=q.dtype)

    def forces(self, t, q, qd):
        return 0.5 * jnp.array([3.0 * t, 0.0, -9.81], q.dtype)


def _floor(copies: int = 1):
    return ukjax.Unilateral(
        lambda t, q: jnp.full(copies, q[2]),
        restitution=0.5,
        friction=0.4,
        slip=lambda t, q, qd: jnp.tile(qd[:2], (copies, 1)),
    )


# walls far from the ball's whole path (x up to 4 m), each with friction: columns of every
# solve they enter
FAR = ukjax.Unilateral(
    lambda t, q: 20.0 + jnp.arange(120.0) - q[0],
    friction=0.3,
    slip=lambda t, q, qd: jnp.tile(qd[1:], (120, 1)),
)


def test_far_contacts_leave_the_run_as_it_was():
    """A ball dropped onto a floor with restitution and friction, bouncing, landing and then
    pushed into a slide, beside 120 far walls (121 contacts on 3 coordinates, where the
    narrowed solve holds 32): the same events and the same trajectory to round-off as the
    ball and the floor alone, both SUCCESS."""
    assert capacity(121, 3) < 121
    q0, qd0 = jnp.array([0.0, 0.0, 0.3]), jnp.array([0.2, 0.1, 0.0])
    ts = jnp.linspace(0, 2.5, 26)
    alone = ukjax.simulate(ukjax.ConstrainedSystem(Ball(), [_floor()]), q0, qd0, 0.0, 2.5, ts=ts)
    beside = ukjax.simulate(ukjax.ConstrainedSystem(Ball(), [_floor(), FAR]), q0, qd0, 0.0, 2.5, ts=ts)
    events = np.asarray(alone.contacts.event_times)
    assert np.sum(np.isfinite(events)) >= 4  # bounces, the landing, the slide's start
    np.testing.assert_allclose(np.asarray(beside.contacts.event_times[: events.size]), events, atol=1e-12)
    np.testing.assert_allclose(np.asarray(beside.q), np.asarray(alone.q), atol=1e-12)
    np.testing.assert_allclose(np.asarray(beside.contacts.normal[:, 0]), np.asarray(alone.contacts.normal[:, 0]), atol=1e-9)
    assert np.all(np.asarray(beside.contacts.mode[:, 1:]) == 0)  # the walls stay open
    assert float(alone.q[-1, 0]) > 0.8  # it slid


def test_more_touching_contacts_than_the_solve_holds_are_reported():
    """70 coincident floor contacts (redundant, each carrying a seventieth of the weight where
    all are solved) on 3 coordinates, where the narrowed solve holds 32: the landing cannot be
    solved within it, and the run says so (`CONTACT_UNRESOLVED`) rather than leaving some of
    them out."""
    assert capacity(70, 3) == 32
    system = ukjax.ConstrainedSystem(Ball(), [_floor(70)])
    sol = ukjax.simulate(system, jnp.array([0.0, 0.0, 0.1]), jnp.zeros(3), 0.0, 0.5, throw=False)
    assert int(sol.status) == int(ukjax.Status.CONTACT_UNRESOLVED)
    assert not np.all(np.isfinite(np.asarray(sol.q[-1])))
