"""How ukjax compiles its programs."""

import functools

import equinox as eqx
import jax

# XLA's CPU fusion emitters spend most of a multibody model's compile in code generation for its
# many small fusions; the previous emitters compile it in about two thirds of the time and run it
# as fast (`ukjax bench`'s compile column; CPU code generation only, other backends ignore it).
COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# The event-driven path runs in the compiled kernels and in control flow, where LLVM's second
# optimization level only lengthens the compile (`benchmarks/grasp.py`, `contacts.py`); the XLA
# route runs in XLA's own loops and keeps it.
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
        # jax takes compiler options only on a jit called outside every trace, and says so by
        # no public test: a traced argument means a trace (the caller's options then), and a
        # trace with none (a caller's jit of a closure) refuses them
        if compiler_options(events) is None or any(
            isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))
        ):
            return plain(*args, **kwargs)
        try:
            return tuned(*args, **kwargs)
        except ValueError as error:
            if "top-level" not in str(error):
                raise
            return plain(*args, **kwargs)

    return call
