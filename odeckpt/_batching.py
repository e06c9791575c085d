"""Two identities with their own `jax.vmap` rules, for the checkpointed loop:
`any_in_batch`, a loop condition that stays unbatched, and `batched_like`, a loop's
initial carry batched as it will end."""

import jax
import jax.numpy as jnp
from jax import custom_batching


@custom_batching.custom_vmap
def any_in_batch(going):
    """`going` unchanged; under `jax.vmap`, whether any batch element's is true.

    A `lax.while_loop` whose condition is batched runs until every element is done and
    selects, per iteration, between the old and new value of every carried array, for
    every element. Loops whose carry holds large buffers use this instead: the
    condition is unbatched, and the body turns itself into a no-op for elements that
    are done.
    """
    return going


@any_in_batch.def_vmap
def _any_rule(axis_size, in_batched, going):
    (batched,) = in_batched
    return (jnp.any(going, axis=0) if batched else going), False


@custom_batching.custom_vmap
def batched_like(tree, like):
    """`tree` unchanged; under `jax.vmap`, with every leaf batched if any leaf of `like`
    is.

    For the initial carry of a `lax.while_loop`. Under `jax.vmap` JAX finds which
    carried values are batched by a fixpoint: it batches the body once, and again
    whenever a carry that started unbatched comes out batched, recursively through
    nested loops. A carry that starts as batched as it will end needs one pass, which
    cuts the trace time of nested loops under `jax.vmap` (about 60% of it for a
    vmapped neural ODE's gradient).
    """
    return tree


@batched_like.def_vmap
def _batched_like_rule(axis_size, in_batched, tree, like):
    tree_batched, like_batched = in_batched
    if not any(jax.tree.leaves(like_batched)):
        return tree, tree_batched

    def broadcast(x, batched):
        return x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))

    out = jax.tree.map(broadcast, tree, tree_batched)
    return out, jax.tree.map(lambda _: True, tree_batched)
