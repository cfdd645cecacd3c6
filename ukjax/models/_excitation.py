"""Known input signals for identification experiments."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._arrays import as_inexact


class SineInputs(eqx.Module):
    """Inputs `u_j(t) = a_j sin(ω_j t + φ_j)` entering as generalized forces `B u`: an
    excitation signal for identification (`ukjax.Forced(system, SineInputs(...))`).

    **Arguments:**

    - `actuation`: the actuation matrix `B`, shape (n, m).
    - `amplitude`, `frequency`, `phase`: shape (m,) each.
    """

    actuation: Float[Array, "n m"] = eqx.field(converter=as_inexact)
    amplitude: Float[Array, " m"] = eqx.field(converter=as_inexact)
    frequency: Float[Array, " m"] = eqx.field(converter=as_inexact)
    phase: Float[Array, " m"] = eqx.field(converter=as_inexact)

    def __call__(
        self, t: Float[ArrayLike, ""], q: Float[Array, " n"], qd: Float[Array, " n"]
    ) -> Float[Array, " n"]:
        return self.actuation @ (self.amplitude * jnp.sin(self.frequency * t + self.phase))
