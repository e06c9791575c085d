"""PyTree helpers for the loops' buffers and for custom VJPs: one home for each.

A buffer is a PyTree whose leaves have a leading axis of rows (one per step, anchor or
checkpoint slot); `row` reads one, `set_row` writes one, `zero_rows` allocates them.
"""

import jax
import jax.numpy as jnp
import numpy as np

from .custom_types import Y


def row(tree, i):
    """Row `i` of every leaf of `tree`."""
    return jax.tree.map(lambda x: x[i], tree)


def set_row(buffer, i, value):
    """`buffer` with row `i` of each leaf set to the matching leaf of `value`; an
    out-of-range `i` writes nothing (`mode="drop"`), which is how a write is skipped.
    `i` is one row or distinct rows (`unique_indices`: JAX's JVP of the write is then
    the same write of the tangents, where for possibly repeated rows it masks the
    whole buffer, a cost in the buffer's size on every write of a second derivative)."""
    return jax.tree.map(
        lambda b, v: b.at[i].set(v, mode="drop", unique_indices=True), buffer, value
    )


def zero_rows(tree, size: int):
    """A buffer of `size` rows of zeros, each row shaped like `tree` (same dtypes)."""
    return jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)), x.dtype), tree)


def tree_zeros_like(tree):
    """Zeros shaped like every leaf of `tree`."""
    return jax.tree.map(jnp.zeros_like, tree)


def zero_tangent(x):
    """The zero tangent (or cotangent) of array `x`: zeros of its dtype, `float0` zeros
    for an integer or boolean array (JAX's tangent type for those)."""
    if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(jnp.shape(x), dtype=jax.dtypes.float0)


def largest_magnitude(tree, dtype) -> jax.Array:
    """`max |x|` over the inexact leaves of `tree` (`None` leaves skipped), in `dtype`;
    0 for none."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    peaks = [jnp.max(jnp.abs(x), initial=0).astype(dtype) for x in leaves]
    return jnp.max(jnp.stack(peaks), initial=0) if peaks else jnp.zeros((), dtype)


def tree_add(a, b):
    """The leafwise sum of two PyTrees of the same structure."""
    return jax.tree.map(jnp.add, a, b)


def materialize(ct, like):
    """A cotangent with its `None` leaves (symbolic zeros) replaced by zeros shaped like
    the matching leaves of `like` (`None` where `like` has `None` too)."""

    def leaf(c, x):
        return (None if x is None else jnp.zeros_like(x)) if c is None else c

    return jax.tree.map(leaf, ct, like, is_leaf=lambda c: c is None)


def as_arrays(tree):
    """Turn typed Python scalars (how JAX hands weakly typed primals to a custom VJP)
    back into arrays, so the closure-converted vector field sees what it was traced with:
    weakly typed, as the scalar was (an integer in `args` then multiplies a float64 state
    under strict promotion, as it did before)."""
    typed = lambda x: isinstance(x, float | int | complex) and hasattr(x, "dtype")
    return jax.tree.map(lambda x: _weak_array(x) if typed(x) else x, tree)


def _weak_array(x) -> jax.Array:
    """A typed Python scalar as a weakly typed array of its dtype (strongly typed only
    where its dtype is not the one a Python scalar of its kind gets)."""
    array = jnp.asarray(x)
    return array if array.dtype == x.dtype else jnp.asarray(x, x.dtype)


def all_finite(tree) -> jax.Array:
    """Whether every element of every leaf of `tree` is finite (True for no leaves)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def nbytes(tree) -> int:
    """Bytes of the array leaves (arrays or `jax.ShapeDtypeStruct`s) of `tree`."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "shape") and hasattr(x, "dtype")]
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)


def real_view(tree: Y) -> Y:
    """`tree` with each complex leaf `z` replaced by the real array `[z.real, z.imag]`
    (stacked on a new last axis); real leaves unchanged.

    The stiff solvers work on this real view, so their Jacobians are those of the real
    system in `(Re y, Im y)`: right for every vector field, holomorphic or not (the
    complex Jacobian `df/dy` describes only holomorphic fields). For a holomorphic
    field the real-view step equals the complex one, at twice the unknowns.
    `odeckpt.testing` checks the gradients of complex leaves through it too."""
    split = lambda x: jnp.stack([x.real, x.imag], axis=-1) if is_complex(x) else x
    return jax.tree.map(split, tree)


def from_real_view(tree: Y, like: Y) -> Y:
    """The inverse of `real_view`: leaves of `tree` made complex where those of `like`
    (arrays or `jax.ShapeDtypeStruct`s) are."""

    def join(x, proto):
        if not is_complex(proto):
            return x
        return jax.lax.complex(x[..., 0], x[..., 1]).astype(proto.dtype)

    return jax.tree.map(join, tree, like)


def is_complex(x) -> bool:
    """Whether an array (or `jax.ShapeDtypeStruct`) has a complex dtype."""
    return jnp.issubdtype(x.dtype, jnp.complexfloating)
