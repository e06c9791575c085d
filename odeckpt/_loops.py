"""Bounded while loops over a step function, and the checkpointed one with its VJP.

The integrator hands the loop a `LoopBody`: a step `(theta, state) -> (state, record,
accepted)`, and `Emitter`s that write outputs into write-only buffers. The buffers are
outside the loop state: checkpoints never hold outputs, and the backward pass reads
their cotangents when it reverses the step that wrote them.

`checkpointed_loop` has a custom VJP. Its forward pass stores at most `checkpoints`
states, placed online (the number of steps is unknown while it runs; see
`odeckpt.schedules`); its backward pass then reverses the steps n-1, ..., 0, running
the optimal offline binomial plan inside each interval between stored states. Each
step is reversed by one `jax.vjp` of the step: one re-evaluation and its transpose.
When `checkpoints >= max_steps` every state is stored and the backward pass is a plain
reverse sweep.
"""

import functools as ft
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _schedule_jax as sj, schedules


class Emitter(eqx.Module):
    """Writes `value(theta, record, j)` into row `j` of a buffer, for j in `span`."""

    name: str = eqx.field(static=True)
    span: Callable = eqx.field(static=True)  # (state, new_state) -> (lo, hi)
    value: Callable = eqx.field(static=True)  # (theta, record, j) -> PyTree
    size: int = eqx.field(static=True)


class LoopBody(eqx.Module):
    """The functions a loop runs; all static."""

    step: Callable = eqx.field(static=True)  # (theta, state, replay=None) -> ...
    replay: Callable = eqx.field(static=True)  # (new_state, accepted) -> decisions
    reject: Callable = eqx.field(static=True)
    cond: Callable = eqx.field(static=True)
    compress: Callable = eqx.field(static=True)
    restore: Callable = eqx.field(static=True)
    emitters: tuple[Emitter, ...] = eqx.field(static=True)
    progress: Callable | None = eqx.field(static=True, default=None)  # (theta, state0, state, i)


class LoopOutput(eqx.Module):
    state: Any
    buffers: tuple
    num_steps: jax.Array


def _empty_buffers(body: LoopBody, theta, state) -> tuple:
    _, record, _ = eqx.filter_eval_shape(body.step, theta, state)

    def empty(e: Emitter):
        shape = eqx.filter_eval_shape(e.value, theta, record, jnp.asarray(0))
        fill = lambda s: jnp.full((e.size, *s.shape), jnp.inf, s.dtype)  # noqa: E731
        return jax.tree.map(fill, shape)

    return tuple(empty(e) for e in body.emitters)


def _write(body: LoopBody, theta, state, new, record, buffers) -> tuple:
    out = []
    for e, buf in zip(body.emitters, buffers, strict=True):
        lo, hi = e.span(state, new)

        def put(j, b, e=e):
            value = e.value(theta, record, j)
            return jax.tree.map(lambda x, v: x.at[j].set(v), b, value)

        out.append(lax.fori_loop(lo, hi, put, buf))
    return tuple(out)


def _keep_going(body, theta, max_steps, state, i):
    going = body.cond(theta, state)
    return going if max_steps is None else going & (i < max_steps)


def _report(body: LoopBody, theta, state0, state, i):
    if body.progress is not None:
        body.progress(theta, state0, state, i)


def forward_loop(body: LoopBody, theta, state0, max_steps: int | None) -> LoopOutput:
    """The plain loop (no reverse mode; forward mode works through it)."""

    def cond(carry):
        state, _, i = carry
        return _keep_going(body, theta, max_steps, state, i)

    def step(carry):
        state, buffers, i = carry
        _report(body, theta, state0, state, i)
        new, record, _ = body.step(theta, state)
        return new, _write(body, theta, state, new, record, buffers), i + 1

    init = (state0, _empty_buffers(body, theta, state0), jnp.asarray(0, jnp.int32))
    state, buffers, n = lax.while_loop(cond, step, init)
    return LoopOutput(state, buffers, n)


# ----------------------------------------------------------------------------------
# Reversing one step


def _is_diff(x) -> bool:
    return eqx.is_inexact_array(x)


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)


def _add(a, b):
    return jax.tree.map(jnp.add, a, b)


def _step_vjp(body: LoopBody, theta, state, replay):
    """`jax.vjp` of one step (with its recorded decisions) w.r.t. the floating parts
    of theta and state."""
    th_d, th_s = eqx.partition(theta, _is_diff)
    st_d, st_s = eqx.partition(state, _is_diff)

    def fn(th_d, st_d):
        theta, state = eqx.combine(th_d, th_s), eqx.combine(st_d, st_s)
        new, record, accepted = body.step(theta, state, replay)
        new_d, new_s = eqx.partition(new, _is_diff)
        rec_d, rec_s = eqx.partition(record, _is_diff)
        return (new_d, rec_d), (new_s, rec_s, accepted)

    (new_d, rec_d), vjp_fn, (new_s, rec_s, accepted) = jax.vjp(fn, th_d, st_d, has_aux=True)
    return eqx.combine(new_d, new_s), eqx.combine(rec_d, rec_s), accepted, vjp_fn


def _emitter_cotangents(body, theta, state, new, record, ct_buffers):
    """Cotangents of theta and the record from the outputs this step wrote."""
    th_d, th_s = eqx.partition(theta, _is_diff)
    rec_d, rec_s = eqx.partition(record, _is_diff)
    acc = (_zeros(th_d), _zeros(rec_d))
    for e, ct_buf in zip(body.emitters, ct_buffers, strict=True):
        lo, hi = e.span(state, new)

        def pull(j, acc, e=e, ct_buf=ct_buf):
            fn = lambda a, b: e.value(eqx.combine(a, th_s), eqx.combine(b, rec_s), j)  # noqa: E731
            _, vjp_fn = jax.vjp(fn, th_d, rec_d)
            return _add(acc, vjp_fn(jax.tree.map(lambda c: c[j], ct_buf)))

        acc = lax.fori_loop(lo, hi, pull, acc)
    return acc


def reverse_step(body: LoopBody, theta, state, replay, ct_new, ct_buffers):
    """Cotangents (theta, state) of step `state -> new` given those of `new` and outputs.

    A rejected step leaves the state unchanged; its VJP is taken through
    `body.reject`, so that a rejected candidate's NaN or inf never reaches a gradient.
    """
    new, record, accepted, vjp_fn = _step_vjp(body, theta, state, replay)
    return _pullback(body, theta, state, (new, record, accepted, vjp_fn), ct_new, ct_buffers)


def _pullback(body: LoopBody, theta, state, linearised, ct_new, ct_buffers):
    """`reverse_step` given the step's linearisation `(new, record, accepted, vjp_fn)`."""
    new, record, accepted, vjp_fn = linearised
    ct_th_out, ct_rec = _emitter_cotangents(body, theta, state, new, record, ct_buffers)
    th_d, th_s = eqx.partition(theta, _is_diff)
    st_d, st_s = eqx.partition(state, _is_diff)

    def rejected():
        fn = lambda a, b: eqx.partition(  # noqa: E731
            body.reject(eqx.combine(a, th_s), eqx.combine(b, st_s), new), _is_diff
        )[0]
        _, vjp_rej = jax.vjp(fn, th_d, st_d)
        return vjp_rej(ct_new)

    ct_th, ct_st = lax.cond(accepted, lambda: vjp_fn((ct_new, ct_rec)), rejected)
    return _add(ct_th, ct_th_out), ct_st


# ----------------------------------------------------------------------------------
# The checkpointed loop


class _Plan(eqx.Module):
    """Integer bookkeeping of the backward pass (mirrors `odeckpt.schedules`)."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    cur_pos: jax.Array  # position of the state in hand; -1: none
    target: jax.Array  # advancing towards this position; -1: none
    push: jax.Array  # store the state on arrival at target
    count: jax.Array  # live checkpoints on the stack
    stack_pos: jax.Array  # (c,) positions, ascending
    stack_slot: jax.Array  # (c,) slot holding each


_RESTORE, _ADVANCE, _REVERSE = 0, 1, 2


def _plan_action(plan: _Plan, c: int, betas: jax.Array):
    """Choose this iteration's action; set a new advance target when one is needed."""
    top = plan.stack_pos[plan.count - 1]
    action = jnp.where(
        plan.cur_pos < 0, _RESTORE, jnp.where(plan.cur_pos == plan.b - 1, _REVERSE, _ADVANCE)
    )
    fresh = (action == _ADVANCE) & (plan.target <= plan.cur_pos)
    length = plan.b - top
    snaps = c - plan.count + 1
    split = sj.revolve_split_from_table(length, snaps, betas)
    m = jnp.where(snaps > 1, split, length - 1)
    target = jnp.where(fresh, top + m, plan.target)
    push = jnp.where(fresh, snaps > 1, plan.push)
    return action, eqx.tree_at(lambda p: (p.target, p.push), plan, (target, push))


def _after_reverse(plan: _Plan, c: int) -> _Plan:
    b = plan.b - 1
    pop = plan.stack_pos[plan.count - 1] == b
    count = plan.count - pop
    return eqx.tree_at(
        lambda p: (p.b, p.cur_pos, p.target, p.count),
        plan,
        (b, jnp.asarray(-1), jnp.asarray(-1), count),
    )


def _after_advance(plan: _Plan, slot_free_index):
    cur_pos = plan.cur_pos + 1
    arrived = cur_pos == plan.target
    store = arrived & plan.push
    idx = plan.count
    stack_pos = jnp.where(store, plan.stack_pos.at[idx].set(cur_pos, mode="drop"), plan.stack_pos)
    stack_slot = jnp.where(
        store, plan.stack_slot.at[idx].set(slot_free_index, mode="drop"), plan.stack_slot
    )
    plan = eqx.tree_at(
        lambda p: (p.cur_pos, p.count, p.stack_pos, p.stack_slot, p.target),
        plan,
        (cur_pos, plan.count + store, stack_pos, stack_slot, jnp.where(arrived, -1, plan.target)),
    )
    return plan, store


def _free_slot(plan: _Plan, c: int):
    live = jnp.where(jnp.arange(c) < plan.count, plan.stack_slot, c)
    used = jnp.zeros((c,), bool).at[live].set(True, mode="drop")
    return jnp.argmin(used).astype(jnp.int32)


def _index(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def _store(buffer, i, value):
    return jax.tree.map(lambda b, v: b.at[i].set(v, mode="drop"), buffer, value)


def _materialize(ct, like):
    return jax.tree.map(lambda c, x: jnp.zeros_like(x) if c is None else c, ct, like,
                        is_leaf=lambda c: c is None)  # fmt: skip


class _Residuals(eqx.Module):
    n: jax.Array
    decisions: object  # per step, what `body.replay` recorded
    store: object  # every state (fast path), or None
    slots: object  # compressed checkpoints (online path), or None
    slot_pos: jax.Array | None


def _as_arrays(tree):
    """Turn typed Python scalars (how JAX hands weakly typed primals to a custom VJP)
    back into arrays, so the closure-converted vector field sees what it was traced with."""
    typed = lambda x: isinstance(x, float | int | complex) and hasattr(x, "dtype")  # noqa: E731
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if typed(x) else x, tree)


@eqx.filter_custom_vjp
def _checkpointed(vjp_arg, body, max_steps, checkpoints):
    theta, state0 = _as_arrays(vjp_arg)
    return forward_loop(body, theta, state0, max_steps)


def checkpointed_loop(body: LoopBody, theta, state0, max_steps: int, checkpoints: int):
    """`forward_loop` with a checkpointed reverse mode (see the module docstring)."""
    return _checkpointed((theta, state0), body, max_steps, checkpoints)


@_checkpointed.def_fwd
def _checkpointed_fwd(perturbed, vjp_arg, body, max_steps, checkpoints):
    theta, state0 = _as_arrays(vjp_arg)
    if checkpoints >= max_steps:
        return _forward_store_all(body, theta, state0, max_steps)
    return _forward_online(body, theta, state0, max_steps, checkpoints)


def _forward_store_all(body, theta, state0, max_steps):
    store = _stack_like(state0, max_steps)
    decisions = _stack_like(_replay_like(body, theta, state0), max_steps)

    def step(carry):
        state, buffers, i, store, decisions = carry
        _report(body, theta, state0, state, i)
        store = _store(store, i, state)
        new, record, accepted = body.step(theta, state)
        decisions = _store(decisions, i, body.replay(new, accepted))
        return new, _write(body, theta, state, new, record, buffers), i + 1, store, decisions

    init = (state0, _empty_buffers(body, theta, state0), jnp.asarray(0, jnp.int32),
            store, decisions)  # fmt: skip
    cond = lambda carry: _keep_going(body, theta, max_steps, carry[0], carry[2])  # noqa: E731
    state, buffers, n, store, decisions = lax.while_loop(cond, step, init)
    return LoopOutput(state, buffers, n), _Residuals(n, decisions, store, None, None)


def _stack_like(tree, size):
    return jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)), x.dtype), tree)


def _replay_like(body, theta, state0):
    def fn(theta, state):
        new, _, accepted = body.step(theta, state)
        return body.replay(new, accepted)

    return eqx.filter_eval_shape(fn, theta, state0)


_TABLE_LIMIT = 2**19  # max_steps * c up to which the online slots are planned in Python


@ft.lru_cache(maxsize=32)
def _online_table(c: int, max_steps: int) -> np.ndarray:
    return np.asarray(schedules.online_slots(max_steps, c), np.int32)


def _online_slot(c: int, max_steps: int):
    """`(init, decide)`: the online placement as a constant table when it is cheap to
    plan at trace time (nothing to compile), else the traced decision function."""
    if max_steps * c <= _TABLE_LIMIT:
        table = _online_table(c, max_steps)
        return jnp.zeros((), jnp.int32), lambda state, i: (state, jnp.asarray(table)[i])
    return sj.online_init(c), sj.online_decide


def _forward_online(body, theta, state0, max_steps, c):
    slots = _stack_like(body.compress(state0), c)
    decisions = _stack_like(_replay_like(body, theta, state0), max_steps)
    online0, decide = _online_slot(c, max_steps)

    def step(carry):
        state, buffers, i, online, slots, positions, decisions = carry
        _report(body, theta, state0, state, i)
        online, slot = decide(online, i)
        slot = jnp.where(slot >= 0, slot, c)
        slots = _store(slots, slot, body.compress(state))
        positions = positions.at[slot].set(i, mode="drop")
        new, record, accepted = body.step(theta, state)
        decisions = _store(decisions, i, body.replay(new, accepted))
        buffers = _write(body, theta, state, new, record, buffers)
        return new, buffers, i + 1, online, slots, positions, decisions

    positions = jnp.full((c,), -1, jnp.int32)
    init = (state0, _empty_buffers(body, theta, state0), jnp.asarray(0, jnp.int32),
            online0, slots, positions, decisions)  # fmt: skip
    cond = lambda carry: _keep_going(body, theta, max_steps, carry[0], carry[2])  # noqa: E731
    state, buffers, n, _, slots, positions, decisions = lax.while_loop(cond, step, init)
    residuals = _Residuals(n, decisions, None, slots, positions)
    return LoopOutput(state, buffers, n), residuals


@_checkpointed.def_bwd
def _checkpointed_bwd(residuals, grad_obj, perturbed, vjp_arg, body, max_steps, checkpoints):
    theta, state0 = _as_arrays(vjp_arg)
    out_like = eqx.filter_eval_shape(forward_loop, body, theta, state0, max_steps)
    ct_state = eqx.filter(_materialize(grad_obj.state, out_like.state), _is_diff)
    ct_buffers = _materialize(grad_obj.buffers, out_like.buffers)
    backward = _backward_store_all if residuals.store is not None else _backward_online
    ct_th, ct_st = backward(body, theta, residuals, ct_state, ct_buffers, checkpoints)
    return ct_th, ct_st


def _backward_store_all(body, theta, res: _Residuals, ct_state, ct_buffers, c):
    def step(carry):
        i, ct_th, ct_st = carry
        i = i - 1
        state, replay = _index(res.store, i), _index(res.decisions, i)
        d_th, ct_st = reverse_step(body, theta, state, replay, ct_st, ct_buffers)
        return i, _add(ct_th, d_th), ct_st

    init = (res.n, _zeros(eqx.filter(theta, _is_diff)), ct_state)
    _, ct_th, ct_st = lax.while_loop(lambda carry: carry[0] > 0, step, init)
    return ct_th, ct_st


def _initial_plan(res: _Residuals, c: int) -> _Plan:
    assert res.slot_pos is not None
    valid = res.slot_pos >= 0
    order = jnp.argsort(jnp.where(valid, res.slot_pos, jnp.iinfo(jnp.int32).max))
    count = jnp.sum(valid).astype(jnp.int32)
    minus = jnp.asarray(-1, jnp.int32)
    return _Plan(
        b=res.n, cur_pos=minus, target=minus, push=jnp.asarray(False), count=count,
        stack_pos=jnp.where(jnp.arange(c) < count, res.slot_pos[order], -1).astype(jnp.int32),
        stack_slot=order.astype(jnp.int32),
    )  # fmt: skip


def _backward_online(body, theta, res: _Residuals, ct_state, ct_buffers, c):
    """Reverse the steps from the online checkpoints, binomially inside each interval."""
    max_steps = jax.tree.leaves(res.decisions)[0].shape[0]
    betas = jnp.asarray(sj.beta_table(c, max_steps))

    def restore(state, ckpt, replay, ct_th, ct_st, action):
        return body.restore(theta, ckpt), ct_th, ct_st

    def move(state, ckpt, replay, ct_th, ct_st, action):
        # Advancing and reversing share one linearised step: the step is compiled once.
        linearised = _step_vjp(body, theta, state, replay)

        def reverse():
            d_th, ct = _pullback(body, theta, state, linearised, ct_st, ct_buffers)
            return state, _add(ct_th, d_th), ct

        return lax.cond(action == _REVERSE, reverse, lambda: (linearised[0], ct_th, ct_st))

    def step(carry):
        plan, state, slots, ct_th, ct_st = carry
        action, plan = _plan_action(plan, c, betas)
        ckpt = _index(slots, plan.stack_slot[plan.count - 1])
        replay = _index(res.decisions, jnp.maximum(plan.cur_pos, 0))
        state, ct_th, ct_st = lax.cond(
            action == _RESTORE, restore, move, state, ckpt, replay, ct_th, ct_st, action
        )
        restored = eqx.tree_at(lambda p: (p.cur_pos, p.target), plan,
                               (plan.stack_pos[plan.count - 1], jnp.asarray(-1)))  # fmt: skip
        advanced, store = _after_advance(plan, _free_slot(plan, c))
        reversed_ = _after_reverse(plan, c)
        plan = jax.tree.map(
            lambda r, a, v: jnp.select([action == _RESTORE, action == _ADVANCE], [r, a], v),
            restored,
            advanced,
            reversed_,
        )
        index = jnp.where(store & (action == _ADVANCE), advanced.stack_slot[plan.count - 1], c)
        slots = _store(slots, index, body.compress(state))
        return plan, state, slots, ct_th, ct_st

    like = eqx.filter_eval_shape(body.restore, theta, _index(res.slots, 0))
    placeholder = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
    init = (_initial_plan(res, c), placeholder, res.slots,
            _zeros(eqx.filter(theta, _is_diff)), ct_state)  # fmt: skip
    out = lax.while_loop(lambda carry: carry[0].b > 0, step, init)
    return out[3], out[4]
