"""How ukjax compiles its programs."""

import functools

import equinox as eqx
import jax

# XLA's CPU fusion emitters (jaxlib 0.10's default) spend most of a compile in code generation
# for the many small fusions of a multibody model; the previous emitters compile it in about
# two thirds of the time and run it as fast or faster. Measured on 2 cores: XLA's compile of
# Cassie's `simulate_batch` 11.2 → 7.9 s; `ukjax bench` (256 × 200 RK4 steps) with this option
# on every program, compile 9.7 → 6.0 s (coordinated robots), 9.8 → 6.4 s (parallel robot),
# 16.4 → 12.3 s (Cassie), throughput 0.249 → 0.278, 0.081 → 0.092 and 0.007 → 0.008 M steps/s
# (the runs with it on ukjax's programs only: benchmarks/README.md). The option only concerns
# CPU code generation; other backends ignore it.
COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def _supported() -> bool:
    # A jaxlib that no longer knows the option refuses every program compiled with it: ask once.
    try:
        jax.jit(lambda x: x, compiler_options=COMPILER_OPTIONS).lower(0.0).compile()
    except jax.errors.JaxRuntimeError:
        return False
    return True


def _top_level() -> bool:
    # jax accepts compiler options only on a jit called outside every trace. Its test for that
    # is not public; without it, no options (the programs are the same, only slower to compile).
    clean = getattr(getattr(jax, "_src", None) and jax._src.core, "trace_state_clean", None)
    return bool(clean and clean())


def jit(fun):
    """`eqx.filter_jit`, compiled with `COMPILER_OPTIONS` when called outside every trace (a
    program the caller jits, vmaps or differentiates compiles with the caller's options)."""
    tuned = eqx.filter_jit(fun, compiler_options=COMPILER_OPTIONS)
    plain = eqx.filter_jit(fun)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return (tuned if _top_level() and _supported() else plain)(*args, **kwargs)

    return call
