"""Gradient accuracy of the pseudo-inverse routes on nearly parallel constraint rows.

For B with two rows a distance `eps` apart, compares d/ds Σ sin(B(s)⁺ e) at s = 0, with
B(s) = B + s dB, from: jnp.linalg.pinv (custom JVP), lineax's SVD solve, and the Cholesky
route of the Gram matrix, against a 60-digit mpmath finite difference.

    python benchmarks/pinv_accuracy.py
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import lineax as lx
import mpmath as mp
import numpy as np

jax.config.update("jax_enable_x64", True)
mp.mp.dps = 60


def pinv(B, e):
    return jnp.linalg.pinv(B) @ e


def lineax_svd(B, e):
    return lx.linear_solve(lx.MatrixLinearOperator(B), e, lx.SVD()).value


def cholesky(B, e):
    return B.T @ jsl.cho_solve((jnp.linalg.cholesky(B @ B.T), True), e)


def reference(B, e, dB):
    def f(s):
        Bs = mp.matrix(B.tolist()) + s * mp.matrix(dB.tolist())
        x = Bs.T * mp.inverse(Bs * Bs.T) * mp.matrix(e.tolist())
        return sum(mp.sin(x[i]) for i in range(x.rows))

    h = mp.mpf("1e-25")
    return float((f(h) - f(-h)) / (2 * h))


def main():
    rng = np.random.default_rng(0)
    routes = {"jnp.linalg.pinv": pinv, "lineax SVD": lineax_svd, "cholesky(BBᵀ)": cholesky}
    print(f"{'eps':>7} {'cond(B)':>9} | " + " | ".join(f"{k:>16}" for k in routes))
    for eps in [1e-2, 1e-4, 1e-6, 1e-8]:
        B = rng.normal(size=(3, 6))
        B[1] = B[0] + eps * rng.normal(size=6)
        e, dB = rng.normal(size=3), rng.normal(size=(3, 6))
        ref = reference(B, e, dB)
        errors = []
        for route in routes.values():

            def f(s, route=route, B=jnp.asarray(B), dB=jnp.asarray(dB), e=jnp.asarray(e)):
                return jnp.sum(jnp.sin(route(B + s * dB, e)))

            errors.append(abs(float(jax.grad(f)(0.0)) - ref) / abs(ref))
        print(f"{eps:>7.0e} {np.linalg.cond(B):>9.1e} | " + " | ".join(f"{x:>16.2e}" for x in errors))
    print("relative error of the gradient against the 60-digit reference")


if __name__ == "__main__":
    main()
