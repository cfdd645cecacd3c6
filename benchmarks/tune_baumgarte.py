"""Baumgarte gains for the SCARA task of the SCARA paper [2] (the paper's initial state, 20 s): the paper's
gains, critically damped gains at the paper's β, a grid over ω (critically damped,
α = 2ω, β = ω²) and `ukjax.tune_baumgarte` (scalar and per-row gains), (a) with RK4 at a fixed
step of 0.02 s and (b) with adaptive Tsit5 at rtol = atol = 1e-6. Columns: ∫‖Φ‖dt, final ‖Φ‖,
solver steps. The last line is `violation ratio paper/tuned R steps ratio S` for case (b).

    python benchmarks/tune_baumgarte.py [--horizon 20]
"""

import argparse
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402

PAPER = ukjax.Baumgarte(0.5, 200.0)


def measure(csys, q0, qd0, horizon, integrator):
    """∫‖Φ‖dt (trapezoid over the saves), final ‖Φ‖, accepted steps; NaN where it fails."""
    if integrator["adaptive"]:
        ts = jnp.linspace(0.0, horizon, 2001)
    else:
        ts = integrator["dt0"] * jnp.arange(round(horizon / integrator["dt0"]) + 1)
    sol = ukjax.simulate(csys, q0, qd0, 0.0, horizon, ts=ts, throw=False, **integrator)
    if not bool(sol.success):
        return math.nan, math.nan, int(sol.stats["num_steps"])
    norms = jnp.linalg.norm(sol.phi, axis=1)
    return float(jnp.trapezoid(norms, ts)), float(norms[-1]), int(sol.stats["num_steps"])


def compare(horizon: float, integrator: dict, grid, progress: bool = False):
    """Rows (name, ∫‖Φ‖dt, final ‖Φ‖, steps) for the paper's, critically damped, grid and
    tuned gains."""
    model = models.scara()
    q0, qd0 = model.q0, model.qd0

    def system(gains):
        return ukjax.ConstrainedSystem(model.system, model.constraints, gains)

    rows = [("paper α = 0.5, β = 200", *measure(system(PAPER), q0, qd0, horizon, integrator))]
    w = math.sqrt(200.0)
    rows.append((f"critically damped at β = 200 (ω = {w:.1f})", *measure(system(ukjax.Baumgarte(2 * w, w * w)), q0, qd0, horizon, integrator)))
    for w in grid:
        rows.append((f"grid ω = {w:g}", *measure(system(ukjax.Baumgarte(2 * w, w * w)), q0, qd0, horizon, integrator)))
    for per_row in (False, True):
        start = time.perf_counter()
        gains = ukjax.tune_baumgarte(system(PAPER), q0, qd0, horizon, per_row=per_row, progress=progress, **integrator)
        elapsed = time.perf_counter() - start
        alpha, beta = np.atleast_1d(np.asarray(gains.alpha)), np.atleast_1d(np.asarray(gains.beta))
        label = "tuned per row" if per_row else "tuned"
        text = "α " + ",".join(f"{a:.1f}" for a in alpha) + " β " + ",".join(f"{b:.0f}" for b in beta)
        rows.append((f"{label} ({text}; {elapsed:.0f} s)", *measure(system(gains), q0, qd0, horizon, integrator)))
    return rows


def print_rows(title, rows):
    print(title)
    for name, drift, final, steps in rows:
        print(f"  {name:<58} ∫‖Φ‖dt {drift:9.3e}  final ‖Φ‖ {final:9.3e}  steps {steps:6d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=float, default=20.0)
    args = parser.parse_args()
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=0.02)
    rows_a = compare(args.horizon, fixed, (5, 10, 20, 30, 50, 70, 100, 120, 150))
    print_rows("(a) RK4, fixed dt = 0.02 s", rows_a)
    grid = [r for r in rows_a if r[0].startswith("grid") and math.isfinite(r[1])]
    best = min(grid, key=lambda r: r[1])
    tuned = [r for r in rows_a if r[0].startswith("tuned")]
    print(f"  best grid point {best[0]}: {best[1]:.3e}; tuned/best " + ", ".join(f"{r[1] / best[1]:.2f}" for r in tuned))
    adaptive = dict(solver=None, adaptive=True, rtol=1e-6, atol=1e-6)
    rows_b = compare(args.horizon, adaptive, (5, 10, 20, 50, 100))
    print_rows("(b) Tsit5, adaptive, rtol = atol = 1e-6", rows_b)
    paper = rows_b[0]
    tuned = min((r for r in rows_b if r[0].startswith("tuned")), key=lambda r: r[1])
    print(f"violation ratio paper/tuned {paper[1] / tuned[1]:.1f} steps ratio {tuned[3] / paper[3]:.2f}")


if __name__ == "__main__":
    main()
