"""Reproduce every quantitative claim of the seed papers with ukjax.

Prints one row per claim (name, the paper's value, ukjax's value, pass/fail) and last
`reproduced K/N seed claims`; exits non-zero if any claim fails. The test suite runs each
claim as a test (tests/test_seeds.py). To add a claim, decorate a function returning
`(ukjax's value as text, passed)` with `@claim(name, paper's value)`.

    python benchmarks/reproduce_seeds.py
"""

import sys
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402

try:
    from . import references  # noqa: E402
except ImportError:  # run as a script
    import references  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)


class Claim(NamedTuple):
    name: str
    paper: str
    check: Callable[[], tuple[str, bool]]


CLAIMS: list[Claim] = []


def claim(name: str, paper: str):
    def register(check):
        CLAIMS.append(Claim(name, paper, check))
        return check

    return register


def _scara_run(stabilization):
    model = models.scara()
    csys = ukjax.ConstrainedSystem(model.system, model.constraints, stabilization)
    return ukjax.simulate(csys, model.q0, model.qd0, 0.0, 20.0, ts=jnp.linspace(0.0, 20.0, 201), **TOL)


@claim("seed 001: SCARA z error without stabilization", "0.0005 t; 0.01 m at t = 20 s")
def scara_z_error():
    sol = _scara_run(None)
    z = sol.phi[:, 3]
    linear = float(jnp.max(jnp.abs(z + 0.0005 * sol.ts)))
    return f"|z(20)| = {abs(float(z[-1])):.6f} m, max |z + 0.0005 t| = {linear:.1e}", linear < 1e-9


@claim("seed 001: SCARA errors at 20 s with α = 0.5, β = 200", "errors suppressed (figs. 8–9)")
def scara_baumgarte():
    free, damped = _scara_run(None).phi[-1], _scara_run(ukjax.Baumgarte(0.5, 200.0)).phi[-1]
    rows = [0, 1, 3]  # x, y, z
    ratios = jnp.abs(damped[jnp.array(rows)]) / jnp.abs(free[jnp.array(rows)])
    text = ", ".join(f"{axis} {abs(float(free[r])):.1e} -> {abs(float(damped[r])):.1e}" for axis, r in zip("xyz", rows))
    return text, bool(jnp.all(ratios < 1e-2))


@claim("seed 001: SCARA mass matrix, PoE builder = eq. 34 = Pinocchio", "eq. 34")
def scara_mass_matrix():
    arm = models.ScaraArm()
    chain, pinocchio = models.scara_chain(arm), references.pinocchio_scara(arm)
    worst = 0.0
    for q in np.random.default_rng(0).normal(size=(5, 4)):
        closed = np.asarray(arm.mass_matrix(0.0, jnp.asarray(q)))
        worst = max(worst, np.abs(np.asarray(chain.mass_matrix(0.0, jnp.asarray(q))) - closed).max())
        worst = max(worst, np.abs(pinocchio(q, np.zeros(4))[0] - closed).max())
    return f"max difference {worst:.1e}", worst < 1e-12


@claim("seed 001: trajectory constraint in second-order form", "eq. 49 (A, b)")
def scara_constraint_rows():
    con = models.ScaraTrajectory(models.ScaraArm())
    worst = 0.0
    for t, q, qd in zip(np.linspace(0, 20, 5), *np.random.default_rng(1).normal(size=(2, 5, 4))):
        rows = con.rows(t, jnp.asarray(q), jnp.asarray(qd))
        A, b = references.seed001_A_b(t, q, qd)
        worst = max(worst, np.abs(np.asarray(rows.A) - A).max(), np.abs(np.asarray(rows.b) - b).max())
    return f"max difference {worst:.1e}", worst < 1e-12


@claim("seed 002: 5-link chain M, C q̇, G = appendix A2–A4", "A2–A4")
def seed002_appendix():
    m, l, I = (np.ones(5) for _ in range(3))
    chain = models.coordinated_robots().system
    worst = 0.0
    for th, thd in np.random.default_rng(2).normal(size=(5, 2, 5)):
        M, Cqd, G = references.seed002_appendix(m, l, I, 9.8, th, thd)
        worst = max(worst, np.abs(np.asarray(chain.mass_matrix(0.0, jnp.asarray(th))) - M).max())
        worst = max(worst, np.abs(-np.asarray(chain.forces(0.0, jnp.asarray(th), jnp.asarray(thd))) - Cqd - G).max())
    return f"max difference {worst:.1e}", worst < 1e-12


@claim("seed 000: subsystem M_i, C_i q̇ = eq. 14", "eq. 14")
def seed000_eq14():
    system = models.parallel_2dof().system
    worst = 0.0
    for name, (link_a, link_b) in models.PARALLEL_2DOF_LINKS.items():
        chain = system.parts[name]
        for q, qd in np.random.default_rng(3).normal(size=(3, 2, 4)):
            M, Cqd = references.seed000_eq14(link_a, link_b, q, qd)
            worst = max(worst, np.abs(np.asarray(chain.mass_matrix(0.0, jnp.asarray(q))) - M).max())
            worst = max(worst, np.abs(-np.asarray(chain.forces(0.0, jnp.asarray(q), jnp.asarray(qd))) - Cqd).max())
    return f"max difference {worst:.1e}", worst < 1e-12


@claim("seed 000: printed q0 puts the chain ends together", "E ≈ (0.2216, 0.2980)")
def seed000_q0():
    model = models.parallel_2dof()
    tips = np.stack([np.asarray(model.system.parts[n].joint_positions(model.system.part(models.PARALLEL_2DOF_Q0, n))[2]) for n in model.system.parts])
    spread = np.abs(tips - tips.mean(axis=0)).max()
    ok = spread < 1e-4 and np.abs(tips[0] - [0.2216, 0.2980]).max() < 2e-4
    return f"E1 = ({tips[0, 0]:.4f}, {tips[0, 1]:.4f}), ends within {spread:.1e} m", bool(ok)


@claim("seed 000: bases fixed and ends joined under τ = 0.1 cos(πt), 10 s", "fixed / coincident (figs. 3–4)")
def seed000_verification():
    model = models.parallel_2dof()
    torque = ukjax.Forced(model.system, lambda t, q, qd: jnp.zeros(12).at[0].set(0.1 * jnp.cos(jnp.pi * t)))
    sol = ukjax.simulate(ukjax.ConstrainedSystem(torque, model.constraints), model.q0, model.qd0, 0.0, 10.0, ts=jnp.linspace(0, 10, 101), **TOL)
    bases, ends = float(jnp.max(jnp.abs(sol.phi[:, :6]))), float(jnp.max(jnp.abs(sol.phi[:, 6:])))
    moved = float(jnp.max(jnp.abs(sol.q[:, 0] - sol.q[0, 0])))
    return f"bases {bases:.1e} m, ends {ends:.1e} m (qa1 moves {moved:.2f} rad)", max(bases, ends) < 1e-8 and moved > 0.05


@claim("seed 002: coordinated robots stay closed under gravity, t ∈ [0, 2π]", "closed chain (eq. 60)")
def coordinated_closure():
    model = models.coordinated_robots()
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    sol = ukjax.simulate(csys, model.q0, model.qd0, 0.0, 2 * np.pi, ts=jnp.linspace(0, 2 * np.pi, 101), **TOL)
    gap = float(jnp.max(jnp.abs(sol.phi)))
    return f"max loop gap {gap:.1e} m", gap < 1e-8


def main() -> int:
    passed = 0
    width = max(len(c.name) for c in CLAIMS)
    print(f"{'claim':<{width}} | {'paper':<30} | ukjax | result")
    for c in CLAIMS:
        value, ok = c.check()
        passed += ok
        print(f"{c.name:<{width}} | {c.paper:<30} | {value} | {'pass' if ok else 'FAIL'}")
    print(f"reproduced {passed}/{len(CLAIMS)} seed claims")
    return 0 if passed == len(CLAIMS) else 1


if __name__ == "__main__":
    sys.exit(main())
