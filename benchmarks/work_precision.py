"""Accuracy per second: the largest error of any body's position over 1 s against the wall time per
simulated second per member, for ukjax and MuJoCo on the same files.

Mechanisms, each read from one MJCF file by both simulators: the four-bar
(`ukjax/examples/fourbar.xml`, from its `swinging` keyframe), the two-finger gripper
(`ukjax/examples/gripper.xml`, its actuator held at 0.3) and Agility's Cassie
(`shared/robots/cassie.xml`, from `home` with its loops closed, falling; joint limits and
contacts off in both, as ukjax models neither here). Each runs `--members` starts: the file's
state plus random joint rates along the loops (MuJoCo's equality rows), the same in both.

The reference is exact up to its own tolerance: the KKT acceleration on MuJoCo's functions
(`benchmarks/references.py`: `mj_fullM`, the forces, the equality rows of `efc_J`, `J̇v` by
central differences) integrated by scipy's DOP853 at 1e-12; its distance from the same at
1e-11 is printed as its own error. The error of a run is the largest distance of any body
from the reference at any of the saves (every 10 ms of the second) over the members: a damped
mechanism that settles (the gripper does within 0.1 s) is judged on its motion, not its rest.

- ukjax: `simulate_batch` of `--batch` members (the starts repeated), RK4 at several steps and
  Tsit5 at several tolerances, one program per solver (its compile time printed apart); the
  compiled tree kernel runs every mechanism here (`UKJAX_KERNELS=0`: the XLA route).
- MuJoCo: `rollout` of the same batch on every core, RK4 at several steps, with the file's
  `solref` and with the tightest MuJoCo allows at that step (a time constant of twice the step).
  Its equalities are soft, so its error has a floor that a smaller step does not lower.

Cost: wall time per simulated second per member, both simulators on every core.

With contacts (`--cases contacts`): `ukjax/examples/contacts.xml` (`benchmarks/contacts.py`),
its sphere and box launched at `--members` speeds from 0.5 to 1.5 m/s, judged against their
closed forms after 1 s (the sphere slides, then rolls at 5/7 of the launch speed; the box
slides to rest at v²/(2 μ g)): ukjax's Tsit5 at several tolerances, MuJoCo's default Euler
step at several steps with the file's `solref` and with `solref` (2h, 1) on every geom and
limit (the tightest its step allows). A point whose run failed (ukjax) or blew up (MuJoCo)
is where its curve ends.

    python benchmarks/work_precision.py [--batch 32] [--members 4] [--plot docs/assets/work_precision.png]

Last lines: per mechanism, MuJoCo's best error and ukjax's cost at that accuracy against
MuJoCo's (`equal accuracy: ukjax R x MuJoCo`), and the same at every MuJoCo point it reaches.
"""

import argparse
import os
import time
import warnings
from pathlib import Path

import jax

CORES = os.cpu_count() or 1
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", CORES)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate  # noqa: E402
import scipy.linalg  # noqa: E402
from mujoco import rollout  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.references import mujoco_kkt_flow  # noqa: E402
from ukjax.cli.bench import compiled_and_timed  # noqa: E402

T = 1.0
SAVES = np.linspace(0.0, T, 101)
CASSIE = Path(__file__).resolve().parents[2] / "shared" / "robots" / "cassie.xml"
CASES = {
    # name: file, keyframe, constant control, spread of the random joint rates [rad/s]
    "four-bar": (ukjax.examples.path("fourbar.xml"), "swinging", None, 1.0),
    "gripper": (ukjax.examples.path("gripper.xml"), None, 0.3, 1.0),
    "Cassie": (CASSIE, "home", None, 0.3),
}
CONTACTS = ukjax.examples.path("contacts.xml")
RK4_STEPS = (1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 2.5e-4)
TSIT5_TOLERANCES = (1e-4, 1e-6, 1e-8, 1e-10)
MUJOCO_STEPS = (5e-3, 2e-3, 1e-3, 5e-4, 2.5e-4, 1e-4)
REFERENCE_TOLERANCE = 1e-12


def mujoco_model(path):
    """The file as MuJoCo reads it, RK4, limits, contacts and friction loss off."""
    mjm = mujoco.MjModel.from_xml_path(str(path))
    for flag in ("LIMIT", "CONTACT", "FRICTIONLOSS"):
        mjm.opt.disableflags |= int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{flag}"))
    mjm.opt.integrator = int(mujoco.mjtIntegrator.mjINT_RK4)
    return mjm


def starts(model, mjm, members, spread, seed=0):
    """The model's start (`q0`, projected onto the loops by `from_mjcf`) plus random joint
    rates in the null space of MuJoCo's equality rows, as MuJoCo states."""
    qpos, qvel = (np.asarray(x) for x in model.state_to_mujoco(model.q0, model.qd0))
    d = mujoco.MjData(mjm)
    d.qpos[:] = qpos
    mujoco.mj_forward(mjm, d)
    free = scipy.linalg.null_space(d.efc_J.reshape(d.nefc, mjm.nv)[: d.ne])
    rng = np.random.default_rng(seed)
    return [(qpos, qvel + free @ (free.T @ rng.normal(scale=spread, size=mjm.nv))) for _ in range(members)]


def body_positions(mjm, qpos):
    """Every body's world position at each of the configurations `qpos` (..., nq)."""
    d = mujoco.MjData(mjm)
    out = []
    for x in np.reshape(qpos, (-1, mjm.nq)):
        d.qpos[:] = x
        mujoco.mj_kinematics(mjm, d)
        out.append(d.xpos[1:].copy())
    return np.reshape(out, np.shape(qpos)[:-1] + (mjm.nbody - 1, 3))


def error(mjm, qpos, references):
    """The largest distance of any body from the reference at any save, over the members."""
    if not np.all(np.isfinite(qpos)):
        return np.inf
    return float(np.max(np.abs(body_positions(mjm, qpos) - references)))


def reference(mjm, ctrl, qpos, qvel, tolerance):
    """The bodies' positions at `SAVES` by DOP853 on the KKT flow, and its evaluation count."""
    flow = mujoco_kkt_flow(mjm, 0.0 if ctrl is None else ctrl)
    sol = scipy.integrate.solve_ivp(
        flow, (0.0, T), np.concatenate([qpos, qvel]), method="DOP853", t_eval=SAVES, rtol=tolerance, atol=tolerance
    )
    assert sol.success, sol.message
    return body_positions(mjm, sol.y[: mjm.nq].T), sol.nfev


def timed(run, first):
    """`run()`'s result and wall time, and where `first`, its compile time too (`compiled_and_timed`;
    None elsewhere)."""
    if first:
        return compiled_and_timed(run)
    start = time.perf_counter()
    result = jax.block_until_ready(run())
    return result, time.perf_counter() - start, None


def run_ukjax(system, model, mjm, states, batch, references):
    """ukjax's points: (label, setting, error, ms per simulated s per member), and the
    compile time of each solver's program."""
    q0, qd0 = (jnp.stack(x) for x in zip(*(model.state_from_mujoco(*s) for s in states)))
    tile = -(-batch // len(states))
    q0, qd0 = jnp.tile(q0, (tile, 1))[:batch], jnp.tile(qd0, (tile, 1))[:batch]
    families = {
        "ukjax RK4": [
            (f"h {h * 1e3:g} ms", dict(solver=ukjax.RK4(), adaptive=False, dt0=h, max_steps=round(T / min(RK4_STEPS))))
            for h in RK4_STEPS
        ],
        "ukjax Tsit5": [(f"tol {tol:.0e}", dict(rtol=tol, atol=tol, max_steps=1 << 16)) for tol in TSIT5_TOLERANCES],
    }
    to_mujoco = jax.jit(jax.vmap(jax.vmap(model.state_to_mujoco)))
    points, compiles = [], {}
    for label, settings in families.items():
        for i, (setting, options) in enumerate(settings):
            run = lambda: jax.block_until_ready(  # noqa: E731
                ukjax.simulate_batch(system, q0, qd0, 0.0, T, ts=SAVES, **options)
            )
            sol, wall, first = timed(run, i == 0)
            if i == 0:
                compiles[label] = first
            members = slice(0, len(states))
            qpos = np.asarray(to_mujoco(sol.q[members], sol.qd[members])[0])
            worst = error(mjm, qpos, references) if bool(jnp.all(sol.success[members])) else np.inf
            points.append((label, setting, worst, 1e3 * wall / (batch * T)))
    return points, compiles


def rollout_states(mjm, states, batch):
    """The batch's start states as `rollout` takes them (the `states` repeated), the same at
    every step and `solref`."""
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(mjm)
    initial = []
    for qpos, qvel in states:
        data.qpos[:], data.qvel[:] = qpos, qvel
        state = np.empty(mujoco.mj_stateSize(mjm, spec))
        mujoco.mj_getState(mjm, data, state, spec)
        initial.append(state)
    return np.array([initial[i % len(states)] for i in range(batch)])


def run_mujoco(mjm, ctrl, states, batch, references):
    """MuJoCo's points, as `run_ukjax`'s, with the file's `solref` and the tightest."""
    points = []
    datas = [mujoco.MjData(mjm) for _ in range(CORES)]
    initial = rollout_states(mjm, states, batch)
    for tight in (False, True):
        for h in MUJOCO_STEPS:
            mjm.opt.timestep = h
            saved = mjm.eq_solref.copy()
            if tight:
                mjm.eq_solref[:] = (2 * h, 1.0)
            nstep = round(T / h)
            control = None if ctrl is None else np.full((batch, nstep, mjm.nu), ctrl)
            rollout.rollout(mjm, datas, initial[:CORES], None if control is None else control[:CORES], nstep=1)
            for d in datas:
                for w in d.warning:
                    w.number = 0
            start = time.perf_counter()
            out, _ = rollout.rollout(mjm, datas, initial, control, nstep=nstep)
            wall = time.perf_counter() - start
            # MuJoCo resets a member whose state blew up and goes on: its counters say so
            unstable = any(w.number for d in datas for w in d.warning)
            mjm.eq_solref[:] = saved
            # the state after step k is out[:, k - 1]; the saves fall on steps
            steps = np.round(SAVES / h).astype(int)
            qpos = out[: len(states), np.maximum(steps - 1, 0), 1 : 1 + mjm.nq]
            qpos[:, 0] = [q for q, _ in states]
            label = "MuJoCo RK4, solref 2h" if tight else "MuJoCo RK4, file's solref"
            worst = np.inf if unstable else error(mjm, qpos, references)
            points.append((label, f"h {h * 1e3:g} ms", worst, 1e3 * wall / (batch * T)))
    return points


def run_contacts(members, batch):
    """The contact scene's points, ukjax's and MuJoCo's, as `run_ukjax`'s, and ukjax's
    compile time: the largest distance of the sphere's and the box's x after 1 s from their
    closed forms."""
    from benchmarks.contacts import START, closed_forms

    speeds = np.linspace(0.5, 1.5, members)
    exact = np.stack(closed_forms(speeds), axis=1)
    mjm = mujoco.MjModel.from_xml_path(str(CONTACTS))
    states = []
    for v in speeds:
        qpos, qvel = mjm.qpos0.copy(), np.zeros(mjm.nv)
        qpos[0], qvel[1], qvel[7] = START, v, v
        states.append((qpos, qvel))

    def worst(x):  # x: the sphere's and the box's final x, (members, 2)
        return float(np.max(np.abs(x - exact)))

    model = ukjax.models.from_mjcf(CONTACTS)
    system = model.full_system()
    tile = -(-batch // members)
    q0, qd0 = (jnp.tile(jnp.stack(x), (tile, 1))[:batch] for x in zip(*(model.state_from_mujoco(*s) for s in states)))
    points = []
    for i, tol in enumerate(TSIT5_TOLERANCES):
        run = lambda: jax.block_until_ready(  # noqa: E731
            ukjax.simulate_batch(system, q0, qd0, 0.0, T, ts=jnp.array([0.0, T]), rtol=tol, atol=tol, max_steps=1 << 16)
        )
        sol, wall, first = timed(run, i == 0)
        if i == 0:
            compile_time = first
        final = np.asarray(sol.q[:members, -1][:, [1, 8]])
        error = worst(final) if bool(jnp.all(sol.success[:members])) else np.inf
        points.append(("ukjax Tsit5", f"tol {tol:.0e}", error, 1e3 * wall / (batch * T)))
    datas = [mujoco.MjData(mjm) for _ in range(CORES)]
    initial = rollout_states(mjm, states, batch)
    geoms, joints = mjm.geom_solref.copy(), mjm.jnt_solref.copy()
    for tight in (False, True):
        for h in MUJOCO_STEPS:
            mjm.opt.timestep = h
            if tight:
                mjm.geom_solref[:], mjm.jnt_solref[:] = (2 * h, 1.0), (2 * h, 1.0)
            for d in datas:
                for w in d.warning:
                    w.number = 0
            start = time.perf_counter()
            out, _ = rollout.rollout(mjm, datas, initial, nstep=round(T / h))
            wall = time.perf_counter() - start
            unstable = any(w.number for d in datas for w in d.warning)
            mjm.geom_solref[:], mjm.jnt_solref[:] = geoms, joints
            final = out[:members, -1, 1 : 1 + mjm.nq][:, [1, 8]]
            label = "MuJoCo Euler, solref 2h" if tight else "MuJoCo Euler, file's solref"
            points.append((label, f"h {h * 1e3:g} ms", np.inf if unstable else worst(final), 1e3 * wall / (batch * T)))
    return points, compile_time


def equal_accuracy(ukjax_points, mujoco_points):
    """For each MuJoCo point, its cost over ukjax's cheapest point at least as accurate (None
    where no ukjax point is): `(label, setting, error, ratio)`."""
    out = []
    for label, setting, error, cost in mujoco_points:
        costs = [c for *_, e, c in ukjax_points if e <= error]
        out.append((label, setting, error, cost / min(costs) if costs and np.isfinite(error) else None))
    return out


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4.2), constrained_layout=True)
    styles = {
        "ukjax RK4": ("C0", "o-"),
        "ukjax Tsit5": ("C2", "s-"),
        "MuJoCo RK4, file's solref": ("C3", "^--"),
        "MuJoCo RK4, solref 2h": ("C1", "v--"),
        "MuJoCo Euler, file's solref": ("C3", "^--"),
        "MuJoCo Euler, solref 2h": ("C1", "v--"),
    }
    for ax, (name, (points, floor)) in zip(np.atleast_1d(axes), results.items()):
        for label, (color, style) in styles.items():
            xs = [(c, e) for lab, _, e, c in points if lab == label and np.isfinite(e)]
            if xs:
                ax.loglog(*zip(*xs), style, color=color, label=label)
        if floor is not None:
            ax.axhline(floor, color="0.6", lw=0.8, ls=":", label="reference's own error")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(name)
        ax.set_xlabel("wall ms per simulated s per member")
        ax.grid(True, which="both", lw=0.3)
    np.atleast_1d(axes)[0].set_ylabel("largest position error over 1 s [m]")
    for ax in np.atleast_1d(axes):  # the contact scene's MuJoCo steps by Euler, the others by RK4
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def report(name, ours, theirs, compiles, summary):
    """Print a case's points and compile times, and add its line to `summary`."""
    print(f"  {'':28s} {'setting':>12s} {'error [m]':>10s} {'ms per sim s':>13s}")
    for label, setting, error, cost in ours + theirs:
        shown = f"{error:10.1e}" if np.isfinite(error) else f"{'failed':>10s}"
        print(f"  {label:28s} {setting:>12s} {shown} {cost:13.3g}")
    print("  compile: " + ", ".join(f"{k} {v:.1f} s" for k, v in compiles.items()))
    ratios = equal_accuracy(ours, theirs)
    reached = [r for r in ratios if r[3] is not None]
    best = min(ratios, key=lambda r: r[2])
    if reached:
        worst = min(reached, key=lambda r: r[3])
        text = (
            f"{name}: MuJoCo's best error {best[2]:.1e} m ({best[0]}, {best[1]}); equal accuracy: ukjax "
            + (f"{best[3]:.3g}x MuJoCo there" if best[3] is not None else "does not reach it")
            + f", at least {worst[3]:.3g}x at every MuJoCo point it reaches ({worst[0]}, {worst[1]})"
        )
    else:
        text = f"{name}: ukjax reaches none of MuJoCo's errors (best {best[2]:.1e} m)"
    summary.append(text)


def main():
    mujoco.set_mju_user_warning(lambda text: None)  # an unstable run is counted, not printed
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--members", type=int, default=4, help="distinct starts (each has a reference)")
    parser.add_argument("--cases", nargs="*", default=[*CASES, "contacts"])
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    print(
        f"{CORES} CPU cores; jax {jax.__version__} on {len(jax.devices())} devices, MuJoCo {mujoco.__version__}; "
        f"batch {args.batch}, {args.members} distinct starts, {T:g} s"
    )
    results, summary = {}, []
    for name in args.cases:
        if name == "contacts":
            points, compile_time = run_contacts(args.members, args.batch)
            print(f"\ncontacts: {CONTACTS.name}, the sphere's and the box's x after {T:g} s against their closed forms")
            report(name, points[: len(TSIT5_TOLERANCES)], points[len(TSIT5_TOLERANCES) :], {"ukjax Tsit5": compile_time}, summary)
            results[name] = (points, None)
            continue
        path, keyframe, ctrl, spread = CASES[name]
        if not Path(path).exists():
            print(f"{name}: {path} not found, left out")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # limits named; a keyframe projected onto the loops
            model = ukjax.models.from_mjcf(path, keyframe=keyframe)
        system = model.system if ctrl is None else model.controlled(lambda t, q, qd: jnp.full(1, ctrl))
        system = ukjax.ConstrainedSystem(system, model.constraints)
        mjm = mujoco_model(path)
        states = starts(model, mjm, args.members, spread)
        start = time.perf_counter()
        refs = [reference(mjm, ctrl, qpos, qvel, REFERENCE_TOLERANCE) for qpos, qvel in states]
        check, _ = reference(mjm, ctrl, *states[0], 10 * REFERENCE_TOLERANCE)
        floor = float(np.max(np.abs(check - refs[0][0])))
        moved = max(np.max(np.abs(r - r[0])) for r, _ in refs)
        print(
            f"\n{name}: {mjm.nbody - 1} bodies, nv {mjm.nv}, {mjm.neq} equalities; reference DOP853 at "
            f"{REFERENCE_TOLERANCE:g}: {np.mean([n for _, n in refs]):.0f} evaluations per member, "
            f"{time.perf_counter() - start:.0f} s; its distance from the same at {10 * REFERENCE_TOLERANCE:g}: "
            f"{floor:.1e} m; the bodies move up to {moved:.2f} m"
        )
        refs = np.array([r for r, _ in refs])
        ours, compiles = run_ukjax(system, model, mjm, states, args.batch, refs)
        theirs = run_mujoco(mjm, ctrl, states, args.batch, refs)
        report(name, ours, theirs, compiles, summary)
        results[name] = (ours + theirs, floor)
    print()
    print("\n".join(summary))
    if args.plot is not None:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
