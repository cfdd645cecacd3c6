"""The solvers ukjax adds to diffrax's: the classic fixed-step RK4, and the choice for stiff
problems."""

from collections.abc import Callable
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx


def stiff_solver(rtol: float = 1e-8, atol: float = 1e-8) -> diffrax.AbstractSolver:
    """The solver for stiff problems (large Baumgarte gains): `Kvaerno5` with a Newton root
    finder. Implicit solvers only pay off with Newton; with diffrax's default chord iteration
    they take as many steps as an explicit solver.

    **Arguments:**

    - `rtol`, `atol`: tolerances of the Newton iteration.

    **Returns:**

    A diffrax solver to pass as `simulate(..., solver=...)`.
    """
    return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol))


class RK4(diffrax.AbstractSolver):
    """The classic fourth-order Runge–Kutta method (MATLAB's `ode4`), for fixed steps
    (`simulate(..., solver=ukjax.RK4(), adaptive=False, dt0=h)`): it has no error estimate.
    Its dense output is the cubic Hermite polynomial on the step's first and last stages, as
    diffrax gives a Runge–Kutta method of this tableau.
    """

    # Its four stages written out, not a diffrax Runge–Kutta method of this tableau: that
    # loops over the stages inside every step, which costs a small robot under its servos a
    # third of its step (`benchmarks/arm_batches.py`). The tableau stays for its stability
    # function (`_stability.py`).
    tableau: ClassVar[diffrax.ButcherTableau] = diffrax.ButcherTableau(
        c=np.array([0.5, 0.5, 1.0]),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.zeros(4),
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    )
    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        h = terms.contr(t0, t1)
        half = 0.5 * h

        def stage(t, k, a):  # the step's increment h f(t, y0 + a k)
            y = y0 if k is None else jax.tree.map(lambda y, k: y + a * k, y0, k)
            return terms.vf_prod(t, y, args, h)

        k1 = stage(t0, None, 0.0)
        k2 = stage(t0 + half, k1, 0.5)
        k3 = stage(t0 + half, k2, 0.5)
        k4 = stage(t1, k3, 1.0)
        y1 = jax.tree.map(lambda y, a, b, c, d: y + (a + 2 * b + 2 * c + d) / 6, y0, k1, k2, k3, k4)
        k = jax.tree.map(lambda first, last: jnp.stack([first, last]), k1, k4)
        return y1, None, dict(y0=y0, y1=y1, k=k), None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)
