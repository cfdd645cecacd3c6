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
# A program with unilateral constraints (the event-driven path) runs in the compiled kernels and
# in control flow, and LLVM's second optimization level only lengthens its compile. Measured
# alternately on 2 cores, compile and throughput at the first level against the second: the held
# box (benchmarks/grasp.py) 9.5 against 10.5 s, 398 against 410 sim s/s; contacts.xml 5.5
# against 6.0 s, 86.3 against 86.5; the ball 4.3 against 4.5 s, 285 against 280; Cassie
# standing 7.7 against 8.4 s, 4.02 against 4.00. A program of the XLA route runs in XLA's own
# loops and needs the second: the hand-built parallel robot 0.069 against 0.079-0.083 M steps/s.
EVENT_COMPILER_OPTIONS = {**COMPILER_OPTIONS, "xla_backend_optimization_level": 1}
_OPTIONS = {False: COMPILER_OPTIONS, True: EVENT_COMPILER_OPTIONS}  # by `events`


@functools.cache
def _supported(options: tuple) -> bool:
    # A jaxlib that no longer knows an option refuses every program compiled with it: ask once.
    try:
        jax.jit(lambda x: x, compiler_options=dict(options)).lower(0.0).compile()
    except jax.errors.JaxRuntimeError:
        return False
    return True


def compiler_options(events: bool = False) -> dict | None:
    """The compiler options of ukjax's programs, those of the event-driven path where `events`;
    None where this jaxlib refuses them."""
    return _OPTIONS[events] if _supported(tuple(sorted(_OPTIONS[events].items()))) else None


def _top_level() -> bool:
    # jax accepts compiler options only on a jit called outside every trace. Its test for that
    # is not public; without it, no options (the programs are the same, only slower to compile).
    clean = getattr(getattr(jax, "_src", None) and jax._src.core, "trace_state_clean", None)
    return bool(clean and clean())


def jit(fun=None, *, events: bool = False):
    """`eqx.filter_jit`, compiled with `compiler_options(events)` when called outside every
    trace (a program the caller jits, vmaps or differentiates compiles with the caller's
    options). `events`: whether `fun` runs the event-driven path."""
    if fun is None:
        return functools.partial(jit, events=events)
    tuned = eqx.filter_jit(fun, compiler_options=_OPTIONS[events])
    plain = eqx.filter_jit(fun)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return (tuned if _top_level() and compiler_options(events) is not None else plain)(*args, **kwargs)

    return call
