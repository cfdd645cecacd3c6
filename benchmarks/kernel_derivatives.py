"""Derivatives through the custom kernel, and what they cost.

`batch_last`'s one-call acceleration (an XLA FFI call, which JAX cannot differentiate) given a
custom JVP whose tangent is the library's: the single-state acceleration under `vmap`,
differentiated by JAX in the tree's parameters and the state. Forward mode then runs through
an RK4 run, and reverse mode too (JAX transposes the tangent, which is linear). Measured on
Cassie (`ukjax bench`'s, RK4 at 1 ms from rest, one device): the derivative of every member's
final `q` along a direction in the bodies' masses (`jax.jvp`) and the gradient of a scalar of
them (`jax.grad`), each through the kernel route and through the library's route alone (the
same RK4 on the `vmap`ped acceleration), against central differences; seconds per call
compiled (best of 3) and seconds to compile.

    python benchmarks/kernel_derivatives.py [--batch 64] [--steps 100]
"""

import argparse
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import batch_last
from ukjax import _bench as bench


def library_acceleration(system, q, qd):
    """The library's acceleration of (n, B) states, mapped over the last axis."""
    return jax.vmap(lambda q, qd: system.acceleration(0.0, q, qd), in_axes=1, out_axes=1)(q, qd)


@eqx.filter_custom_jvp
def kernel_acceleration(system, q, qd):
    """`batch_last.tree_kernel`'s acceleration of (n, B) states, differentiable."""
    return batch_last.tree_kernel(system)(q, qd)


@kernel_acceleration.def_jvp
def _kernel_acceleration_jvp(primals, tangents):
    # the tangent is the library's; its primal, computed alongside, is what JAX linearizes at
    _, tangent = eqx.filter_jvp(library_acceleration, primals, tangents)
    return kernel_acceleration(*primals), tangent


def final_state(acceleration, system, q0, steps):
    """`q` after `steps` RK4 steps of `bench.DT` from `(q0, 0)`, (n, B) states."""

    def step(state, _):
        return batch_last.rk4_step(lambda q, qd: acceleration(system, q, qd), bench.DT, state), None

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
    if not batch_last.build_kernel():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits named, keyframe projected
        _, system, q0, *_ = bench.cassie()
    tree = system.system
    n, B = q0.shape[0], args.batch
    rng = np.random.default_rng(0)
    # members apart: the keyframe with its joints turned by up to 0.01 rad
    start = jnp.asarray(np.asarray(q0)[:, None] + 0.01 * rng.uniform(-1, 1, (n, B)))
    start = jax.jit(jax.vmap(lambda q: system.project(0.0, q, jnp.zeros_like(q)).q, in_axes=1, out_axes=1))(
        start
    )
    direction = jnp.asarray(rng.uniform(0.5, 1.5, tree.masses.shape)) * tree.masses
    weights = jnp.asarray(rng.normal(size=(n, B)))

    def final(acceleration, masses):
        edited = eqx.tree_at(lambda s: s.system.masses, system, masses)
        return final_state(acceleration, edited, start, args.steps)

    print(
        f"Cassie, RK4 at {bench.DT * 1e3:g} ms, {args.steps} steps, batch {B}, one device; "
        "seconds per call / compile"
    )
    results = {}
    for name, acceleration in (("library", library_acceleration), ("kernel", kernel_acceleration)):
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
    (q_lib, dq_lib, g_lib), (q_k, dq_k, g_k) = results["library"], results["kernel"]

    def relative(x, y):
        return float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y)))

    print(
        f"  kernel against library: final q {relative(q_k, q_lib):.1e}, jvp {relative(dq_k, dq_lib):.1e}, "
        f"grad {relative(g_k, g_lib):.1e}; library's jvp against central differences (1e-6) "
        f"{relative(dq_lib, fd):.1e}; grad · direction against jvp · weights "
        f"{abs(float(g_k @ direction - jnp.sum(weights * dq_k))) / abs(float(jnp.sum(weights * dq_k))):.1e}"
    )


if __name__ == "__main__":
    main()
