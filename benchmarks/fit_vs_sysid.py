"""Fitting per second: ukjax's `fit_least_squares` (exact forward-mode Jacobians through the
simulation) against MuJoCo's system identification toolbox (`mujoco.sysid`: Gauss–Newton with
finite-difference Jacobians over `rollout`s), on the same data and the same parameters.

The arm: four links on parallel hinges, under gravity, read from one MJCF file (below) by
both, driven by known sinusoidal torques for 2 s. Twelve parameters: the links' masses, the
joints' damping and armature, all started 30–50 % off. The measurements: the joint angles
every `H` from one MuJoCo `rollout` of the true arm (RK4 at `H`), plus Gaussian noise of
`--noise` rad: `mujoco.sysid`'s own model is the data's, its best case. (Data from DOP853 at
1e-12 on MuJoCo's forward dynamics with continuous torques left `mujoco.sysid` 3.6 % off
without noise: its pipeline aligns controls and sensors in time its own way.)

- ukjax: the parameters named as the file names them (`ukjax.models.FileParameters`: the
  links' masses, the joints' damping and armature), `trajectory_residuals` (Tsit5, the torques
  continuous) and Levenberg–Marquardt,
  twice: at its defaults (1e-10 for both) and with the simulation at 1e-8 and the fit stopping
  at relative steps of 1e-6 (both far below what the noise lets the data decide); standard
  errors from the Jacobian at the solution.
- `mujoco.sysid`: `optimize` with its default optimizer (`mujoco.minimize`), the model at
  `H` with RK4 and the torques held over each step at their mid-step value; confidence
  intervals from `calculate_intervals`, turned into standard errors (α = 0.3173, one σ).

Printed per fitter: wall time (ukjax's compile apart), iterations, the largest relative
parameter error, and the largest error over its reported standard error (about 1–3 for an
honest uncertainty). Needs `pip install "mujoco[sysid]"` (not a ukjax dependency).

    python benchmarks/fit_vs_sysid.py [--noise 1e-3] [--seed 0]
"""

import argparse
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402
from mujoco import rollout  # noqa: E402

import ukjax  # noqa: E402

H, T = 1e-3, 2.0
# per link: mass, diagonal inertia, armature and damping of its joint, the joint's axis
LINKS = [
    (1.2, (0.012, 0.012, 0.006), 0.40, 0.8, "0 1 0"),
    (0.9, (0.009, 0.009, 0.004), 0.30, 0.6, "0 1 0"),
    (0.6, (0.006, 0.006, 0.003), 0.20, 0.4, "0 1 0"),
    (0.4, (0.003, 0.003, 0.002), 0.10, 0.2, "0 1 0"),
]
AMPLITUDES, FREQUENCIES, PHASES = np.array([4.0, 3.0, 2.0, 1.0]), np.array([0.5, 0.7, 0.4, 0.9]), np.arange(4) * 0.5
OFF = (1.3, 0.7, 1.5)  # the start: masses, damping, armature times these


def xml() -> str:
    body = ""
    for i, (mass, inertia, armature, damping, axis) in reversed(list(enumerate(LINKS))):
        body = f"""
<body name="link{i}" pos="0 0 {0.1 if i else 0.05}">
  <inertial pos="0.03 0 0.05" mass="{mass}" diaginertia="{' '.join(map(str, inertia))}"/>
  <joint name="joint{i}" type="hinge" axis="{axis}" armature="{armature}" damping="{damping}"/>
  {body}
</body>"""
    motors = "".join(f'<motor name="motor{i}" joint="joint{i}"/>' for i in range(len(LINKS)))
    sensors = "".join(f'<jointpos name="angle{i}" joint="joint{i}"/>' for i in range(len(LINKS)))
    return f"""<mujoco model="arm">
<option timestep="{H}" integrator="RK4"><flag contact="disable"/></option>
<worldbody>{body}</worldbody>
<actuator>{motors}</actuator>
<sensor>{sensors}</sensor>
</mujoco>"""


def torques(t, xp=np):
    return AMPLITUDES * xp.sin(2 * np.pi * FREQUENCIES * xp.asarray(t)[..., None] + PHASES)


def measurements(noise, seed):
    """One `rollout` of the true arm (RK4 at `H`, each step's torque the mid-step value), with
    Gaussian noise: the joint angles of the states after each step, at `H, 2H, …, T` (for
    ukjax), and the angle sensors as `rollout` records them, labelled with the same times as
    MuJoCo's sysid tests do (for `mujoco.sysid`: its own model is then the data's)."""
    mjm = mujoco.MjModel.from_xml_string(xml())
    d = mujoco.MjData(mjm)
    steps = H * np.arange(round(T / H))
    initial = np.empty(mujoco.mj_stateSize(mjm, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(mjm, d, initial, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    states, sensors = rollout.rollout(mjm, d, initial[None], torques(steps + H / 2)[None])
    rng = np.random.default_rng(seed)
    times = states[0, :, 0]
    angles = states[0, :, 1 : 1 + mjm.nq]
    return (
        times,
        angles + rng.normal(scale=noise, size=angles.shape),
        sensors[0] + rng.normal(scale=noise, size=sensors[0].shape),
    )


def truth():
    return np.array([[m for m, *_ in LINKS], [d for *_, d, _ in LINKS], [a for *_, a, _, _ in LINKS]])


def report(name, values, std, wall, iterations, extra=""):
    true = truth()
    error = np.abs(values / true - 1)
    print(
        f"{name:34s} {wall:8.1f} s {iterations:6d} {np.max(error):12.2e} {np.max(np.abs(values - true) / std):10.2f}  {extra}"
    )
    return float(np.max(error)), wall


def fit_ukjax(times, measured, _, tolerance=1e-10, stop=1e-10):
    """`tolerance`: the simulation's rtol and atol; `stop`: Levenberg–Marquardt's (its steps end
    once they change the log-parameters by less than it, relative)."""
    model = ukjax.models.from_mjcf(xml())
    start = time.perf_counter()
    system = model.controlled(lambda t, q, qd: torques(t, jnp))
    leaves = lambda s: (s.system.masses, s.system.damping, s.system.armature)  # noqa: E731
    system = eqx.tree_at(leaves, system, tuple(x * f for x, f in zip(leaves(system), OFF)))
    # the twelve parameters by their names in the file, reported by name
    links, joints = [f"link{i}" for i in range(len(LINKS))], [f"joint{i}" for i in range(len(LINKS))]
    where = ukjax.models.FileParameters(masses=links, damping=joints, armature=joints)
    ts = jnp.concatenate([jnp.zeros(1), jnp.asarray(times)])
    q = jnp.concatenate([jnp.zeros((1, 4)), jnp.asarray(measured)])

    def residuals(s):
        return ukjax.trajectory_residuals(s, jnp.zeros(4), jnp.zeros(4), ts, q, rtol=tolerance, atol=tolerance)

    solver = optx.LevenbergMarquardt(rtol=stop, atol=stop)
    res = ukjax.fit_least_squares(residuals, system, where=where, positive=True, progress=False, solver=solver)
    wall = time.perf_counter() - start
    # the same fit once more, compiled: what the first took beyond it is compiling
    again = time.perf_counter()
    ukjax.fit_least_squares(residuals, system, where=where, positive=True, progress=False, solver=solver)
    compiled = time.perf_counter() - again
    assert res.names[0] == "mass of link0" and res.names[-1] == f"armature of joint{len(LINKS) - 1}"
    values = np.asarray(res.values).reshape(3, 4)  # masses, damping, armature, as named
    std = np.asarray(res.std).reshape(3, 4)
    name = f"ukjax, exact Jacobians ({tolerance:g}, {stop:g})"
    return report(name, values, std, compiled, res.steps, f"(first run {wall:.1f} s)")


def fit_sysid(times, _, measured):
    from mujoco import sysid

    # without its extras `mujoco.sysid` imports empty (it swallows the missing dependencies)
    if "create_initial_state" not in dir(sysid):
        raise SystemExit('mujoco.sysid is installed without its dependencies: pip install "mujoco[sysid]".')

    spec = mujoco.MjSpec.from_string(xml())
    mjm = spec.compile()
    d = mujoco.MjData(mjm)
    initial = sysid.create_initial_state(mjm, d.qpos, d.qvel, d.act)
    steps = H * np.arange(round(T / H))
    control = sysid.TimeSeries(steps, torques(steps + H / 2))
    sensors = sysid.TimeSeries.from_names(times, measured, mjm)
    params = sysid.ParameterDict()
    setters = {
        "mass": lambda s, i, v: setattr(s.body(f"link{i}"), "mass", v),
        "damping": lambda s, i, v: setattr(s.joint(f"joint{i}"), "damping", [v, 0.0, 0.0]),
        "armature": lambda s, i, v: setattr(s.joint(f"joint{i}"), "armature", v),
    }
    for (kind, setter), row, factor in zip(setters.items(), truth(), OFF):
        for i, value in enumerate(row):
            params.add(
                sysid.Parameter(
                    f"{kind}{i}",
                    nominal=value,
                    min_value=value / 10,
                    max_value=value * 10,
                    modifier=lambda s, p, i=i, setter=setter: setter(s, i, p.value[0]),
                )
            )
            params[f"{kind}{i}"].value[:] = value * factor
    sequence = sysid.ModelSequences("arm", spec, "sines", initial, control, sensors)
    residual_fn = sysid.build_residual_fn(models_sequences=[sequence])
    start = time.perf_counter()
    fitted, result = sysid.optimize(initial_params=params, residual_fn=residual_fn, optimizer="mujoco", verbose=False)
    wall = time.perf_counter() - start
    residuals, _, _ = residual_fn(fitted.as_vector(), fitted)
    _, half_widths = sysid.calculate_intervals(residuals, result.jac, alpha=0.3173)
    values = fitted.as_vector().reshape(3, 4)
    iterations = len(result.extras.get("objective", [])) or -1
    return report("mujoco.sysid, finite differences", values, half_widths.reshape(3, 4), wall, iterations)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, default=1e-3, help="joint angle noise [rad]")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    times, *measured = measurements(args.noise, args.seed)
    print(f"4-link arm, 12 parameters, {times.size} samples of 4 angles, noise {args.noise:g} rad; MuJoCo {mujoco.__version__}")
    print(f"{'fitter':34s} {'wall':>10s} {'iters':>6s} {'param error':>12s} {'err/std':>10s}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # ukjax's defaults, then tolerances chosen from the noise: a simulation error of 1e-8
        # rad and parameter steps of 1e-6 (relative) are far below what noise of 1e-3 rad
        # lets the data decide
        defaults = fit_ukjax(times, *measured)
        ours = fit_ukjax(times, *measured, tolerance=1e-8, stop=1e-6)
    theirs = fit_sysid(times, *measured)
    print(
        f"time ratio sysid/ukjax {theirs[1] / ours[1]:.3g} (compiled; {theirs[1] / defaults[1]:.3g} at ukjax's "
        f"defaults), parameter error ukjax {ours[0]:.2e} sysid {theirs[0]:.2e}"
    )


if __name__ == "__main__":
    main()
