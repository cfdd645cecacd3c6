import os

# The tests' own jitted programs compile as ukjax compiles its (ukjax._jit.COMPILER_OPTIONS);
# set before the first computation, when XLA reads its flags. Processes the tests start
# inherit it.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_use_fusion_emitters=false").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
