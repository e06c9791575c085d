"""The rows of a `Solution`'s saved outputs: each `SubSaveAt`'s `t0` row, its save-time,
step and `t1` rows in time order, and the time derivatives that no step carries."""

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
from jax import lax
from jaxtyping import PyTree

from ._core import Y
from ._integrator import Problem, SaveLayout, State, SubOutputs
from ._saveat import SubSaveAt


class SolveEnd(eqx.Module):
    """What every `SubSaveAt`'s rows read of the solve besides their buffers."""

    problem: Problem
    state0: State
    final: State
    ok: jax.Array
    num_steps: jax.Array
    t0: jax.Array
    t1: jax.Array
    sign: jax.Array | float
    y0: Y
    end: tuple  # where the solve ended: `event_end`
    fixed_times: bool = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)


class _Rows(eqx.Module):
    """Some rows of one `SubSaveAt`: their times as given, their values, and the
    internal times that order them (`inf` for unfilled rows)."""

    ts: jax.Array
    ys: PyTree
    order: jax.Array


def sub_rows(sub: SubSaveAt, layout: SaveLayout, request, buffers: SubOutputs, end: SolveEnd):
    """`(ts, ys)` of one `SubSaveAt`: its `t0` row, then its save-time, step and `t1`
    rows in time order (as diffrax orders them: at equal times, save times first)."""
    parts = []
    if sub.ts is not None:
        parts.append(_ts_rows(sub, layout, request, buffers, end))
    if buffers.steps is not None:
        step_ts, values = buffers.steps
        shown = jnp.where(step_ts < jnp.inf, step_ts * end.sign, step_ts)  # inf pads
        parts.append(_Rows(shown, values, step_ts))
    # `steps=1` saves the last step, which ends at t1; `steps=n` saves t1 after its
    # last step row, unless that step was saved.
    if sub.t1 and layout.steps != 1:
        parts.append(_t1_row(sub, layout, end))
    size = sum(p.order.shape[0] for p in parts)
    if layout.steps > 1 and sub.t1 and end.max_steps % layout.steps == 0:
        size -= 1  # the t1 row then fits in an unused step row
    middle = _in_time_order(parts, size) if layout.steps else parts
    if sub.t0:
        t0_row = _Rows(end.t0[None], _one_row(sub.fn(end.t0, end.y0, end.problem.args)),
                       end.t0[None])  # fmt: skip
        middle = [t0_row, *middle]
    ts = jnp.concatenate([p.ts for p in middle])
    ys = jax.tree.map(lambda *p: jnp.concatenate(p), *[p.ys for p in middle])
    return ts, ys


def _one_row(tree):
    return jax.tree.map(lambda y: jnp.asarray(y)[None], tree)


def _in_time_order(parts: list[_Rows], size: int) -> list[_Rows]:
    """The rows of `parts` in the order of their internal times (a stable sort: at
    equal times, the order of `parts`), the first `size` of them."""
    if len(parts) == 1:
        return parts
    order = jnp.argsort(jnp.concatenate([p.order for p in parts]), stable=True)[:size]
    take = lambda *p: jnp.concatenate(p)[order]
    ys = jax.tree.map(take, *[p.ys for p in parts])
    return [_Rows(take(*[p.ts for p in parts]), ys, take(*[p.order for p in parts]))]


def _ts_rows(sub: SubSaveAt, layout: SaveLayout, request, buffers: SubOutputs, end: SolveEnd):
    """The `SaveAt(ts=...)` rows: the steps' buffer, with the rows at `t0` (which no
    step writes) set from `y0`."""
    if not layout.num_ts:  # `ts=[]`
        none = jnp.zeros((0,), end.t0.dtype)
        return _Rows(none, _no_rows(sub, end), none)
    at_t0 = request.ts == end.state0.t
    shown = jnp.where(request.ts > end.end[1], jnp.inf, request.ts * end.sign)  # as given
    start = _at_start(end, sub.ts, request.ts, at_t0)
    if not layout.saves_y:
        if end.fixed_times and not isinstance(sub.ts, jax.core.Tracer):
            first = sub.fn(end.t0, end.y0, end.problem.args)  # every row at t0: one value
            start = jax.tree.map(lambda v: jnp.broadcast_to(v, (shown.shape[0], *v.shape)),
                                 first)  # fmt: skip
        else:
            start = jax.vmap(lambda t, y: sub.fn(t, y, end.problem.args))(shown, start)
    ys = jax.tree.map(
        lambda b, y: jnp.where(at_t0.reshape((-1,) + (1,) * (y.ndim - 1)), y, b),
        buffers.ts, start,
    )  # fmt: skip
    return _Rows(shown, ys, request.ts)


def _no_rows(sub: SubSaveAt, end: SolveEnd):
    shape = eqx.filter_eval_shape(sub.fn, end.t0, end.y0, end.problem.args)
    return jax.tree.map(lambda s: jnp.zeros((0, *s.shape), s.dtype), shape)


def _t1_row(sub: SubSaveAt, layout: SaveLayout, end: SolveEnd) -> _Rows:
    """The `t1` row: `fn(t1, y1)` (inf if the solve failed, or if `steps=n` saved the
    last step, which ended at t1)."""
    saved = end.ok
    if layout.steps:
        saved = saved & (end.final.num_accepted % layout.steps != 0)
    y1 = end.final.y if end.fixed_times else _with_time_derivative(end, end.final.y)
    t_end, tau_end = end.end
    value = sub.fn(t_end, y1, end.problem.args)
    ys = jax.tree.map(lambda y: jnp.where(saved, y, jnp.inf)[None], value)
    inf = jnp.inf
    return _Rows(jnp.where(saved, t_end, inf)[None], ys, jnp.where(saved, tau_end, inf)[None])


def _at_start(end: SolveEnd, given, ts, at_t0):
    """`y(ts[i])` for save times `ts` (internal time; `given`: as the user passed
    them) at `t0`: `y0`, with `dy/dts[i] = f(t0, y0)` and `dy/dt0 = -f(t0, y0)` (the
    solution's one-sided derivatives into the interval)."""
    if end.fixed_times and not isinstance(given, jax.core.Tracer):
        return jax.tree.map(lambda y: jnp.broadcast_to(y, (ts.shape[0], *y.shape)), end.y0)
    dt = _time_tangent(ts * end.sign, end.t0)  # `ts * sign`: the times as given
    return _plus_time_tangent(end, end.y0, dt, jnp.any(at_t0))


def _with_time_derivative(end: SolveEnd, y):
    """`y(t1)`, with `dy(t1)/dt1 = f` and `dy(t1)/dt0 = -f` when `t0 == t1`: a solve
    with `t0 == t1` takes no step, so the loop carries no derivative with respect to
    the times."""
    return _plus_time_tangent(end, y, _time_tangent(end.t1, end.t0), end.num_steps == 0)


def _time_tangent(t, t0):
    """`t - t0` in tangents only: zero in value."""
    sg = lax.stop_gradient
    return (t - sg(t)) - (t0 - sg(t0))


def _plus_time_tangent(end: SolveEnd, y, dt, needed):
    """`y + dt f(t0, y)`, one row per entry of `dt` (a scalar or a vector of times),
    with `dt` zero in value (`_time_tangent`): the first-order time dependence of a
    state that no step carries. The vector field is evaluated only when `needed`."""
    problem, sign = end.problem, end.sign

    def rows(v):
        return dt.reshape(dt.shape + (1,) * v.ndim)

    def first_order():  # `problem.term` runs in internal time: f = sign * f_internal
        f = problem.term.vf(end.t0 * sign, y, problem.args)
        lead = lambda v: v.reshape((1,) * dt.ndim + v.shape)
        return jax.tree.map(lambda v: (rows(v) * sign * lead(v)).astype(v.dtype), f)

    base = jax.tree.map(lambda v: jnp.broadcast_to(v, dt.shape + v.shape), y)
    zero = lambda: jax.tree.map(jnp.zeros_like, base)
    return jax.tree.map(jnp.add, base, lax.cond(needed, first_order, zero))
