"""Speed of the two U-K routes: SVD pseudo-inverse (any rank) against Cholesky of A M⁻¹ Aᵀ
(full row rank only), for n from 4 to 60 with p = n/2 constraints.

Prints, per n: the latency of one jitted call (median) and the throughput of a vmapped batch,
for each route, and the ratio svd/cholesky measured in the same run.

    python benchmarks/bench_core.py [--batch 4096] [--repeats 50]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402


def problem(key, n, p, batch=None):
    shape = () if batch is None else (batch,)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    X = jax.random.normal(k1, shape + (n, n))
    M = X @ jnp.swapaxes(X, -1, -2) + n * jnp.eye(n)
    return M, jax.random.normal(k2, shape + (n,)), jax.random.normal(k3, shape + (p, n)), jax.random.normal(k4, shape + (p,))


def median_time(fn, args, repeats):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 30, 60])
    args = parser.parse_args()
    print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}), float64, batch {args.batch}")
    print(f"{'n':>4} {'p':>4} | {'svd 1 call':>11} {'chol 1 call':>11} {'ratio':>6} | {'svd batch/s':>12} {'chol batch/s':>12} {'ratio':>6}")
    key = jax.random.PRNGKey(0)
    for n in args.sizes:
        p = max(1, n // 2)
        one, batch = problem(key, n, p), problem(key, n, p, args.batch)
        latency, throughput = {}, {}
        for method in ("svd", "cholesky"):
            f = jax.jit(lambda M, Q, A, b, method=method: ukjax.udwadia_kalaba(M, Q, A, b, method=method))
            latency[method] = median_time(f, one, args.repeats)
            fb = jax.jit(jax.vmap(lambda M, Q, A, b, method=method: ukjax.udwadia_kalaba(M, Q, A, b, method=method)))
            throughput[method] = args.batch / median_time(fb, batch, max(3, args.repeats // 10))
        print(
            f"{n:>4} {p:>4} | {latency['svd'] * 1e6:>9.1f}us {latency['cholesky'] * 1e6:>9.1f}us "
            f"{latency['svd'] / latency['cholesky']:>6.2f} | {throughput['svd']:>12.3g} {throughput['cholesky']:>12.3g} "
            f"{throughput['cholesky'] / throughput['svd']:>6.2f}"
        )
    print("ratio > 1: the Cholesky route is that many times faster than the SVD route.")


if __name__ == "__main__":
    main()
