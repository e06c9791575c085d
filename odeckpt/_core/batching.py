"""Primitives with their own `jax.vmap` rules, for the loops of the solve and its
reverse passes: `any_in_batch`, a loop condition that stays unbatched; `min_in_batch`,
the batch's least value, unbatched; `batched_like`,
a loop's initial carry batched as it will end; and `batch_cond`, a `lax.cond` whose branches
keep unbatched operands (the vector field's parameters) unbatched. `batch_size` reads,
at trace time, how many batch elements a value is traced for."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import custom_batching, lax


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
def min_in_batch(x):
    """`x` unchanged; under `jax.vmap`, the least of the batch elements' values
    (unbatched). For reports about the whole batch, such as a progress meter's."""
    return x


@min_in_batch.def_vmap
def _min_rule(axis_size, in_batched, x):
    (batched,) = in_batched
    return (jnp.min(x, axis=0) if batched else x), False


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


def batch_cond(pred, true_fn, false_fn, *operands):
    """`lax.cond(pred, true_fn, false_fn, *operands)`, with a `jax.vmap` rule that
    leaves unbatched operands unbatched.

    Under `jax.vmap` with a batched `pred`, `lax.cond` runs both branches on operands
    that it has all broadcast to the batch: a branch that reads the vector field's
    parameters then works on one copy of the weights per batch element (batched
    matrix products, where one product over the whole batch would do), in every
    iteration of the loop around it. Here each branch is vmapped over the operands
    that are batched and the outputs are selected; with an unbatched `pred` one
    branch runs, vmapped the same way.

    Non-array leaves of the operands are passed through as static values. The
    branches must not close over traced values (pass those as operands) and must
    return arrays only.
    """
    dynamic, static = eqx.partition(operands, eqx.is_array)

    def branch(fn):
        return lambda dynamic: fn(*eqx.combine(dynamic, static))

    on_true, on_false = branch(true_fn), branch(false_fn)
    call = custom_batching.custom_vmap(lambda p, dynamic: lax.cond(p, on_true, on_false, dynamic))

    @call.def_vmap
    def _rule(axis_size, in_batched, p, dynamic):
        p_batched, dynamic_batched = in_batched
        axes = jax.tree.map(lambda b: 0 if b else None, dynamic_batched)

        def vmapped(fn):
            return lambda dynamic: jax.vmap(fn, in_axes=(axes,), axis_size=axis_size)(dynamic)

        if p_batched:
            yes, no = vmapped(on_true)(dynamic), vmapped(on_false)(dynamic)

            def select(a, b):
                return jnp.where(jnp.reshape(p, p.shape + (1,) * (a.ndim - 1)), a, b)

            out = jax.tree.map(select, yes, no)
        else:
            out = lax.cond(p, vmapped(on_true), vmapped(on_false), dynamic)
        return out, jax.tree.map(lambda _: True, out)

    return call(pred, dynamic)


def batch_size(tree) -> int:
    """How many batch elements `tree` is traced for: the product of the sizes of the
    `jax.vmap`s that batch its leaves (the largest over leaves), 1 outside `jax.vmap`.

    Asked of JAX through its public batching API at trace time: each leaf goes through
    an identity with a `custom_vmap` rule, which JAX calls, while tracing, once for every
    `jax.vmap` that batches the leaf, with that map's size (the rule re-applies the
    identity, so an enclosing `jax.vmap` calls it in turn). The identity's result is
    unused and never reaches the compiled program. `jax.grad`/`jax.jvp` around the code
    are seen through (the leaf's gradient is stopped first). A function traced on its
    own first (`jax.vmap(jax.jit(f))`) counts as unbatched.
    """
    largest = 1
    for leaf in jax.tree.leaves(tree):
        if eqx.is_array_like(leaf):
            largest = max(largest, _vmap_sizes(lax.stop_gradient(jnp.asarray(leaf))))
    return largest


def _vmap_sizes(x) -> int:
    """The product of the sizes of the `jax.vmap`s that batch `x` (see `batch_size`)."""
    sizes = []

    @custom_batching.custom_vmap
    def probe(x):
        return x

    @probe.def_vmap
    def _rule(axis_size, in_batched, x):
        (batched,) = in_batched
        if batched:
            sizes.append(axis_size)
        return probe(x), batched

    probe(x)
    return math.prod(sizes)
