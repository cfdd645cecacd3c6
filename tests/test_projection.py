"""Projection onto the constraints and starts off them: `ConstrainedSystem.project` closes the
loops from far starts (checked by MuJoCo's own kinematics), says when it cannot, and
`simulate`/`simulate_batch` say when a run starts off its constraints; states of the wrong
length are refused with the lengths named."""

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import ukjax
from ukjax import models

HERE = Path(__file__).parent
FILES = {"five-bar": HERE / "data" / "fivebar.xml", "four-bar": HERE.parent / "examples" / "fourbar.xml"}


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the five-bar's qpos0 is off its loop, and said so
        model = models.from_mjcf(str(path))
    return model, ukjax.ConstrainedSystem(model.system, model.constraints)


def _mujoco_gap(path, q):
    """The distance between the two ends of the file's loop, by MuJoCo's kinematics."""
    mjm = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(mjm)
    gaps = []
    for qpos in np.asarray(q):
        data.qpos[:] = qpos
        mujoco.mj_kinematics(mjm, data)
        if mjm.eq_objtype[0] == mujoco.mjtObj.mjOBJ_SITE:
            one, two = data.site_xpos[mjm.eq_obj1id[0]], data.site_xpos[mjm.eq_obj2id[0]]
        else:
            b1, b2 = mjm.eq_obj1id[0], mjm.eq_obj2id[0]
            one = data.xpos[b1] + data.xmat[b1].reshape(3, 3) @ mjm.eq_data[0, :3]
            two = data.xpos[b2] + data.xmat[b2].reshape(3, 3) @ mjm.eq_data[0, 3:6]
        gaps.append(np.linalg.norm(one - two))
    return np.array(gaps)


def test_five_bar_projection_from_the_issues_start():
    """The start that Gauss–Newton's eight full steps left 0.86 m open: closed to round-off."""
    _, system = _load(FILES["five-bar"])
    result = system.project(0.0, jnp.array([-0.24, -0.40, -0.07, 0.13]), jnp.array([0.3, 0.0, -0.2, 0.1]))
    assert bool(result.success)
    assert _mujoco_gap(FILES["five-bar"], result.q[None])[0] < 1e-12
    assert float(jnp.max(jnp.abs(result.phid))) < 1e-12  # the rates moved onto the loop too


@pytest.mark.parametrize("name", FILES)
def test_projection_from_random_starts(name):
    """64 starts within ±1 rad (22 of them failed on the five-bar, 3 on the four-bar, with
    eight plain Gauss–Newton steps): every one closes its loop, by MuJoCo's measure."""
    _, system = _load(FILES[name])
    n = system.num_coordinates
    starts = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (64, n)))
    result = jax.jit(jax.vmap(lambda q: system.project(0.0, q, jnp.zeros(n))))(starts)
    assert bool(jnp.all(result.success)), int(jnp.sum(~result.success))
    assert _mujoco_gap(FILES[name], result.q).max() < 1e-12


def test_a_projection_that_cannot_close_says_so():
    """The world site moved out of the five-bar's reach (1.2 m): eagerly a warning with the
    distance left, under jit and vmap `success` is False; the distance is the closest the
    chain's tip comes, 2.0 − 1.2 m."""
    source = FILES["five-bar"].read_text().replace('pos="0.6 0 0"', 'pos="2.0 0 0"')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = models.from_mjcf(source)
    system = ukjax.ConstrainedSystem(model.system, model.constraints)
    q = jnp.array([0.1, 0.2, -0.1, 0.3])
    with pytest.warns(RuntimeWarning, match=r"missed its tolerance .* \|Φ\| = [78]\.\d\de-01"):
        result = system.project(0.0, q, jnp.zeros(4))
    assert not bool(result.success)
    # the stretched chain is singular there: the steps stall just short of the closest point
    assert abs(float(jnp.linalg.norm(result.phi)) - 0.8) < 1e-3
    traced = jax.jit(jax.vmap(lambda q: system.project(0.0, q, jnp.zeros(4))))(jnp.stack([q, -q]))
    assert not bool(jnp.any(traced.success))


def test_a_run_that_starts_off_its_constraints_says_so():
    """The four-bar started with its crank rate 1 rad/s off (φ̇ = 0.5 m/s), no Baumgarte
    gains: the loop opens 0.1 m in 0.2 s while every step succeeds, and `simulate` and
    `simulate_batch` warn (naming the members); a consistent start does not, nor saves that
    begin after the start."""
    model, system = _load(FILES["four-bar"])
    off = model.qd0.at[0].add(1.0)
    with pytest.warns(RuntimeWarning, match=r"starts off its constraints \(the run\).*\|Φ̇\| = 5\.00e-01"):
        sol = ukjax.simulate(system, model.q0, off, 0.0, 0.2)
    assert abs(float(jnp.max(jnp.abs(sol.phi[-1]))) - 0.1) < 1e-6
    with pytest.warns(RuntimeWarning, match=r"\(1 of 2 members\)"):
        ukjax.simulate_batch(system, jnp.stack([model.q0] * 2), jnp.stack([model.qd0, off]), 0.0, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ukjax.simulate(system, model.q0, model.qd0, 0.0, 0.2)
        # saves that begin after the start: their violation is the run's, not the start's (it
        # was said to be the start's, at ts[0])
        ukjax.simulate_batch(system, jnp.stack([model.q0] * 2), jnp.stack([model.qd0, off]), 0.0, 0.2, ts=[0.2])


def test_states_of_the_wrong_length_name_the_lengths():
    """MuJoCo's qvel (nv = 6) where a free-joint model wants its 7 coordinates: refused by
    `simulate`, `simulate_batch`, `project` and `acceleration`, nq and nv named."""
    model = models.from_mjcf(
        '<mujoco><worldbody><body><freejoint/><geom size="0.1" mass="1"/></body>'
        '<body pos="1 0 0"><joint name="h" type="hinge"/><geom size="0.1" mass="1"/></body>'
        '</worldbody><equality><joint joint1="h"/></equality><option><flag contact="disable"/></option></mujoco>'
    )
    system = ukjax.ConstrainedSystem(model.system, model.constraints)
    wrong = jnp.zeros(7)
    message = r"8 coordinates.*got 7.*nq = 8.*nv = 7.*state_from_mujoco"
    for call in (
        lambda: ukjax.simulate(system, wrong, wrong, 0.0, 1.0),
        lambda: ukjax.simulate_batch(system, wrong[None], wrong[None], 0.0, 1.0),
        lambda: system.project(0.0, wrong, wrong),
        lambda: system.acceleration(0.0, wrong, wrong),
    ):
        with pytest.raises(ValueError, match=message):
            call()


def test_a_run_projected_at_each_step_keeps_its_loop_closed():
    """The four-bar swinging (`examples/fourbar.xml`), RK4 at 10 ms for 2 s: unprojected, the
    loop opens by RK4's error (about 2e-4 m, as the U-K rows hold only its second
    derivative); with `project=True` it stays closed to 1e-11 and its velocities to 1e-13, and
    the path is nearer a 1e-12 Tsit5 reference."""
    model = models.from_mjcf(ukjax.examples.path("fourbar.xml"), keyframe="swinging")
    system = ukjax.ConstrainedSystem(model.system, model.constraints)
    ts = jnp.linspace(0.0, 2.0, 11)
    run = dict(ts=ts, solver=ukjax.RK4(), adaptive=False, dt0=1e-2)
    projected, drifting = (ukjax.simulate(system, model.q0, model.qd0, 0.0, 2.0, **run, project=p) for p in (True, False))
    reference = ukjax.simulate(system, model.q0, model.qd0, 0.0, 2.0, ts=ts, rtol=1e-12, atol=1e-12)
    assert float(jnp.max(jnp.abs(drifting.phi))) > 1e-5
    assert float(jnp.max(jnp.abs(projected.phi))) < 1e-11 and float(jnp.max(jnp.abs(projected.phid))) < 1e-13
    error = [float(jnp.max(jnp.abs(sol.q - reference.q))) for sol in (projected, drifting)]
    assert error[0] < error[1] / 4


def _pendulum(length):
    """A unit point mass on a rod of `length` in Cartesian coordinates."""
    point = ukjax.ExplicitSystem(M=lambda t, q: jnp.eye(2), Q=lambda t, q, qd: jnp.array([0.0, -9.81]))
    return ukjax.ConstrainedSystem(point, ukjax.Holonomic(lambda t, q: q @ q - length**2))


def test_derivatives_go_through_the_projections():
    """A point pendulum, RK4 at 50 ms with `project=True`: ∂x(2 s)/∂(rod length) in forward and
    in reverse mode equal central differences of the projected runs."""
    import diffrax

    def x(length, **options):
        sol = ukjax.simulate(
            _pendulum(length), jnp.stack([0.6 * length, -0.8 * length]), jnp.zeros(2), 0.0, 2.0,
            solver=ukjax.RK4(), adaptive=False, dt0=0.05, project=True, **options,
        )
        return sol.q[-1, 0]

    step, length = 1e-6, jnp.asarray(1.0)
    central = (x(length + step) - x(length - step)) / (2 * step)
    forward = jax.jacfwd(lambda a: x(a, adjoint=diffrax.ForwardMode()))(length)
    reverse = jax.grad(x)(length)
    assert abs(float(central)) > 1e-2
    np.testing.assert_allclose([float(forward), float(reverse)], float(central), rtol=1e-6)
