"""Primitives with their own `jax.vmap` rules, for the loops of the solve and its passes.

Why each exists: `docs/performance.md`, "Loops under `jax.vmap`".
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import custom_batching, lax

from .tree import zero_tangent


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


def batched_like(tree, like):
    """`tree` unchanged; under `jax.vmap`, with every leaf batched if any leaf of `like` is.

    For a `lax.while_loop`'s initial carry, so that JAX batches the body once
    (`docs/performance.md`, "Loops under `jax.vmap`"). Its JVP is the identity.
    """
    leaves, treedef = jax.tree.flatten(tree)
    return jax.tree.unflatten(treedef, _batched_like(leaves, jax.tree.leaves(like)))


# Second derivatives (`jax.hessian`, `jax.jacfwd(jax.grad(f))`, `jax.vmap` of a
# Hessian-vector product) take the JVP of the backward passes, which use
# `batched_like` and `batch_cond`, and batch it. JAX's own JVP of a `custom_vmap`
# function is wrong under `jax.vmap` whenever a primal and its tangent are not batched
# alike (the batch axis comes out twice: jax 0.10), and fails an assertion when an
# argument holds a `None` node. So each has a `custom_jvp` whose tangent is computed by
# the same primitive again (never by JAX's JVP of it), and takes flat lists of leaves.


@jax.custom_jvp
def _batched_like(leaves: list, like: list) -> list:
    return _broadcast_like(leaves, like)


@_batched_like.defjvp
def _batched_like_jvp(primals, tangents):
    (leaves, like), (dots, like_dots) = primals, tangents
    inexact = [eqx.is_inexact_array(x) for x in leaves]
    # tangents batched as they will end: like `like` or its tangents (linear in `dots`)
    both = [*like, *(d for x, d in zip(like, like_dots, strict=True) if eqx.is_inexact_array(x))]
    moved = iter(_broadcast_like([d for d, f in zip(dots, inexact, strict=True) if f], both))
    return _broadcast_like(leaves, like), [
        next(moved) if f else d for d, f in zip(dots, inexact, strict=True)
    ]


@custom_batching.custom_vmap
def _broadcast_like(leaves: list, like: list) -> list:
    return leaves


@_broadcast_like.def_vmap
def _broadcast_like_rule(axis_size, in_batched, leaves, like):
    leaves_batched, like_batched = in_batched
    if not any(like_batched):
        return leaves, leaves_batched

    def broadcast(x, batched):
        return x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))

    return [broadcast(x, b) for x, b in zip(leaves, leaves_batched, strict=True)], [
        True for _ in leaves
    ]


def batch_cond(pred, true_fn, false_fn, *operands):
    """`lax.cond(pred, true_fn, false_fn, *operands)`, with a `jax.vmap` rule that
    leaves unbatched operands unbatched (`docs/performance.md`, "Loops under `jax.vmap`").

    Forward mode only (its JVP cannot be transposed). Non-array operands pass through as
    static values; the branches must not close over traced values and return arrays only.
    """
    dynamic, static = eqx.partition(operands, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)

    def branch(fn):
        return lambda leaves: fn(*eqx.combine(jax.tree.unflatten(treedef, leaves), static))

    on_true, on_false = branch(true_fn), branch(false_fn)
    call = jax.custom_jvp(lambda p, leaves: _vmapped_cond(p, on_true, on_false, leaves))

    @call.defjvp
    def _jvp(primals, tangents):
        p, leaves = primals
        inexact = [eqx.is_inexact_array(x) for x in leaves]
        dots = [d for d, f in zip(tangents[1], inexact, strict=True) if f]
        yes, no = _with_tangents(on_true, inexact), _with_tangents(on_false, inexact)
        out, out_dots = _vmapped_cond(p, yes, no, [leaves, dots], tangents=True)
        out_leaves, out_def = jax.tree.flatten(out)
        out_dots = iter(out_dots)
        full = [next(out_dots) if eqx.is_inexact_array(x) else zero_tangent(x) for x in out_leaves]
        return out, jax.tree.unflatten(out_def, full)

    return call(pred, leaves)


def _with_tangents(fn, inexact: list):
    """`fn(leaves)` -> `(out, tangents of out's inexact leaves)`, a function of the
    leaves and the tangents of their inexact ones (`inexact`: which they are)."""

    def jvp_fn(operands):
        leaves, dots = operands
        dots = iter(dots)
        full = [next(dots) if f else zero_tangent(x) for x, f in zip(leaves, inexact, strict=True)]
        out, out_dot = jax.jvp(fn, (leaves,), (full,))
        pairs = zip(jax.tree.leaves(out), jax.tree.leaves(out_dot), strict=True)
        return out, [d for x, d in pairs if eqx.is_inexact_array(x)]

    return jvp_fn


def _vmapped_cond(pred, on_true, on_false, operands, *, tangents: bool = False):
    """`lax.cond(pred, on_true, on_false, operands)` with `batch_cond`'s `jax.vmap` rule.

    `tangents`: the operands are `[primals, tangents]` and the branches return
    `(out, out_tangents)`; `out` is then batched only where `pred` or a primal is (the
    rule batches every output otherwise), so that a batch of tangents (`jax.jacfwd`,
    `jax.hessian`) leaves the primal computation unbatched."""
    leaves, treedef = jax.tree.flatten(operands)
    num_primals = len(jax.tree.leaves(operands[0])) if tangents else len(leaves)

    def branch(fn):
        return lambda leaves: fn(jax.tree.unflatten(treedef, leaves))

    on_true, on_false = branch(on_true), branch(on_false)
    call = custom_batching.custom_vmap(lambda p, leaves: lax.cond(p, on_true, on_false, leaves))

    @call.def_vmap
    def _rule(axis_size, in_batched, p, leaves):
        p_batched, leaves_batched = in_batched
        axes = [0 if b else None for b in leaves_batched]
        primal_batched = p_batched or any(leaves_batched[:num_primals]) or not tangents
        out_axes = 0 if primal_batched else (None, 0)

        def vmapped(fn):
            return lambda leaves: jax.vmap(
                fn, in_axes=(axes,), out_axes=out_axes, axis_size=axis_size
            )(leaves)

        if p_batched:
            yes, no = vmapped(on_true)(leaves), vmapped(on_false)(leaves)

            def select(a, b):
                return jnp.where(jnp.reshape(p, p.shape + (1,) * (a.ndim - 1)), a, b)

            out = jax.tree.map(select, yes, no)
        else:
            out = lax.cond(p, vmapped(on_true), vmapped(on_false), leaves)
        if primal_batched:
            return out, jax.tree.map(lambda _: True, out)
        return out, (jax.tree.map(lambda _: False, out[0]), jax.tree.map(lambda _: True, out[1]))

    return call(pred, leaves)


def batch_size(tree) -> int:
    """How many batch elements `tree` is traced for: the product of the sizes of the
    `jax.vmap`s that batch its leaves (the largest over leaves), 1 outside `jax.vmap`.

    Read at trace time through a `custom_vmap` identity (`docs/performance.md`, "Loops
    under `jax.vmap`"); `jax.vmap(jax.jit(f))` counts as unbatched.
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
