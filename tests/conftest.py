import gc
import os

# The tests' own jitted programs compile as ukjax compiles its (ukjax._jit.COMPILER_OPTIONS),
# and without LLVM's optimizations: the suite is mostly compile time, and its programs run
# briefly (the event loops of tests/test_contacts.py and tests/test_grasp.py compile in 30 %
# less time; tests/test_grasp.py with tests/test_fit.py, alone: 103 → 90 s). Set before the
# first computation, when XLA reads its flags; processes the tests start inherit them.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

# Tracing allocates millions of short-lived objects, and at Python's default threshold (a
# collection every 700 net allocations) the collector took 7 % of the time: 6.3 s of
# tests/test_fit.py run alone, 3.1 s of tests/test_composition.py; 1.4 and 0.6 s at this one,
# at about the same peak memory (1.33 GB against 1.30). The tests' processes only; ukjax leaves
# the interpreter as it is.
gc.set_threshold(50_000, 10, 10)


def pytest_configure(config):
    config.addinivalue_line("markers", "long: a test of many seconds, started before the short ones")


def pytest_collection_modifyitems(items):
    """Tests marked `long` first. xdist hands out the tests in this order (after the
    `xdist_group`s, which it sends first), topping a worker up whenever it has two or fewer
    left: with long tests at the end, one worker ran them while the other had nothing left
    (worker loads 325 against 292 s). Each kind keeps its order."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
