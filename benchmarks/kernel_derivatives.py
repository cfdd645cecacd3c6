"""Derivatives through the compiled tree kernel, and what they cost.

The kernel (an XLA FFI call, which JAX cannot differentiate) has a custom JVP whose tangent is
the XLA route's: the single-state acceleration, differentiated by JAX in the tree's parameters
and the state. Forward mode then runs through an RK4 run, and reverse mode too (JAX transposes
the tangent, which is linear). Measured on Cassie (`ukjax bench`'s, RK4 at 1 ms from rest, one
device): the derivative of every member's final `q` along a direction in the bodies' masses
(`jax.jvp`) and the gradient of a scalar of them (`jax.grad`), each through the kernel and
through the XLA route alone (the same RK4 on the `vmap`ped acceleration), against central
differences; seconds per call compiled (best of 3) and seconds to compile.

    python benchmarks/kernel_derivatives.py [--batch 64] [--steps 100]
"""

import argparse
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ukjax
from ukjax.cli import bench
from ukjax._backends import _tree_kernel as kernels


def library_acceleration(system, q, qd):
    """The XLA route's acceleration of (B, n) states."""
    return jax.vmap(lambda q, qd: system.solve(0.0, q, qd).acceleration)(q, qd)


def kernel_acceleration(system, q, qd):
    """The compiled kernel's acceleration of (B, n) states (one call for the batch)."""
    bound = ukjax.TreeKernel().bind(system, q.dtype, "cpu")
    return jax.vmap(lambda q, qd: kernels.solve(bound, 0.0, q, qd).acceleration)(q, qd)


def final_state(acceleration, system, q0, steps):
    """`q` after `steps` RK4 steps of `bench.DT` from `(q0, 0)`, (B, n) states."""
    h = bench.DT

    def step(state, _):
        q, qd = state
        f = lambda q, qd: (qd, acceleration(system, q, qd))  # noqa: E731
        k1 = f(q, qd)
        k2 = f(q + h / 2 * k1[0], qd + h / 2 * k1[1])
        k3 = f(q + h / 2 * k2[0], qd + h / 2 * k2[1])
        k4 = f(q + h * k3[0], qd + h * k3[1])
        return tuple(x + h / 6 * (a + 2 * b + 2 * c + d) for x, a, b, c, d in zip(state, k1, k2, k3, k4)), None

    return jax.lax.scan(step, (q0, jnp.zeros_like(q0)), None, length=steps)[0][0]


def timed(f, *args):
    """`(output, seconds per call compiled (best of 3), seconds to compile)`."""
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    first = time.perf_counter() - start
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - start)
    return out, best, first - best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits named, keyframe projected
        _, system, q0, *_ = bench.cassie()
    tree = system.system
    n, B = q0.shape[0], args.batch
    rng = np.random.default_rng(0)
    if not kernels.can_run(system, jnp.float64, "cpu"):
        print("the tree kernel does not run here (no C++ compiler)")
        return
    # members apart: the keyframe with its joints turned by up to 0.01 rad
    start = jnp.asarray(np.asarray(q0)[None, :] + 0.01 * rng.uniform(-1, 1, (B, n)))
    start = jax.jit(jax.vmap(lambda q: system.project(0.0, q, jnp.zeros_like(q)).q))(start)
    direction = jnp.asarray(rng.uniform(0.5, 1.5, tree.masses.shape)) * tree.masses
    weights = jnp.asarray(rng.normal(size=(B, n)))

    def final(acceleration, masses):
        edited = eqx.tree_at(lambda s: s.system.masses, system, masses)
        return final_state(acceleration, edited, start, args.steps)

    print(
        f"Cassie, RK4 at {bench.DT * 1e3:g} ms, {args.steps} steps, batch {B}, one device; "
        "seconds per call / compile"
    )
    results = {}
    for name, acceleration in (("XLA", library_acceleration), ("kernel", kernel_acceleration)):
        primal = jax.jit(lambda m, a=acceleration: final(a, m))
        forward = jax.jit(lambda m, a=acceleration: jax.jvp(lambda m: final(a, m), (m,), (direction,)))
        reverse = jax.jit(jax.grad(lambda m, a=acceleration: jnp.sum(weights * final(a, m))))
        q1, tp, cp = timed(primal, tree.masses)
        (_, dq), tf, cf = timed(forward, tree.masses)
        g, tr, cr = timed(reverse, tree.masses)
        results[name] = (q1, dq, g)
        print(
            f"  {name:8s} run {tp:7.3f} / {cp:5.1f}   jvp {tf:7.3f} / {cf:5.1f}   grad {tr:7.3f} / {cr:5.1f}"
        )
    eps = 1e-6
    library = jax.jit(lambda m: final(library_acceleration, m))
    fd = (library(tree.masses + eps * direction) - library(tree.masses - eps * direction)) / (2 * eps)
    (q_lib, dq_lib, g_lib), (q_k, dq_k, g_k) = results["XLA"], results["kernel"]

    def relative(x, y):
        return float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y)))

    print(
        f"  kernel against the XLA route: final q {relative(q_k, q_lib):.1e}, jvp {relative(dq_k, dq_lib):.1e}, "
        f"grad {relative(g_k, g_lib):.1e}; the XLA route's jvp against central differences (1e-6) "
        f"{relative(dq_lib, fd):.1e}; grad · direction against jvp · weights "
        f"{abs(float(g_k @ direction - jnp.sum(weights * dq_k))) / abs(float(jnp.sum(weights * dq_k))):.1e}"
    )


if __name__ == "__main__":
    main()
