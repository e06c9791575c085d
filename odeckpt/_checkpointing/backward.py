"""The checkpointed loop's backward passes: a plain reverse sweep over every stored state
(`backward_store_all`), or the binomial plan over the online checkpoints
(`backward_online`), a window of steps at a time."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import (
    any_in_batch,
    batch_cond,
    batched_like,
    row,
    set_row,
    tree_add,
    tree_zeros_like,
)

from . import plan as traced_plan
from .body import LoopBody, Residuals
from .reverse import is_diff, replay_step, reverse_step
from .window import WINDOW_STEPS, read_window


class _Cotangents(eqx.Module):
    """What the backward pass accumulates."""

    problem: Any  # of the problem's floating leaves, summed over the reversed steps
    state: Any  # of the state before the earliest step reversed so far


def _reversed(body, problem, state, decisions, ct: _Cotangents, ct_buffers) -> _Cotangents:
    """`ct` after reversing the step from `state`."""
    d_problem, ct_state = reverse_step(body, problem, state, decisions, ct.state, ct_buffers)
    return _Cotangents(tree_add(ct.problem, d_problem), ct_state)


class _Sweep(eqx.Module):
    """The carry of the store-all backward pass."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    ct: _Cotangents


def backward_store_all(body, problem, res: Residuals, ct_state, ct_buffers, w):
    """A plain reverse sweep, a window of stored states at a time."""

    def chunk(carry: _Sweep):
        b = carry.b
        start = jnp.maximum(b - w, 0)
        states, decisions = read_window(res.store, start, w), read_window(res.decisions, start, w)

        def step(j, ct):
            i = b - 1 - j - start
            return _reversed(body, problem, row(states, i), row(decisions, i), ct, ct_buffers)

        return _Sweep(start, lax.fori_loop(0, b - start, step, carry.ct))

    init = _Sweep(res.n, _Cotangents(tree_zeros_like(eqx.filter(problem, is_diff)), ct_state))
    init = batched_like(init, (res.n, ct_state))
    out = lax.while_loop(lambda carry: carry.b > 0, chunk, init)
    return out.ct.problem, out.ct.state


# ----------------------------------------------------------------------------------
# The plan's checkpoint stack


class _Plan(eqx.Module):
    """The checkpoint stack of the backward pass (mirrors `odeckpt.schedules`); or,
    inside a window, a view of its top entries (`_view`)."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    count: jax.Array  # live checkpoints in `stack_pos` (above `base`)
    stack_pos: jax.Array  # positions, ascending
    stack_slot: jax.Array  # slot holding each; -1: pushed in a window, slot not yet chosen
    base: jax.Array  # live checkpoints below the view (0 for the whole stack)


def _initial_plan(res: Residuals, c: int) -> _Plan:
    assert res.slot_pos is not None
    valid = res.slot_pos >= 0
    order = jnp.argsort(jnp.where(valid, res.slot_pos, jnp.iinfo(jnp.int32).max))
    count = jnp.sum(valid).astype(jnp.int32)
    stack_pos = jnp.where(jnp.arange(c, dtype=jnp.int32) < count, res.slot_pos[order], -1).astype(
        jnp.int32
    )
    return _Plan(res.n, count, stack_pos, order.astype(jnp.int32), jnp.asarray(0, jnp.int32))


def _top(plan: _Plan):
    return plan.stack_pos[plan.count - 1]


def _view(plan: _Plan, w: int) -> _Plan:
    """The top w + 1 entries of the stack, with room for w pushes: all a window needs
    (its live checkpoints, at most w, and the one below it). The per-segment loops
    carry this instead of the c-long stack, so that their buffers stay small for any c
    (see `odeckpt._checkpointing.window`)."""
    base = jnp.maximum(plan.count - (w + 1), 0)
    k = jnp.arange(2 * w + 1, dtype=jnp.int32)
    live = k < plan.count - base
    index = jnp.minimum(base + k, plan.stack_pos.shape[0] - 1)
    pos = jnp.where(live, plan.stack_pos[index], -1)
    slot = jnp.where(live, plan.stack_slot[index], -1)
    return _Plan(plan.b, plan.count - base, pos, slot, base)


def _merge(plan: _Plan, view: _Plan, c: int) -> _Plan:
    """The whole stack after a window's work on `view`; checkpoints pushed in the
    window take free slots (those of no live checkpoint)."""
    k = jnp.arange(view.stack_pos.shape[0], dtype=jnp.int32)
    index = jnp.where(k < view.count, view.base + k, c)
    stack_pos = plan.stack_pos.at[index].set(view.stack_pos, mode="drop")
    stack_slot = plan.stack_slot.at[index].set(view.stack_slot, mode="drop")
    count = view.base + view.count
    live = jnp.arange(c, dtype=jnp.int32) < count
    held = jnp.where(live & (stack_slot >= 0), stack_slot, c)
    unused = jnp.ones((c,), bool).at[held].set(False, mode="drop")
    # free[k]: the k-th unused slot (a scatter by rank: no sort, O(c) per window)
    order = jnp.where(unused, jnp.cumsum(unused) - 1, c)
    free = jnp.zeros((c,), jnp.int32).at[order].set(jnp.arange(c, dtype=jnp.int32), mode="drop")
    new = live & (stack_slot < 0)
    rank = jnp.cumsum(new) - 1
    stack_slot = jnp.where(new, free[jnp.clip(rank, 0, c - 1)], stack_slot)
    return _Plan(view.b, count, stack_pos, stack_slot, jnp.asarray(0, jnp.int32))


def _push(plan: _Plan, pos, push) -> _Plan:
    """Push the checkpoint at `pos` if `push`; its slot is chosen by `_merge`."""
    stack_pos = jnp.where(push, plan.stack_pos.at[plan.count].set(pos, mode="drop"),
                          plan.stack_pos)  # fmt: skip
    stack_slot = jnp.where(push, plan.stack_slot.at[plan.count].set(-1, mode="drop"),
                           plan.stack_slot)  # fmt: skip
    return _Plan(plan.b, plan.count + push.astype(jnp.int32), stack_pos, stack_slot, plan.base)


def _segment(plan: _Plan, top, c: int):
    """The Revolve segment from the top checkpoint (at `top`) towards step b - 1:
    `(target, push)`, where the state reached at `target` is stored if `push`."""
    length, snaps = plan.b - top, c - (plan.base + plan.count) + 1
    push = snaps > 1
    # A select, not a conditional: each branch of a conditional is compiled apart, and
    # the split's loop is a few integer iterations.
    split = jnp.where(push, traced_plan.revolve_split(length, snaps), length - 1)
    return top + split, push


# ----------------------------------------------------------------------------------
# The state in hand, and the window it works in


class _Hand(eqx.Module):
    """The state in hand, advancing from the top checkpoint towards step b - 1."""

    state: Any
    pos: jax.Array  # position of `state`
    target: jax.Array  # where the current segment ends
    push: jax.Array  # store the state on arrival at `target`
    held: jax.Array  # False: none in hand (after a reversal); restore the top checkpoint


class _Window(eqx.Module):
    """Steps `start, ..., start + w - 1`: their recorded decisions, and the live
    checkpoints among them (row = position - start)."""

    start: jax.Array
    decisions: Any
    states: Any
    w: int = eqx.field(static=True)


def _window_entries(plan: _Plan, start, w: int):
    """The stack entries whose checkpoints lie in the window from `start`: the top `w`
    entries at most. Returns their stack indices, rows and a validity mask."""
    k = plan.count - 1 - jnp.arange(w, dtype=jnp.int32)
    index = jnp.maximum(k, 0)
    rows = plan.stack_pos[index] - start
    return index, rows, (k >= 0) & (rows >= 0) & (rows < w)


def _open_window(slots, decisions, plan: _Plan, start, w: int) -> _Window:
    index, rows, valid = _window_entries(plan, start, w)
    stored = row(slots, plan.stack_slot[index])
    spare = w + jnp.arange(w, dtype=rows.dtype)  # distinct rows, the invalid ones dropped
    rows = jnp.where(valid, rows, spare)
    states = set_row(jax.tree.map(jnp.zeros_like, stored), rows, stored)
    return _Window(start, read_window(decisions, start, w), states, w)


def _close_window(slots, plan: _Plan, window: _Window, c: int):
    """Write the window's live checkpoints back into their slots."""
    index, rows, valid = _window_entries(plan, window.start, window.w)
    values = row(window.states, jnp.clip(rows, 0, window.w - 1))
    return set_row(
        slots,
        jnp.where(valid, plan.stack_slot[index], c + jnp.arange(window.w, dtype=index.dtype)),
        values,
    )


def _advance_in_window(body: LoopBody, problem, c: int, window: _Window, plan: _Plan, hand: _Hand):
    """Advance the state in hand towards b - 1, within the window, storing what the plan
    asks for: one iteration per segment, whose steps are replayed in a loop."""
    stop = jnp.minimum(plan.b - 1, window.start + window.w - 1)

    def step(carry):
        state, pos = carry
        decisions = row(window.decisions, pos - window.start)
        if window.w < WINDOW_STEPS:  # a large state: see `replay_step`
            return replay_step(body, problem, state, decisions), pos + 1
        return body.step(problem, state, decisions)[0], pos + 1

    def segment(carry):
        plan, hand, states = carry
        end = jnp.minimum(hand.target, stop)
        init = batched_like((hand.state, hand.pos), (hand, end))
        state, pos = lax.while_loop(lambda carry: carry[1] < end, step, init)
        arrived = pos == hand.target
        store = arrived & hand.push
        at = jnp.where(store, pos - window.start, window.w)
        states = set_row(states, at, body.compress(state))
        plan = _push(plan, pos, store)
        target, push = _segment(plan, pos, c)
        target = jnp.where(arrived, target, hand.target)
        push = jnp.where(arrived, push, hand.push)
        return plan, _Hand(state, pos, target, push, hand.held), states

    init = batched_like((plan, hand, window.states), (plan, hand))
    plan, hand, states = lax.while_loop(lambda carry: carry[1].pos < stop, segment, init)
    return plan, hand, eqx.tree_at(lambda w: w.states, window, states)


class _InWindow(eqx.Module):
    """The carry of the backward pass's work within one window."""

    plan: _Plan  # a view of the stack (`_view`)
    hand: _Hand
    window: _Window
    ct: _Cotangents
    going: jax.Array


def _run_window(body: LoopBody, problem, c: int, window: _Window, ct_buffers, plan: _Plan,
                hand: _Hand, ct: _Cotangents) -> _InWindow:  # fmt: skip
    """Advance and reverse while every step needed lies in the window: one iteration per
    reversed step b - 1 (restore the top checkpoint, advance to b - 1 storing the states
    the Revolve plan asks for, reverse the step, pop the top checkpoint once it is
    b - 1); stop when the advance leaves the window or the top checkpoint is before it."""

    # The branches take everything they read as operands (see `_core.batching.cond`).
    def keep(problem, plan, hand, window):
        return hand

    def restore(problem, plan, hand, window):
        # Arrived at its own position, without a store: the advance's first segment
        # iteration plans the segment (one traced Revolve split, not two).
        top = _top(plan)
        state = body.restore(problem, row(window.states, top - window.start))
        return _Hand(state, top, top, jnp.asarray(False), jnp.asarray(True))

    def skip(problem, window, ct_buffers, plan, hand, ct):
        return plan, ct

    def reverse(problem, window, ct_buffers, plan, hand, ct):
        b = plan.b - 1
        decisions = row(window.decisions, b - window.start)
        ct = _reversed(body, problem, hand.state, decisions, ct, ct_buffers)
        count = plan.count - (_top(plan) == b).astype(jnp.int32)
        return _Plan(b, count, plan.stack_pos, plan.stack_slot, plan.base), ct

    def iteration(carry: _InWindow):
        plan, window = carry.plan, carry.window
        hand = batch_cond(carry.hand.held, keep, restore, problem, plan, carry.hand, window)
        plan, hand, window = _advance_in_window(body, problem, c, window, plan, hand)
        reached = hand.pos == plan.b - 1
        plan, ct = batch_cond(reached, reverse, skip, problem, window, ct_buffers, plan, hand,
                              carry.ct)  # fmt: skip
        hand = eqx.tree_at(lambda h: h.held, hand, ~reached)
        going = reached & (plan.b > 0) & (_top(plan) >= window.start)
        return _InWindow(plan, hand, window, ct, going)

    init = _InWindow(plan, hand, window, ct, plan.b > 0)  # b = 0: a finished batch element
    init = batched_like(init, (plan, hand, ct))
    return lax.while_loop(lambda carry: carry.going, iteration, init)


class _OnlineBackward(eqx.Module):
    """The carry of the online backward pass."""

    plan: _Plan
    hand: _Hand
    slots: Any  # the compressed checkpoints
    ct: _Cotangents


def backward_online(body, problem, res: Residuals, ct_state, ct_buffers, c, w):
    """Reverse the steps from the online checkpoints, binomially inside each interval.

    A window of `w` steps at a time: the window before b when the state to start from
    lies within it, else the window the state in hand advances through."""

    def window(carry: _OnlineBackward):
        plan, hand = carry.plan, carry.hand
        pos = jnp.where(hand.held, hand.pos, _top(plan))
        start = jnp.minimum(pos, jnp.maximum(plan.b - w, 0))
        opened = _open_window(carry.slots, res.decisions, plan, start, w)
        done = _run_window(body, problem, c, opened, ct_buffers, _view(plan, w), hand, carry.ct)
        plan = _merge(plan, done.plan, c)
        slots = _close_window(carry.slots, plan, done.window, c)
        return _OnlineBackward(plan, done.hand, slots, done.ct)

    like = eqx.filter_eval_shape(body.restore, problem, row(res.slots, 0))
    placeholder = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
    zero = jnp.asarray(0, jnp.int32)
    hand = _Hand(placeholder, zero, zero, jnp.asarray(False), jnp.asarray(False))
    plan = _initial_plan(res, c)
    ct = _Cotangents(tree_zeros_like(eqx.filter(problem, is_diff)), ct_state)
    init = _OnlineBackward(plan, hand, res.slots, ct)
    init = batched_like(init, (res, ct_state))

    def cond(carry: _OnlineBackward):
        return any_in_batch(carry.plan.b > 0)  # see `checkpointed._any_going`

    out = lax.while_loop(cond, window, init)
    return out.ct.problem, out.ct.state
