# %% [markdown]
# # Fitting through whole simulations: parameters with their uncertainty, and Baumgarte gains
#
# 1. A torque-driven double pendulum: masses and inertias from a position record, starting
#    30 % off, by Levenberg–Marquardt with forward-mode Jacobians through the simulation.
# 2. The SCARA paper's SCARA task with RK4 at a fixed step: Baumgarte gains tuned by gradient inside
#    the integrator's stability region, against the paper's gains.
#
# The same fit on a closed chain (the servo-control paper's coordinated robots, where the motion leaves one
# combination of the ten inertial parameters undetermined and the fit says which) is
# `ukjax fit`; every identification case with its numbers is `benchmarks/identify.py`.

# %%
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

jax.config.update("jax_enable_x64", True)
import ukjax
from ukjax import models

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
FAST = bool(os.environ.get("UKJAX_FAST"))
TOL = dict(rtol=1e-12, atol=1e-12)


def inertial(system):
    """Masses and inertias of the chain inside a (forced, constrained) system."""
    while not isinstance(system, models.PlanarChain):
        system = system.system
    return system.masses, system.inertias


# %%
chain = models.PlanarChain([1.0, 0.8], [1.5, 1.0], [0.5, 0.4], [0.12, 0.06])
true = ukjax.Forced(chain, models.SineInputs(jnp.eye(2), [3.0, 1.0], [2.0, 3.0], [0.0, np.pi / 2]))
q0, qd0 = jnp.array([1.2, -0.4]), jnp.zeros(2)
horizon = 1.0 if FAST else 1.5
ts = jnp.linspace(0.0, horizon, round(20 * horizon) + 1)
measured = ukjax.simulate(true, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
start = eqx.tree_at(inertial, true, (1.3 * chain.masses, 0.7 * chain.inertias))
pendulum = ukjax.fit_least_squares(
    lambda m: ukjax.trajectory_residuals(m, q0, qd0, ts, measured, **TOL),
    start,
    where=inertial,
    positive=True,
    progress=False,
)
error = max(float(jnp.max(jnp.abs(f / t - 1))) for f, t in zip(inertial(pendulum.model), inertial(true)))
print(f"double pendulum: rank {pendulum.rank}/4, max relative error {error:.1e}, std {pendulum.std}")
assert pendulum.rank == 4 and error < 1e-6

# %%
scara = models.scara()
paper = ukjax.Baumgarte(0.5, 200.0)
dt, scara_horizon = 0.02, (2.0 if FAST else 20.0)
rk4 = dict(solver=ukjax.RK4(), adaptive=False, dt0=dt)
tuned = ukjax.tune_baumgarte(
    ukjax.ConstrainedSystem(scara.system, scara.constraints, paper),
    scara.q0,
    scara.qd0,
    scara_horizon,
    steps=10 if FAST else 100,
    progress=False,
    **rk4,
)
scara_ts = dt * jnp.arange(round(scara_horizon / dt) + 1)
drift = {}
for name, gains in (
    ("paper α = 0.5, β = 200", paper),
    (f"tuned α = {float(tuned.alpha):.0f}, β = {float(tuned.beta):.0f}", tuned),
):
    sol = ukjax.simulate(
        ukjax.ConstrainedSystem(scara.system, scara.constraints, gains),
        scara.q0,
        scara.qd0,
        0.0,
        scara_horizon,
        ts=scara_ts,
        **rk4,
    )
    drift[name] = jnp.linalg.norm(sol.phi, axis=1)
integrals = {name: float(jnp.trapezoid(d, scara_ts)) for name, d in drift.items()}
print("∫‖Φ‖dt:", integrals)
assert integrals[next(iter(integrals))] > 10 * integrals[list(integrals)[1]]

# %%
fig, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True)
axes[0, 0].semilogy(pendulum.costs, "o-", label="double pendulum")
axes[0, 0].set(title="cost ½‖r‖² per Levenberg–Marquardt step", xlabel="step")
fitted = ukjax.simulate(pendulum.model, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
before = ukjax.simulate(start, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
for j in range(2):
    axes[0, 1].plot(ts, measured[:, j], "k.", label="measured" if j == 0 else None)
    axes[0, 1].plot(ts, before[:, j], "--", color=f"C{j}", label=f"q{j + 1}, start")
    axes[0, 1].plot(ts, fitted[:, j], "-", color=f"C{j}", label=f"q{j + 1}, fitted")
axes[0, 1].set(title="double pendulum: fitted against measured", xlabel="t [s]", ylabel="rad")
axes[1, 0].semilogy(pendulum.singular_values / pendulum.singular_values[0], "o-", label=f"double pendulum (rank {pendulum.rank})")
axes[1, 0].set(title="singular values of the Jacobian in relative parameters", xlabel="index")
for name, d in drift.items():
    axes[1, 1].semilogy(scara_ts, d + 1e-16, label=f"{name}: ∫‖Φ‖dt = {integrals[name]:.1e}")
axes[1, 1].set(title="SCARA constraint error ‖Φ‖, RK4 at dt = 0.02 s", xlabel="t [s]")
for ax in axes.flat:
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
fig.savefig(FIGURES / "fitting.png", dpi=110)
