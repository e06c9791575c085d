"""`any_in_batch`: a loop condition that stays unbatched under `jax.vmap`."""

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
