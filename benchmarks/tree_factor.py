"""Does a factorization that follows Cassie's kinematic tree beat the dense column loops?

`M`'s below-diagonal entries in row k are non-zero only on k's path to the root (the tree's
`lower` pattern). Eliminating the leaves first (`M = Lᵀ L`, Featherstone's LTL, MuJoCo's
`mj_factorM`) keeps that pattern in `L`: no fill-in, Σₖ (depth k)² work instead of n³. Two
ways to write it for XLA, each measured against the library's dense kernels
(`ukjax._linalg`: one `fori_loop` step per column or row, n² work a step):

- unrolled: one Python step per coordinate with static index arrays (the traced program
  grows with n);
- loop: one `fori_loop` step per coordinate on rows packed to the tree's depth (each step
  gathers and scatter-adds the ancestors' entries; the program stays the same size).

Each kernel is jitted and vmapped alone over the same batch of Cassie's mass matrices near
`home` (`shared/robots/cassie.xml`: n = 35, p = 15); prints compile time and µs per member, and
each variant's time over the dense kernel's, same run.

    python benchmarks/tree_factor.py [--batch 256]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np


def ancestors(lower: np.ndarray) -> list[np.ndarray]:
    """Each coordinate's path to the root, nearest first, from the tree's `lower` pattern."""
    n = lower.shape[0]
    parent = [max((k for k in range(j) if lower[j, k]), default=-1) for j in range(n)]
    paths = []
    for j in range(n):
        path, k = [], parent[j]
        while k >= 0:
            path.append(k)
            k = parent[k]
        if set(path) != {k for k in range(j) if lower[j, k]}:
            raise ValueError("the pattern is not a tree's")
        paths.append(np.array(path, dtype=int))
    return paths


def unrolled_kernels(paths):
    n = len(paths)

    def factor(M):
        for k in range(n - 1, -1, -1):
            a = paths[k]
            d = jnp.sqrt(M[k, k])
            r = M[k, a] / d
            M = M.at[k, a].set(r).at[k, k].set(d)
            if len(a):
                M = M.at[a[:, None], a[None, :]].add(-r[:, None] * r[None, :])
        return jnp.tril(M)

    def solve(L, x):  # L⁻¹ x
        for k in range(n):
            a = paths[k]
            x = x.at[k].set((x[k] - (L[k, a] @ x[a] if len(a) else 0.0)) / L[k, k])
        return x

    def solve_T(L, x):  # L⁻ᵀ x
        for k in range(n - 1, -1, -1):
            a = paths[k]
            x = x.at[k].set(x[k] / L[k, k])
            if len(a):
                x = x.at[a].add(-jnp.multiply.outer(L[k, a], x[k]))
        return x

    return factor, solve, solve_T


def loop_kernels(paths):
    n, depth = len(paths), max(map(len, paths))
    # row k: its ancestors, padded with a spare row n that collects the padding's updates
    index = np.full((n, depth), n, dtype=np.int32)
    for k, a in enumerate(paths):
        index[k, : len(a)] = a
    index = jnp.asarray(index)  # indexed by the loop's step
    shift = np.arange(depth)[:, None] + np.arange(depth + 1)[None, :]

    def factor(M):
        # packed row k: the diagonal, then M's entries at k's ancestors, nearest first; an
        # ancestor's packed row is the tail of its descendant's, so the update is a shift
        rows = jnp.pad(M, ((0, 0), (0, 1)))[jnp.arange(n)[:, None], index]
        P = jnp.concatenate([jnp.diagonal(M)[:, None], rows], 1)
        P = jnp.pad(P, ((0, 1), (0, 0)))

        def step(i, P):
            k = n - 1 - i
            d = jnp.sqrt(P[k, 0])
            r = P[k, 1:] / d
            U = r[:, None] * jnp.pad(r, (0, depth + 1))[shift]
            return P.at[k].set(jnp.concatenate([d[None], r])).at[index[k]].add(-U)

        return jax.lax.fori_loop(0, n, step, P)

    def solve(P, x):
        def step(k, x):
            return x.at[k].set((x[k] - P[k, 1:] @ x[index[k]]) / P[k, 0])

        return jax.lax.fori_loop(0, n, step, jnp.pad(x, [(0, 1)] + [(0, 0)] * (x.ndim - 1)))[:n]

    def solve_T(P, x):
        def step(i, x):
            k = n - 1 - i
            x = x.at[k].set(x[k] / P[k, 0])
            return x.at[index[k]].add(-jnp.multiply.outer(P[k, 1:], x[k]))

        return jax.lax.fori_loop(0, n, step, jnp.pad(x, [(0, 1)] + [(0, 0)] * (x.ndim - 1)))[:n]

    return factor, solve, solve_T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    batch = parser.parse_args().batch
    jax.config.update("jax_enable_x64", True)
    from tree_profile import cassie_batch, timed  # beside this script

    from ukjax import _linalg as la

    model, _, _, _, _, M, Q, A, _ = cassie_batch(batch)
    paths = ancestors(model.system._topology.lower)

    # Every route computes M⁻¹Q and Wᵀ Aᵀ (W Wᵀ = M⁻¹: W = L⁻ᵀ for the dense L Lᵀ, W = L⁻¹
    # for the tree's Lᵀ L), the two products the U-K solve needs from the factor.
    routes = {"dense column loops (the library's)": (la.cholesky, la.cho_solve, la.solve_lower)}
    for name, kernels in (
        ("tree, unrolled", unrolled_kernels),
        ("tree, loop over packed rows", loop_kernels),
    ):
        factor, solve, solve_T = kernels(paths)
        routes[name] = (factor, lambda L, x, s=solve, t=solve_T: s(L, t(L, x)), solve_T)
    exact = jnp.linalg.solve(M, Q[..., None])[..., 0]
    print(f"Cassie: n = {M.shape[1]}, p = {A.shape[1]}, batch {batch}, jax {jax.__version__}")
    print(f"{'route':36s} {'part':10s} {'compile s':>9s} {'µs/member':>10s} {'/dense':>7s}")
    base = {}
    for name, (factor, solve_M, solve_W) in routes.items():
        L, c1, t1 = timed(factor, M, repeats=9)
        x, c2, t2 = timed(solve_M, L, Q, repeats=9)
        _, c3, t3 = timed(lambda L, A, solve_W=solve_W: solve_W(L, A.T), L, A, repeats=9)
        error = float(jnp.max(jnp.abs(x - exact)) / jnp.max(jnp.abs(exact)))
        for part, c, t in (("factor", c1, t1), ("M⁻¹Q", c2, t2), ("Wᵀ Aᵀ", c3, t3)):
            base.setdefault(part, t)
            print(f"{name:36s} {part:10s} {c:9.2f} {t:10.2f} {t / base[part]:7.2f}")
        print(f"{name:36s} M⁻¹Q relative to LAPACK's solve: {error:.1e}")


if __name__ == "__main__":
    main()
