"""The command line's commands: the source papers' demonstrations (`scara`, `coordinated`,
`fit`) and the simulation of an MJCF or URDF robot (`simulate`), with the stage lines, plots
and kept programs they share."""

import argparse
import contextlib
import dataclasses
import functools
import time
from pathlib import Path

import jax
import numpy as np

from .cache import keep_program, kept_model, read_file, read_program


def _fields(module) -> dict:
    """A module's fields by name (a pytree of dicts, which a kept executable's output tree
    holds without ukjax's classes), but for the backend a solution reports: a module, which
    that tree cannot rebuild (the command reads what ran from the program's own run)."""
    return {f.name: getattr(module, f.name) for f in dataclasses.fields(module) if f.name != "backend"}


@contextlib.contextmanager
def _stage(what: str):
    """Say what a stage of a second or more is doing before it starts, and how long it took."""
    print(f"{what} ...", flush=True)
    start = time.perf_counter()
    yield
    print(f"  done in {time.perf_counter() - start:.1f} s", flush=True)


def _animation(system, sol, path, violation: dict) -> None:
    """Write `sol` of `system` as an animation of at most ~120 frames, its title reporting the
    rows of `violation` (`animate`'s), and say where."""
    import ukjax

    every = max(1, sol.ts.shape[0] // 120)
    with _stage(f"writing the animation {path} ({-(-sol.ts.shape[0] // every)} frames)"):
        ukjax.animate(system, sol, path, fps=20, every=every, violation=violation)


def _row_units(tree, constraints, norms: int) -> dict[str, tuple[list[int], str]]:
    """The rows of `sol.phi` for an imported model grouped by unit (`animate`'s `violation`):
    quaternion norms first, then each equality's rows, then the unilateral ones."""
    from ukjax import models

    groups: dict[str, tuple[list[int], str]] = {}
    row = norms

    def add(label, count, unit):
        nonlocal row
        groups.setdefault(label, ([], unit))[0].extend(range(row, row + count))
        row += count

    if norms:
        groups["quaternion norms"] = (list(range(norms)), "(|u|² − 1)")
    for c in constraints:
        if isinstance(c, models.Connect):
            add("loop closure", 3, "m")
        elif isinstance(c, models.Weld):
            add("loop closure", 3, "m")
            add("weld rotation", 3, "(sin θ/2)")
        elif isinstance(c, models.JointCoupling):
            hinge = tree.joint_kinds[tree.joint_names.index(c.joint1)] == "hinge"
            add("hinge coupling" if hinge else "slide coupling", 1, "rad" if hinge else "m")
        elif isinstance(c, models.TendonCoupling):
            add("tendon coupling", 1, "(tendon length)")
    # the unilateral rows follow all equality rows of the level: min(g, 0), what passes a
    # limit or penetrates
    for c in constraints:
        if isinstance(c, models.JointLimits):
            for name in c.joints * 2:
                hinge = tree.joint_kinds[tree.joint_names.index(name)] == "hinge"
                add("past a hinge limit" if hinge else "past a slide limit", 1, "rad" if hinge else "m")
        elif isinstance(c, models.PlaneContacts):
            add("penetration", len(c.bodies), "m")
    return groups


def _check_success(sol, what: str) -> None:
    """Raise for a run (a `Solution`, or the fields of one a kept program returned) that did
    not end in SUCCESS (`main` turns it into exit status 1)."""
    import ukjax
    from ukjax._solution import MESSAGES

    status = ukjax.Status(int(sol["status"] if isinstance(sol, dict) else sol.status))
    if status != ukjax.Status.SUCCESS:
        raise RuntimeError(f"{what} ended with status {status.name}: {MESSAGES[status]}")


def run_scara(args: argparse.Namespace) -> None:
    ts = np.linspace(0.0, args.t1, args.saves)
    runs = ("no stabilization", f"Baumgarte α={args.alpha:g}, β={args.beta:g}")

    @functools.cache
    def built():
        """The arm and its two systems by name: the engine, imported where a kept program is
        not found or after the runs."""
        import ukjax
        from ukjax.models import scara

        model = scara()
        gains = ukjax.Baumgarte(args.alpha, args.beta)
        systems = [ukjax.ConstrainedSystem(model.system, model.constraints, s) for s in (None, gains)]
        return model, dict(zip(runs, systems))

    fields = {}
    print(
        f"SCARA arm of the SCARA paper [Xu & Liu 2017] following its trajectory constraint (eq. 47) for "
        f"{args.t1:g} s (float64, Tsit5, rtol=atol={args.tol:g})"
    )
    for name in runs:
        print(f"[{name}]")
        start = time.perf_counter()
        with _stage("  compiling and simulating, or reading it back (kept)"):
            # the system is made by ukjax's code from its name (the gains)
            key = ("scara", name, args.t1, args.saves, args.tol)
            found = read_program(args.cache, "scara", key)
            if found is None:
                from .._simulate import simulate

                model, systems = built()

                def run(q0, qd0, system=systems[name]):
                    sol = simulate(system, q0, qd0, 0.0, args.t1, ts=ts, rtol=args.tol, atol=args.tol, throw=False)
                    return _fields(sol)

                found = keep_program(args.cache, "scara", key, run, (model.q0, model.qd0))
            program, arguments = found
            fields[name] = jax.block_until_ready(program(*arguments))
        first = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(program(*arguments))
        again = time.perf_counter() - start
        phi, steps = np.asarray(fields[name]["phi"]), int(fields[name]["stats"]["num_steps"])
        print(
            f"  violation at t={args.t1:g} s: x {phi[-1, 0]:+.3e} m, y {phi[-1, 1]:+.3e} m, "
            f"orientation {phi[-1, 2]:+.3e} rad, z {phi[-1, 3]:+.3e} m"
        )
        print(
            f"  max |Φ| over the run {np.max(np.abs(phi)):.3e}, steps {steps}, "
            f"first call {first:.2f} s (with compilation, or reading it back), compiled call {again * 1e3:.1f} ms"
        )
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import ukjax
    from ukjax._jit import jit
    from ukjax.models import scara_reference

    model, systems = built()
    arm = model.system
    solutions = {}
    for name in runs:
        solutions[name] = ukjax.Solution(**fields[name])
        _check_success(solutions[name], f"the SCARA arm, {name}")

    # Benchmark: a vmapped batch of perturbed starts against one-at-a-time calls of the same
    # compiled simulation, measured in this run.
    system = systems[runs[1]]
    key = jax.random.PRNGKey(0)
    q0s = model.q0 + 1e-3 * jax.random.normal(key, (args.batch, 4))
    qd0s = jnp.broadcast_to(model.qd0, (args.batch, 4))

    @jit
    def batch(q0s, qd0s):
        return jax.vmap(
            lambda q0, qd0: ukjax.simulate(
                system, q0, qd0, 0.0, args.t1, ts=ts, rtol=args.tol, atol=args.tol, throw=False
            )
        )(q0s, qd0s)

    @jit
    def one(q0, qd0):
        return ukjax.simulate(system, q0, qd0, 0.0, args.t1, ts=ts, rtol=args.tol, atol=args.tol, throw=False)

    with _stage(f"benchmark: compiling a vmapped batch of {args.batch} perturbed starts and one-at-a-time runs"):
        jax.block_until_ready((batch(q0s, qd0s), one(q0s[0], qd0s[0])))
    start = time.perf_counter()
    out = jax.block_until_ready(batch(q0s, qd0s))
    t_batch = time.perf_counter() - start
    single = 8
    start = time.perf_counter()
    for k in range(single):
        jax.block_until_ready(one(q0s[k], qd0s[k]))
    t_single = (time.perf_counter() - start) / single
    print(
        f"batch of {args.batch} (vmap, {jax.default_backend()}): {t_batch:.2f} s, "
        f"{args.batch / t_batch:.1f} simulations/s; one at a time: {1 / t_single:.1f} simulations/s; "
        f"speed-up {t_single * args.batch / t_batch:.1f}x; succeeded {int(out.success.sum())}/{args.batch}"
    )

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for (name, sol), style in zip(solutions.items(), ("--", "-")):
        for j in range(3):
            axes[0, 0].plot(sol.ts, jnp.rad2deg(sol.q[:, j]), style, label=f"q{j + 1} ({name})")
        axes[0, 1].plot(sol.ts, sol.q[:, 3], style, label=f"q4 ({name})")
        tool = jax.vmap(arm.end_effector)(sol.q) - jax.vmap(scara_reference)(sol.ts)
        for j, axis in enumerate("xyz"):
            axes[1, 0 if j < 2 else 1].semilogy(
                sol.ts, jnp.abs(tool[:, j]) + 1e-16, style, label=f"|{axis} error| ({name})"
            )
    axes[0, 0].set(title="revolute joints", xlabel="t [s]", ylabel="angle [deg]")
    axes[0, 1].set(title="prismatic joint", xlabel="t [s]", ylabel="q4 [m]")
    axes[1, 0].set(title="x/y tracking error", xlabel="t [s]", ylabel="|error| [m]")
    axes[1, 1].set(title="z tracking error", xlabel="t [s]", ylabel="|error| [m]")
    for ax in axes.flat:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("SCARA arm under trajectory constraints (the SCARA paper, Xu & Liu 2017), ukjax")
    fig.savefig(args.out, dpi=120)
    print(f"plot written to {args.out}")
    # the stabilized run; rows x, y, orientation, z
    _animation(
        system, sol, Path(args.out).with_suffix(".gif"), {"tool position": ([0, 1, 3], "m"), "orientation": ([2], "rad")}
    )


def run_coordinated(args: argparse.Namespace) -> None:
    ts = np.linspace(0.0, args.t1, args.saves)
    a = args.seed_gain
    names = ("exact (constrained input map)", f"the paper's formula (M⁻¹ map, Baumgarte α=β={a:g})")

    @functools.cache
    def built():
        """The robots, the passive system and the controllers by name: the engine, imported
        where a kept program is not found or after the runs."""
        import ukjax
        from ukjax.models import coordinated_robots

        model = coordinated_robots()
        passive = ukjax.ConstrainedSystem(model.system, model.constraints)
        exact = ukjax.ServoControl(passive, model.servo, model.actuation)
        stabilized = ukjax.Baumgarte(2 * a, a * a)
        seed = ukjax.ServoControl(passive, model.servo, model.actuation, exact=False, stabilization=stabilized)
        return model, passive, dict(zip(names, (exact, seed)))

    print(
        "Two coordinated planar robots holding a load (the servo-control paper [Liu et al. 2015], §V), "
        f"t ∈ [0, {args.t1:g}] s, rtol=atol={args.tol:g}"
    )
    print("the paper's figs. 9–14: u1 [0,10] u2 [3,5] u3 [-8,-5.5] u4 [4.5,10] u5 [-4.5,0.5] u6 [-5,0]")
    runs = {}
    for name in names:
        print(f"[{name}] compiling and simulating, or reading it back (kept) ...", flush=True)
        start = time.perf_counter()
        # the controller is made by ukjax's code from its name and the options (the seed gain)
        key = ("coordinated", name, args.t1, args.saves, args.tol)
        found = read_program(args.cache, "coordinated", key)
        if found is None:
            import equinox as eqx

            from .._simulate import simulate

            model, passive, controllers = built()

            def run(q0, qd0, ctrl=controllers[name]):
                sol = simulate(ctrl.closed_loop(), q0, qd0, 0.0, args.t1, ts=ts, rtol=args.tol, atol=args.tol, throw=False)
                u = eqx.filter_vmap(ctrl)(sol.ts, sol.q, sol.qd)
                closure = eqx.filter_vmap(passive.violation)(sol.ts, sol.q, sol.qd)[0]
                return _fields(sol) | {"u": u, "closure": closure}

            found = keep_program(args.cache, "coordinated", key, run, (model.q0, model.qd0))
        program, arguments = found
        # as NumPy: the summary and the plot would compile operation by operation
        fields = jax.tree.map(np.asarray, program(*arguments))
        elapsed = time.perf_counter() - start
        u, closure = fields.pop("u"), fields.pop("closure")
        print(
            f"  object tracking error {np.max(np.abs(fields['phi'])):.2e}, loop closure {np.max(np.abs(closure)):.2e}, "
            f"{elapsed:.1f} s"
        )
        print(
            "  "
            + " ".join(f"u{j + 1} [{lo:.1f},{hi:.1f}]" for j, (lo, hi) in enumerate(zip(u.min(0), u.max(0))))
        )
        runs[name] = fields, u
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import ukjax

    fig, axes = plt.subplots(2, 1, figsize=(10, 8), constrained_layout=True)
    for (name, (fields, u)), style in zip(runs.items(), ("-", "--")):
        sol = runs[name] = ukjax.Solution(**fields)
        _check_success(sol, f"the coordinated robots under {name}")
        for j in range(6):
            axes[0].plot(sol.ts, u[:, j], style, color=f"C{j}", label=f"u{j + 1} ({name.split(' ')[0]})")
        axes[1].semilogy(sol.ts, np.max(np.abs(sol.phi), axis=1) + 1e-16, style, label=name)
    axes[0].set(title="actuator inputs", xlabel="t [s]", ylabel="torque [N·m]")
    axes[1].set(
        title="object tracking error max(|Δx₃| [m], |Δy₃| [m], |Δθ₃| [rad])", xlabel="t [s]", ylabel="|error| [m or rad]"
    )
    for ax in axes:
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
    fig.savefig(args.out, dpi=120)
    print(f"plot written to {args.out}")
    _animation(
        built()[2][names[0]].closed_loop(),
        runs[names[0]],
        Path(args.out).with_suffix(".gif"),
        {"load position": ([0, 1], "m"), "load angle": ([2], "rad")},
    )


def run_fit(args: argparse.Namespace) -> None:
    import warnings

    tol = dict(rtol=1e-12, atol=1e-12)
    max_steps = 200  # Levenberg–Marquardt's, at most
    horizons = {
        "torque-driven double pendulum": args.horizon,
        "coordinated robots of the servo-control paper (closed chain)": args.closed_horizon,
    }
    plotted = "torque-driven double pendulum"  # its record, and its runs from the first guess and the fit

    @functools.cache
    def built():
        """The selection of the inertial parameters, and by case the true system, its start,
        the fit's first guess (masses +30 %, inertias −30 %) and its parameters
        (`_fit._parameters`: their vector θ and names): the engine, imported where a kept
        program is not found or after the runs."""
        import equinox as eqx
        import jax.numpy as jnp

        import ukjax
        from ukjax import models

        from .._fit import _parameters

        def inertial(system):
            while not isinstance(system, models.PlanarChain):
                system = system.system
            return system.masses, system.inertias

        pendulum = models.PlanarChain([1.0, 0.8], [1.5, 1.0], [0.5, 0.4], [0.12, 0.06])
        drive = models.SineInputs(jnp.eye(2), [3.0, 1.0], [2.0, 3.0], [0.0, np.pi / 2])
        robots = models.coordinated_robots()
        motors = models.SineInputs(
            robots.actuation, [3.0, -2.0, 2.5, 1.5, -2.0, 1.0], [1.0, 1.7, 2.3, 1.3, 2.9, 0.7], np.linspace(0, 2, 6)
        )
        closed = ukjax.ConstrainedSystem(ukjax.Forced(robots.system, motors), robots.constraints)
        cases = {}
        for label, (true, q0, qd0) in zip(
            horizons, ((ukjax.Forced(pendulum, drive), jnp.array([1.2, -0.4]), jnp.zeros(2)), (closed, robots.q0, robots.qd0))
        ):
            masses, inertias = inertial(true)
            start = eqx.tree_at(inertial, true, (1.3 * masses, 0.7 * inertias))
            cases[label] = true, q0, qd0, start, _parameters(start, inertial, True)
        return inertial, cases

    fits = {}
    for label, horizon in horizons.items():
        ts = np.linspace(0.0, horizon, round(20 * horizon) + 1)
        print(f"[{label}] {horizon:g} s record, {ts.size} samples; start: masses +30 %, inertias −30 %")
        # the systems are made by ukjax's code from the case's name; the options make the rest
        key = ("fit", label, horizon, max_steps)
        found = read_program(args.cache, "fit", key)
        if found is None:
            from .._fit import _LEVENBERG_MARQUARDT, _least_squares, _Residuals
            from .._residuals import trajectory_residuals
            from .._simulate import simulate

            true, q0, qd0, start, (params, theta, _) = built()[1][label]

            def identify(q0, qd0):
                """The fit's arrays (`_least_squares`' without its solver's result, an
                optimistix enumeration, not an array), and the runs of the true system (the
                record) and, for the plot, of the first guess and the fit: their coordinates
                and statuses (no simulation raises in a kept program: that is a host callback)."""
                run = lambda system: simulate(system, q0, qd0, 0.0, horizon, ts=ts, throw=False, **tol)  # noqa: E731
                runs = {"measured": run(true)}
                residuals = lambda m: trajectory_residuals(m, q0, qd0, ts, runs["measured"].q, **tol)  # noqa: E731
                fit = _least_squares(
                    _LEVENBERG_MARQUARDT, _Residuals(params, residuals, "fwd"), theta, {"jac": "fwd"}, max_steps, False
                )
                del fit["result"]
                if label == plotted:
                    runs |= {"before": run(start), "after": run(params.model(fit["theta"]))}
                return fit | {"runs": {name: {"q": sol.q, "status": sol.status} for name, sol in runs.items()}}

            with _stage("  compiling the identification (kept: the same command again starts at once)"):
                found = keep_program(args.cache, "fit", key, identify, (q0, qd0))
        program, arguments = found
        print("fitting: simulating the record, Levenberg–Marquardt, the Jacobian's statistics", flush=True)
        clock = time.perf_counter()
        out = jax.tree.map(np.asarray, program(*arguments))
        elapsed = time.perf_counter() - clock
        for name, run in out["runs"].items():
            _check_success(run, f"the {name} simulation of the {label}")
        # the result with the engine, after the run
        from .._fit import _result

        inertial, cases = built()
        true, *_, (params, _, names) = cases[label]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the rank is printed below
            res = _result(params, names, out, True, None, 1e-6, max_steps)
        if not args.quiet:
            print("  cost ½‖r‖² per step: " + " ".join(f"{c:.2e}" for c in res.costs))
        truth = np.concatenate([np.ravel(x) for x in inertial(true)])
        print(f"  {res.steps} steps, cost {res.cost:.2e}, {elapsed:.1f} s; rank {res.rank}/{len(res.names)}")
        for name, t, f, e in zip(res.names, truth, res.values, res.std):
            print(f"  {name:<22} true {t:8.4f}  fitted {f:8.4f}  std {e:.1e}")
        for v in res.unidentifiable:
            print("  not determined (relative changes): " + res.describe(v))
        error = np.max(np.abs(res.determined(res.values - truth) / truth))
        print(f"  fitted − true along what the data determine: {error:.1e} (largest, relative)")
        fits[label] = ts, out, res

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), constrained_layout=True)
    for (_, _, res), name in zip(fits.values(), ("double pendulum", "closed chain")):
        axes[0].semilogy(res.costs, "o-", label=name)
        axes[2].semilogy(res.singular_values / res.singular_values[0], "s-", label=name)
    axes[0].set(title="cost ½‖r‖² per Levenberg–Marquardt step", xlabel="step", ylabel="cost [rad²]")
    ts, out, _ = fits[plotted]
    for j in range(2):
        axes[1].plot(ts, out["runs"]["measured"]["q"][:, j], "k.", label="measured" if j == 0 else None)
        axes[1].plot(ts, out["runs"]["before"]["q"][:, j], "--", color=f"C{j}", label=f"q{j + 1} from the start")
        axes[1].plot(ts, out["runs"]["after"]["q"][:, j], "-", color=f"C{j}", label=f"q{j + 1} fitted")
    axes[1].set(title="double pendulum: measured and simulated", xlabel="t [s]", ylabel="joint angle [rad]")
    axes[2].set(title="singular values of the scaled Jacobian", xlabel="index", ylabel="σ / σ₁ [dimensionless]")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.savefig(args.out, dpi=120)
    print(f"plot written to {args.out}")


def _units(tree) -> dict[str, list[int]]:
    """The tree's coordinates grouped by unit: hinge angles, positions (slides, free joints'
    x, y, z) and quaternion components, as indices into `q`."""
    groups = {"hinge angles [rad]": [], "positions [m]": [], "quaternion components [1]": []}
    for kind, first in zip(tree.joint_kinds, tree.joint_coordinates):
        if kind == "hinge":
            groups["hinge angles [rad]"].append(first)
        elif kind == "slide":
            groups["positions [m]"].append(first)
        else:
            rotation = first + (3 if kind == "free" else 0)
            groups["positions [m]"] += list(range(first, rotation))
            groups["quaternion components [1]"] += list(range(rotation, rotation + 4))
    return {name: index for name, index in groups.items() if index}


def _step(args: argparse.Namespace, model) -> float | None:
    """The time step of `ukjax simulate`'s run: `--step`'s; else, for a file with limits or
    contacts in the run, the file's own timestep, as MuJoCo takes it (`--events`: none, the
    event-driven route); None for a smooth run."""
    if args.step is not None:
        return args.step
    if args.events or args.no_contacts or not model.unilateral:
        return None
    return model.timestep


def run_simulate(args: argparse.Namespace) -> None:
    keyframe = int(args.keyframe) if args.keyframe and args.keyframe.isdigit() else args.keyframe
    name = Path(args.file).stem
    out = Path(args.out) if args.out else Path(f"{name}.png")
    ts = np.linspace(0.0, args.t1, args.saves)
    # the file's compiled binary, the keyframe and the options make the program and its start
    read = read_file(args.file)
    key = (
        "simulate", read[2], keyframe, args.alpha, args.beta, args.no_contacts, args.t1, args.saves, args.tol, args.step,
        args.events,
    )
    found = read_program(args.cache, "simulate", key)

    def read_model():
        import ukjax

        with _stage(
            f"reading {args.file} (MuJoCo's compiler; a start off its equalities, if it has any, is "
            "projected onto them; kept: the same file again is read back)"
        ):
            model = kept_model(args.cache, args.file, keyframe, read)
        stabilization = ukjax.Baumgarte(args.alpha, args.beta) if args.alpha or args.beta else None
        return model, model.full_system(stabilization, unilateral=not args.no_contacts)

    model = None
    if found is None:
        from .._simulate import integrator_for, simulate
        from .._time_stepping import TimeStepping

        model, system = read_model()
        step = _step(args, model)
        route = {} if step is None else {"solver": TimeStepping(), "dt0": step}

        def simulation(q0, qd0):
            sol = simulate(system, q0, qd0, 0.0, args.t1, ts=ts, rtol=args.tol, atol=args.tol, throw=False, **route)
            return _fields(sol) | {"contacts": None if sol.contacts is None else _fields(sol.contacts)}

        with _stage("compiling the simulation (kept: the same command again starts at once)"):
            events = integrator_for(system, route.get("solver")).events
            found = keep_program(args.cache, "simulate", key, simulation, (model.q0, model.qd0), events=events)
    program, (q0, qd0) = found
    with _stage(f"simulating {args.t1:g} s"):
        fields = jax.block_until_ready(program(q0, qd0))
    # the engine and the model after the run: a kept program starts without them
    import ukjax

    from .._events import warn_if_started_inside
    from .._simulate import warn_if_started_off

    if model is None:
        model, system = read_model()
    step = _step(args, model)
    tree = model.system
    unilateral = () if args.no_contacts else model.unilateral
    constraints = model.constraints + unilateral
    # the tree's quaternion norm rows come first in `sol.phi`, the file's equalities after them
    norms = sum(kind in ("ball", "free") for kind in tree.joint_kinds)
    contacts = fields.pop("contacts")
    sol = ukjax.Solution(**fields, contacts=None if contacts is None else ukjax.ContactRecord(**contacts))
    warn_if_started_off(sol, q0, qd0, 0.0, args.tol, args.tol)
    warn_if_started_inside(sol, args.tol)
    # as NumPy: the summary and the plot would compile operation by operation
    sol = jax.tree.map(np.asarray, sol)
    # the rows counted on the results (traced for their shapes, they took 0.2 s of a warm start)
    contacts = 0 if sol.contacts is None else sol.contacts.gap.shape[1]
    rows = 0 if sol.phi is None else sol.phi.shape[1] - norms - contacts
    print(
        f"{args.file}: {len(tree.body_names)} bodies, {len(tree.joint_names)} joints, {len(model.constraints)} "
        f"constraints ({rows} rows), {norms} quaternion norm rows"
        + (f", {contacts} unilateral rows (limits, contacts)" if unilateral else "")
        + f"; t ∈ [0, {args.t1:g}] s, "
        + (f"Tsit5, rtol=atol={args.tol:g}" if step is None else f"time-stepping at {step:g} s")
    )
    status = ukjax.Status(int(sol.status)).name
    parts = []
    if sol.phi is not None:
        # over the saves the run reached (a run that stopped early has no state after that)
        phi = np.abs(sol.phi[np.all(np.isfinite(sol.q), axis=1)])
        closure = phi[:, norms : norms + rows]
        if closure.size:
            parts.append(f"max constraint violation {float(np.max(closure)):.2e}")
        if norms and phi.size:
            parts.append(f"quaternion norm error {float(np.max(phi[:, :norms])):.2e}")
    if sol.contacts is not None:
        events = "" if step is not None else f"{int(sol.contacts.events)} contact events, "
        parts.append(f"{events}largest penetration {float(sol.contacts.penetration):.1e}")
    print(f"  status {status}, {int(sol.stats['num_steps'])} steps" + "".join(f"; {p}" for p in parts))
    coordinates = _units(tree)
    panels = len(coordinates) + (sol.phi is not None)
    import matplotlib  # after the run: its first step does not wait for it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(panels, 1, figsize=(10, 3.2 * panels), constrained_layout=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (unit, index) in zip(axes, coordinates.items()):
        for j in index:
            ax.plot(sol.ts, sol.q[:, j], label=tree.coordinate_names[j])
        ax.set(title=unit.split(" [")[0], xlabel="t [s]", ylabel=unit)
        ax.legend(fontsize=7, ncol=6)
    groups = _row_units(tree, constraints, norms)
    if sol.phi is not None:
        ax = axes[-1]
        for label, (indices, unit) in groups.items():
            ax.semilogy(sol.ts, np.max(np.abs(sol.phi[:, indices]), axis=1) + 1e-17, label=f"{label} {unit}")
        ax.set(title="largest constraint violation |Φ| of each kind", xlabel="t [s]", ylabel="|Φ| (unit in the legend)")
        ax.legend(fontsize=7)
    fig.suptitle(f"{name}: joint coordinates and constraint violation (ukjax)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.savefig(out, dpi=120)
    print(f"plot written to {out}")
    if args.gif:
        _animation(system, sol, args.gif, groups)
    _check_success(sol, f"the simulation of {args.file}")
