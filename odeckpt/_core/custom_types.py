"""Type aliases shared by the package."""

from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Float, Inexact, PyTree

Y: TypeAlias = PyTree[Inexact[Array, "..."]]
"""The state: any PyTree of floating arrays, real or complex (possibly empty)."""
Args: TypeAlias = PyTree[Any]
"""Extra arguments passed to the vector field."""
RealScalarLike: TypeAlias = float | int | Float[ArrayLike, ""]
"""A real scalar: a Python number or a 0-d floating array."""

__all__ = ["Args", "RealScalarLike", "Y"]
