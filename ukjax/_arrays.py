"""Small array helpers every room of ukjax uses: the ground floor, importing nothing of ukjax."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike


def as_inexact(x: ArrayLike) -> Array:
    """`x` as a floating-point array, so that `jax.grad` reaches it (integers are promoted)."""
    if isinstance(x, np.ndarray):
        # With the dtype named, `asarray` does not compile a program per new shape (a file's
        # import converts tens of NumPy arrays).
        dtype = x.dtype if np.issubdtype(x.dtype, np.inexact) else float
        return jnp.asarray(x, jax.dtypes.canonicalize_dtype(dtype))
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(float))
