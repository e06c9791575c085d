"""PyTree helpers for the loops' buffers and for custom VJPs: one home for each.

A buffer is a PyTree whose leaves have a leading axis of rows (one per step, anchor or
checkpoint slot); `row` reads one, `set_row` writes one, `zero_rows` allocates them.
"""

import jax
import jax.numpy as jnp
import numpy as np


def row(tree, i):
    """Row `i` of every leaf of `tree`."""
    return jax.tree.map(lambda x: x[i], tree)


def set_row(buffer, i, value):
    """`buffer` with row `i` of each leaf set to the matching leaf of `value`; an
    out-of-range `i` writes nothing (`mode="drop"`), which is how a write is skipped."""
    return jax.tree.map(lambda b, v: b.at[i].set(v, mode="drop"), buffer, value)


def zero_rows(tree, size: int):
    """A buffer of `size` rows of zeros, each row shaped like `tree` (same dtypes)."""
    return jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)), x.dtype), tree)


def tree_zeros_like(tree):
    """Zeros shaped like every leaf of `tree`."""
    return jax.tree.map(jnp.zeros_like, tree)


def tree_add(a, b):
    """The leafwise sum of two PyTrees of the same structure."""
    return jax.tree.map(jnp.add, a, b)


def materialize(ct, like):
    """A cotangent with its `None` leaves (symbolic zeros) replaced by zeros shaped like
    the matching leaves of `like`."""
    return jax.tree.map(
        lambda c, x: jnp.zeros_like(x) if c is None else c, ct, like, is_leaf=lambda c: c is None
    )


def as_arrays(tree):
    """Turn typed Python scalars (how JAX hands weakly typed primals to a custom VJP)
    back into arrays, so the closure-converted vector field sees what it was traced with."""
    typed = lambda x: isinstance(x, float | int | complex) and hasattr(x, "dtype")  # noqa: E731
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if typed(x) else x, tree)


def all_finite(tree) -> jax.Array:
    """Whether every element of every leaf of `tree` is finite (True for no leaves)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def nbytes(tree) -> int:
    """Bytes of the array leaves (arrays or `jax.ShapeDtypeStruct`s) of `tree`."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "shape") and hasattr(x, "dtype")]
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
