"""What the steps save: one `Emitter` per requested output, and `Outputs`, the record
of their buffers that the Solution and the continuous adjoints read.

Each emitter writes rows `j` of its own buffer for `j` in its span (see
`odeckpt._checkpointing.Emitter`): `SaveAt(ts=...)` the rows of the save times a step
crossed, `SaveAt(steps=True)` and dense output one row per accepted step.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._checkpointing import Emitter
from odeckpt._core import Y
from odeckpt._solvers import DenseStep

from .state import Problem, Record, State


class Outputs(eqx.Module):
    """The loop's output buffers (or their cotangents) by output; `None` where not saved.

    Attributes:
        ts: `SaveAt(ts=...)`: `y` at each save time, leaves `(num_ts, ...)`.
        steps: `SaveAt(steps=True)`: `(step_ts, step_ys)`, one row per accepted step
            (`max_steps` rows, `inf` where unfilled).
        dense: `SaveAt(dense=True)`: every accepted step's polynomial.
    """

    ts: Y | None = None
    steps: tuple[jax.Array, Y] | None = None
    dense: DenseStep | None = None


def emitters(
    *, save_ts: bool, save_steps: bool, save_dense: bool, num_ts: int, max_steps: int
) -> tuple[Emitter, ...]:
    """The emitters of the requested outputs, in the order of `Outputs`' fields."""
    out = []
    if save_ts:
        out.append(Emitter(_ts_span, _ts_value, num_ts))
    if save_steps:
        out.append(Emitter(_step_span, _step_value, max_steps))
    if save_dense:
        out.append(Emitter(_step_span, _dense_value, max_steps))
    return tuple(out)


def outputs(buffers: tuple, *, save_ts: bool, save_steps: bool, save_dense: bool) -> Outputs:
    """The loop's buffers (one per emitter, in `emitters`' order) as an `Outputs` record."""
    rows = list(buffers)
    take = lambda saved: rows.pop(0) if saved else None  # noqa: E731
    record = Outputs(ts=take(save_ts), steps=take(save_steps), dense=take(save_dense))
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


def _ts_span(state: State, new: State):
    return state.save_index, new.save_index


def _ts_value(problem: Problem, record: Record, j):
    assert problem.ts is not None
    return record.dense.evaluate(problem.ts[j])


def _step_span(state: State, new: State):
    return state.num_accepted, new.num_accepted


def _step_value(problem: Problem, record: Record, j):
    return record.dense.t1, record.y1


def _dense_value(problem: Problem, record: Record, j):
    return record.dense
