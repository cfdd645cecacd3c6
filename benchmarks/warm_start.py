"""How long the command line takes to start, in a fresh process: the first run (an empty cache)
against the same command run again (its compiled programs, and `simulate`'s traced one, read
back from the cache).

Each command runs twice in its own process with a new cache directory (`UKJAX_CACHE_DIR`);
its first step is when it prints "simulating" (`simulate`) or "fitting" (`fit`): its program is
ready, measured from the process's start. The floor: what a kept `simulate` imports before its first step (jax and
MuJoCo's compiler), beside the engine's import (`ukjax.simulate`: equinox, diffrax), which it
imports after.

    python benchmarks/warm_start.py

Its measured table: benchmarks/README.md.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASSIE = str(ROOT.parent / "shared" / "robots" / "cassie.xml")
SCENE = str(ROOT / "ukjax" / "examples" / "contacts.xml")
COMMANDS = {
    "simulate Cassie, contacts": ["simulate", CASSIE, "--keyframe", "home", "--t1", "0.02", "--saves", "11"],
    "simulate Cassie, no contacts": ["simulate", CASSIE, "--keyframe", "home", "--no-contacts", "--t1", "0.02"],
    "simulate contacts.xml": ["simulate", SCENE, "--keyframe", "launched", "--t1", "0.2", "--saves", "21"],
    "coordinated": ["coordinated", "--t1", "0.5", "--saves", "11"],
    "fit": ["fit", "--horizon", "0.5", "--closed-horizon", "0.25", "--quiet"],
}


def timed(argv: list[str], cache: str, workdir: str) -> tuple[float, float | None]:
    """The run's wall time and when it first printed "simulating" or "fitting" (None where it
    did not), from the process's start."""
    environment = dict(os.environ, UKJAX_CACHE_DIR=cache, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment, cwd=workdir)
    first = None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if first is None and line.startswith(("simulating", "fitting")):
            first = time.perf_counter() - start
    if process.wait():
        raise RuntimeError(f"{' '.join(argv)} failed:\n{''.join(lines)[-3000:]}")
    return time.perf_counter() - start, first


def main() -> None:
    import jax

    print(f"{os.cpu_count()} cores; jax {jax.__version__}; python {sys.version.split()[0]}; seconds from the process's start")
    with tempfile.TemporaryDirectory() as workdir:
        imports = {
            what: min(timed([sys.executable, "-c", f"import {what}"], "", workdir)[0] for _ in range(3))
            for what in ("jax, mujoco", "ukjax; ukjax.simulate")
        }
        print("; ".join(f"import {what} {seconds:.2f} s" for what, seconds in imports.items()))
        print(f"{'command':30s} {'first step, cold':>17s} {'warm':>6s} {'whole run, cold':>16s} {'warm':>6s}")
        for name, argv in COMMANDS.items():
            cache = str(Path(workdir) / name.replace(" ", "_").replace(",", ""))
            runs = [timed([sys.executable, "-m", "ukjax.cli", *argv], cache, workdir) for _ in range(2)]
            (cold, cold_first), (warm, warm_first) = runs
            show = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            print(f"{name:30s} {show(cold_first):>17s} {show(warm_first):>6s} {cold:16.2f} {warm:6.2f}")


if __name__ == "__main__":
    main()
