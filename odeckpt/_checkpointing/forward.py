"""The plain loop, `forward_loop` (and `forward_only_loop`, the same without a bound and
without reverse mode), and the output writing every forward pass shares."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import as_arrays, set_row

from .body import AbstractForwardBody, Emitter, LoopOutput


def empty_buffers(body: AbstractForwardBody, problem, record) -> tuple:
    """Output buffers (filled with inf) for a step whose record is shaped like `record`."""

    def empty(e: Emitter):
        shape = eqx.filter_eval_shape(e.value, problem, record, jnp.asarray(0))
        fill = lambda s: jnp.full((e.size, *s.shape), jnp.inf, s.dtype)
        return jax.tree.map(fill, shape)

    return tuple(empty(e) for e in body.emitters)


def write_outputs(body: AbstractForwardBody, problem, state, new, record, buffers) -> tuple:
    """The buffers with the outputs of the step `state -> new` (its `record`) written."""
    out = []
    for e, buf in zip(body.emitters, buffers, strict=True):
        lo, hi = e.span(problem, state, new)

        def put(j, b, e=e):
            value = e.value(problem, record, j)
            return set_row(b, j, value)

        out.append(lax.fori_loop(lo, hi, put, buf))
    return tuple(out)


def keep_going(body: AbstractForwardBody, problem, max_steps, state, i):
    """Whether the loop takes step `i` from `state`."""
    going = body.cond(problem, state)
    return going if max_steps is None else going & (i < max_steps)


def report_progress(body: AbstractForwardBody, problem, state0, state, i):
    """Call the body's progress report, if it has one, before step `i`."""
    if body.progress is not None:
        body.progress(problem, state0, state, i)


class _Carry(eqx.Module):
    state: object
    buffers: tuple
    num_steps: jax.Array


def forward_loop(body: AbstractForwardBody, problem, state0, max_steps: int | None) -> LoopOutput:
    """The plain loop (no reverse mode; forward mode works through it)."""

    def cond(carry: _Carry):
        return keep_going(body, problem, max_steps, carry.state, carry.num_steps)

    def step(carry: _Carry):
        state, i = carry.state, carry.num_steps
        report_progress(body, problem, state0, state, i)
        new, record, _ = body.step(problem, state)
        return _Carry(new, write_outputs(body, problem, state, new, record, carry.buffers), i + 1)

    # The body may be any `AbstractForwardBody` (the continuous adjoints' taped bodies
    # record no decisions), so the record's shape comes from the step alone.
    record = eqx.filter_eval_shape(body.step, problem, state0)[1]
    init = _Carry(state0, empty_buffers(body, problem, record), jnp.asarray(0, jnp.int32))
    out = lax.while_loop(cond, step, init)
    return LoopOutput(out.state, out.buffers, out.num_steps)


def forward_only_loop(body: AbstractForwardBody, problem, state0, message: str) -> LoopOutput:
    """`forward_loop` without a bound on the steps, for a solve that reverse mode must
    not go through: its VJP raises `ValueError(message)` when reverse mode reaches it
    (at trace time), instead of failing inside JAX."""
    return _forward_only((problem, state0), body, message)


@eqx.filter_custom_vjp
def _forward_only(vjp_arg, body, message):
    problem, state0 = as_arrays(vjp_arg)
    return forward_loop(body, problem, state0, None)


@_forward_only.def_fwd
def _forward_only_fwd(perturbed, vjp_arg, body, message):
    problem, state0 = as_arrays(vjp_arg)
    return forward_loop(body, problem, state0, None), None


@_forward_only.def_bwd
def _forward_only_bwd(residuals, grad_obj, perturbed, vjp_arg, body, message):
    raise ValueError(message)
