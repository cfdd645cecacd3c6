"""One constraint-force evaluation by pyudk (the NumPy/SciPy U-K package) and by ukjax.

pyudk 1.0.6 pins old versions; install it without them (it needs NumPy, SciPy and SymPy):

    pip install --no-deps pyudk==1.0.6 && pip install sympy
    python benchmarks/pyudk_compare.py [--batch 4096]

The problem: the servo-control paper's coordinated robots (n = 5, two passive rows) at random states, `M`, `Q`,
`A`, `b` evaluated once by ukjax and handed to both. pyudk computes `M^{1/2} B⁺ (b − A M⁻¹ Q)`
with SciPy's fractional matrix powers, one state per call; ukjax's `constraint_force` runs
jitted, one state per call and vmapped over the batch. Times after compilation, same run; the
answers are checked equal (relative 1e-9). Last line: `per-evaluation ratio pyudk/ukjax R
(batched) R1 (single call) max relative difference D`.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from pyudk import mechanics

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402


def problems(batch: int):
    """`M, Q, A, b` of the coordinated robots at `batch` random states."""
    model = models.coordinated_robots()
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    rng = np.random.default_rng(0)
    q = jnp.asarray(model.q0 + 0.1 * rng.normal(size=(batch, 5)))
    qd = jnp.asarray(rng.normal(size=(batch, 5)))

    @jax.jit
    @jax.vmap
    def evaluate(q, qd):
        d = csys.dynamics(0.0, q, qd)
        rows = d.levels[0].rows
        return d.M, d.Q, rows.A, rows.b

    return [np.asarray(x) for x in evaluate(q, qd)]


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--pyudk-calls", type=int, default=500, help="pyudk calls timed (one state each)")
    args = parser.parse_args()
    M, Q, A, b = problems(args.batch)
    calls = min(args.pyudk_calls, args.batch)

    theirs = np.stack([mechanics.ideal_Constraint_force(None, M[i], Q[i], A[i], b[i]) for i in range(calls)])
    start = time.perf_counter()
    for i in range(calls):
        mechanics.ideal_Constraint_force(None, M[i], Q[i], A[i], b[i])
    pyudk_each = (time.perf_counter() - start) / calls

    single = jax.jit(ukjax.constraint_force)
    batched = jax.jit(jax.vmap(ukjax.constraint_force))
    Mj, Qj, Aj, bj = (jnp.asarray(x) for x in (M, Q, A, b))
    ours = np.asarray(batched(Mj, Qj, Aj, bj))
    single_each = best_of(lambda: single(Mj[0], Qj[0], Aj[0], bj[0]), repeats=200)
    batched_each = best_of(lambda: batched(Mj, Qj, Aj, bj)) / args.batch

    scale = np.maximum(np.linalg.norm(theirs, axis=1), 1e-300)
    difference = float(np.max(np.linalg.norm(ours[:calls] - theirs, axis=1) / scale))
    assert difference < 1e-9, difference
    print(f"jax {jax.__version__} on {jax.default_backend()}, float64; coordinated robots, n = 5, p = 2")
    print(f"pyudk 1.0.6, one state per call:  {pyudk_each * 1e6:10.2f} µs per evaluation ({calls} calls)")
    print(f"ukjax, jitted, one state per call: {single_each * 1e6:10.2f} µs per evaluation")
    print(f"ukjax, vmapped batch of {args.batch}: {batched_each * 1e6:10.4f} µs per evaluation")
    print(
        f"per-evaluation ratio pyudk/ukjax {pyudk_each / batched_each:.0f} (batched) "
        f"{pyudk_each / single_each:.0f} (single call) max relative difference {difference:.1e}"
    )


if __name__ == "__main__":
    main()
