"""Telling concrete values from traced ones, at trace time."""

import jax
import numpy as np

try:  # `jax.core.concrete_or_error` is deprecated (a DeprecationWarning) in newer JAX
    from jax.extend.core import concrete_or_error as _concrete_or_error
except ImportError:  # older JAX
    from jax.core import concrete_or_error as _concrete_or_error  # pyright: ignore


def concrete(x):
    """The value of `x` as a NumPy array, or None when it is traced."""
    try:
        return np.asarray(_concrete_or_error(None, x))
    except jax.errors.ConcretizationTypeError:
        return None
