"""What robot files nobody prepared for ukjax meet (issue "Real robots right"), on files of
those kinds written here (an arm whose coupled fingers rest on their limits) and on MuJoCo
Menagerie's Go1 (tests/data/go1.xml, its meshes left out)."""

import re
import warnings
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import ukjax
from ukjax import models

DATA = Path(__file__).parent / "data"
G = 9.81


def _impact_time(angle0: float, limit: float) -> float:
    """The coupled-fingers arm with its fingers welded at their limits: a physical pendulum
    `I θ̈ = m g x cos θ`, by DOP853 at rtol 1e-13, to its first reaching `limit`."""
    inertia = 1.0 * 0.5**2 + 0.01 + 0.5 * 1.0**2 + 0.002 + 2 * (0.05 * 1.0**2 + 1e-5)
    moment = 1.0 * 0.5 + 0.5 * 1.0 + 2 * 0.05 * 1.0
    event = lambda t, y: y[0] - limit  # noqa: E731
    event.terminal = True
    run = solve_ivp(
        lambda t, y: [y[1], moment * G * np.cos(y[0]) / inertia],
        (0.0, 2.0),
        [angle0, 0.0],
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
        events=event,
    )
    return float(run.t_events[0][0])


@eqx.filter_jit
def _fingers_run(system, q0, qd0, tol):
    # one program for the three tolerances (they are traced)
    run = lambda q0: ukjax.simulate(system, q0, qd0, 0.0, 1.0, ts=jnp.linspace(0, 1, 5), rtol=tol, atol=tol, throw=False)  # noqa: E731
    return jax.vmap(run)(q0)


@pytest.mark.xdist_group("coupled_fingers")  # one worker, one compile
@pytest.mark.parametrize("tol", [1e-6, 1e-8, 1e-10])
def test_limit_impact_beside_coupled_fingers_on_their_limits(tol):
    """The arm falls onto its shoulder's limit while its fingers rest on theirs, the rows of
    the two finger limits and the joint equality between them dependent: the minimum-norm
    forces leave the right finger's limit open at zero gap, held there by the coupling, and
    its event value sits at its offset, below the root finder's tolerance, through the whole
    swing. The impact used to be unlocatable there (`CONTACT_UNRESOLVED`, 6 of these 9 runs;
    which ones, by the tolerance). Every run ends SUCCESS, the impact at the welded
    pendulum's time (DOP853), the arm at rest on its limit and the fingers on theirs."""
    model = models.from_mjcf(DATA / "coupled_fingers.xml", keyframe="open")
    angles = jnp.array([0.0, 0.05, 0.1])
    q0 = jnp.tile(model.q0, (3, 1)).at[:, 0].set(angles)
    sol = _fingers_run(model.full_system(), q0, model.qd0, jnp.asarray(tol))
    assert np.all(np.asarray(sol.status) == int(ukjax.Status.SUCCESS))
    events = np.asarray(sol.contacts.event_times)
    assert np.all(np.sum(np.isfinite(events), axis=1) == 1)
    expected = np.array([_impact_time(float(a), 1.0) for a in angles])
    assert np.max(np.abs(events[:, 0] - expected)) < 1e3 * tol
    np.testing.assert_allclose(np.asarray(sol.q[:, -1]), np.tile([1.0, 0.04, 0.04], (3, 1)), atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.qd[:, -1]), 0.0, atol=1e-9)
    assert float(jnp.max(sol.contacts.penetration)) < 1e-9


def _go1(self_collisions: bool = False):
    """The Go1 (tests/data/go1.xml) under its servos at the keyframe's controls, with its joint
    limits and its contacts with the floor (and, with `self_collisions`, between its bodies)."""
    model = models.from_mjcf(DATA / "go1.xml", keyframe="home")
    unilateral = model.unilateral if self_collisions else model.unilateral[:2]  # limits, the floor's
    ctrl = jnp.asarray(model.ctrl)
    driven = model.controlled(lambda t, q, qd: ctrl)
    return model, ukjax.ConstrainedSystem(driven, model.constraints + unilateral)


def _foot_depth(model) -> float:
    """How deep the keyframe puts the feet into the floor, by MuJoCo's kinematics: the lowest
    foot sphere's centre less its radius and margin."""
    mjm = mujoco.MjModel.from_xml_path(str(DATA / "go1.xml"))
    data = mujoco.MjData(mjm)
    mujoco.mj_resetDataKeyframe(mjm, data, 0)
    mujoco.mj_forward(mjm, data)
    feet = [mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, name) for name in ("FR", "FL", "RR", "RL")]
    bottom = data.geom_xpos[feet, 2] - mjm.geom_size[feet, 0] - mjm.geom_margin[feet]
    return float(-np.min(bottom))


@pytest.mark.long
def test_quadruped_dropped_under_its_servos_lands():
    """The Go1 raised 0, 10 and 14 cm above its keyframe under its servos, onto the floor:
    at 10 cm its third foot touched down at 5e-6 m/s beside two sliding ones, and the
    impact's search with Coulomb's cone cycled (`CONTACT_UNRESOLVED` at 0.30 s, the state
    inf). Every member lands: SUCCESS, its first touchdown at the free fall's time (the
    servos hold the keyframe's pose, so the robot falls rigid) from the feet's height by
    MuJoCo's kinematics, no penetration past 1e-9 m, and the robot standing upright on its
    four feet at the end. The start inside the floor is warned of with the feet's names and
    depths (it was projected out silently, its depth only in the record)."""
    model, system = _go1()
    depth = _foot_depth(model)
    heights = jnp.array([0.0, 0.10, 0.14])
    q0 = jnp.tile(model.q0, (3, 1)).at[:, 2].add(heights)
    qd0 = jnp.zeros_like(q0)
    # the keyframe puts the feet into the floor (made for MuJoCo's soft feet): said, by name
    with pytest.warns(RuntimeWarning, match="starts inside") as caught:
        sol = ukjax.simulate_batch(system, q0, qd0, 0.0, 0.6, ts=jnp.linspace(0, 0.6, 4))
    (message,) = [str(w.message) for w in caught if "starts inside" in str(w.message)]
    assert "(1 of 3 members)" in message and all(f"{foot}–floor {depth:.3g}" in message for foot in ("FR", "FL", "RR", "RL"))
    assert np.all(np.asarray(sol.status) == int(ukjax.Status.SUCCESS))
    fall = np.sqrt(2 * np.maximum(np.asarray(heights) - depth, 0) / G)
    first = np.asarray(sol.contacts.event_times[:, 0])
    # from the keyframe the feet start inside the floor, projected out: touching at t = 0
    assert abs(first[0]) < 1e-3 or not np.isfinite(first[0])
    np.testing.assert_allclose(first[1:], fall[1:], rtol=1e-6)
    assert float(jnp.max(sol.contacts.penetration)) < 1e-9
    feet_down = np.sum(np.asarray(sol.contacts.gap[:, -1]) < 1e-9, axis=1)
    assert np.all(feet_down >= 4)
    height, upright = np.asarray(sol.q[:, -1, 2]), np.abs(np.asarray(sol.q[:, -1, 3]))
    assert np.all((height > 0.25) & (height < 0.31)) and np.all(upright > 0.999)

    # The file's whole system: its self-collision pairs too (2 255 rows of sphere, capsule and
    # box pairs between its bodies), more than the narrowed contact solve holds (38 on its 19
    # coordinates). The broadphase builds the rows of the pairs nearest contact only, and the
    # 10 cm drop is the one with the floor alone: the same events and trajectory to round-off
    # (none of the pairs comes near contact). With a column per pair in every solve it took
    # 20 s a run of 0.3 s (benchmarks/self_collisions.py) and went another way.
    _, full = _go1(self_collisions=True)
    assert jax.eval_shape(full.contact_rows, 0.0, model.q0, model.qd0).normal.b.shape[0] > 2000
    beside = ukjax.simulate(full, q0[1], qd0[1], 0.0, 0.6, ts=jnp.linspace(0, 0.6, 4))
    np.testing.assert_allclose(np.asarray(beside.contacts.event_times), np.asarray(sol.contacts.event_times[1]), atol=1e-9)
    np.testing.assert_allclose(np.asarray(beside.q), np.asarray(sol.q[1]), atol=1e-9)
    assert np.all(np.asarray(beside.contacts.mode[:, 2 * 12 + 82 :]) == 0)  # after the limits and the floor's


def test_fixed_step_past_the_stability_limit_is_warned_of():
    """RK4 at a fixed step on an arm under stiff servos: the warning names the limit from the
    linearization at the start, and the limit is the run's own: at twice it the run diverges
    (it used to end SUCCESS at |q| of 1e33 without a word), at half it follows the adaptive
    run with no warning. A step longer than the run, or pointing away from t1, is refused."""
    model = models.from_mjcf(DATA / "servo_arm.xml", keyframe="held")
    system = model.full_system()
    q0 = model.q0 + jnp.array([0.2, -0.1])

    def run(h):
        return ukjax.simulate(system, q0, model.qd0, 0.0, 1.0, solver=ukjax.RK4(), dt0=h, adaptive=False, throw=False)

    with pytest.warns(RuntimeWarning, match="stability limit") as caught:
        run(0.05)
    (message,) = [str(w.message) for w in caught if "stability limit" in str(w.message)]
    limit = float(re.search(r"about ([0-9.e+-]+):", message).group(1))
    assert 1e-4 < limit < 0.05
    with pytest.warns(RuntimeWarning, match="stability limit"):
        diverged = run(2 * limit)
    assert not float(jnp.max(jnp.abs(diverged.q))) < 1e3  # inf or NaN count as diverged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stable = run(0.5 * limit)
    reference = ukjax.simulate(system, q0, model.qd0, 0.0, 1.0, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(stable.q[-1]), np.asarray(reference.q[-1]), atol=1e-4)
    with pytest.raises(ValueError, match="longer than the run"):
        run(5.0)
    with pytest.raises(ValueError, match="towards t1"):
        run(-0.001)


def test_backwards_run_with_unilateral_constraints_is_refused():
    """Impacts and friction do not run backwards: `t1 < t0` with a joint limit is an error."""
    model = models.from_mjcf(DATA / "coupled_fingers.xml", keyframe="open")
    with pytest.raises(ValueError, match="before t0"):
        ukjax.simulate(model.full_system(), model.q0, model.qd0, 1.0, 0.0)



def test_parameters_fitted_by_their_names_in_the_file():
    """The arm's lower link's mass, its elbow's damping and its shoulder servo's gain, named as
    the file names them, identified from its own motion (started 20–30 % off; the other link
    and servo, not fitted, stay as they were): recovered to 1e-6, reported by name with
    their standard errors, the servo's bias (`−kp`) moved with its gain. The names of an
    inertia's six entries are read too."""
    model = models.from_mjcf(DATA / "servo_arm.xml", keyframe="held")
    truth = model.full_system()
    where = models.FileParameters(masses="lower", inertias="lower", damping="elbow", gains="shoulder")
    q0 = model.q0 + jnp.array([0.4, -0.3])
    ts = jnp.linspace(0.0, 0.6, 31)
    measured = ukjax.simulate(truth, q0, model.qd0, 0.0, 0.6, ts=ts, rtol=1e-11, atol=1e-11).q
    # the masses and damping off by hand (the servo-driven tree: `truth.system`)
    found = truth.system
    lower, elbow, shoulder = np.array([1.0, 1.3]), np.array([1.0, 0.7]), np.array([[0.8], [1.0]])
    off = eqx.tree_at(lambda s: (s.system.masses, s.system.damping), truth, (found.masses * lower, found.damping * elbow))
    off = eqx.tree_at(lambda s: (s.actuators.gain, s.actuators.bias), off, (off.actuators.gain * shoulder, off.actuators.bias * shoulder))
    start = dict(zip(where.names(off), np.asarray(ukjax._fit._parameters(off, where, False)[1])))
    assert list(start) == ["mass of lower", *(f"inertia of lower [{x}]" for x in ("xx", "yy", "zz", "xy", "xz", "yz")), "damping of elbow", "gain of shoulder"]

    def residuals(system):
        return ukjax.trajectory_residuals(system, q0, model.qd0, ts, measured, rtol=1e-11, atol=1e-11)

    # the inertia's entries the motion about the hinges cannot see are left where they are: fit
    # the mass, the damping and the gain, then check the named inertia reads back unchanged
    fitted = models.FileParameters(masses="lower", damping="elbow", gains="shoulder")
    res = ukjax.fit_least_squares(residuals, off, where=fitted, positive=True, progress=False)
    assert res.names == ("mass of lower", "damping of elbow", "gain of shoulder")
    np.testing.assert_allclose(np.asarray(res.values), [1.0, 10.0, 2000.0], rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(res.std)))
    actuators = res.model.actuators
    assert float(actuators.bias[0, 1]) == pytest.approx(-float(actuators.gain[0, 0]), rel=1e-12)
    # the elbow's servo was not fitted, nor the upper link's mass: they are as they were
    np.testing.assert_array_equal(np.asarray(actuators.gain[1]), np.asarray(truth.actuators.gain[1]))
    fitted_tree = res.model.system
    assert float(fitted_tree.masses[0]) == float(found.masses[0])
    np.testing.assert_array_equal(np.asarray(fitted_tree.inertias), np.asarray(found.inertias))


@pytest.mark.slow
def test_quadruped_height_derivative_in_the_trunk_mass():
    """d z(0.3 s) / d (trunk mass) of the Go1 dropped 5 cm onto the floor under its servos,
    through its five events, by forward mode against central differences (1e-5 relative).
    Slow (about 45 s, compile included, on 2 cores): `pytest -m slow`."""
    model, system = _go1()
    q0 = model.q0.at[2].add(0.05)
    trunk = system.system.system.masses[0]

    def height(mass):
        changed = eqx.tree_at(lambda s: s.system.system.masses, system, system.system.system.masses.at[0].set(mass))
        return ukjax.simulate(changed, q0, model.qd0, 0.0, 0.3, adjoint=diffrax.ForwardMode(), throw=False).q[-1, 2]

    _, derivative = jax.jit(lambda m: jax.jvp(height, (m,), (jnp.ones_like(m),)))(trunk)
    h = 1e-4 * float(trunk)
    central = (jax.jit(height)(trunk + h) - jax.jit(height)(trunk - h)) / (2 * h)
    assert np.isfinite(float(derivative)) and abs(float(derivative)) > 1e-5
    assert abs(float(derivative) - float(central)) < 1e-5 * abs(float(central))


def test_fixed_step_limit_of_an_oscillator_is_rk4s_closed_form():
    """An undamped oscillator of ω = 1000 rad/s: RK4's stability on the imaginary axis ends at
    |h ω| = 2√2, and the warning's limit is that within the 1 % its search resolves; a
    system whose forces forward mode cannot pass (a `custom_vjp`) runs with no estimate."""
    oscillator = ukjax.ExplicitSystem(M=lambda t, q: jnp.eye(1), Q=lambda t, q, qd: -1e6 * q)
    with pytest.warns(RuntimeWarning, match="stability limit") as caught:
        ukjax.simulate(oscillator, jnp.ones(1), jnp.zeros(1), 0.0, 1.0, solver=ukjax.RK4(), dt0=0.01, adaptive=False, throw=False)
    (message,) = [str(w.message) for w in caught if "stability limit" in str(w.message)]
    limit = float(re.search(r"about ([0-9.e+-]+):", message).group(1))
    assert limit == pytest.approx(2 * np.sqrt(2) / 1000, rel=0.015)

    @jax.custom_vjp
    def spring(q):
        return -100.0 * q

    spring.defvjp(lambda q: (spring(q), None), lambda _, g: (-100.0 * g,))
    opaque = ukjax.ExplicitSystem(M=lambda t, q: jnp.eye(1), Q=lambda t, q, qd: spring(q))
    sol = ukjax.simulate(opaque, jnp.ones(1), jnp.zeros(1), 0.0, 1.0, solver=ukjax.RK4(), dt0=0.01, adaptive=False)
    # RK4's own error at h ω = 0.1 over ten radians: (h ω)⁴ ω t / 120 ≈ 8e-6 (3.9e-6 measured)
    assert float(sol.q[-1, 0]) == pytest.approx(np.cos(10.0), abs=2e-5)
