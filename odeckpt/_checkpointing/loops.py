"""Bounded while loops over a step function, and the checkpointed one with its VJP.

The integrator hands the loop a `LoopBody`: a step `(theta, state) -> (state, record,
accepted)`, and `Emitter`s that write outputs into write-only buffers. The buffers are
outside the loop state: checkpoints never hold outputs, and the backward pass reads
their cotangents when it reverses the step that wrote them.

`checkpointed_loop` has a custom VJP. Its forward pass stores at most `checkpoints`
states, placed online (the number of steps is unknown while it runs; see
`odeckpt.schedules`); its backward pass then reverses the steps n-1, ..., 0, running
the optimal offline binomial plan inside each interval between stored states. Each
accepted step is reversed by one `jax.vjp` of the step: one re-evaluation and its
transpose. A rejected step moved only the next step's time, which is recorded: it is
reversed from that record (`LoopBody.skip`) without being evaluated, and so replayed
for large states (see `advance`). When `checkpoints >= max_steps` every state is
stored and the backward pass is a plain reverse sweep.

Both passes work a window of consecutive steps at a time (see `window_size`): the
loops that run once per step touch only the window's recorded decisions and
checkpoints, and the max_steps-long buffers are read and written once per window.
The backward pass keeps the plan's order of actions exactly, so it performs the
evaluations `odeckpt.schedules.online_plan` counts, less those of skipped rejected
steps.
"""

import functools as ft
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt import schedules
from odeckpt._core.batching import any_in_batch, batched_like, cond as batch_cond

from . import plan as sj


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
    skip: Callable = eqx.field(static=True)  # (theta, state, decisions) -> a rejected step
    cond: Callable = eqx.field(static=True)
    compress: Callable = eqx.field(static=True)
    restore: Callable = eqx.field(static=True)
    emitters: tuple[Emitter, ...] = eqx.field(static=True)
    progress: Callable | None = eqx.field(static=True, default=None)  # (theta, state0, state, i)


class LoopOutput(eqx.Module):
    state: Any
    buffers: tuple
    num_steps: jax.Array


class _Like(eqx.Module):
    """Shapes and dtypes of what one step produces: its output record and recorded
    decisions. Traced once per loop (tracing the step is most of a solve's trace time)."""

    record: Any
    replay: Any


def _step_like(body: LoopBody, theta, state) -> _Like:
    def fn(theta, state):
        new, record, accepted = body.step(theta, state)
        return record, body.replay(new, accepted)

    return _Like(*eqx.filter_eval_shape(fn, theta, state))


def _empty_buffers(body: LoopBody, theta, record) -> tuple:
    """Output buffers (filled with inf) for a step whose record is shaped like `record`."""

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

    # Not `_step_like`: the continuous adjoints' taped bodies (`_tape`) run this loop,
    # and their `replay` does not apply to their (State, Tape) state.
    record = eqx.filter_eval_shape(body.step, theta, state0)[1]
    init = (state0, _empty_buffers(body, theta, record), jnp.asarray(0, jnp.int32))
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
    acc = batched_like((_zeros(th_d), _zeros(rec_d)), (state, ct_buffers))
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

    An accepted step is recomputed and linearised. A rejected one leaves the state
    unchanged but for `t_next`: its VJP is `body.skip`'s, and its candidate is never
    computed (so its NaN or inf, if any, cannot reach a gradient).
    """

    def taped(theta, state, replay, ct_new, ct_buffers):
        new, record, _, vjp_fn = _step_vjp(body, theta, state, replay)
        ct_th_out, ct_rec = _emitter_cotangents(body, theta, state, new, record, ct_buffers)
        ct_th, ct_st = vjp_fn((ct_new, ct_rec))
        return _add(ct_th, ct_th_out), ct_st

    def rejected(theta, state, replay, ct_new, ct_buffers):
        th_d, th_s = eqx.partition(theta, _is_diff)
        st_d, st_s = eqx.partition(state, _is_diff)
        fn = lambda a, b: eqx.partition(  # noqa: E731
            body.skip(eqx.combine(a, th_s), eqx.combine(b, st_s), replay), _is_diff
        )[0]
        return jax.vjp(fn, th_d, st_d)[1](ct_new)

    return batch_cond(replay.accepted, taped, rejected, theta, state, replay, ct_new, ct_buffers)


def advance(body: LoopBody, theta, state, replay):
    """One step replayed from its record, for its value only (no derivatives): an
    accepted step is recomputed, a rejected one is `body.skip`ped.

    The backward pass's advances use this for large states only (those with windows
    shorter than `_WINDOW`). For a small state the branch costs about what it saves:
    on the 2-D damped oscillator at c = 16 the gradient ran as fast with it, and
    `jit(grad)` took 7% longer to compile (0.25 s); on a 4096-point reaction-diffusion
    problem it saves 6-11% of the gradient's time (measured)."""

    def taped(theta, state, replay):
        return body.step(theta, state, replay)[0]

    return batch_cond(replay.accepted, taped, body.skip, theta, state, replay)


# ----------------------------------------------------------------------------------
# The checkpointed loop
#
# XLA's CPU runtime runs a while loop's body inline, without dispatching each kernel to
# its thread pool, only when the body is tiny or every buffer it touches is small (512
# bytes). So the loops that run once per step (forward steps, backward advances and
# reversals) touch only the state, the outputs, and a window of a few steps'
# recorded decisions and checkpoints; the max_steps-long buffers and the checkpoint
# slots are read and written by an outer loop, once per window. (The forward and
# backward passes share these helpers and records, hence one module over ~300 lines.)
#
# A window holds up to `_WINDOW` steps (32 rows of a 2-D state's leaf stay within 512
# bytes), fewer for large states: the backward pass keeps two windows of checkpoints
# besides the c stored ones, and `_WINDOW_BYTES` bounds what that costs.

_WINDOW = 32
_WINDOW_BYTES = 64 * 1024


def window_size(body: "LoopBody", theta, state0) -> int:
    """Steps per window: `_WINDOW`, or fewer so that a window of checkpoints takes at
    most `_WINDOW_BYTES`; at least 2 (the backward pass advances by one step within a
    window, from the state at its first row to the next)."""
    like = eqx.filter_eval_shape(body.compress, state0)
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(like))
    return int(min(_WINDOW, max(2, _WINDOW_BYTES // max(size, 1))))


def _index(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def _store(buffer, i, value):
    return jax.tree.map(lambda b, v: b.at[i].set(v, mode="drop"), buffer, value)


def _window(buffer, i, w: int):
    """Rows `i, ..., i + w - 1` of a buffer padded by `w` rows."""
    return jax.tree.map(lambda b: lax.dynamic_slice_in_dim(b, i, w), buffer)


def _flush(buffer, i, window):
    """Write a window into rows `i, ..., i + len(window) - 1` of a padded buffer."""
    return jax.tree.map(lambda b, w: lax.dynamic_update_slice_in_dim(b, w, i, 0), buffer, window)


def _stack_like(tree, size):
    return jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)), x.dtype), tree)


def _materialize(ct, like):
    return jax.tree.map(lambda c, x: jnp.zeros_like(x) if c is None else c, ct, like,
                        is_leaf=lambda c: c is None)  # fmt: skip


class _Residuals(eqx.Module):
    n: jax.Array
    decisions: object  # per step, what `body.replay` recorded; a window of padding
    store: object  # every state (fast path), padded like `decisions`; or None
    slots: object  # compressed checkpoints (online path), or None
    slot_pos: jax.Array | None


def _as_arrays(tree):
    """Turn typed Python scalars (how JAX hands weakly typed primals to a custom VJP)
    back into arrays, so the closure-converted vector field sees what it was traced with."""
    typed = lambda x: isinstance(x, float | int | complex) and hasattr(x, "dtype")  # noqa: E731
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if typed(x) else x, tree)


@eqx.filter_custom_vjp
def _checkpointed(vjp_arg, body, max_steps, checkpoints, expected, w, like):
    theta, state0 = _as_arrays(vjp_arg)
    return forward_loop(body, theta, state0, max_steps)


def checkpointed_loop(
    body: LoopBody, theta, state0, max_steps: int, checkpoints: int, expected: int | None = None
):
    """`forward_loop` with a checkpointed reverse mode (see the module docstring).

    `expected`: the number of steps, when known before the loop runs (fixed step
    sizes): the forward pass then stores where `schedules.known_slots` says, near the
    offline optimum, instead of placing checkpoints online. A wrong value costs
    recomputation only, never correctness."""
    w = window_size(body, theta, state0)
    like = _step_like(body, theta, state0)
    return _checkpointed((theta, state0), body, max_steps, checkpoints, expected, w, like)


@_checkpointed.def_fwd
def _checkpointed_fwd(perturbed, vjp_arg, body, max_steps, checkpoints, expected, w, like):
    theta, state0 = _as_arrays(vjp_arg)
    if checkpoints >= max_steps:
        return _forward_store_all(body, theta, state0, max_steps, w, like)
    return _forward_online(body, theta, state0, max_steps, checkpoints, expected, w, like)


# ----------------------------------------------------------------------------------
# The forward pass, in runs of at most a window's steps


def _run(body, theta, state0, state, buffers, i, length, keep_states, w, like: _Like):
    """Up to `length <= w` steps from step i; returns the state, the outputs, the
    number of steps taken, and a window of their decisions (and states if asked)."""
    decisions = _stack_like(like.replay, w)
    states = _stack_like(state, w) if keep_states else None

    def cond(carry):
        state, _, j, _, _ = carry
        return (j < length) & body.cond(theta, state)

    def step(carry):
        state, buffers, j, decisions, states = carry
        _report(body, theta, state0, state, i + j)
        if keep_states:
            states = _store(states, j, state)
        new, record, accepted = body.step(theta, state)
        decisions = _store(decisions, j, body.replay(new, accepted))
        buffers = _write(body, theta, state, new, record, buffers)
        return new, buffers, j + 1, decisions, states

    init = (state, buffers, jnp.asarray(0, jnp.int32), decisions, states)
    return lax.while_loop(cond, step, batched_like(init, state))


def _any_going(body, theta, max_steps):
    """The condition of an outer (per-window) loop: go on while any batch element is
    going. Under `jax.vmap` a batched condition would make the loop select every
    carried buffer (max_steps states here) per iteration; instead the loop runs
    unbatched and a finished element's window has no steps."""
    return lambda carry: any_in_batch(_keep_going(body, theta, max_steps, carry[0], carry[2]))


def _forward_store_all(body, theta, state0, max_steps, w, like: _Like):
    store = _stack_like(state0, max_steps + w)
    decisions = _stack_like(like.replay, max_steps + w)

    def chunk(carry):
        state, buffers, i, store, decisions = carry
        going = _keep_going(body, theta, max_steps, state, i)
        length = jnp.where(going, jnp.minimum(max_steps - i, w), 0)
        state, buffers, k, window, states = _run(
            body, theta, state0, state, buffers, i, length, keep_states=True, w=w, like=like
        )
        return state, buffers, i + k, _flush(store, i, states), _flush(decisions, i, window)

    init = (state0, _empty_buffers(body, theta, like.record), jnp.asarray(0, jnp.int32),
            store, decisions)  # fmt: skip
    cond = _any_going(body, theta, max_steps)
    state, buffers, n, store, decisions = lax.while_loop(cond, chunk, batched_like(init, state0))
    return LoopOutput(state, buffers, n), _Residuals(n, decisions, store, None, None)


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
        ahead = lambda online, i: (online, gaps[i], next_slots[i])  # noqa: E731
        return (jnp.zeros((), jnp.int32), slots[0]), ahead

    def ahead(online, i):
        def cond(carry):
            _, k, slot = carry
            return (slot < 0) & (k < w)

        def decide(carry):
            online, k, _ = carry
            online, slot = sj.online_decide(online, i + k + 1)
            return online, k + 1, slot

        return lax.while_loop(
            cond, decide, (online, jnp.asarray(0, jnp.int32), jnp.asarray(-1, jnp.int32))
        )

    return sj.online_decide(sj.online_init(c), 0), ahead


def _forward_online(body, theta, state0, max_steps, c, expected, w, like: _Like):
    decisions = _stack_like(like.replay, max_steps + w)
    (online, slot), ahead = _online_schedule(c, max_steps, expected, w)

    def chunk(carry):
        state, buffers, i, online, slot, slots, positions, decisions = carry
        going = _keep_going(body, theta, max_steps, state, i)
        slot = jnp.where(going & (slot >= 0), slot, c)
        slots = _store(slots, slot, body.compress(state))
        positions = positions.at[slot].set(i, mode="drop")
        online, length, slot = ahead(online, i)
        length = jnp.where(going, jnp.minimum(length, max_steps - i), 0)
        state, buffers, k, window, _ = _run(
            body, theta, state0, state, buffers, i, length, keep_states=False, w=w, like=like
        )
        decisions = _flush(decisions, i, window)
        return state, buffers, i + k, online, slot, slots, positions, decisions

    slots = _stack_like(body.compress(state0), c)
    positions = jnp.full((c,), -1, jnp.int32)
    init = (state0, _empty_buffers(body, theta, like.record), jnp.asarray(0, jnp.int32),
            online, slot, slots, positions, decisions)  # fmt: skip
    cond = _any_going(body, theta, max_steps)
    init = batched_like(init, state0)
    state, buffers, n, _, _, slots, positions, decisions = lax.while_loop(cond, chunk, init)
    residuals = _Residuals(n, decisions, None, slots, positions)
    return LoopOutput(state, buffers, n), residuals


# ----------------------------------------------------------------------------------
# The backward pass


@_checkpointed.def_bwd
def _checkpointed_bwd(
    residuals, grad_obj, perturbed, vjp_arg, body, max_steps, checkpoints, expected, w, like
):
    theta, state0 = _as_arrays(vjp_arg)
    buffers_like = eqx.filter_eval_shape(_empty_buffers, body, theta, like.record)
    ct_state = eqx.filter(_materialize(grad_obj.state, state0), _is_diff)
    ct_buffers = _materialize(grad_obj.buffers, buffers_like)
    if residuals.store is not None:
        return _backward_store_all(body, theta, residuals, ct_state, ct_buffers, w)
    return _backward_online(body, theta, residuals, ct_state, ct_buffers, checkpoints, w)


def _backward_store_all(body, theta, res: _Residuals, ct_state, ct_buffers, w):
    """A plain reverse sweep, a window of stored states at a time."""

    def chunk(carry):
        b, ct_th, ct_st = carry
        start = jnp.maximum(b - w, 0)
        states, decisions = _window(res.store, start, w), _window(res.decisions, start, w)

        def step(j, carry):
            ct_th, ct_st = carry
            i = b - 1 - j - start
            d_th, ct_st = reverse_step(
                body, theta, _index(states, i), _index(decisions, i), ct_st, ct_buffers
            )
            return _add(ct_th, d_th), ct_st

        return (start, *lax.fori_loop(0, b - start, step, (ct_th, ct_st)))

    init = (res.n, _zeros(eqx.filter(theta, _is_diff)), ct_state)
    init = batched_like(init, (res.n, ct_state))
    _, ct_th, ct_st = lax.while_loop(lambda carry: carry[0] > 0, chunk, init)
    return ct_th, ct_st


class _Plan(eqx.Module):
    """The checkpoint stack of the backward pass (mirrors `odeckpt.schedules`); or,
    inside a window, a view of its top entries (`_view`)."""

    b: jax.Array  # steps b-1, ..., 0 remain to be reversed
    count: jax.Array  # live checkpoints in `stack_pos` (above `base`)
    stack_pos: jax.Array  # positions, ascending
    stack_slot: jax.Array  # slot holding each; -1: pushed in a window, slot not yet chosen
    base: jax.Array  # live checkpoints below the view (0 for the whole stack)


def _initial_plan(res: _Residuals, c: int) -> _Plan:
    assert res.slot_pos is not None
    valid = res.slot_pos >= 0
    order = jnp.argsort(jnp.where(valid, res.slot_pos, jnp.iinfo(jnp.int32).max))
    count = jnp.sum(valid).astype(jnp.int32)
    stack_pos = jnp.where(jnp.arange(c) < count, res.slot_pos[order], -1).astype(jnp.int32)
    return _Plan(res.n, count, stack_pos, order.astype(jnp.int32), jnp.asarray(0, jnp.int32))


def _top(plan: _Plan):
    return plan.stack_pos[plan.count - 1]


def _view(plan: _Plan, w: int) -> _Plan:
    """The top w + 1 entries of the stack, with room for w pushes: all a window needs
    (its live checkpoints, at most w, and the one below it). The per-segment loops
    carry this instead of the c-long stack, so that their buffers stay small for any c
    (see the comment above `_WINDOW`)."""
    base = jnp.maximum(plan.count - (w + 1), 0)
    k = jnp.arange(2 * w + 1)
    live = k < plan.count - base
    index = jnp.minimum(base + k, plan.stack_pos.shape[0] - 1)
    pos = jnp.where(live, plan.stack_pos[index], -1)
    slot = jnp.where(live, plan.stack_slot[index], -1)
    return _Plan(plan.b, plan.count - base, pos, slot, base)


def _merge(plan: _Plan, view: _Plan, c: int) -> _Plan:
    """The whole stack after a window's work on `view`; checkpoints pushed in the
    window take free slots (those of no live checkpoint)."""
    k = jnp.arange(view.stack_pos.shape[0])
    index = jnp.where(k < view.count, view.base + k, c)
    stack_pos = plan.stack_pos.at[index].set(view.stack_pos, mode="drop")
    stack_slot = plan.stack_slot.at[index].set(view.stack_slot, mode="drop")
    count = view.base + view.count
    live = jnp.arange(c) < count
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
    return _Plan(plan.b, plan.count + push, stack_pos, stack_slot, plan.base)


def _segment(plan: _Plan, top, c: int):
    """The Revolve segment from the top checkpoint (at `top`) towards step b - 1:
    `(target, push)`, where the state reached at `target` is stored if `push`."""
    length, snaps = plan.b - top, c - (plan.base + plan.count) + 1
    push = snaps > 1
    split = lax.cond(push, sj.revolve_split, lambda length, snaps: length - 1, length, snaps)
    return top + split, push


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
    replays: Any
    states: Any
    w: int = eqx.field(static=True)


def _window_entries(plan: _Plan, start, w: int):
    """The stack entries whose checkpoints lie in the window from `start`: the top `w`
    entries at most. Returns their stack indices, rows and a validity mask."""
    k = plan.count - 1 - jnp.arange(w)
    index = jnp.maximum(k, 0)
    rows = plan.stack_pos[index] - start
    return index, rows, (k >= 0) & (rows >= 0) & (rows < w)


def _open_window(slots, decisions, plan: _Plan, start, w: int) -> _Window:
    index, rows, valid = _window_entries(plan, start, w)
    stored = _index(slots, plan.stack_slot[index])
    rows = jnp.where(valid, rows, w)
    states = jax.tree.map(lambda s: jnp.zeros_like(s).at[rows].set(s, mode="drop"), stored)
    return _Window(start, _window(decisions, start, w), states, w)


def _close_window(slots, plan: _Plan, window: _Window, c: int):
    """Write the window's live checkpoints back into their slots."""
    index, rows, valid = _window_entries(plan, window.start, window.w)
    values = _index(window.states, jnp.clip(rows, 0, window.w - 1))
    return _store(slots, jnp.where(valid, plan.stack_slot[index], c), values)


def _advance(body: LoopBody, theta, c: int, window: _Window, plan: _Plan, hand: _Hand):
    """Advance towards b - 1, within the window, storing what the plan asks for: one
    iteration per segment, whose steps run in a loop of plain (replayed) steps."""
    stop = jnp.minimum(plan.b - 1, window.start + window.w - 1)

    def step(carry):
        state, pos = carry
        replay = _index(window.replays, pos - window.start)
        if window.w < _WINDOW:  # a large state: see `advance`
            return advance(body, theta, state, replay), pos + 1
        return body.step(theta, state, replay)[0], pos + 1

    def segment(carry):
        plan, hand, states = carry
        end = jnp.minimum(hand.target, stop)
        init = batched_like((hand.state, hand.pos), (hand, end))
        state, pos = lax.while_loop(lambda carry: carry[1] < end, step, init)
        arrived = pos == hand.target
        store = arrived & hand.push
        row = jnp.where(store, pos - window.start, window.w)
        states = _store(states, row, body.compress(state))
        plan = _push(plan, pos, store)
        keep = lambda plan, pos: (hand.target, hand.push)  # noqa: E731
        target, push = lax.cond(arrived, ft.partial(_segment, c=c), keep, plan, pos)
        return plan, _Hand(state, pos, target, push, hand.held), states

    init = batched_like((plan, hand, window.states), (plan, hand))
    plan, hand, states = lax.while_loop(lambda carry: carry[1].pos < stop, segment, init)
    return plan, hand, eqx.tree_at(lambda w: w.states, window, states)


def _run_window(body: LoopBody, theta, c: int, window: _Window, ct_buffers, carry):
    """Advance and reverse while every step needed lies in the window: one iteration per
    reversed step b - 1 (restore the top checkpoint, advance to b - 1 storing the states
    the Revolve plan asks for, reverse the step, pop the top checkpoint once it is
    b - 1); stop when the advance leaves the window or the top checkpoint is before it."""

    # The branches take everything they read as operands (see `_batching.cond`).
    def keep(theta, plan, hand, window):
        return hand

    def restore(theta, plan, hand, window):
        top = _top(plan)
        state = body.restore(theta, _index(window.states, top - window.start))
        return _Hand(state, top, *_segment(plan, top, c), jnp.asarray(True))

    def skip(theta, window, ct_buffers, plan, hand, ct_th, ct_st):
        return plan, ct_th, ct_st

    def reverse(theta, window, ct_buffers, plan, hand, ct_th, ct_st):
        b = plan.b - 1
        replay = _index(window.replays, b - window.start)
        d_th, ct_st = reverse_step(body, theta, hand.state, replay, ct_st, ct_buffers)
        count = plan.count - (_top(plan) == b)
        plan = _Plan(b, count, plan.stack_pos, plan.stack_slot, plan.base)
        return plan, _add(ct_th, d_th), ct_st

    def iteration(carry):
        plan, hand, window, ct_th, ct_st, _ = carry
        hand = batch_cond(hand.held, keep, restore, theta, plan, hand, window)
        plan, hand, window = _advance(body, theta, c, window, plan, hand)
        reached = hand.pos == plan.b - 1
        plan, ct_th, ct_st = batch_cond(
            reached, reverse, skip, theta, window, ct_buffers, plan, hand, ct_th, ct_st
        )
        hand = eqx.tree_at(lambda h: h.held, hand, ~reached)
        going = reached & (plan.b > 0) & (_top(plan) >= window.start)
        return plan, hand, window, ct_th, ct_st, going

    plan, hand, ct_th, ct_st = carry
    init = (plan, hand, window, ct_th, ct_st, plan.b > 0)  # b = 0: a finished batch element
    init = batched_like(init, carry)
    plan, hand, window, ct_th, ct_st, _ = lax.while_loop(lambda carry: carry[-1], iteration, init)
    return plan, hand, window, ct_th, ct_st


def _backward_online(body, theta, res: _Residuals, ct_state, ct_buffers, c, w):
    """Reverse the steps from the online checkpoints, binomially inside each interval.

    A window of `w` steps at a time: the window before b when the state to start from
    lies within it, else the window the state in hand advances through."""

    def window(carry):
        plan, hand, slots, ct_th, ct_st = carry
        pos = jnp.where(hand.held, hand.pos, _top(plan))
        start = jnp.minimum(pos, jnp.maximum(plan.b - w, 0))
        opened = _open_window(slots, res.decisions, plan, start, w)
        view, hand, closed, ct_th, ct_st = _run_window(
            body, theta, c, opened, ct_buffers, (_view(plan, w), hand, ct_th, ct_st)
        )
        plan = _merge(plan, view, c)
        return plan, hand, _close_window(slots, plan, closed, c), ct_th, ct_st

    like = eqx.filter_eval_shape(body.restore, theta, _index(res.slots, 0))
    placeholder = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
    zero = jnp.asarray(0, jnp.int32)
    hand = _Hand(placeholder, zero, zero, jnp.asarray(False), jnp.asarray(False))
    init = (_initial_plan(res, c), hand, res.slots, _zeros(eqx.filter(theta, _is_diff)),
            ct_state)  # fmt: skip
    init = batched_like(init, (res, ct_state))
    cond = lambda carry: any_in_batch(carry[0].b > 0)  # see `_any_going`  # noqa: E731
    _, _, _, ct_th, ct_st = lax.while_loop(cond, window, init)
    return ct_th, ct_st
