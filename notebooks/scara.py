# %% [markdown]
# # SCARA arm under a space-trajectory constraint (the SCARA paper [2])
#
# The tool of a SCARA arm must follow `x = 0.05 sin(0.4πt)`, `y = 0.35 + 0.05 cos(0.4πt)`,
# `z = 0.02 t` with fixed orientation (eq. 47). The start `q(0) = (−30°, 55°, −24°, 0)`,
# `q̇(0) = (−0.157, 0.0001, 0.157, 0.0195)` is off the constraints, so without stabilization the
# errors persist and grow (z error exactly `0.0005 t`); Baumgarte terms (α = 0.5, β = 200)
# pull them back. This notebook redraws the paper's figures 2–10.

# %%
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

jax.config.update("jax_enable_x64", True)
import ukjax
from ukjax.models import scara, scara_reference

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
T1 = 4.0 if os.environ.get("UKJAX_FAST") else 20.0

# %%
model = scara()
arm = model.system
ts = jnp.linspace(0, T1, 801)
runs = {}
for name, gains in {"no stabilization": None, "Baumgarte α=0.5, β=200": ukjax.Baumgarte(0.5, 200.0)}.items():
    csys = ukjax.ConstrainedSystem(arm, model.constraints, gains)
    sol = ukjax.simulate(csys, model.q0, model.qd0, 0.0, T1, ts=ts, rtol=1e-10, atol=1e-10)
    torque = eqx.filter_jit(eqx.filter_vmap(csys.constraint_force))(sol.ts, sol.q, sol.qd)
    runs[name] = (sol, torque)
    print(f"{name}: violation at t = {T1:g} s:", sol.phi[-1])

# %%
free = runs["no stabilization"][0]
assert jnp.max(jnp.abs(free.phi[:, 3] + 0.0005 * free.ts)) < 1e-9  # z error 0.0005 t

fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
for (name, (sol, torque)), style in zip(runs.items(), ("--", "-")):
    for j in range(3):
        axes[0, 0].plot(sol.ts, jnp.rad2deg(sol.q[:, j]), style, color=f"C{j}", label=f"q{j + 1} ({name})")
    tool = jax.jit(jax.vmap(arm.end_effector))(sol.q)
    axes[0, 1].plot(tool[:, 0], tool[:, 1], style, label=name)
    for j, axis in enumerate("xyz"):
        axes[1, 0].semilogy(sol.ts, jnp.abs(sol.phi[:, (0, 1, 3)[j]]) + 1e-16, style, color=f"C{j}", label=f"{axis} ({name})")
    for j in range(4):
        axes[1, 1].plot(sol.ts, torque[:, j], style, color=f"C{j}", label=f"Qc{j + 1} ({name})")
reference = jax.jit(jax.vmap(scara_reference))(ts)
axes[0, 1].plot(reference[:, 0], reference[:, 1], ":k", label="desired path")
axes[0, 0].set(title="joint angles (figs. 2, 6)", xlabel="t [s]", ylabel="deg")
axes[0, 1].set(title="tool path in the xy plane (figs. 3, 7)", xlabel="x [m]", ylabel="y [m]")
axes[1, 0].set(title="|x|, |y|, |z| errors (figs. 5, 9)", xlabel="t [s]", ylabel="m")
axes[1, 1].set(title="constraint torques / force (fig. 10)", xlabel="t [s]")
for ax in axes.flat:
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
fig.savefig(FIGURES / "scara.png", dpi=110)

# %% [markdown]
# The stabilized arm in motion (`ukjax.animate`): the column, the two arms and the tool's
# slide, with the tool's gap to the point of the path where it should be in red.

# %%
stabilized = ukjax.ConstrainedSystem(arm, model.constraints, ukjax.Baumgarte(0.5, 200.0))
gif = FIGURES / "scara.gif"
_ = ukjax.animate(stabilized, runs["Baumgarte α=0.5, β=200"][0], gif, fps=20, every=10)
if "get_ipython" in globals():  # run as a notebook (the documentation site): show it
    import base64

    from IPython.display import HTML, display

    display(HTML(f'<img src="data:image/gif;base64,{base64.b64encode(gif.read_bytes()).decode()}">'))
