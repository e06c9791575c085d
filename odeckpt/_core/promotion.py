"""Explicit dtype promotion, for `jax_numpy_dtype_promotion="strict"`.

Strict promotion refuses implicit mixes of strongly typed arrays (int32 with bool,
float32 with float64, ints with floats). Where odeckpt mixes them on purpose (a float32
state against float64 times, say), it casts explicitly to the dtype that standard
promotion gives, so that results are bit for bit those of standard promotion.
"""

import jax
import jax.numpy as jnp


def promoted_dtype(*values) -> jnp.dtype:
    """`jnp.result_type(*values)` under standard promotion, whatever the mode."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(*values)


def promoted(*values) -> tuple[jax.Array, ...]:
    """`values` as arrays of the dtype JAX's standard promotion gives them together.

    Only those of another dtype are cast, so weakly typed values (Python scalars) keep
    their weak type where the dtype already agrees, as under standard promotion."""
    dtype = promoted_dtype(*values)
    arrays = [jnp.asarray(v) for v in values]
    return tuple(a if a.dtype == dtype else a.astype(dtype) for a in arrays)


def real_dtype(dtype) -> jnp.dtype:
    """The real dtype of a floating dtype: float32 for complex64, itself for a real one
    (the dtype of norms, distances and tolerances measured on such values)."""
    return jnp.finfo(dtype).dtype
