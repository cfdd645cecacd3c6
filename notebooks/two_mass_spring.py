# %% [markdown]
# # Two-mass spring under servo control (the servo-control paper [3] §IV)
#
# A force `F` on mass 1 must hold the spring at length `2l` (`x₂ − x₁ = 2l`): an
# under-actuated servo-constraint problem (2 DOF, 1 input). The paper's closed form is
# `F = −(1 + m₁/m₂) k (x₂ − x₁ − l)` (eq. 47).

# %%
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

jax.config.update("jax_enable_x64", True)
import ukjax
from ukjax.models import two_mass_spring

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
T1 = 2.0 if os.environ.get("UKJAX_FAST") else 10.0

# %%
model = two_mass_spring()
s = model.system
ctrl = ukjax.ServoControl(s, model.servo, model.actuation)
ts = jnp.linspace(0, T1, 401)
sol = ukjax.simulate(ctrl.closed_loop(), model.q0, jnp.array([0.3, 0.3]), 0.0, T1, ts=ts, rtol=1e-11, atol=1e-11)
u = eqx.filter_jit(eqx.filter_vmap(ctrl))(sol.ts, sol.q, sol.qd)[:, 0]
closed_form = -(1 + s.m1 / s.m2) * s.k * (sol.q[:, 1] - sol.q[:, 0] - s.l)
print("max |u − F(eq. 47)| =", float(jnp.max(jnp.abs(u - closed_form))))
assert jnp.max(jnp.abs(u - closed_form)) < 1e-10

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
axes[0].plot(sol.ts, u, label="ukjax u")
axes[0].plot(sol.ts, closed_form, ":", label="eq. 47")
axes[0].set(title="servo force F", xlabel="t [s]", ylabel="N")
axes[1].plot(sol.ts, sol.q[:, 1] - sol.q[:, 0] - 2 * s.l)
axes[1].set(title="x₂ − x₁ − 2l", xlabel="t [s]", ylabel="m")
for ax in axes:
    ax.grid(alpha=0.3)
axes[0].legend()
fig.savefig(FIGURES / "two_mass_spring.png", dpi=110)
