"""The checkpointed loop's backward passes: a plain reverse sweep over every stored state
(`backward_store_all`), or the binomial plan over the online checkpoints
(`backward_online`), a window of steps at a time (see `window`)."""

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
from .body import Residuals
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
# The online backward pass


class _Stack(eqx.Module):
    """The checkpoint stack of the backward pass (mirrors `odeckpt.schedules`).

    `slot` is a permutation of the c slots: its first `count` entries hold the live
    checkpoints in stack order, the rest are free. A pop leaves the popped slot first
    among the free ones, where the next push takes it: no slot is ever searched for."""

    count: jax.Array  # live checkpoints
    pos: jax.Array  # (c,) their positions, ascending (past `count`: stale)
    slot: jax.Array  # (c,) the slot holding each; the free slots past `count`


def _initial_stack(res: Residuals, c: int) -> _Stack:
    assert res.slot_pos is not None
    valid = res.slot_pos >= 0
    order = jnp.argsort(jnp.where(valid, res.slot_pos, jnp.iinfo(jnp.int32).max))
    count = jnp.sum(valid).astype(jnp.int32)
    live = jnp.arange(c, dtype=jnp.int32) < count
    pos = jnp.where(live, res.slot_pos[order], -1).astype(jnp.int32)
    return _Stack(count, pos, order.astype(jnp.int32))


class _Hand(eqx.Module):
    """The state in hand, advancing from the top checkpoint towards step b - 1."""

    state: Any
    pos: jax.Array  # position of `state`
    target: jax.Array  # where the current segment ends
    push: jax.Array  # store the state on arrival at `target`
    held: jax.Array  # False: none in hand; the top checkpoint is restored next
    plan: jax.Array  # plan the segment from `pos` (the top checkpoint) before moving on


def _segment(b, count, pos, c: int):
    """The Revolve segment from the checkpoint at `pos` (the top of `count`) towards
    step b - 1: `(target, push)`, where the state reached at `target` is stored if
    `push`."""
    length, snaps = b - pos, c - count + 1
    push = snaps > 1
    split = jnp.where(push, traced_plan.revolve_split(length, snaps), length - 1)
    return pos + split, push


def _restored(body, problem, top, checkpoint) -> _Hand:
    """The top checkpoint (at `top`) in hand, its segment to be planned."""
    yes, no = jnp.asarray(True), jnp.asarray(False)
    return _Hand(body.restore(problem, checkpoint), top, top, no, yes, yes)


class _Local(eqx.Module):
    """The carry of the backward pass's steps within one window (steps `start, ...,
    start + w - 2`, arriving at positions up to `start + w - 1`). The stack entries
    from `base` on (at most w: those in the window, and those pushed there) have their
    checkpoints in `fresh` (row: entry - base); `pos[k]` is the position of entry
    `base - 1 + k` (k = 0: the last one before the window)."""

    start: jax.Array
    base: jax.Array
    b: jax.Array
    count: jax.Array
    pos: jax.Array  # (w + 1,)
    fresh: Any  # (w,) rows of compressed checkpoints
    hand: _Hand
    ct: _Cotangents
    going: jax.Array


def _run_window(body, problem, c, w, decisions, ct_buffers, local: _Local):
    """Advance and reverse one step per iteration while the step needed lies in the
    window and the checkpoint to restore (if any) lies in it. An iteration with no state
    in hand (after a reversal, or the first of a window entered with none) restores the
    top checkpoint first: the restore, an evaluation of the field for an FSAL method, is
    compiled once."""
    large = w < WINDOW_STEPS

    def advance(problem, decisions, ct_buffers, local: _Local):
        hand, base = local.hand, local.base
        recorded = row(decisions, hand.pos - local.start)
        if large:  # see `replay_step`
            state = replay_step(body, problem, hand.state, recorded)
        else:
            state = body.step(problem, hand.state, recorded)[0]
        pos = hand.pos + 1
        store = (pos == hand.target) & hand.push  # recorded by `iteration`
        count = local.count + store.astype(jnp.int32)
        hand = _Hand(state, pos, hand.target, hand.push, hand.held, store)
        return _Local(
            local.start, base, local.b, count, local.pos, None, hand, local.ct, local.going
        )

    def restore(problem, local: _Local):
        k = local.count - local.base  # the top entry's local index
        checkpoint = row(local.fresh, jnp.maximum(k - 1, 0))
        return _restored(body, problem, local.pos[k], checkpoint)

    def keep(problem, local: _Local):
        return local.hand

    def reverse(problem, decisions, ct_buffers, local: _Local):
        b, base = local.b - 1, local.base
        ct = _reversed(
            body, problem, local.hand.state, row(decisions, b - local.start), local.ct, ct_buffers
        )
        popped = local.pos[local.count - base] == b
        hand = eqx.tree_at(lambda h: h.held, local.hand, jnp.asarray(False))
        return _Local(
            local.start,
            base,
            b,
            local.count - popped.astype(jnp.int32),
            local.pos,
            None,
            hand,
            ct,
            local.going,
        )

    def plan(b, count, pos, target, push):
        return _segment(b, count, pos, c)

    def planned(b, count, pos, target, push):
        return target, push

    def iteration(local: _Local):
        # None in hand: the top checkpoint, which lies in the window at or before its
        # last step's start (reversals happen there; see `window` for the window's
        # entry), so the step from it stays in the window.
        hand = batch_cond(~local.hand.held, restore, keep, problem, local)
        # A conditional: the split's loop would otherwise run on every step (the window
        # loop's body is small enough to run inline, so a branch costs little there).
        target, push = batch_cond(
            hand.plan, plan, planned, local.b, local.count, hand.pos, hand.target, hand.push
        )
        hand = _Hand(hand.state, hand.pos, target, push, hand.held, jnp.asarray(False))
        local = eqx.tree_at(lambda lo: lo.hand, local, hand)
        reached = hand.pos == local.b - 1
        # The branches take everything they read as operands (see `_core.batching.cond`),
        # and return all but the window's checkpoints: a conditional's outputs are new
        # buffers, and w rows of a large state are the most bytes the loop carries. The
        # state an advance stores (its position and checkpoint) is recorded here instead.
        out = batch_cond(reached, reverse, advance, problem, decisions, ct_buffers, local)
        hand = out.hand  # the next step needed is the one from hand.pos
        k = jnp.where(~reached & hand.plan, out.count - 1 - out.base, w)  # w: none stored
        pos = out.pos.at[k + 1].set(hand.pos, mode="drop")
        fresh = set_row(local.fresh, k, body.compress(hand.state))
        # on with a state in hand inside the window, or none but the top checkpoint in it
        inside = jnp.where(hand.held, hand.pos < out.start + w - 1, out.count > out.base)
        going = (out.b > 0) & inside
        return _Local(out.start, out.base, out.b, out.count, pos, fresh, hand, out.ct, going)

    return lax.while_loop(lambda local: local.going, iteration, local)


class _Online(eqx.Module):
    """The carry of the online backward pass."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    stack: _Stack
    hand: _Hand
    ct: _Cotangents
    slots: Any  # the compressed checkpoints


def backward_online(body, problem, res: Residuals, ct_state, ct_buffers, c, w):
    """Reverse the steps from the online checkpoints, binomially inside each interval.

    One iteration per window: advance and reverse a step at a time within the window of
    `w - 1` steps from the state in hand, or from the top checkpoint if none is in hand
    (or the `w - 1` steps before b, if they contain it), storing where Revolve's plan
    says (`_run_window`); write the window's checkpoints back (those pushed there into
    free slots)."""

    def window(carry: _Online):
        hand = carry.hand
        stack, b = carry.stack, carry.b
        # with none in hand, the window's first iteration restores the top checkpoint
        top = stack.pos[jnp.maximum(stack.count - 1, 0)]
        start = jnp.minimum(jnp.where(hand.held, hand.pos, top), jnp.maximum(b - (w - 1), 0))
        # the entries from `base` on lie in the window: at most w, at positions
        # start, ..., start + w - 1 (the window's last step arrives at start + w - 1,
        # and may push there; the state in hand is at or after the top entry). So a
        # window is w - 1 steps: its w rows of checkpoints stay within the window's
        # bytes (see `window`)
        live = jnp.arange(c, dtype=jnp.int32) < stack.count
        base = jnp.sum(live & (stack.pos < start)).astype(jnp.int32)
        k = jnp.arange(w + 1, dtype=jnp.int32)
        entries = base - 1 + k
        pos = jnp.where(entries >= 0, stack.pos[jnp.clip(entries, 0, c - 1)], -1)
        fresh = row(carry.slots, stack.slot[jnp.clip(entries[1:], 0, c - 1)])
        local = _Local(start, base, b, stack.count, pos, fresh, hand, carry.ct, b > 0)
        local = batched_like(local, (local, carry.slots))
        decisions = read_window(res.decisions, start, w)
        local = _run_window(body, problem, c, w, decisions, ct_buffers, local)
        # the window's pushes into the stack, their checkpoints into free slots
        live = (entries >= base) & (entries < local.count)
        at = jnp.where(live, entries, c)
        stack_pos = stack.pos.at[at].set(local.pos, mode="drop")
        slot = jnp.where(live[1:], stack.slot[jnp.clip(entries[1:], 0, c - 1)], c)
        slots = set_row(carry.slots, slot, local.fresh)
        return _Online(
            local.b, _Stack(local.count, stack_pos, stack.slot), local.hand, local.ct, slots
        )

    like = eqx.filter_eval_shape(body.restore, problem, row(res.slots, 0))
    placeholder = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
    zero = jnp.asarray(0, jnp.int32)
    no = jnp.asarray(False)
    hand = _Hand(placeholder, zero, zero, no, no, no)
    ct = _Cotangents(tree_zeros_like(eqx.filter(problem, is_diff)), ct_state)
    init = _Online(res.n, _initial_stack(res, c), hand, ct, res.slots)
    init = batched_like(init, (res, ct_state))

    def cond(carry: _Online):
        return any_in_batch(carry.b > 0)  # see `checkpointed._any_going`

    out = lax.while_loop(cond, window, init)
    return out.ct.problem, out.ct.state
