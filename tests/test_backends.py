"""The route as an object (`ukjax.AutoBackend`, `ukjax.TreeKernel`, `ukjax.XLABackend`): what the
automatic one picks and reports, that each route is what runs (the kernel's FFI calls in the
program, or none), that both give the same motion, and clear errors for a route that cannot
run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax import models
from ukjax._backends import _tree_kernel

ARM = """<mujoco><option timestep="0.001"/><worldbody>
<body><joint name="shoulder" type="hinge" axis="0 1 0" damping="0.1"/>
<geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04" mass="1"/>
<body pos="0 0 -0.5"><joint name="elbow" type="hinge" axis="0 1 0"/>
<geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03" mass="0.6"/></body></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def arm():
    model = models.from_mjcf(ARM)
    if not _tree_kernel.can_run(model.system, jnp.float64, jax.default_backend()):
        pytest.skip("no compiler builds the kernel for this device")
    return model.system, jnp.array([0.6, -0.3])


def _ball_on_a_floor():
    """A point mass on a line above a floor (a hand-built system: no tree for the kernel, only
    its contact solve)."""
    system = ukjax.LagrangianSystem(lambda t, q, qd: 0.5 * qd @ qd, lambda t, q: 9.81 * q[0])
    return ukjax.ConstrainedSystem(system, [ukjax.Unilateral(lambda t, q: q[0], restitution=0.5)])


def test_the_automatic_choice_says_what_it_picked(arm):
    tree, _ = arm
    auto = ukjax.AutoBackend()
    assert auto.select(tree, jnp.float64, jax.default_backend()) == ukjax.TreeKernel()
    assert auto.select(tree, jnp.float32, jax.default_backend()) == ukjax.XLABackend()
    assert ukjax.AutoBackend(kernels=False).select(tree, jnp.float64, "cpu") == ukjax.XLABackend()
    # nothing the kernel covers: XLA, and the kernel is not built for it
    smooth = ukjax.LagrangianSystem(lambda t, q, qd: 0.5 * qd @ qd)
    assert auto.select(smooth, jnp.float64, "cpu") == ukjax.XLABackend()
    # a hand-built system with contacts: its contact solve runs on the kernel
    assert auto.select(_ball_on_a_floor(), jnp.float64, jax.default_backend()) == ukjax.TreeKernel()


def test_each_route_is_what_runs_and_both_move_alike(arm):
    tree, q0 = arm
    qd0 = jnp.zeros(2)
    options = dict(ts=jnp.linspace(0.0, 0.5, 6), solver=ukjax.RK4(), adaptive=False, dt0=1e-3)
    programs = {}
    for backend in (ukjax.AutoBackend(), ukjax.TreeKernel(), ukjax.XLABackend()):
        run = jax.jit(lambda q: ukjax.simulate(tree, q, qd0, 0.0, 0.5, backend=backend, **options).q)
        programs[backend] = run.lower(q0).as_text()
    assert "ukjax_tree_1" in programs[ukjax.TreeKernel()]
    assert "ukjax_tree_1" in programs[ukjax.AutoBackend()]
    assert "ukjax_" not in programs[ukjax.XLABackend()]
    on_kernel = ukjax.simulate(tree, q0, qd0, 0.0, 0.5, **options)
    on_xla = ukjax.simulate(tree, q0, qd0, 0.0, 0.5, backend=ukjax.XLABackend(), **options)
    assert on_kernel.backend == ukjax.TreeKernel() and on_xla.backend == ukjax.XLABackend()
    np.testing.assert_allclose(on_kernel.q, on_xla.q, rtol=0, atol=1e-12)
    # a batch: one program of the kernel for every member, the pick reported for all
    q = q0 + jnp.linspace(-0.1, 0.1, 5)[:, None]
    batch = ukjax.simulate_batch(tree, q, jnp.zeros_like(q), 0.0, 0.5, **options)
    alone = ukjax.simulate_batch(tree, q, jnp.zeros_like(q), 0.0, 0.5, backend=ukjax.XLABackend(), **options)
    assert batch.backend == ukjax.TreeKernel() and alone.backend == ukjax.XLABackend()
    np.testing.assert_allclose(batch.q, alone.q, rtol=0, atol=1e-12)


def test_a_system_is_pure_xla_until_a_backend_binds_it(arm):
    tree, q0 = arm
    text = lambda system: jax.jit(lambda q: system.solve(0.0, q, q).acceleration).lower(q0).as_text()  # noqa: E731
    assert "ukjax_" not in text(tree)
    bound = ukjax.TreeKernel().bind(tree, jnp.float64, jax.default_backend())
    assert "ukjax_tree_dynamics" in text(bound) or jax.default_backend() != "cpu"
    # bound back to XLA: nothing of the kernel is left, and the same arrays
    unbound = ukjax.XLABackend().bind(bound, jnp.float64, jax.default_backend())
    assert "ukjax_" not in text(unbound)
    assert unbound.route is None and jax.tree.structure(unbound) == jax.tree.structure(tree)
    # a constrained system's contact solve: the kernel's where bound
    ball = _ball_on_a_floor()
    q = jnp.array([0.0])
    contact = lambda system: jax.jit(lambda q: system.solve(0.0, q, q).acceleration).lower(q).as_text()  # noqa: E731
    assert "ukjax_contact_solve" not in contact(ball)
    assert "ukjax_contact_solve" in contact(ukjax.TreeKernel().bind(ball, jnp.float64, jax.default_backend()))


def test_the_two_routes_bounce_a_ball_alike():
    ball = _ball_on_a_floor()
    q0, qd0 = jnp.array([0.2]), jnp.array([0.0])
    runs = [
        ukjax.simulate(ball, q0, qd0, 0.0, 0.6, backend=b) for b in (ukjax.AutoBackend(), ukjax.XLABackend())
    ]
    assert runs[1].backend == ukjax.XLABackend()
    np.testing.assert_allclose(runs[0].contacts.event_times, runs[1].contacts.event_times, rtol=0, atol=1e-12)
    np.testing.assert_allclose(runs[0].q, runs[1].q, rtol=0, atol=1e-12)


def test_a_route_that_cannot_run_is_an_error(arm):
    tree, q0 = arm
    with pytest.raises(ValueError, match="float64"):
        ukjax.simulate(
            tree, q0.astype(jnp.float32), jnp.zeros(2, jnp.float32), 0.0, 0.1, backend=ukjax.TreeKernel()
        )
    with pytest.raises(TypeError, match="backend must be a ukjax backend"):
        ukjax.simulate(tree, q0, jnp.zeros(2), 0.0, 0.1, backend="kernel")
    with pytest.raises(TypeError, match="backend must be a ukjax backend"):
        ukjax.simulate_batch(tree, q0[None], jnp.zeros((1, 2)), 0.0, 0.1, backend="xla")


def test_a_system_edited_or_made_anew_runs_as_it_is_now(arm):
    """`simulate` and `simulate_batch` remember the last systems they bound, by identity (the
    binding walks the whole system, a seventh of a small robot's fixed-step run): a system
    edited through `eqx.tree_at` runs as edited, the one run before it as before, and a new
    system made where a dropped one lived (Python may reuse the address) as itself. Damping
    changes the motion only where it is applied, so a stale binding would show."""
    import gc

    import equinox as eqx

    tree, q0 = arm
    qd0 = jnp.zeros(2)
    options = dict(ts=jnp.linspace(0.0, 0.3, 4), solver=ukjax.RK4(), adaptive=False, dt0=1e-3)

    def runs(system):
        one = ukjax.simulate(system, q0, qd0, 0.0, 0.3, **options).q
        batch = ukjax.simulate_batch(system, q0[None], qd0[None], 0.0, 0.3, **options).q[0]
        return np.asarray(one), np.asarray(batch)

    damped = lambda d: eqx.tree_at(lambda s: s.damping, tree, jnp.full(2, d))  # noqa: E731
    first = runs(tree)
    edited = runs(damped(3.0))
    again = runs(tree)
    for one, batch in (first, edited, again):
        np.testing.assert_allclose(batch, one, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(again[0], first[0])
    assert np.max(np.abs(edited[0][-1] - first[0][-1])) > 1e-3
    # made, run and dropped one after another: each a new system, perhaps at the address of
    # the one dropped before it
    finals = []
    for d in (0.0, 3.0, 0.0, 3.0):
        system = damped(d)
        finals.append(runs(system)[1][-1])
        del system
        gc.collect()
    np.testing.assert_allclose(finals[1], edited[1][-1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(finals[2], finals[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(finals[3], finals[1], rtol=0, atol=1e-12)
    assert np.max(np.abs(finals[1] - finals[0])) > 1e-3
