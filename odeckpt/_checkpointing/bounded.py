"""`bounded_loop`: the loop as a scan of `max_steps` iterations, which JAX
differentiates in both modes.

Each iteration is a `lax.cond` (a step, or nothing once the solve has ended); reverse
mode stores every iteration's residuals, so memory grows with `max_steps`. The scan
stacks every iteration's record and emitter spans, and each output row is evaluated
afterwards from the record of the step whose span holds it (a write loop of
step-dependent length would be a while loop, which reverse mode cannot go through).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .body import AbstractForwardBody, Emitter, LoopOutput
from .forward import keep_going, report_progress


def bounded_loop(body: AbstractForwardBody, problem, state0, max_steps: int) -> LoopOutput:
    """`forward_loop`'s result, through a loop that forward and reverse mode both go
    through (at the memory of storing every one of `max_steps` iterations)."""
    record0 = jax.tree.map(
        lambda s: jnp.zeros(s.shape, s.dtype), eqx.filter_eval_shape(body.step, problem, state0)[1]
    )
    dynamic0, static = eqx.partition(state0, eqx.is_array)

    def iteration(carry, _):
        dynamic, i = carry
        state = eqx.combine(dynamic, static)

        def advance(dynamic):
            state = eqx.combine(dynamic, static)
            report_progress(body, problem, state0, state, i)
            new, record, _ = body.step(problem, state)
            ends = _span_ends(body, problem, state, new)
            return eqx.partition(new, eqx.is_array)[0], record, ends

        def stay(dynamic):
            return dynamic, record0, _span_ends(body, problem, state, state)

        go = keep_going(body, problem, max_steps, state, i)
        dynamic, record, ends = lax.cond(go, advance, stay, dynamic)
        return (dynamic, i + go.astype(jnp.int32)), (record, ends)

    init = (dynamic0, jnp.asarray(0, jnp.int32))
    (dynamic, n), (records, ends) = lax.scan(iteration, init, None, length=max_steps)
    starts = _span_starts(body, problem, state0)
    buffers = tuple(
        _emitted_rows(e, problem, records, lo, his)
        for e, lo, his in zip(body.emitters, starts, ends, strict=True)
    )
    return LoopOutput(eqx.combine(dynamic, static), buffers, n)


def _span_starts(body: AbstractForwardBody, problem, state0) -> tuple:
    return tuple(jnp.asarray(e.span(problem, state0, state0)[0], jnp.int32) for e in body.emitters)


def _span_ends(body: AbstractForwardBody, problem, state, new) -> tuple:
    return tuple(jnp.asarray(e.span(problem, state, new)[1], jnp.int32) for e in body.emitters)


def _emitted_rows(e: Emitter, problem, records, lo, his):
    """Emitter `e`'s buffer: row `j` from the record of the step whose span holds it
    (`lo <= j < his[-1]`; `his` is non-decreasing), `inf` where no step wrote."""

    def row(j):
        k = jnp.minimum(jnp.searchsorted(his, j, side="right").astype(jnp.int32), his.shape[0] - 1)
        written = (j >= lo) & (j < his[-1])
        # An unwritten row's value is discarded: no cotangent may flow back through it
        # (its record may be the zeros of an iteration that took no step).
        hold = lambda x: jnp.where(written, x, lax.stop_gradient(x))
        record = jax.tree.map(lambda r: hold(r[k]), records)
        value = e.value(_with_inexact_held(problem, hold), record, j)
        return jax.tree.map(lambda v: jnp.where(written, v, jnp.full_like(v, jnp.inf)), value)

    return jax.vmap(row)(jnp.arange(e.size, dtype=jnp.int32))


def _with_inexact_held(tree, hold):
    dynamic, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(jax.tree.map(hold, dynamic), static)
