"""Type aliases shared by the package."""

from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

Y: TypeAlias = PyTree[Float[Array, "..."]]
"""The state: any PyTree of floating arrays."""
Args: TypeAlias = PyTree[Any]
"""Extra arguments passed to the vector field."""
RealScalar: TypeAlias = Float[Array, ""]
RealScalarLike: TypeAlias = float | int | Float[ArrayLike, ""]
IntScalar: TypeAlias = Int[Array, ""]
BoolScalar: TypeAlias = Bool[Array, ""]

__all__ = ["Args", "BoolScalar", "IntScalar", "RealScalar", "RealScalarLike", "Y"]
