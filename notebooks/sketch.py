# %% [markdown]
# # Drawing your own system
#
# [`ukjax.animate`][] draws a system through its `sketch(t, q)` method, which returns a
# [`ukjax.Sketch`][]: the links as segments `(l, 2, d)`, the joints as points `(k, d)` and,
# optionally, gaps `(g, 2, d)` that a constraint should keep closed (drawn in red as soon as
# they open). `d` is 2 for a planar system, 3 for a spatial one. Systems built by ukjax (every
# mechanism in `ukjax.models`, every MJCF or URDF robot) bring their own; a system you write
# yourself gets one by deriving from [`ukjax.AbstractDrawn`][] too and defining the method.
# Wrappers (`ConstrainedSystem`, `Forced`,
# `ComposedSystem`) draw what they wrap, so a constrained system is drawn for free.
#
# Here: a double pendulum in Cartesian coordinates, `q = (x₁, y₁, x₂, y₂)`, whose two rods are
# holonomic constraints.

# %%
import os
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)
import ukjax

FIGURES = Path(os.environ.get("UKJAX_FIGURES", "notebooks/figures"))
FIGURES.mkdir(parents=True, exist_ok=True)


class CartesianPendulum(ukjax.AbstractUnconstrainedSystem, ukjax.AbstractDrawn):
    """Two point masses under gravity, drawn as a chain from the pivot at the origin."""

    masses: jax.Array

    def mass_matrix(self, t, q):
        return jnp.diag(jnp.repeat(self.masses, 2))

    def forces(self, t, q, qd):
        return jnp.stack([0.0, -9.81 * self.masses[0], 0.0, -9.81 * self.masses[1]])

    def sketch(self, t, q):
        pivot, one, two = jnp.zeros(2), q[:2], q[2:]
        links = jnp.stack([jnp.stack([pivot, one]), jnp.stack([one, two])])  # (2 links, 2 ends, 2D)
        return ukjax.Sketch(links, jnp.stack([pivot, one, two]))


rods = [
    ukjax.Holonomic(lambda t, q: q[:2] @ q[:2] - 1.0),
    ukjax.Holonomic(lambda t, q: (q[2:] - q[:2]) @ (q[2:] - q[:2]) - 0.5**2),
]
pendulum = ukjax.ConstrainedSystem(CartesianPendulum(jnp.array([1.0, 0.5])), rods)
q0 = jnp.array([1.0, 0.0, 1.5, 0.0])  # both rods horizontal, at rest
sol = ukjax.simulate(pendulum, q0, jnp.zeros(4), 0.0, 2.0, ts=jnp.linspace(0, 2, 41), rtol=1e-10, atol=1e-10)
print("largest rod violation:", float(jnp.max(jnp.abs(sol.phi))))

# %% [markdown]
# The drawing of one configuration is an ordinary value: check it before animating.

# %%
print(pendulum.sketch(0.0, q0))
gif = FIGURES / "cartesian_pendulum.gif"
_ = ukjax.animate(pendulum, sol, gif, fps=20)
if "get_ipython" in globals():  # run as a notebook (the documentation site): show it
    import base64

    from IPython.display import HTML, display

    display(HTML(f'<img src="data:image/gif;base64,{base64.b64encode(gif.read_bytes()).decode()}">'))

# %% [markdown]
# A constraint can add to the drawing too: derive it from
# [`ukjax.AbstractDrawnConstraint`][] and give it `sketch(self, system, t, q)`, returning a
# `Sketch` (or None), as `ukjax.models.Connect` does for the gap of a loop closure.
