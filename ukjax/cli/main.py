"""The `ukjax` command line: simulations and benchmarks of the source papers' mechanisms and of
MJCF/URDF robots."""

import argparse
import math

import jax

from .commands import run_coordinated, run_fit, run_scara, run_simulate
from .cache import cache_directory, compilation_cache


def _duration(text: str) -> float:
    """A finite, positive number of seconds (argparse's type)."""
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite, positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    """An integer of at least 2 (argparse's type for numbers of saves)."""
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {text!r}")
    return value


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, where the help does not say it already, the
    default is not None (an option whose absence its help explains) and the option is not a
    switch (its default is its absence)."""

    def _get_help_string(self, action):
        told = action.default is None or action.nargs == 0 or "(default:" in (action.help or "")
        return action.help if told else super()._get_help_string(action)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ukjax` console script."""
    import ukjax

    formatter = _Defaults
    parser = argparse.ArgumentParser(prog="ukjax", description=__doc__, epilog=_EPILOG, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"ukjax {ukjax.__version__}")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="do not keep programs between runs (JAX's persistent compilation cache, and the models read and "
        "programs traced by `simulate`, `coordinated`, `scara` and `fit`, by default in $UKJAX_CACHE_DIR or "
        "~/.cache/ukjax/jax)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name, help):
        return commands.add_parser(name, help=help, description=help, formatter_class=formatter)

    p = command("scara", "the SCARA arm of Xu & Liu (2017) with and without Baumgarte stabilization (about 25 s on 2 cores)")
    p.add_argument("--t1", type=_duration, default=20.0, help="final time [s]")
    p.add_argument("--saves", type=_count, default=401, help="number of saved times")
    p.add_argument("--alpha", type=float, default=0.5, help="Baumgarte α (the paper's value)")
    p.add_argument("--beta", type=float, default=200.0, help="Baumgarte β (the paper's value)")
    p.add_argument("--tol", type=float, default=1e-10, help="rtol = atol of the event-driven and smooth routes")
    p.add_argument("--batch", type=int, default=256, help="batch size of the vmap benchmark")
    p.add_argument("--out", default="scara.png", help="where to write the plot (the animation beside it, .gif)")
    p.set_defaults(run=run_scara)
    p = command(
        "coordinated", "servo control of the coordinated robots of Liu et al. (2015), exact and the paper's formula"
    )
    p.add_argument("--t1", type=_duration, default=2 * math.pi, help="final time [s]")
    p.add_argument("--saves", type=_count, default=401, help="number of saved times")
    p.add_argument(
        "--seed-gain", type=float, default=50.0, help="α = β of the paper's Baumgarte form φ̈ + 2αφ̇ + β²φ"
    )
    p.add_argument("--tol", type=float, default=1e-10, help="rtol = atol of the event-driven and smooth routes")
    p.add_argument("--out", default="coordinated.png", help="where to write the plot (the animation beside it, .gif)")
    p.set_defaults(run=run_coordinated)
    p = command("fit", "identify inertial parameters from trajectories: an open and a closed chain")
    p.add_argument("--horizon", type=_duration, default=1.5, help="record length of the double pendulum [s]")
    p.add_argument("--closed-horizon", type=_duration, default=0.5, help="record length of the closed chain [s]")
    p.add_argument("--out", default="fit.png", help="where to write the plot")
    p.add_argument("--quiet", action="store_true", help="leave out the cost at each step")
    p.set_defaults(run=run_fit)
    p = command(
        "simulate",
        "simulate an MJCF or URDF model as the file describes it: its equality constraints, joint limits and "
        "contacts imposed exactly, its actuators held at the keyframe's controls",
    )
    p.add_argument("file", help="an .xml (MJCF) or .urdf file")
    p.add_argument("--t1", type=_duration, default=5.0, help="final time [s]")
    p.add_argument("--saves", type=_count, default=501, help="number of saved times")
    p.add_argument("--keyframe", default=None, help="start from this keyframe, a name or an index (default: qpos0)")
    p.add_argument("--alpha", type=float, default=0.0, help="Baumgarte α (0 with β = 0: none)")
    p.add_argument("--beta", type=float, default=0.0, help="Baumgarte β (0 with α = 0: none)")
    p.add_argument("--tol", type=float, default=1e-10, help="rtol = atol of the event-driven and smooth routes")
    p.add_argument("--out", default=None, help="where to write the plot (default: the model's name, .png)")
    p.add_argument("--gif", default=None, help="also write an animation here (.gif, or .mp4 with ffmpeg)")
    p.add_argument(
        "--no-contacts",
        action="store_true",
        help="leave out the file's joint limits and contacts (a smooth run: shorter to compile, faster on robot trees)",
    )
    route = p.add_mutually_exclusive_group()
    route.add_argument(
        "--step",
        type=_duration,
        default=None,
        help="time-stepping at this step [s] (ukjax.TimeStepping: first order, each step's contacts exact; "
        "a file with joint limits or contacts steps at its own <option timestep> unless --events)",
    )
    route.add_argument(
        "--events",
        action="store_true",
        help="the event-driven route at --tol for a file's limits and contacts (every impact and slide "
        "located; slower where contacts are many), instead of time-stepping at the file's timestep",
    )
    p.set_defaults(run=run_simulate)
    p = commands.add_parser(
        "bench",
        help="batch throughput of closed chains against MuJoCo's rollout (and MJX); "
        "options: --batch, --steps, --mjx-batch, --plot (ukjax bench --help); about a minute on 2 cores",
        add_help=False,
    )
    p.set_defaults(run=None)
    args, rest = parser.parse_known_args(argv)
    args.cache = None if args.no_cache else cache_directory()
    if args.cache is not None and args.command not in ("simulate", "coordinated", "fit"):
        # these three keep their compiled programs themselves (`cache.keep_program`); `scara`
        # keeps its simulations so too, and compiles more than them
        compilation_cache(args.cache)
    if args.command == "bench":
        from ukjax.cli.bench import main as bench

        return bench(rest, batch=256, steps=200, mjx_batch=0, cache=False)  # set above
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    jax.config.update("jax_enable_x64", True)
    try:
        args.run(args)
    except (FileNotFoundError, KeyError, ValueError) as error:
        # a bad file, keyframe or option: say what, without a traceback
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        parser.exit(2, f"ukjax {args.command}: error: {message}\n")
    except RuntimeError as error:  # a run that did not end in SUCCESS: a script can tell
        parser.exit(1, f"ukjax {args.command}: {error}\n")


_EPILOG = (
    "The mechanisms come from the papers listed in the README's References: the SCARA arm from "
    "Xu & Liu (2017), the coordinated robots from Liu et al. (2015). Compiled programs are kept "
    "between runs (see --no-cache), so a command run again starts in seconds."
)


if __name__ == "__main__":
    main()
