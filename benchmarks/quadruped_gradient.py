"""A quadruped's derivative by time-stepping, in both modes, compile included.

MuJoCo Menagerie's Go1 (tests/data/go1.xml, meshes left out) under its servos at its `home`
controls, with its joint limits and the floor (as in `quadruped.py`), dropped `--drop` m and
run `--t1` s at the file's 2 ms by `ukjax.TimeStepping`: d z(t1) / d (trunk mass), the trunk's
height at the end in its mass, by `jax.grad` (simulate's default adjoint, checkpointed reverse
mode) and by `jax.jvp` (`diffrax.ForwardMode()`), each timed from its first call (trace and
compile included) and again, against central differences of the same runs at two widths.
The derivative is that of the steps' final modes (the mode search is discrete): central
differences agree where no contact changes mode within the width.

    python -m benchmarks.quadruped_gradient [--t1 1] [--drop 0.05]
"""

import argparse
import time
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from benchmarks.self_collisions import systems  # noqa: E402


def timed(f, *args):
    """The first call's time (trace and compile included), the second's, and the result."""
    start = time.perf_counter()
    jax.block_until_ready(f(*args))
    first = time.perf_counter() - start
    start = time.perf_counter()
    result = jax.block_until_ready(f(*args))
    return first, time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--t1", type=float, default=1.0)
    parser.add_argument("--drop", type=float, default=0.05)
    args = parser.parse_args()
    model, system, _ = systems()  # the Go1 with its limits and floor, as self_collisions.py has it
    q0 = model.q0.at[2].add(args.drop)
    trunk = system.system.system.masses[0]

    def height(mass, adjoint):
        changed = eqx.tree_at(lambda s: s.system.system.masses, system, system.system.system.masses.at[0].set(mass))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the start inside the floor, warned of in the tests
            sol = ukjax.simulate(
                changed, q0, model.qd0, 0.0, args.t1, ts=jnp.array([args.t1]),
                solver=ukjax.TimeStepping(), dt0=model.timestep, adjoint=adjoint, throw=False,
            )
        return sol.q[-1, 2], sol.status

    reverse = jax.jit(jax.grad(lambda m: height(m, diffrax.RecursiveCheckpointAdjoint())[0]))
    forward = jax.jit(lambda m: jax.jvp(lambda m: height(m, diffrax.ForwardMode())[0], (m,), (jnp.ones_like(m),))[1])
    value = jax.jit(lambda m: height(m, diffrax.RecursiveCheckpointAdjoint()))
    steps = round(args.t1 / model.timestep)
    z, status = value(trunk)
    print(f"Go1 dropped {args.drop:g} m under its servos, {args.t1:g} s at {model.timestep:g} s ({steps} steps), "
          f"trunk mass {float(trunk):.4f} kg: z = {float(z):.6f} m, {ukjax.Status(int(status)).name}")
    print(f"{'':28s} {'first call s':>12s} {'again s':>8s} {'dz/dm (m/kg)':>14s}")
    for name, f in (("jax.grad (reverse)", reverse), ("jax.jvp (ForwardMode)", forward)):
        first, again, d = timed(f, trunk)
        print(f"{name:28s} {first:12.1f} {again:8.2f} {float(d):14.6e}")
    for relative in (1e-4, 1e-6):
        h = relative * float(trunk)
        central = (value(trunk + h)[0] - value(trunk - h)[0]) / (2 * h)
        print(f"{f'central differences, {relative:g}':28s} {'':12s} {'':8s} {float(central):14.6e}")


if __name__ == "__main__":
    main()
