"""The contact solve narrowed to the contacts that can act (`ukjax._narrow`): a scene with
more contacts than the narrowed solve holds runs as the same scene without the ones far away,
and more touching contacts than it holds are reported, not solved wrong."""

import jax.numpy as jnp
import numpy as np
import pytest

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


class HeavyAcross(Ball):
    """The ball four times as heavy across (y) as along x: the impulse that stops a slip is
    not along it, so sliding against the slip and sliding against that impulse differ."""

    def mass_matrix(self, t, q):
        return jnp.diag(jnp.array([0.5, 2.0, 0.5], q.dtype))


def test_far_contacts_leave_a_time_stepping_run_as_it_was():
    """The heavy-across ball thrown onto the floor by time-stepping at 2 ms, beside the 120
    far walls: each step's problem, its contacts' sliding (decided on the candidates' rows
    alone where they do not all fit) and its projection narrowed, the same trajectory and
    forces to round-off as the ball and the floor alone; it lands and slides."""
    q0, qd0 = jnp.array([0.0, 0.0, 0.1]), jnp.array([1.0, 1.5, 0.0])
    ts = jnp.linspace(0, 1.5, 31)
    route = dict(solver=ukjax.TimeStepping(), dt0=0.002, ts=ts)
    alone = ukjax.simulate(ukjax.ConstrainedSystem(HeavyAcross(), [_floor()]), q0, qd0, 0.0, 1.5, **route)
    beside = ukjax.simulate(ukjax.ConstrainedSystem(HeavyAcross(), [_floor(), FAR]), q0, qd0, 0.0, 1.5, **route)
    assert int(alone.status) == int(beside.status) == int(ukjax.Status.SUCCESS)
    np.testing.assert_allclose(np.asarray(beside.q), np.asarray(alone.q), atol=1e-12)
    np.testing.assert_allclose(np.asarray(beside.contacts.normal[:, 0]), np.asarray(alone.contacts.normal[:, 0]), atol=1e-9)
    np.testing.assert_array_equal(np.asarray(beside.contacts.mode[:, 0]), np.asarray(alone.contacts.mode[:, 0]))
    assert np.all(np.asarray(beside.contacts.mode[:, 1:]) == 0)  # the walls stay open
    assert 1 in set(np.asarray(alone.contacts.mode[:, 0]).tolist())  # it slid


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


def test_narrowed_search_is_the_search_on_its_own_contacts_derivatives_included():
    """The box landing on a corner while another slides (tests/data/box_landing.npz, the
    impact's problem as `_events._transition` poses it) with 40 far contacts beside it, more
    than the narrowed solve holds on 7 coordinates: its modes, jump and impulses are those of
    the box's contacts alone, the far ones open, and the jump's derivatives in the applied
    impulse are the box's alone, the same by forward and reverse mode, and central
    differences' of the solve at the modes found."""
    from pathlib import Path

    import jax

    from ukjax._constraints import ConstraintRows
    from ukjax._narrow import select_in, solve_in
    from ukjax._unilateral import ContactRows, select_modes

    data = dict(np.load(Path(__file__).parent / "data" / "box_landing.npz"))

    def rows(name, extra=0, far=1.0):
        A, b, phi, phid = (data[f"{name}_{x}"] for x in ("A", "b", "phi", "phid"))
        n = A.shape[1]
        return ConstraintRows(*(
            jnp.asarray(np.concatenate(x))
            for x in ([A, np.ones((extra, n))], [b, np.zeros(extra)], [phi, np.full(extra, far)], [phid, np.full(extra, far)])
        ))

    k, extra = data["friction"].shape[0], 40
    alone = ContactRows(rows("n"), rows("t"), data["friction"], data["restitution"])
    beside = ContactRows(
        rows("n", extra), rows("t", 2 * extra, 0.0), jnp.asarray(np.concatenate([data["friction"], np.full(extra, 0.5)])),
        jnp.asarray(np.concatenate([data["restitution"], np.zeros(extra)])),
    )
    assert capacity(k + extra, 7) < k + extra
    pad = lambda x, fill: jnp.asarray(np.concatenate([x, np.full((extra,) + x.shape[1:], fill)]))  # noqa: E731

    def jump(Q, narrowed):
        if narrowed:
            candidates, slipping, slack = pad(data["candidates"], False), pad(data["slipping"], 0.0), pad(data["slack"], 0.0)
            return select_in(data["M"], Q, rows("eq"), beside, candidates, slipping, slack=slack)
        return select_modes(data["M"], Q, rows("eq"), alone, data["candidates"], data["slipping"], slack=data["slack"])

    (m1, j1, c1), (m2, j2, c2) = jax.jit(lambda Q: jump(Q, False))(data["Q"]), jax.jit(lambda Q: jump(Q, True))(data["Q"])
    assert bool(c1) and bool(c2)
    np.testing.assert_array_equal(np.asarray(m2.mode[:k]), np.asarray(m1.mode))
    assert np.all(np.asarray(m2.mode[k:]) == 0)
    np.testing.assert_allclose(np.asarray(j2.x), np.asarray(j1.x), atol=1e-12)
    np.testing.assert_allclose(np.asarray(j2.normal[:k]), np.asarray(j1.normal), atol=1e-12)

    # the derivatives along an applied impulse small enough to keep the modes
    direction = np.linspace(-1.0, 1.0, data["Q"].shape[0]) * 1e-3
    x = lambda s, narrowed: jump(data["Q"] + s * direction, narrowed)[1].x  # noqa: E731
    forward = jax.jit(lambda s: jax.jvp(lambda s: x(s, True), (s,), (1.0,))[1])(0.0)
    reverse = jax.jit(jax.grad(lambda s: x(s, True) @ np.arange(1.0, 8.0)))(0.0)
    alone_forward = jax.jit(lambda s: jax.jvp(lambda s: x(s, False), (s,), (1.0,))[1])(0.0)
    # the derivative is that of the final modes' solve (the search's choices, its friction
    # shares included, off the tape): central differences at those modes
    h = 1e-4
    at_modes = jax.jit(lambda s: solve_in(data["M"], data["Q"] + s * direction, rows("eq"), beside, m2).x)
    central = (at_modes(h) - at_modes(-h)) / (2 * h)
    np.testing.assert_allclose(np.asarray(at_modes(0.0)), np.asarray(j2.x), atol=1e-12)
    np.testing.assert_allclose(np.asarray(forward), np.asarray(alone_forward), atol=1e-10)
    np.testing.assert_allclose(np.asarray(forward), np.asarray(central), rtol=1e-6, atol=1e-10)
    assert float(reverse) == pytest.approx(float(np.asarray(forward) @ np.arange(1.0, 8.0)), rel=1e-9, abs=1e-12)
