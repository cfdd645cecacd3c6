"""The tree kernel's two builds for a CPU, on the robots of `gpu.py` that it covers (Cassie and
the gripper of `examples/gripper.xml`): chunks of `LANES` states side by side (what a CPU runs),
and one lane in the GPU's layout (members one after another, each one's work space in tiles of
32 members in memory: the code and the memory traffic of the GPU's build, whose speed a machine
without a GPU can only approach through this). Prints µs per acceleration of each build at the
same batch, best of `--repeats` calls, and the one lane's time over the chunks'.

    python benchmarks/kernel_layouts.py [--batch 4096] [--repeats 7]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax.cli import bench as _bench  # noqa: E402
from ukjax._backends import _tree_kernel as kernels  # noqa: E402


def per_member(parts, q, qd, lanes, repeats):
    """µs per member of the kernel's build of `lanes` (None: chunks) on the batch, handed what
    the system evaluates outside it (the gripper's actuator and mirror rows), best of `repeats`
    calls after a first that compiles."""
    outside = jax.jit(jax.vmap(lambda q, qd: kernels._outside(parts, 0.0, q, qd)))(q, qd)
    call = jax.jit(lambda q, qd: kernels._call(parts, q, qd, outside, lanes=lanes))
    jax.block_until_ready(call(q, qd))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call(q, qd))
        best = min(best, time.perf_counter() - start)
    return best / q.shape[0] * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4096, help="members (states about each robot's start)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls of each build")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"batch {args.batch}; µs per acceleration, best of {args.repeats}")
    print(f"{'case':24s} {'chunks of ' + str(kernels.LANES):>14s} {'one lane, GPU layout':>22s} {'ratio':>7s}")
    for name, system, q0, *_ in (_bench.cassie(), _bench.gripper()):
        parts = kernels.covered(ukjax.TreeKernel().bind(system, jnp.float64, "cpu"))
        q = jnp.asarray(np.asarray(q0) + 1e-3 * rng.standard_normal((args.batch, q0.shape[0])))
        qd = jnp.asarray(0.1 * rng.standard_normal(q.shape))
        chunks, lane = (per_member(parts, q, qd, lanes, args.repeats) for lanes in (None, 1))
        print(f"{name:24s} {chunks:14.2f} {lane:22.2f} {lane / chunks:7.2f}", flush=True)


if __name__ == "__main__":
    main()
