# %% [markdown]
# # Contacts and joint limits: a bouncing ball, a scene from a file, a friction coefficient fitted
#
# 1. A ball dropped on a floor with Newton's restitution `e`: impact times and bounce heights
#    against the closed forms.
# 2. `ukjax/examples/contacts.xml`: a pendulum released onto its joint limit, a sphere that
#    slides and then rolls, a box that slides to rest on four corners, a rod standing on its
#    end; the contact modes and forces as `sol.contacts` records them.
# 3. A block thrown along a floor, its friction coefficient identified from a noisy record of
#    its position, by derivatives through the moment it stops.
#
# The formulation is on the page "Unilateral constraints and contacts".

# %%
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

jax.config.update("jax_enable_x64", True)
import ukjax

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
G = 9.81


class Block(ukjax.AbstractUnconstrainedSystem):
    """A point mass in a vertical plane: x along the floor, y above it."""

    mass: jax.Array

    def mass_matrix(self, t, q):
        return self.mass * jnp.eye(2, dtype=q.dtype)

    def forces(self, t, q, qd):
        return self.mass * jnp.array([0.0, -G], q.dtype)


def on_floor(mass, restitution, friction):
    floor = ukjax.Unilateral(
        lambda t, q: q[1], restitution=restitution, friction=friction, slip=lambda t, q, qd: qd[0]
    )
    return ukjax.ConstrainedSystem(Block(jnp.asarray(mass)), floor)


# %% [markdown]
# ## 1. A bouncing ball

# %%
h, e = 1.0, 0.7
ts = jnp.linspace(0.0, 3.0, 601)
sol = ukjax.simulate(on_floor(1.0, e, 0.0), jnp.array([0.0, h]), jnp.zeros(2), 0.0, 3.0, ts=ts)
fall = np.sqrt(2 * h / G)
impacts = fall * (1 + 2 * np.cumsum(np.r_[0, e ** np.arange(1, 6)]))
found = np.asarray(sol.contacts.event_times[:6])
print("impact times", found.round(6), "closed form", impacts.round(6))
print(f"largest penetration {float(sol.contacts.penetration):.1e} m, {int(sol.contacts.events)} events")
assert np.allclose(found, impacts, rtol=1e-9)

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(ts, sol.q[:, 1], label="ukjax")
for n, t in enumerate(impacts[:5]):
    ax.plot(t + e ** (n + 1) * fall, e ** (2 * n + 2) * h, "k+", label="e²ⁿ h" if n == 0 else None)
ax.set(xlabel="t [s]", ylabel="height [m]", title=f"a ball dropped from {h} m, e = {e}")
ax.legend()
fig.tight_layout()
fig.savefig(FIGURES / "contacts_ball.png")

# %% [markdown]
# ## 2. A scene from a file
# The importer reads the joint range and the geoms that may touch the floor
# (`model.unilateral`); they join the equalities in one `ConstrainedSystem`.

# %%
model = ukjax.models.from_mjcf(ukjax.examples.path("contacts.xml"))
limits, contacts = model.unilateral
print(limits.joints, contacts.names)
scene = ukjax.ConstrainedSystem(model.system, model.constraints + model.unilateral)
# q: the pendulum's angle, then the sphere's, the box's and the rod's position and quaternion
q0 = model.q0.at[0].set(np.deg2rad(75))
qd0 = jnp.zeros_like(q0).at[1].set(1.0).at[8].set(1.0)  # the sphere and the box along x at 1 m/s
ts = jnp.linspace(0.0, 1.0, 101)
sol = ukjax.simulate(scene, q0, qd0, 0.0, 1.0, ts=ts)
modes = np.asarray(sol.contacts.mode)
print("events at", np.asarray(sol.contacts.event_times[: int(sol.contacts.events)]).round(4))
print(f"penetration {float(sol.contacts.penetration):.1e} m; the pendulum's lowest angle "
      f"{np.rad2deg(float(sol.q[:, 0].min())):.6f}° (its limit: −30°)")

fig, axes = plt.subplots(1, 2, figsize=(9, 3))
axes[0].plot(ts, sol.q[:, 1], label="sphere")
axes[0].plot(ts, sol.q[:, 8], label="box")
axes[0].set(xlabel="t [s]", ylabel="x [m]", title="launched at 1 m/s")
axes[0].legend()
axes[1].plot(ts, np.rad2deg(sol.q[:, 0]))
axes[1].axhline(-30, color="k", lw=0.8)
axes[1].set(xlabel="t [s]", ylabel="pendulum [°]", title="onto its limit at −30°")
fig.tight_layout()
fig.savefig(FIGURES / "contacts_scene.png")

# %% [markdown]
# ## 3. A friction coefficient from a sliding record
# A block thrown along the floor at 2 m/s slides to rest; its position is measured every
# 20 ms with 0.1 mm of noise. The residuals are differentiated in forward mode through the
# simulation and through the event where the block stops.

# %%
true_mu = 0.35
start = jnp.array([0.0, 0.0]), jnp.array([2.0, 0.0])
ts = jnp.linspace(0.0, 1.0, 51)
clean = ukjax.simulate(on_floor(1.0, 0.0, true_mu), *start, 0.0, 1.0, ts=ts).q
measured = clean + 1e-4 * jax.random.normal(jax.random.key(0), clean.shape)
guess = on_floor(1.0, 0.0, 0.2)
fit = ukjax.fit_least_squares(
    lambda m: ukjax.trajectory_residuals(m, *start, ts, measured),
    guess,
    where=lambda m: m.constraints[0].friction,
    noise_std=1e-4,
    progress=False,
)
mu = float(fit.model.constraints[0].friction)
print(f"μ = {mu:.5f} ± {float(fit.std[0]):.1e} (true {true_mu}); the block stops at "
      f"{2.0 / (mu * G):.4f} s (true {2.0 / (true_mu * G):.4f} s)")
assert abs(mu - true_mu) < 5 * float(fit.std[0]) + 1e-6
