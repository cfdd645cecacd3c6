"""The event-driven route's event function: a value that stays positive while every contact's
mode holds (`mode_values`), read by the vector field at each step's last stage and by the
root finder that locates a mode's end."""

import jax.numpy as jnp

from ._unilateral import CONE, OPEN, PULL, SLIDING, STICKING, ContactState, norm

# Event values are kept this far above zero where a mode begins: diffrax's events fire when a
# value goes from positive to non-positive, and a mode begins where its own condition is zero
# (a contact released at λₙ = 0, a slide started at zero slip). Gaps and slip speeds in the
# model's units. Forces, relative to each contact's own force scale at the segment's start
# (`ContactSolution.scale`): twice
# what the modes' search accepts (`PULL`, `CONE`), as a value that started a segment below zero
# would hide every event of that segment.
_GAP_OFFSET = 1e-12
_FORCE_OFFSET = 2.0
# The root finder stops where the value is below 1e-14 (`FallingRoot`). Forces
# solved through an ill-conditioned Delassus matrix (Cassie's feet and loops) carry more
# round-off than that, and whether their events were located was luck: values are scaled so
# that 1e-8 (m, m/s, or relative to a contact's force scale) counts as zero. A value that
# jumps across zero still never gets there (`Status.CONTACT_UNRESOLVED`).
_EVENT_SCALE = 1e-6


def mode_values(c: ContactState, sol, modes, force_scale):
    """Positive while every contact's mode holds: an open contact's gap, a closed one's
    normal force, a sticking one's margin inside the friction cone, a sliding one's slip
    along the direction it started in. The least of them, scaled (`_EVENT_SCALE`)."""
    slip = jnp.einsum("kd,kd->k", c.slip, modes.direction)
    friction = c.friction > 0
    values = [
        jnp.where(modes.mode == OPEN, c.gap + _GAP_OFFSET, jnp.inf),
        jnp.where(modes.mode != OPEN, sol.normal / force_scale + PULL * _FORCE_OFFSET, jnp.inf),
        jnp.where(
            (modes.mode == STICKING) & friction,
            (c.friction * sol.normal - norm(sol.tangent)) / force_scale + CONE * _FORCE_OFFSET,
            jnp.inf,
        ),
        jnp.where((modes.mode == SLIDING) & friction, slip + _GAP_OFFSET, jnp.inf),
    ]
    # where no acceleration exists (a mass matrix that is not positive definite) the values
    # are NaN: no event, so that the fault stops the run (`StopAtFault`) and is reported,
    # instead of every step being rejected until max_steps
    value = _EVENT_SCALE * jnp.min(jnp.stack(values))
    return jnp.where(jnp.isnan(value), jnp.inf, value)
