"""The one contract of every system, `Dynamics` (`M`, `Q` and the constraints by level, each
evaluated once), and the one solve of it: the acceleration with the diagnostics of every
level, the unilateral constraints in given modes or in those that solve the complementarity
problem."""

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ._constraints import ConstraintRows
from ._core import Method, UKSolution, check_shapes, free_solve, uk_solve
from ._backends._contact_kernel import ContactKernel
from ._narrow import select_in, solve_in
from ._unilateral import ContactRows, ContactSolution, Modes, candidates, concatenate


class ConstraintLevel(NamedTuple):
    """Constraint rows solved together in one U-K solve.

    **Attributes:**

    - `rows`: the stacked rows, `b` already stabilized.
    - `nonideal`: the non-ideal constraint force specification `c` (n,), or None.
    - `method`: the pseudo-inverse route of this solve.
    - `contacts`: the unilateral constraints solved with these rows (the last level's only),
      or None.
    - `kernel`: the compiled contact solve the contacts are solved on (set by a backend), or
      None: XLA's.
    """

    rows: ConstraintRows
    nonideal: Float[Array, " n"] | None
    method: Method
    contacts: ContactRows | None = None
    kernel: ContactKernel | None = None


class Dynamics(NamedTuple):
    """A system's equations of motion at one state, each term evaluated once.

    **Attributes:**

    - `M`: the mass matrix (n, n).
    - `Q`: the applied generalized forces (n,): everything except constraint forces.
    - `levels`: the constraints, one [`ukjax.ConstraintLevel`][] per U-K solve. All constraints
      of a system tree form one level; a sequential cascade adds one level per
      `ConstrainedSystem(..., sequential=True)`, each solved under the forces of the ones
      before it (the parallel-robot paper [1] §3 taken literally).
    - `inconsistency`: how far the forces miss a demand of their own, reported with the
      levels' (servo constraints the inputs cannot realise: [`ukjax.ClosedLoop`][]), or None.
    """

    M: Float[Array, "n n"]
    Q: Float[Array, " n"]
    levels: tuple[ConstraintLevel, ...]
    inconsistency: Float[Array, ""] | None = None


def solve_contacts(M, Q, level: ConstraintLevel, modes: Modes | None = None, differentiable: bool = True):
    """A level with unilateral constraints: for the given modes (the simulation's, between
    events), or for the modes that solve the complementarity problem at this state
    (`differentiable` as for `select_modes`).

    **Returns:**

    `(modes, solution, converged)` as `select_modes` gives them.
    """
    contacts = level.contacts
    if level.nonideal is not None:
        Q = Q + level.nonideal  # the U-K non-ideal term is this force's share off the rows
    if modes is None:
        slipping = contacts.tangent.phid.reshape(-1, 2)
        return select_in(
            M, Q, level.rows, contacts, candidates(contacts), slipping, differentiable, kernel=level.kernel
        )
    # at given modes nothing asks for the contacts' scales (the events' values are relative to
    # the scales at the stretch's start)
    sol = solve_in(M, Q, level.rows, contacts, modes, scales=False, kernel=level.kernel)
    return modes, sol, sol.solvable


def contact_level(c: ContactSolution, converged: Bool[Array, ""], nonideal=None) -> UKSolution:
    """A level's `UKSolution` from its contact solve `c` (`nonideal` its non-ideal force):
    no modes solving the contact problem (Painlevé's paradox, or a search that did not end)
    read as constraints that cannot be met."""
    return UKSolution(
        c.x,
        c.constraint_force + (0 if nonideal is None else nonideal),
        jnp.where(converged, c.inconsistency, jnp.inf),
        c.mass_ok,
        jnp.array(True),
    )


def solve_levels(
    d: Dynamics, modes: Modes | None = None, differentiable: bool = True
) -> tuple[UKSolution, tuple | None]:
    """The acceleration from `Dynamics`, level by level, with the diagnostics of every solve;
    the unilateral constraints of the last level in the given `modes` (default: the modes
    that solve the complementarity problem at this state; `differentiable` as for
    `select_modes`).

    **Returns:**

    `(solution, contacts)`: a `UKSolution`, and `(modes, ContactSolution, converged)` for
    the unilateral constraints (None without any).
    """
    if d.inconsistency is not None:
        solution, contacts = solve_levels(d._replace(inconsistency=None), modes, differentiable)
        return solution._replace(inconsistency=jnp.maximum(solution.inconsistency, d.inconsistency)), contacts
    if not d.levels:
        return free_solve(d.M, d.Q), None
    Q, sols, contacts = d.Q, [], None
    for level in d.levels:
        check_shapes(d.M, Q, level.rows.A, level.rows.b, level.nonideal)
        if level.contacts is None:
            sol = uk_solve(d.M, Q, level.rows.A, level.rows.b, level.nonideal, level.method)
        else:
            contacts = solve_contacts(d.M, Q, level, modes, differentiable)
            _, c, converged = contacts
            sol = contact_level(c, converged, level.nonideal)
        Q = Q + sol.constraint_force
        sols.append(sol)
    solution = UKSolution(
        sols[-1].acceleration,
        Q - d.Q,
        functools.reduce(jnp.maximum, [sol.inconsistency for sol in sols]),
        functools.reduce(jnp.logical_and, [sol.mass_ok for sol in sols]),
        functools.reduce(jnp.logical_and, [sol.rank_ok for sol in sols]),
    )
    return solution, contacts


def solve_dynamics(d: Dynamics) -> UKSolution:
    """The acceleration from `Dynamics` with the diagnostics of every solve (`solve_levels`)."""
    return solve_levels(d)[0]


def merge(levels: Sequence[ConstraintLevel], method: Method) -> ConstraintLevel:
    """Several levels as one: rows and contacts stacked, non-ideal terms added."""
    rows = jax.tree.map(lambda *xs: jnp.concatenate(xs), *(level.rows for level in levels))
    nonideal = [level.nonideal for level in levels if level.nonideal is not None]
    return ConstraintLevel(
        rows,
        functools.reduce(jnp.add, nonideal) if nonideal else None,
        method,
        concatenate([level.contacts for level in levels]),
        next((level.kernel for level in levels if level.kernel is not None), None),
    )


def levels_violation(levels: Sequence[ConstraintLevel]) -> tuple[Float[Array, " p"], Float[Array, " p"]]:
    """`(phi, phid)` of `AbstractSystem.violation` from levels already evaluated."""
    phi, phid = [], []
    for level in levels:
        phi.append(level.rows.phi)
        phid.append(level.rows.phid)
        if level.contacts is not None:
            # a unilateral row is violated only by penetration
            phi.append(jnp.minimum(level.contacts.normal.phi, 0))
            phid.append(jnp.zeros_like(level.contacts.normal.phi))
    return jnp.concatenate(phi), jnp.concatenate(phid)
