"""`checkpointed_loop`: its custom VJP, and the forward passes (store every state, or
place checkpoints online), which run a window's steps at a time."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt import schedules
from odeckpt._core import any_in_batch, as_arrays, batched_like, materialize, set_row, zero_rows

from . import plan as traced_plan
from .backward import backward_online, backward_store_all
from .body import LoopBody, LoopOutput, Residuals, StepShapes, step_shapes
from .forward import empty_buffers, forward_loop, keep_going, report_progress, write_outputs
from .reverse import is_diff
from .window import flush, window_size


@eqx.filter_custom_vjp
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _checkpointed(vjp_arg, body, max_steps, checkpoints, expected, w, like):
    problem, state0 = as_arrays(vjp_arg)
    return forward_loop(body, problem, state0, max_steps)


def checkpointed_loop(
    body: LoopBody, problem, state0, max_steps: int, checkpoints: int, expected: int | None = None
):
    """`forward_loop` with a checkpointed reverse mode (see `odeckpt._checkpointing`).

    `expected`: the number of steps, when known before the loop runs (fixed step
    sizes): the forward pass then stores where `schedules.known_slots` says, near the
    offline optimum, instead of placing checkpoints online. A wrong value costs
    recomputation only, never correctness."""
    w = window_size(body, problem, state0)
    like = step_shapes(body, problem, state0)
    return _checkpointed((problem, state0), body, max_steps, checkpoints, expected, w, like)


@_checkpointed.def_fwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _checkpointed_fwd(perturbed, vjp_arg, body, max_steps, checkpoints, expected, w, like):
    problem, state0 = as_arrays(vjp_arg)
    if checkpoints >= max_steps:
        return _forward_store_all(body, problem, state0, max_steps, w, like)
    return _forward_online(body, problem, state0, max_steps, checkpoints, expected, w, like)


@_checkpointed.def_bwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _checkpointed_bwd(
    residuals, grad_obj, perturbed, vjp_arg, body, max_steps, checkpoints, expected, w, like
):
    problem, state0 = as_arrays(vjp_arg)
    buffers_like = eqx.filter_eval_shape(empty_buffers, body, problem, like.record)
    ct_state = eqx.filter(materialize(grad_obj.state, state0), is_diff)
    ct_buffers = materialize(grad_obj.buffers, buffers_like)
    if residuals.store is not None:
        return backward_store_all(body, problem, residuals, ct_state, ct_buffers, w)
    return backward_online(body, problem, residuals, ct_state, ct_buffers, checkpoints, w)


# ----------------------------------------------------------------------------------
# The forward pass, in runs of at most a window's steps


class _Run(eqx.Module):
    """The carry of a run of steps within a window."""

    state: object
    buffers: tuple
    taken: jax.Array  # steps taken in the run
    decisions: object  # a window of the steps' recorded decisions
    states: object  # a window of the states they started from; or None


def _run(body, problem, state0, state, buffers, i, length, keep_states, w, like: StepShapes):
    """Up to `length <= w` steps from step i; returns the state, the outputs, the
    number of steps taken, and a window of their decisions (and states if asked)."""
    decisions = zero_rows(like.decisions, w)
    states = zero_rows(state, w) if keep_states else None

    def cond(carry: _Run):
        return (carry.taken < length) & body.cond(problem, carry.state)

    def step(carry: _Run):
        state, j, states = carry.state, carry.taken, carry.states
        report_progress(body, problem, state0, state, i + j)
        if keep_states:
            states = set_row(states, j, state)
        new, record, accepted = body.step(problem, state)
        decisions = set_row(carry.decisions, j, body.decisions(new, accepted))
        buffers = write_outputs(body, problem, state, new, record, carry.buffers)
        return _Run(new, buffers, j + 1, decisions, states)

    init = _Run(state, buffers, jnp.asarray(0, jnp.int32), decisions, states)
    return lax.while_loop(cond, step, batched_like(init, state))


def _any_going(body, problem, max_steps):
    """The condition of an outer (per-window) loop: go on while any batch element is
    going. Under `jax.vmap` a batched condition would make the loop select every
    carried buffer (max_steps states here) per iteration; instead the loop runs
    unbatched and a finished element's window has no steps."""
    return lambda carry: any_in_batch(
        keep_going(body, problem, max_steps, carry.state, carry.num_steps)
    )


class _StoreAll(eqx.Module):
    """The carry of the forward pass that stores every state."""

    state: object
    buffers: tuple
    num_steps: jax.Array
    store: object  # every state so far, padded by a window
    decisions: object  # every step's recorded decisions, padded likewise


def _forward_store_all(body, problem, state0, max_steps, w, like: StepShapes):
    store = zero_rows(state0, max_steps + w)
    decisions = zero_rows(like.decisions, max_steps + w)

    def chunk(carry: _StoreAll):
        state, i = carry.state, carry.num_steps
        going = keep_going(body, problem, max_steps, state, i)
        length = jnp.where(going, jnp.minimum(max_steps - i, w), 0)
        run = _run(
            body, problem, state0, state, carry.buffers, i, length, keep_states=True, w=w, like=like
        )
        return _StoreAll(
            run.state,
            run.buffers,
            i + run.taken,
            flush(carry.store, i, run.states),
            flush(carry.decisions, i, run.decisions),
        )

    init = _StoreAll(
        state0,
        empty_buffers(body, problem, like.record),
        jnp.asarray(0, jnp.int32),
        store,
        decisions,
    )
    cond = _any_going(body, problem, max_steps)
    out = lax.while_loop(cond, chunk, batched_like(init, state0))
    n = out.num_steps
    return LoopOutput(out.state, out.buffers, n), Residuals(n, out.decisions, out.store, None, None)


_TABLE_LIMIT = 2**19  # max_steps * c up to which the online slots are planned in Python
_KNOWN_LIMIT = 2**17  # max_steps up to which a known step count's slots are tabled


def _use_table(c: int, max_steps: int, expected: int | None) -> bool:
    if expected is not None and expected <= max_steps:
        return max_steps <= _KNOWN_LIMIT or max_steps * c <= _TABLE_LIMIT
    return max_steps * c <= _TABLE_LIMIT


@ft.lru_cache(maxsize=32)
def _online_table(
    c: int, max_steps: int, expected: int | None, w: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step i: the slot to store state i in (-1: none), the distance `k <= w` to
    the next step that stores (or `w`), and that step's slot. With a known
    step count `expected <= max_steps`, `schedules.known_slots` (no stores after it)."""
    if expected is not None and expected <= max_steps:
        known = schedules.known_slots(expected, c)
        slots = np.asarray(known + (-1,) * (max_steps - expected), np.int32)
    else:
        slots = np.asarray(schedules.online_slots(max_steps, c), np.int32)
    padded = np.concatenate([slots, np.full(w + 1, -1, np.int32)])
    gaps = np.full(max_steps, w, np.int32)
    for i in range(max_steps - 1, -1, -1):
        if padded[i + 1] >= 0:
            gaps[i] = 1
        elif i + 1 < max_steps:
            gaps[i] = min(gaps[i + 1] + 1, w)
    return slots, gaps, padded[np.arange(max_steps) + gaps]


def _online_schedule(c: int, max_steps: int, expected: int | None, w: int):
    """`(first, ahead)`: the online placement. `first` is `(online, slot of state 0)`;
    `ahead(online, i)` returns `(online, k, slot)`, where step `i + k` (`k <= w`) is the
    next to store, into `slot`, or `k = w` and `slot = -1`. A constant table when it is
    cheap to plan at trace time, else the traced decisions."""
    if _use_table(c, max_steps, expected):
        table = _online_table(c, max_steps, expected, w)
        slots, gaps, next_slots = (jnp.asarray(t) for t in table)
        ahead = lambda online, i: (online, gaps[i], next_slots[i])
        return (jnp.zeros((), jnp.int32), slots[0]), ahead

    def ahead(online, i):
        def cond(carry):
            _, k, slot = carry
            return (slot < 0) & (k < w)

        def decide(carry):
            online, k, _ = carry
            online, slot = traced_plan.online_decide(online, i + k + 1)
            return online, k + 1, slot

        return lax.while_loop(
            cond, decide, (online, jnp.asarray(0, jnp.int32), jnp.asarray(-1, jnp.int32))
        )

    return traced_plan.online_decide(traced_plan.online_init(c), 0), ahead


class _OnlineForward(eqx.Module):
    """The carry of the forward pass that places checkpoints online."""

    state: object
    buffers: tuple
    num_steps: jax.Array
    online: object  # the placement's state (`plan.OnlineState`, or 0 with a table)
    slot: jax.Array  # where the state at `num_steps` is stored (-1: nowhere)
    slots: object  # the compressed checkpoints
    positions: jax.Array  # the step each slot holds (-1: empty)
    decisions: object  # every step's recorded decisions, padded by a window


def _forward_online(body, problem, state0, max_steps, c, expected, w, like: StepShapes):
    decisions = zero_rows(like.decisions, max_steps + w)
    (online, slot), ahead = _online_schedule(c, max_steps, expected, w)

    def chunk(carry: _OnlineForward):
        state, i = carry.state, carry.num_steps
        going = keep_going(body, problem, max_steps, state, i)
        slot = jnp.where(going & (carry.slot >= 0), carry.slot, c)
        slots = set_row(carry.slots, slot, body.compress(state))
        positions = carry.positions.at[slot].set(i, mode="drop")
        online, length, slot = ahead(carry.online, i)
        length = jnp.where(going, jnp.minimum(length, max_steps - i), 0)
        run = _run(
            body,
            problem,
            state0,
            state,
            carry.buffers,
            i,
            length,
            keep_states=False,
            w=w,
            like=like,
        )
        decisions = flush(carry.decisions, i, run.decisions)
        return _OnlineForward(
            run.state, run.buffers, i + run.taken, online, slot, slots, positions, decisions
        )

    slots = zero_rows(body.compress(state0), c)
    positions = jnp.full((c,), -1, jnp.int32)
    buffers = empty_buffers(body, problem, like.record)
    init = _OnlineForward(
        state0, buffers, jnp.asarray(0, jnp.int32), online, slot, slots, positions, decisions
    )
    cond = _any_going(body, problem, max_steps)
    out = lax.while_loop(cond, chunk, batched_like(init, state0))
    n = out.num_steps
    residuals = Residuals(n, out.decisions, None, out.slots, out.positions)
    return LoopOutput(out.state, out.buffers, n), residuals
