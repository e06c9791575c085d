"""Test configuration: float64 everywhere and no implicit rank promotion.

`ODECKPT_DTYPE_PROMOTION=strict` runs the suite under JAX's strict dtype promotion
(`jax_numpy_dtype_promotion="strict"`); the default is JAX's standard promotion.
"""

import os

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update(
    "jax_numpy_dtype_promotion", os.environ.get("ODECKPT_DTYPE_PROMOTION", "standard")
)
