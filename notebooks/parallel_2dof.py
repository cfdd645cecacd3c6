# %% [markdown]
# # Planar 2-DOF redundantly actuated parallel robot (the parallel-robot paper [1] and the redundant-manipulator paper [4])
#
# Three 2-link chains with floating bases (12 coordinates) joined by constraints: bases fixed,
# chain ends coincident. §4.1: under `τ = [0.1 cos(πt), 0, …]` the bases stay put and the ends
# move together (figs. 3–4). §4.2: the end effector follows `x = x_e1 + 0.01 cos t`,
# `y = y_e1`, driven by the three base motors only (the redundant-manipulator paper's inverse dynamics: passive joints
# unactuated), figs. 5–6 and the redundant-manipulator paper's figs. 14–16. Last, the paper's literal cascade (the
# trajectory imposed by a second U-K level that does not know the closed chain) is compared.

# %%
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

jax.config.update("jax_enable_x64", True)
import ukjax
from ukjax.models import parallel_2dof

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
T1 = 2.0 if os.environ.get("UKJAX_FAST") else 10.0

model = parallel_2dof()
system = model.system
passive = ukjax.ConstrainedSystem(system, model.constraints)
ts = jnp.linspace(0, T1, 401)


def chain_ends(q):
    return jnp.stack([chain.joint_positions(system.part(q, name))[2] for name, chain in system.parts.items()])


# %%
torque = ukjax.Forced(system, lambda t, q, qd: jnp.zeros(12).at[0].set(0.1 * jnp.cos(jnp.pi * t)))
verification = ukjax.simulate(ukjax.ConstrainedSystem(torque, model.constraints), model.q0, model.qd0, 0.0, T1, ts=ts, rtol=1e-10, atol=1e-10)
print("§4.1 max violation (bases, ends):", float(jnp.max(jnp.abs(verification.phi))))
assert jnp.max(jnp.abs(verification.phi)) < 1e-8

# %%
ctrl = ukjax.ServoControl(passive, model.servo, model.actuation)
tracking = ukjax.simulate(ctrl.closed_loop(), model.q0, model.qd0, 0.0, T1, ts=ts, rtol=1e-10, atol=1e-10)
active = eqx.filter_jit(eqx.filter_vmap(ctrl))(tracking.ts, tracking.q, tracking.qd)
# the parallel-robot paper [1] §3 taken literally: the trajectory imposed as a second U-K solve on the closed chain
literal = ukjax.ConstrainedSystem(passive, model.servo, sequential=True)
full = eqx.filter_jit(eqx.filter_vmap(lambda t, q, qd: literal.constraint_force(t, q, qd) - passive.constraint_force(t, q, qd)))(tracking.ts, tracking.q, tracking.qd)
print("§4.2 tracking error:", float(jnp.max(jnp.abs(tracking.phi))))
assert jnp.max(jnp.abs(tracking.phi)) < 1e-8

cascade = ukjax.simulate(literal, model.q0, model.qd0, 0.0, T1, ts=ts, rtol=1e-10, atol=1e-10)
broken, followed = cascade.phi[:, :10], cascade.phi[:, 10:]  # closed-chain rows, then the trajectory's
print("the paper's literal cascade: trajectory error", float(jnp.max(jnp.abs(followed))), "but closed-chain violation", float(jnp.max(jnp.abs(broken))))
# the joint solve (the default) keeps both
joint = ukjax.simulate(ukjax.ConstrainedSystem(passive, model.servo), model.q0, model.qd0, 0.0, T1, ts=ts, rtol=1e-10, atol=1e-10)
print("joint solve: every constraint within", float(jnp.max(jnp.abs(joint.phi))))
assert jnp.max(jnp.abs(broken)) > 1e-3 and jnp.max(jnp.abs(joint.phi)) < 1e-8

# %%
fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
ends = jax.jit(jax.vmap(chain_ends))(verification.q)
for i in range(3):
    axes[0, 0].plot(ends[:, i, 0], ends[:, i, 1], ("-", "--", ":")[i], label=f"end of chain {i + 1}")
axes[0, 0].set(title="§4.1: chain ends under τ (fig. 3)", xlabel="x [m]", ylabel="y [m]")
ends = jax.jit(jax.vmap(chain_ends))(tracking.q)
for i in range(3):
    axes[0, 1].plot(tracking.ts, ends[:, i, 0], ("-", "--", ":")[i], label=f"x, chain {i + 1}")
axes[0, 1].set(title="§4.2: end-effector x (fig. 5)", xlabel="t [s]", ylabel="m")
for j, name in enumerate(("A1", "A2", "A3")):
    axes[1, 0].plot(tracking.ts, active[:, j], label=f"τ {name} (active)")
axes[1, 0].set(title="active-joint torques, passive joints unactuated", xlabel="t [s]", ylabel="N·m")
for index, name in [(0, "A1"), (1, "B1"), (4, "A2"), (5, "B2"), (8, "A3"), (9, "B3")]:
    axes[1, 1].plot(tracking.ts, full[:, index], label=name)
axes[1, 1].set(title="full U-K force of the trajectory (the redundant-manipulator paper [4] figs. 14–16)", xlabel="t [s]", ylabel="N·m")
for ax in axes.flat:
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
fig.savefig(FIGURES / "parallel_2dof.png", dpi=110)

# %% [markdown]
# The tracking run in motion (`ukjax.animate`): the three chains, their fixed bases and the
# joined ends (red: the gaps the constraints keep closed).

# %%
gif = FIGURES / "parallel_2dof.gif"
_ = ukjax.animate(ctrl.closed_loop(), tracking, gif, fps=20, every=max(1, len(tracking.ts) // 60))
if "get_ipython" in globals():  # run as a notebook (the documentation site): show it
    import base64

    from IPython.display import HTML, display

    display(HTML(f'<img src="data:image/gif;base64,{base64.b64encode(gif.read_bytes()).decode()}">'))
