"""What the steps save: one `Emitter` per requested output, and `Outputs`, the record
of their buffers that the Solution and the continuous adjoints read.

Each `SubSaveAt` has a `SaveLayout` (static: how many rows) and a `SaveRequest` (in
the `Problem`: its save times and `fn`); its emitter writes the rows of its span. The
`t0` and `t1` rows are added by `build_solution`. See `docs/architecture.md`, "How a
solve flows", steps 4–5.
"""

import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._checkpointing import Emitter
from odeckpt._core import Y
from odeckpt._solvers import DenseStep

from .state import Problem, Record, State


class SaveRequest(eqx.Module):
    """What the steps read of one `SubSaveAt` (a leaf group of `Problem.saves`).

    Attributes:
        ts: its save times in internal time (ascending), or `None` for no rows.
        fn: `fn(tau, y, args)` in internal time: what a row holds.
    """

    ts: jax.Array | None
    fn: Callable


class SaveLayout(eqx.Module):
    """How many rows the steps write for one `SubSaveAt` (all static).

    Attributes:
        num_ts: rows at save times (0: none).
        steps: save every `steps`-th accepted step (0: none).
        saves_y: its `fn` is the state itself (`save_y`): the rows are `y`.
    """

    num_ts: int = eqx.field(static=True)
    steps: int = eqx.field(static=True)
    saves_y: bool = eqx.field(static=True)


class SubOutputs(eqx.Module):
    """One `SubSaveAt`'s buffers (or their cotangents); `None` where not saved.

    Attributes:
        ts: `fn` at each save time, leaves `(num_ts, ...)`.
        steps: `(step_ts, rows)`: `fn` after every `steps`-th accepted step
            (`max_steps // steps` rows, `inf` where unfilled).
    """

    ts: Y | None = None
    steps: tuple[jax.Array, Y] | None = None


class Outputs(eqx.Module):
    """The loop's output buffers (or their cotangents) by output.

    Attributes:
        subs: one `SubOutputs` per `SubSaveAt`, in the order of `Integrator.saves`.
        dense: `SaveAt(dense=True)`: every accepted step's polynomial, or `None`.
    """

    subs: tuple[SubOutputs, ...]
    dense: DenseStep | None = None


def _saved(layout: SaveLayout, of_state: bool) -> bool:
    """Whether a `SubSaveAt` has buffers: of `fn`, or (`of_state`) of `y` where `fn`
    is not `y` itself (the continuous adjoints' pullback of `fn` reads them)."""
    return not (of_state and layout.saves_y)


def emitters(
    layouts: tuple[SaveLayout, ...], *, save_dense: bool, max_steps: int, of_state: bool = False
) -> tuple[Emitter, ...]:
    """The emitters of the requested outputs, in the order `outputs` reads them back.

    With `of_state`, the emitters write `y` itself at the rows of every `SubSaveAt`
    whose `fn` is not `save_y` (and no dense output)."""
    out = []
    for k, layout in enumerate(layouts):
        if not _saved(layout, of_state):
            continue
        if layout.num_ts:
            out.append(
                Emitter(ft.partial(_ts_span, k), ft.partial(_ts_value, k, of_state), layout.num_ts)
            )
        if layout.steps:
            out.append(
                Emitter(
                    ft.partial(_step_span, layout.steps),
                    ft.partial(_step_value, k, of_state),
                    max_steps // layout.steps,
                )
            )
    if save_dense and not of_state:
        out.append(Emitter(ft.partial(_step_span, 1), _dense_value, max_steps))
    return tuple(out)


def outputs(
    buffers: tuple, layouts: tuple[SaveLayout, ...], *, save_dense: bool, of_state: bool = False
) -> Outputs:
    """The buffers (one per emitter, in `emitters`' order) as an `Outputs` record."""
    rows = list(buffers)
    take = lambda saved: rows.pop(0) if saved else None
    subs = []
    for layout in layouts:
        saved = _saved(layout, of_state)
        ts = take(saved and layout.num_ts > 0)
        subs.append(SubOutputs(ts=ts, steps=take(saved and layout.steps > 0)))
    record = Outputs(tuple(subs), dense=take(save_dense and not of_state))
    assert not rows, "one buffer per emitter"
    return record


_COMPARE_ALL = 256  # up to this many save times, count by comparing with all of them


def count_at_or_before(ts, t) -> jax.Array:
    """How many of the ascending `ts` are <= t. A sum of comparisons for few save times
    (one fused kernel, where a binary search is a loop nested in every step), a binary
    search for many."""
    if ts.shape[0] <= _COMPARE_ALL:
        return jnp.sum(ts <= t, dtype=jnp.int32)
    return jnp.searchsorted(ts, t, side="right").astype(jnp.int32)


def _ts_span(k: int, problem: Problem, state: State, new: State):
    ts = problem.saves[k].ts
    return count_at_or_before(ts, state.t), count_at_or_before(ts, new.t)


def _observed(k: int, of_state: bool, problem: Problem, t, y):
    return y if of_state else problem.saves[k].fn(t, y, problem.args)


def _ts_value(k: int, of_state: bool, problem: Problem, record: Record, j):
    t = problem.saves[k].ts[j]
    return _observed(k, of_state, problem, t, record.dense.evaluate(t))


def _step_span(every: int, problem: Problem, state: State, new: State):
    return state.num_accepted // every, new.num_accepted // every


def _step_value(k: int, of_state: bool, problem: Problem, record: Record, j):
    t = record.dense.t1
    return t, _observed(k, of_state, problem, t, record.y1)


def _dense_value(problem: Problem, record: Record, j):
    return record.dense
