"""Where one constrained acceleration of Cassie spends its time, part by part.

Each part is jitted and vmapped alone over the same batch of states near `home` (Cassie from
`shared/robots/cassie.xml`: 35 coordinates, 15 constraint rows with the quaternion norms),
so the parts' times add up to roughly the whole. Prints compile time and µs per batch member
for each, and the whole acceleration last; the ratios against the whole are the comparable
figures.

    python benchmarks/tree_profile.py [--batch 256]
"""

import argparse
import time
import warnings
from pathlib import Path

import jax

CASSIE = Path(__file__).resolve().parents[2] / "shared" / "robots" / "cassie.xml"


def cassie_batch(batch: int):
    """`(model, system, q, qd, parts, M, Q, A, b)`: Cassie's model and constrained system, a
    batch of states near `home`, the function of one state that gives `M`, `Q`, `A` and `b`,
    and those of the batch (float64 must be on)."""
    import ukjax
    from ukjax import models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the keyframe is projected onto the loops
        model = models.from_mjcf(CASSIE, keyframe="home")
    system = ukjax.ConstrainedSystem(model.system, model.constraints)
    keys = jax.random.split(jax.random.PRNGKey(0))
    q = model.q0 + 1e-3 * jax.random.normal(keys[0], (batch, model.q0.shape[0]))
    qd = 0.1 * jax.random.normal(keys[1], q.shape)

    def parts(q, qd):
        d = system.dynamics(0.0, q, qd)
        return d.M, d.Q, d.levels[0].rows.A, d.levels[0].rows.b

    return model, system, q, qd, parts, *jax.jit(jax.vmap(parts))(q, qd)


def timed(fn, *args, repeats: int = 5):
    """`fn` jitted and vmapped over `args`: its output, the first call's seconds (compiling),
    and the best of `repeats` calls' µs per batch member."""
    f = jax.jit(jax.vmap(fn))
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    compile_s = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - start)
    return out, compile_s, best / jax.tree.leaves(args)[0].shape[0] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    batch = parser.parse_args().batch
    jax.config.update("jax_enable_x64", True)
    from ukjax import _core, _linalg as la

    model, system, q, qd, parts, M, Q, A, b = cassie_batch(batch)
    tree = model.system
    L = jax.vmap(la.cholesky)(M)
    B = jax.vmap(lambda L, A: la.solve_lower(L, A.T).T)(L, A)
    print(f"Cassie: n = {q.shape[1]}, p = {A.shape[1]}, batch {batch}, jax {jax.__version__} on {jax.default_backend()}")
    print(f"{'part':40s} {'compile s':>9s} {'µs/member':>10s} {'share':>6s}")
    cases = [
        ("kinematics", lambda q, qd: tree.kinematics(q), (q, qd)),
        ("mass matrix (kinematics included)", lambda q, qd: tree.mass_matrix(0.0, q), (q, qd)),
        ("forces (kinematics included)", lambda q, qd: tree.forces(0.0, q, qd), (q, qd)),
        ("M, Q and the constraint rows", parts, (q, qd)),
        ("Cholesky of M", la.cholesky, (M,)),
        ("M⁻¹Q from the factor", la.cho_solve, (L, Q)),
        ("A L⁻ᵀ", lambda L, A: la.solve_lower(L, A.T), (L, A)),
        ("pseudo-inverse solve (p × n)", lambda B, b: la.pinv_solve(B, b[:, None]), (B, b)),
        ("U-K solve from M, Q, A, b", lambda M, Q, A, b: _core.uk_solve(M, Q, A, b, None, "svd").acceleration, (M, Q, A, b)),
        ("the whole acceleration", lambda q, qd: system.acceleration(0.0, q, qd), (q, qd)),
    ]
    rows = [(name, *timed(fn, *args)[1:]) for name, fn, args in cases]
    whole = rows[-1][2]
    for name, compile_s, us in rows:
        print(f"{name:40s} {compile_s:9.2f} {us:10.2f} {us / whole:6.2f}")


if __name__ == "__main__":
    main()
