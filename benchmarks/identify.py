"""Parameter identification with ukjax: open and closed chains, noise, inverse dynamics.

One row per case, then `max relative parameter error X` over the identifiable parameters of
the noise-free cases. Every case is a function with its size as arguments, so that the tests
run small versions of the same code (tests/test_fit.py).

    python benchmarks/identify.py            # full sizes (several minutes on 2 cores)
    python benchmarks/identify.py --quick    # the sizes the tests use
"""

import argparse
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import ukjax  # noqa: E402
from ukjax import models  # noqa: E402

TOL = dict(rtol=1e-12, atol=1e-12)


def double_pendulum(amplitude: float) -> ukjax.Forced:
    """A torque-driven two-link arm under gravity (the true parameters)."""
    chain = models.PlanarChain([1.0, 0.8], [1.5, 1.0], [0.5, 0.4], [0.12, 0.06])
    return ukjax.Forced(chain, models.SineInputs(jnp.eye(2), amplitude * jnp.array([1.0, 1 / 3]), [2.0, 3.0], [0.0, jnp.pi / 2]))


def inertial(system):
    """The inertial parameters of the chain inside `system`: masses and inertias."""
    while not isinstance(system, models.PlanarChain):
        system = system.system
    return system.masses, system.inertias


def off_by(system, factor_masses=1.3, factor_inertias=0.7):
    """The same system with its masses and inertias 30 % off."""
    masses, inertias = inertial(system)
    return eqx.tree_at(lambda s: inertial(s), system, (masses * factor_masses, inertias * factor_inertias))


def relative_errors(fitted, true) -> np.ndarray:
    return np.concatenate([np.ravel(f / t - 1) for f, t in zip(inertial(fitted), inertial(true))])


def open_chain(horizon: float, segments: int, amplitude: float = 3.0, rate: int = 20, max_steps: int = 100) -> dict:
    """Case 1: masses and inertias of a torque-driven double pendulum from noise-free
    positions, by single (segments = 1) or multiple shooting."""
    true = double_pendulum(amplitude)
    q0, qd0 = jnp.array([1.2, -0.4]), jnp.zeros(2)
    ts = jnp.linspace(0.0, horizon, round(rate * horizon) * segments + 1)
    measured = ukjax.simulate(true, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
    start = off_by(true)

    def residuals(model):
        return ukjax.trajectory_residuals(model, q0, qd0, ts, measured, **TOL)

    if segments == 1:
        res = ukjax.fit_least_squares(residuals, start, where=inertial, positive=True, max_steps=max_steps, progress=False)
        fitted = res.model
    else:
        shooting = ukjax.MultipleShooting.from_measurements(start, ts, measured, segments)
        where = lambda m: (*inertial(m.system), m.q_starts, m.qd_starts)  # noqa: E731
        res = ukjax.fit_least_squares(residuals, shooting, where=where, max_steps=max_steps, progress=False)
        fitted = res.model.system
    return dict(error=float(np.max(np.abs(relative_errors(fitted, true)))), rank=res.rank, parameters=len(res.names), steps=res.steps, cost=res.cost)


def coordinated_robots_driven(horizon: float, rate: int = 20):
    """The servo-control paper's coordinated robots (a 5-link closed chain, 3 DOF) driven by known motor
    torques under gravity: the true system and its noise-free record."""
    model = models.coordinated_robots()
    inputs = models.SineInputs(model.actuation, [3.0, -2.0, 2.5, 1.5, -2.0, 1.0], [1.0, 1.7, 2.3, 1.3, 2.9, 0.7], jnp.linspace(0.0, 2.0, 6))
    true = ukjax.ConstrainedSystem(ukjax.Forced(model.system, inputs), model.constraints)
    ts = jnp.linspace(0.0, horizon, round(rate * horizon) + 1)
    return true, model.q0, model.qd0, ts, ukjax.simulate(true, model.q0, model.qd0, 0.0, horizon, ts=ts, **TOL)


def closed_chain(horizon: float) -> dict:
    """Case 2: the closed chain's ten inertial parameters from its trajectory: the rank, the
    combinations the data do not determine, and the determined ones recovered."""
    true, q0, qd0, ts, sol = coordinated_robots_driven(horizon)
    start = off_by(true)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = ukjax.fit_least_squares(
            lambda m: ukjax.trajectory_residuals(m, q0, qd0, ts, sol.q, **TOL), start, where=inertial, positive=True, progress=False
        )
    # The parameters that explain the data equally well form a line (the dynamics are linear
    # in masses and inertias) along each undetermined direction: compare with the truth
    # across those lines, in kg and kg·m² relative to each true value.
    truth = np.concatenate([np.ravel(x) for x in inertial(true)])
    determined = res.determined(res.values - truth) / truth
    return dict(
        error=float(np.max(np.abs(determined))),
        rank=res.rank,
        parameters=len(res.names),
        unidentifiable=[res.describe(v) for v in res.unidentifiable],
        warned=any("determine" in str(w.message) for w in caught),
        steps=res.steps,
        cost=res.cost,
    )


class Record(eqx.Module):
    """A system and the positions measured of it."""

    system: ukjax.AbstractSystem
    measured: jax.Array


def noise(draws: int, sigma: float, horizon: float = 1.5, seed: int = 0) -> dict:
    """Case 3: Gaussian noise of standard deviation `sigma` [rad] on the positions of case 1:
    the spread of the estimates over `draws` noise draws against the predicted standard
    errors."""
    true = double_pendulum(3.0)
    q0, qd0 = jnp.array([1.2, -0.4]), jnp.zeros(2)
    ts = jnp.linspace(0.0, horizon, round(20 * horizon) + 1)
    clean = ukjax.simulate(true, q0, qd0, 0.0, horizon, ts=ts, **TOL).q
    rng = np.random.default_rng(seed)

    def residuals(record):  # one function and one `where` for every draw: compiled once
        return ukjax.trajectory_residuals(record.system, q0, qd0, ts, record.measured, **TOL)

    def where(record):
        return inertial(record.system)

    estimates, predicted = [], []
    for _ in range(draws):
        record = Record(true, clean + sigma * rng.normal(size=clean.shape))
        res = ukjax.fit_least_squares(residuals, record, where=where, noise_std=sigma, progress=False)
        estimates.append(np.concatenate([np.ravel(x) for x in where(res.model)]))
        predicted.append(res.std)
    ratio = np.std(estimates, axis=0, ddof=1) / np.mean(predicted, axis=0)
    return dict(ratio_min=float(ratio.min()), ratio_max=float(ratio.max()), ratios=ratio)


def inverse_dynamics(horizon: float) -> dict:
    """Case 4: the closed chain's inertial parameters from actuator torques measured along a
    servo-controlled trajectory, by ukjax's gradient fit and by linear least squares on the
    regressor (the torques are linear in the parameters; regressor by `jax.jacfwd`)."""
    model = models.coordinated_robots()
    passive = ukjax.ConstrainedSystem(model.system, model.constraints)
    control = ukjax.ServoControl(passive, model.servo, model.actuation)
    ts = jnp.linspace(0.0, horizon, round(20 * horizon) + 1)
    sol = ukjax.simulate(control.closed_loop(), model.q0, model.qd0, 0.0, horizon, ts=ts, **TOL)
    # one program each for the record and for the regressor with its offset
    qdd, u = jax.jit(jax.vmap(lambda t, q, qd: (control.closed_loop().acceleration(t, q, qd), control(t, q, qd))))(
        sol.ts, sol.q, sol.qd
    )
    start = off_by(control)

    def residuals(ctrl):
        return ukjax.torque_residuals(ctrl, sol.ts, sol.q, sol.qd, qdd, u)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rank is reported below
        res = ukjax.fit_least_squares(residuals, start, where=inertial, jac="bwd", progress=False)

    def predicted(theta):
        masses, inertias = jnp.split(theta, 2)
        return jnp.ravel(residuals(eqx.tree_at(inertial, control, (masses, inertias))))

    theta0 = jnp.zeros(10)
    regressor, offset = jax.jit(jax.jacfwd(lambda theta: (predicted(theta), predicted(theta)), has_aux=True))(theta0)
    linear, *_ = np.linalg.lstsq(np.asarray(regressor), -np.asarray(offset), rcond=None)
    fitted = np.concatenate([np.ravel(x) for x in inertial(res.model)])
    truth = np.concatenate([np.ravel(x) for x in inertial(control)])
    # Both solve the same linear problem; where it is rank deficient, compare the parts the
    # data determine (the residuals they predict) and the parameters along the determined
    # directions.
    _, s, Vt = np.linalg.svd(np.asarray(regressor), full_matrices=False)
    rank = int(np.sum(s > 1e-9 * s[0]))
    P = Vt[:rank].T @ Vt[:rank]
    return dict(
        agreement=float(np.max(np.abs(P @ (fitted - linear))) / np.max(np.abs(truth))),
        error=float(np.max(np.abs(P @ (fitted - truth))) / np.max(np.abs(truth))),
        rank=rank,
        parameters=10,
        fit_rank=res.rank,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small sizes of the tests")
    args = parser.parse_args()
    quick = args.quick
    print(f"{'case':<58} | result")
    errors = []

    def row(name, text, start):
        print(f"{name:<58} | {text} ({time.perf_counter() - start:.0f} s)", flush=True)

    start = time.perf_counter()
    short = open_chain(1.0 if quick else 1.5, 1)
    errors.append(short["error"])
    row("1a open chain, 1.5 s record, single shooting", f"max rel. error {short['error']:.1e}, rank {short['rank']}/{short['parameters']}, {short['steps']} steps", start)
    long = 3.0
    start = time.perf_counter()
    single = open_chain(long, 1, amplitude=6.0, max_steps=40)
    row(f"1b open chain, {long:g} s record, single shooting", f"max rel. error {single['error']:.1e} (fails: cost {single['cost']:.1e})", start)
    start = time.perf_counter()
    multiple = open_chain(long, 6, amplitude=6.0)
    errors.append(multiple["error"])
    row(f"1c open chain, {long:g} s record, 6-segment multiple shooting", f"max rel. error {multiple['error']:.1e}, rank {multiple['rank']}/{multiple['parameters']}", start)
    start = time.perf_counter()
    closed = closed_chain(0.5 if quick else 1.5)
    errors.append(closed["error"])
    row(
        "2  coordinated robots (closed chain), 10 inertial parameters",
        f"rank {closed['rank']}/{closed['parameters']}, cost {closed['cost']:.1e}, determined ones to {closed['error']:.1e}; not determined: "
        + "; ".join(closed["unidentifiable"]),
        start,
    )
    start = time.perf_counter()
    sigma = 1e-3
    spread = noise(5 if quick else 20, sigma)
    row(
        f"3  noise σ = {sigma:g} rad, {5 if quick else 20} draws",
        "spread / predicted std per parameter " + " ".join(f"{r:.2f}" for r in spread["ratios"]),
        start,
    )
    start = time.perf_counter()
    inverse = inverse_dynamics(1.0 if quick else 2.0)
    errors.append(inverse["error"])
    row(
        "4  inverse dynamics on the closed chain, fit vs regressor",
        f"rank {inverse['rank']}/10, fit − linear LS {inverse['agreement']:.1e}, determined error {inverse['error']:.1e}",
        start,
    )
    print(f"max relative parameter error {max(errors):.1e}")


if __name__ == "__main__":
    main()
