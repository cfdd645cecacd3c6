"""Time and memory of a trajectory-fit derivative against the record's length.

A torque-driven double pendulum, four inertial parameters, positions saved at 20 Hz. For each
horizon: the gradient of the squared-residual loss by checkpointed reverse mode (diffrax's
`RecursiveCheckpointAdjoint` with several checkpoint counts), the full Jacobian of the
residuals by forward mode (`diffrax.ForwardMode`, what `fit_least_squares` uses), and the
Jacobian of multiple-shooting residuals (1 s segments, starts included). Time: median of
three compiled calls. Memory: the compiled program's temporary buffers (XLA's
`memory_analysis`), which is where checkpoints live. Ratios are against forward mode in the
same run.

    python benchmarks/fit_gradients.py [--horizons 1 10 100]
"""

import argparse
import time

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402

TOL = dict(rtol=1e-8, atol=1e-8)


def inertial(system):
    while not isinstance(system, models.PlanarChain):
        system = system.system
    return system.masses, system.inertias


def measure(f, *args):
    """Median seconds of three compiled calls and the temporary memory in MB."""
    compiled = jax.jit(f).lower(*args).compile()
    memory = compiled.memory_analysis()
    temp = getattr(memory, "temp_size_in_bytes", float("nan")) / 1e6 if memory is not None else float("nan")
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[1], temp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizons", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    args = parser.parse_args()
    chain = models.PlanarChain([1.0, 0.8], [1.5, 1.0], [0.5, 0.4], [0.12, 0.06])
    true = ukjax.Forced(chain, models.SineInputs(jnp.eye(2), [3.0, 1.0], [2.0, 3.0], [0.0, jnp.pi / 2]))
    q0, qd0 = jnp.array([1.2, -0.4]), jnp.zeros(2)
    theta = jnp.log(jnp.concatenate(inertial(true)))

    def model(theta):
        masses, inertias = jnp.split(jnp.exp(theta), 2)
        return eqx.tree_at(inertial, true, (masses, inertias))

    print(f"{'horizon':>8} {'route':<40} {'time [s]':>10} {'ratio':>7} {'memory [MB]':>12}")
    for horizon in args.horizons:
        ts = jnp.linspace(0.0, horizon, round(20 * horizon) + 1)
        measured = ukjax.simulate(true, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
        steps = 200 * round(horizon) + 1000

        def residuals(theta, adjoint):
            return ukjax.trajectory_residuals(model(theta), q0, qd0, ts, measured, adjoint=adjoint, max_steps=steps, **TOL)

        routes = {"forward mode, Jacobian (4 JVPs)": lambda th: jax.jacfwd(lambda t: residuals(t, diffrax.ForwardMode()))(th)}
        for checkpoints in (None, 100, 10):
            adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
            name = f"reverse, gradient, {'√steps (default)' if checkpoints is None else checkpoints} checkpoints"
            routes[name] = lambda th, adjoint=adjoint: jax.grad(lambda t: jnp.sum(residuals(t, adjoint) ** 2))(th)
        segments = max(1, round(horizon))
        if (ts.size - 1) % segments == 0 and segments > 1:
            shooting = ukjax.MultipleShooting.from_measurements(true, ts, measured, segments)

            def shooting_jacobian(x):
                theta, q_starts, qd_starts = x
                m = eqx.tree_at(lambda s: (s.system, s.q_starts, s.qd_starts), shooting, (model(theta), q_starts, qd_starts))
                return ukjax.trajectory_residuals(m, q0, qd0, ts, measured, **TOL)

            x = (theta, shooting.q_starts, shooting.qd_starts)
            routes[f"multiple shooting, {segments} segments, Jacobian"] = lambda _, x=x: jax.jacfwd(shooting_jacobian)(x)
        baseline = None
        for name, f in routes.items():
            seconds, memory = measure(f, theta)
            baseline = seconds if baseline is None else baseline
            print(f"{horizon:8g} {name:<40} {seconds:10.4f} {seconds / baseline:7.2f} {memory:12.2f}", flush=True)


if __name__ == "__main__":
    main()
