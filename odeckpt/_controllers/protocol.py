"""diffrax's controller protocol, for code that drives a controller by hand:
`init(terms, t0, t1, y0, dt0, args, func, error_order) -> (t1, state)` and
`adapt_step_size(t0, t1, y0, y1_candidate, args, y_error, error_order, state) ->
(keep_step, next_t0, next_t1, made_jump, state, result)`, on the controller the loop
runs, so each decision is the one `diffeqsolve` makes (docs/controllers.md).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._terms import ODETerm


class ProtocolState(eqx.Module):
    """The state the protocol hands back: the loop controller (its arrays as leaves,
    the rest static) and its memory (a `ControllerState`)."""

    arrays: Any
    rest: Any = eqx.field(static=True)
    memory: Any

    @property
    def loop(self):
        return eqx.combine(self.arrays, self.rest)


def _state(loop, memory) -> ProtocolState:
    arrays, rest = eqx.partition(loop, eqx.is_array)
    return ProtocolState(arrays, rest, memory)


class _GivenOrder:
    """Stands for the solver where the protocol passes only its error order."""

    def __init__(self, order):
        self.order = order

    def error_order(self, terms):
        return self.order


def protocol_init(controller, terms, t0, t1, y0, dt0, args, func, error_order, records) -> tuple:
    """diffrax's `controller.init`: the end of the first step, and the state
    `ProtocolState`. `records`: the `(ControllerState, Decision)` classes."""
    memory, decision = records
    with jax.numpy_dtype_promotion("standard"):
        dtype = jnp.result_type(*(x for x in (t0, t1, dt0) if x is not None), float)
    t0, t1 = jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)
    dt0 = None if dt0 is None else jnp.asarray(dt0, dtype)
    loop = controller.for_solve(t0, t1, dt0, 1.0)
    term = ODETerm(lambda t, y, args: func(terms, t, y, args))
    solver: Any = _GivenOrder(error_order)
    dt = loop.first_step(solver, term, t0, y0, dt0, args).astype(dtype)
    state = memory.initial(dtype)
    first = decision(jnp.asarray(True), dt, state, jnp.asarray(0, jnp.int32))
    return loop.next_time(t0, first), _state(loop, state)


def protocol_adapt(t0, t1, y0, y1_candidate, y_error, error_order, state) -> tuple:
    """diffrax's `controller.adapt_step_size`: `(keep_step, next_t0, next_t1,
    made_jump, state, result)` for the attempted step from `t0` to `t1`."""
    loop, memory = state.loop, state.memory
    dtype = memory.prev_inv_error.dtype
    t0, t1 = jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)
    decision = loop.decide(t0, t1 - t0, y0, y1_candidate, y_error, error_order, memory)
    accept = decision.accept
    if loop.jump_times is None:
        start, jumped = t1, jnp.asarray(False)
    else:
        start, jumped = loop.restart(t1)
    next_t0 = jnp.where(accept, start, t0)
    next_t1 = loop.next_time(next_t0, decision)
    return accept, next_t0, next_t1, accept & jumped, _state(loop, decision.state), decision.result
