"""The acceleration every integrator reads: the solve of a system's `Dynamics` (`solve_levels`),
on the compiled tree kernel where a backend bound the system to it, in XLA otherwise."""

from jaxtyping import Array, Float

from .._core import UKSolution
from .._dynamics import contact_level, solve_levels
from .._unilateral import ContactSolution, ContactState, Modes, contact_state, sliding_now
from . import _tree_kernel


def solve_system(
    system, t, q: Float[Array, " n"], qd: Float[Array, " n"], modes: Modes | None = None, rest=None
) -> tuple[UKSolution, ContactSolution | None, ContactState | None]:
    """`system.solve(t, q, qd)`, and with its unilateral constraints in `modes` (sliding as
    `sliding_now` says with `rest`) their solve and state: by one call of the tree kernel where
    `system` is bound to it (`_tree_kernel.solve`, `_tree_kernel.in_modes`), else by XLA.

    **Arguments:**

    - `system`: the system, bound by a backend or not.
    - `t`, `q`, `qd`: the state.
    - `modes`: the contacts' modes, None for a system without unilateral constraints.
    - `rest`: the speeds below which a sliding contact counts as at rest.

    **Returns:**

    `(solution, contacts, state)`: a `UKSolution`, and for `modes` the `ContactSolution` and
    the `ContactState` (None without).
    """
    if modes is None:
        return _tree_kernel.solve(system, t, q, qd), None, None
    fused = _tree_kernel.in_modes(system, t, q, qd, modes, rest)
    if fused is not None:
        contacts, state = fused
        return contact_level(contacts, contacts.solvable), contacts, state
    d = system.dynamics(t, q, qd)
    sol, (_, contacts, _) = solve_levels(d, sliding_now(modes, d.levels[-1].contacts, rest))
    return sol, contacts, contact_state(d.levels[-1].contacts)
