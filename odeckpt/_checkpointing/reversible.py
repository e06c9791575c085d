"""`reversible_loop`: `forward_loop` whose reverse mode reconstructs each state from
the next one with the step's algebraic inverse, instead of storing it.

The forward pass records, per step, only the scalars its inverse needs
(`Inverse.scalars`: the step's start and end times, 16 bytes in float64). The backward
pass starts from the final state and, for steps n-1, ..., 0, reconstructs the state the
step started from and the decisions the step took (`Inverse.undo`) and reverses the step
from there exactly as the checkpointed loop does (`reverse.reverse_step`: one `jax.vjp`
of the step under its recorded decisions, plus the cotangents of the outputs it wrote).
The gradient is the checkpointed loop's, up to the round-off of the reconstruction, with
two states in memory (the one in hand and its cotangent) whatever the number of steps.
Where `Inverse.refused` says the gradient cannot be trusted (from the reconstructed
initial state, the two passes' checksums, `Inverse.checksum` merged over every step, and
how much the backward pass amplified round-off: the largest magnitude it handled, its
state cotangents' `Inverse.size` and the problem's per-step cotangents, over the largest
of the gradient it returns, `Inverse.initial_size` included), the cotangents are NaN,
or `Inverse.message` is raised.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import (
    as_arrays,
    batched_like,
    largest_magnitude,
    materialize,
    row,
    set_row,
    tree_add,
    tree_zeros_like,
    zero_rows,
)

from .body import Checksum, Emitter, ForwardBody, Inverse, LoopBody, LoopOutput, step_shapes
from .forward import empty_buffers, forward_loop
from .reverse import is_diff, reverse_step


class _Log(eqx.Module):
    """What the forward pass records per step (`max_steps` rows each)."""

    scalars: object  # what `inverse.scalars` recorded, of the state the step started from
    taken: jax.Array  # steps taken so far
    checksum: Checksum  # `inverse.checksum` merged over the states the steps started from


def reversible_loop(body: LoopBody, inverse: Inverse, problem, state0, max_steps: int):
    """`forward_loop` whose reverse mode reverses each step from the state `inverse`
    reconstructs (see the module docstring)."""
    like = step_shapes(body, problem, state0)
    return _reversible((problem, state0), body, inverse, max_steps, like.record)


@eqx.filter_custom_vjp
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _reversible(vjp_arg, body, inverse, max_steps, record_like):
    problem, state0 = as_arrays(vjp_arg)
    return forward_loop(body, problem, state0, max_steps)


def _logging_body(body: LoopBody, inverse: Inverse) -> ForwardBody:
    """`body` over the state `(state, log)`, recording each step into the log."""

    def step(problem, carry):
        state, log = carry
        new, record, accepted = body.step(problem, state)
        i = log.taken
        checksum = log.checksum.merge(inverse.checksum(state, i))
        log = _Log(set_row(log.scalars, i, inverse.scalars(state)), i + 1, checksum)
        return (new, log), record, accepted

    emitters = tuple(
        Emitter(lambda p, s, n, e=e: e.span(p, s[0], n[0]), e.value, e.size) for e in body.emitters
    )
    progress = None
    if body.progress is not None:
        report = body.progress
        progress = lambda problem, c0, c, i: report(problem, c0[0], c[0], i)
    cond = lambda problem, carry: body.cond(problem, carry[0])
    return ForwardBody(step=step, cond=cond, emitters=emitters, progress=progress)


@_reversible.def_fwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _reversible_fwd(perturbed, vjp_arg, body, inverse, max_steps, record_like):
    problem, state0 = as_arrays(vjp_arg)
    scalars = eqx.filter_eval_shape(inverse.scalars, state0)
    zero = _zero_checksum(inverse, state0)
    log0 = _Log(zero_rows(scalars, max_steps), jnp.asarray(0, jnp.int32), zero)
    out = forward_loop(_logging_body(body, inverse), problem, (state0, log0), max_steps)
    final, log = out.state
    return LoopOutput(final, out.buffers, out.num_steps), (final, log)


class _Unwind(eqx.Module):
    """The carry of the backward pass."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    state: object  # the state after step b-1 (reconstructed)
    ct_problem: object  # of the problem's floating leaves, summed over the reversed steps
    ct_state: object  # of `state`
    checksum: Checksum  # `inverse.checksum` merged over the reconstructed states
    peak: jax.Array  # the largest `inverse.size` of `ct_state` so far
    magnitude: object  # `|d_problem|` summed over the reversed steps (like `ct_problem`)


@_reversible.def_bwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _reversible_bwd(residuals, grad_obj, perturbed, vjp_arg, body, inverse, max_steps, record_like):
    problem, state0 = as_arrays(vjp_arg)
    final, log = residuals
    buffers_like = eqx.filter_eval_shape(empty_buffers, body, problem, record_like)
    ct_state = eqx.filter(materialize(grad_obj.state, state0), is_diff)
    ct_buffers = materialize(grad_obj.buffers, buffers_like)

    def step(carry: _Unwind) -> _Unwind:
        i = carry.b - 1
        state, decisions = inverse.undo(problem, carry.state, row(log.scalars, i))
        d_problem, ct = reverse_step(body, problem, state, decisions, carry.ct_state, ct_buffers)
        checksum = carry.checksum.merge(inverse.checksum(state, i))
        peak = jnp.maximum(carry.peak, inverse.size(ct))
        magnitude = tree_add(carry.magnitude, jax.tree.map(jnp.abs, d_problem))
        ct_problem = tree_add(carry.ct_problem, d_problem)
        return _Unwind(i, state, ct_problem, ct, checksum, peak, magnitude)

    zeros = tree_zeros_like(eqx.filter(problem, is_diff))
    seed = inverse.size(ct_state)  # the largest cotangent the outputs received
    seed = jnp.maximum(seed, largest_magnitude(ct_buffers, seed.dtype))
    checksum0 = _zero_checksum(inverse, state0)
    init = _Unwind(log.taken, final, zeros, ct_state, checksum0, seed, zeros)
    init = batched_like(init, (log.taken, final, ct_state, log.checksum))
    out = lax.while_loop(lambda carry: carry.b > 0, step, init)
    # the largest magnitude the pass handled over the largest of the gradient it returns
    handled = jnp.maximum(out.peak, largest_magnitude(out.magnitude, seed.dtype))
    returned = largest_magnitude(out.ct_problem, seed.dtype)
    returned = jnp.maximum(returned, inverse.initial_size(problem, state0, out.ct_state))
    refused = inverse.refused(
        state0, out.state, log.checksum, out.checksum, _ratio(handled, returned)
    )
    return _unless_refused(inverse, refused, (out.ct_problem, out.ct_state))


def _ratio(a, b):
    """`a / b`, 1 where `b` is 0."""
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1), 1)


def _zero_checksum(inverse: Inverse, state) -> Checksum:
    like = eqx.filter_eval_shape(inverse.checksum, state, jnp.asarray(0, jnp.int32))
    return jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)


def _unless_refused(inverse: Inverse, refused, cotangents):
    """The cotangents, or NaN (or `inverse.message` raised) where they are refused."""
    nan = lambda x: jnp.where(refused, jnp.nan, x)
    cotangents = jax.tree.map(nan, cotangents)
    if inverse.message is None:
        return cotangents
    return eqx.error_if(cotangents, refused, inverse.message)
