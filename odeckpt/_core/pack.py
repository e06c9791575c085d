"""A PyTree's scalar leaves packed into a few short vectors, and unpacked again.

A checkpoint's small values (times, counters, controller memory, status) travel as a
few vectors of at most `VECTOR_BYTES`, not a dozen leaves. See `docs/performance.md`,
"Windows and packed checkpoints".
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

VECTOR_BYTES = 16


class _Leaf(eqx.Module):
    vector: int  # index into `vectors`; -1: kept as is, in `loose`
    index: int  # position in that vector, or in `loose`


class Packed(eqx.Module):
    """Scalars of one dtype, `VECTOR_BYTES` to a vector. Leaves that are not scalars
    stay as they are (`loose`), and so do weakly typed ones: packing would make them
    strongly typed."""

    vectors: tuple[jax.Array, ...]
    loose: tuple[jax.Array, ...]
    treedef: Any = eqx.field(static=True)
    leaves: tuple[_Leaf, ...] = eqx.field(static=True)


def pack(tree) -> Packed:
    """Pack `tree`, whose leaves must all be arrays."""
    values, treedef = jax.tree.flatten(tree)
    values = [jnp.asarray(x) for x in values]
    vectors: list[list[jax.Array]] = []
    open_vector: dict = {}  # dtype -> index of its vector being filled
    loose, leaves = [], []
    for x in values:
        if x.weak_type or x.ndim > 0:
            leaves.append(_Leaf(-1, len(loose)))
            loose.append(x)
            continue
        k = open_vector.get(x.dtype)
        if k is None or (len(vectors[k]) + 1) * x.dtype.itemsize > VECTOR_BYTES:
            k = open_vector[x.dtype] = len(vectors)
            vectors.append([])
        leaves.append(_Leaf(k, len(vectors[k])))
        vectors[k].append(x)
    packed = tuple(jnp.stack(v) for v in vectors)
    return Packed(packed, tuple(loose), treedef, tuple(leaves))


def unpack(packed: Packed):
    """The PyTree `pack` was given."""
    values = [
        packed.loose[leaf.index] if leaf.vector < 0 else packed.vectors[leaf.vector][leaf.index]
        for leaf in packed.leaves
    ]
    return jax.tree.unflatten(packed.treedef, values)
