"""How long a fixed step an explicit Runge–Kutta solver can take on a system: its stability
function, its limit on the real axis, and the limit at a run's start from the linearization
of the applied forces (servos' gains, springs and damping against the mass matrix)."""

import math
import warnings
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from ._solvers import RK4


def stability_function(solver: diffrax.AbstractSolver) -> Callable[[complex], complex] | None:
    """`R(z) = 1 + z bᵀ(I − zA)⁻¹𝟙` of an explicit Runge–Kutta solver (None for others)."""
    if not isinstance(solver, (diffrax.AbstractERK, RK4)):
        return None
    tableau = solver.tableau
    rows = [np.zeros(0)] + [np.asarray(a) for a in tableau.a_lower]
    b = np.asarray(tableau.b_sol)

    def R(z):
        stages = []
        for a in rows:
            stages.append(1 + z * sum(a_j * y_j for a_j, y_j in zip(a, stages)))
        return 1 + z * sum(b_i * y_i for b_i, y_i in zip(b, stages))

    return R


def real_stability_limit(solver: diffrax.AbstractSolver) -> float:
    """The largest `x` with `|R(−s)| ≤ 1` for every `s ∈ (0, x]`: an explicit Runge–Kutta
    solver is stable on `ẏ = −ωy` at step `h` while `ωh ≤ x` (2.785 for RK4). `inf` for
    implicit solvers, which have no such bound.

    **Arguments:**

    - `solver`: a diffrax solver.

    **Returns:**

    The bound `x`, a float.
    """
    R = stability_function(solver)
    if R is None:
        return math.inf
    s = np.arange(1, 200_001) * 1e-4
    unstable = np.abs(R(-s)) > 1
    return float(s[np.argmax(unstable)] - 1e-4) if unstable.any() else math.inf


@eqx.filter_jit
def _linearization(system, t, q, qd):
    """`(M, K, D, A)` at `(t, q, q̇)`: the mass matrix, the applied forces' stiffness
    `−∂Q/∂q` and damping `−∂Q/∂q̇` (gravity's and the velocity terms' shares included), and
    the equality rows of every constraint level."""
    K, D = jax.jacfwd(lambda q, qd: -system.forces(t, q, qd), argnums=(0, 1))(q, qd)
    rows = [level.rows.A for level in system.constraint_levels(t, q, qd)]
    A = jnp.concatenate(rows) if rows else jnp.zeros((0, q.shape[0]), q.dtype)
    return system.mass_matrix(t, q), K, D, A


def _basis(x: Float[np.ndarray, "a b"], *, null: bool) -> Float[np.ndarray, "b c"]:
    """An orthonormal basis of the null space of `x` (`null`) or of the range of the
    symmetric `x`, by the SVD, to 1e-10 of its largest singular value."""
    if x.shape[0] == 0:
        return np.eye(x.shape[1])
    _, sigma, vt = np.linalg.svd(x)
    rank = int(np.sum(sigma > 1e-10 * (sigma[0] if sigma.size else 0.0)))
    return vt[rank:].T if null else vt[:rank].T


def linear_modes(
    M: Float[Array, "n n"], K: Float[Array, "n n"], D: Float[Array, "n n"], A: Float[Array, "p n"]
) -> Complex[np.ndarray, " m"]:
    """The eigenvalues `s` of `M s² + D s + K = 0` on the motions the rows `A` allow (and
    the mass matrix moves: a quaternion's norm has no mass): the linearized motion's modes
    `exp(s t)`, on the host, from the first-order form. A constraint only removes modes, and
    a light link in a loop moves with the heavy ones (Cassie's rods)."""
    M, K, D, A = (np.asarray(x, np.float64) for x in (M, K, D, A))
    N = _basis(A, null=True)
    M, K, D = (N.T @ x @ N for x in (M, K, D))
    R = _basis(M, null=False)
    M, K, D = (R.T @ x @ R for x in (M, K, D))
    m = M.shape[0]
    if m == 0:
        return np.zeros(0, complex)
    first_order = np.block([[np.zeros((m, m)), np.eye(m)], [-np.linalg.solve(M, K), -np.linalg.solve(M, D)]])
    return np.linalg.eigvals(first_order)


def step_limit(
    solver: diffrax.AbstractSolver, eigenvalues: Complex[np.ndarray, " m"], span: float, up_to: float = math.inf
) -> float:
    """The longest fixed step `h` (within 1 %) at which `solver` amplifies no mode by more than
    twice what the motion itself does over `span`: `(|R(h s)| / max(1, |exp(h s)|))^(span / h)
    ≤ 2` for every eigenvalue `s`, at `h` and every shorter step. `inf` for a solver without
    a stability function (an implicit one) or where every step up to `span` passes.

    **Arguments:**

    - `solver`, `eigenvalues`, `span`: the solver, the linearized motion's modes, the run's
      length.
    - `up_to`: the steps are tried up to the first at or past it only (the limit where it is
      shorter, else `inf`): whether a step `h` is past the limit is `h > step_limit(...,
      up_to=h)`, for a fraction of the work.

    **Returns:**

    The limit, a float.
    """
    R = stability_function(solver)
    if R is None or span <= 0 or eigenvalues.size == 0:
        return math.inf
    fastest = float(np.max(np.abs(eigenvalues)))
    if fastest == 0:
        return math.inf
    # from a step at which every mode is resolved, up to the whole run, 1 % apart
    steps = np.geomspace(min(span, 1e-3 / fastest), span, 2_000)
    steps = steps[: int(np.searchsorted(steps, up_to)) + 1]
    z = steps[:, None] * eigenvalues[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        excess = np.log(np.abs(R(z))) - np.maximum(0.0, z.real)
        growth = np.max(excess, axis=1) * np.ceil(span / steps)
    bad = ~(growth <= math.log(2.0))
    if not bad.any():
        return math.inf
    first = int(np.argmax(bad))
    return float(steps[first - 1]) if first > 0 else 0.0


def warn_if_unstable(system, solver: diffrax.AbstractSolver, t0, q0, qd0, span: float, dt0: float) -> None:
    """Warn where a fixed step `dt0` is past `step_limit` at the start `(t0, q0, q̇0)`, from
    the linearization of the applied forces on the motions the equality rows allow. Nothing
    happens for a solver without a stability function, or inside the caller's trace (a
    traced parameter, an outer `jit`), where the linearization is not known."""
    if stability_function(solver) is None:
        return
    try:
        M, K, D, A = _linearization(system, jnp.asarray(t0, q0.dtype), q0, qd0)
    except (TypeError, ValueError, NotImplementedError):
        # forces that forward mode cannot pass (a host callback, a custom_vjp): no estimate,
        # and the run goes on as it would have
        return
    if any(isinstance(x, jax.core.Tracer) for x in (M, K, D, A)):
        return  # inside the caller's trace (a traced parameter, an outer jit): no estimate
    try:
        eigenvalues = linear_modes(M, K, D, A)
    except np.linalg.LinAlgError:
        return  # no mass matrix to speak of: the run reports it
    if not np.all(np.isfinite(eigenvalues)):
        return
    if abs(dt0) <= step_limit(solver, eigenvalues, span, up_to=abs(dt0)):
        return
    limit = step_limit(solver, eigenvalues, span)
    fastest = eigenvalues[np.argmax(np.abs(eigenvalues))]
    warnings.warn(
        f"A fixed step of {abs(dt0):.3g} is past this system's stability limit for "
        f"{type(solver).__name__} at the start, about {limit:.3g}: the linearization there "
        f"(servos' gains, springs, damping and gravity against the mass matrix) has a mode "
        f"s = {fastest.real:.3g}{fastest.imag:+.3g}j (|s| = {abs(fastest):.3g} 1/s) that the steps "
        "would amplify, and the run may diverge though its status says SUCCESS. Take dt0 ≤ "
        f"{limit:.3g}, or the adaptive default.",
        RuntimeWarning,
        stacklevel=3,
    )
