"""The result of a solve, and how `diffeqsolve` builds it from the loop's output."""

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
from jax import lax
from jaxtyping import PyTree

from ._checkpointing import LoopOutput
from ._core import RESULTS, Y, concrete, is_okay
from ._integrator import Integrator, Problem, SaveLayout, State, SubOutputs, event_end, event_mask
from ._saveat import SaveAt, SubSaveAt, sub_saves
from ._solvers import DenseStep


class DenseInterpolation(eqx.Module):
    """Every accepted step's polynomial: the solution between `t0` and `t1`.

    `evaluate(t)` and `derivative(t)` take a scalar or a 1-D array of times; between
    steps the polynomials meet, and `left` picks the step before (`True`) or after a
    step boundary (in the direction of `t`). Outside `[t0, t1]` the first or last
    step's polynomial is extrapolated.
    """

    steps: DenseStep  # stacked: leaves have a leading axis of length max_steps
    num_steps: jax.Array
    direction: jax.Array
    ends: jax.Array  # the steps' ends in internal time, inf past `num_steps` (searched)
    y0: Y | None = None  # returned when no step was taken (e.g. t0 == t1)
    reached: jax.Array | None = None  # internal time a failed solve reached; inf beyond
    start: jax.Array | None = None  # the solve's t0 as given (default: the first step's)

    def __init__(self, steps, num_steps, direction, y0=None, reached=None, start=None):
        self.steps, self.num_steps, self.direction = steps, num_steps, direction
        self.y0, self.reached, self.start = y0, reached, start
        # Masked once here, not at every evaluation (an evaluation then costs a
        # binary search, not a pass over all max_steps rows).
        n = steps.t1.shape[0]
        self.ends = jnp.where(jnp.arange(n, dtype=jnp.int32) < num_steps, steps.t1, jnp.inf)

    @property
    def t0(self) -> jax.Array:
        """The start of the interval the interpolation covers (the solve's `t0`)."""
        return self.steps.t0[0] * self.direction if self.start is None else self.start

    @property
    def t1(self) -> jax.Array:
        """The end of the interval: the end of the last step (`t0` without steps)."""
        last = self.steps.t1[jnp.maximum(self.num_steps - 1, 0)] * self.direction
        return jnp.where(self.num_steps > 0, last, self.t0)

    def evaluate(self, t0, t1=None, left: bool = True) -> Y:
        """The solution at `t0`; with `t1`, the increment `y(t1) - y(t0)`.

        Args:
            t0: a time (scalar) or 1-D array of times.
            t1: `None`, or times like `t0`: then `y(t1) - y(t0)` is returned.
            left: at a step boundary, use the step before it (the polynomials agree
                there, so only the rounding differs).

        Returns:
            A PyTree like `y0`, with a leading axis when the times have one.
        """
        if t1 is not None:
            y0, y1 = self.evaluate(t0, left=left), self.evaluate(t1, left=left)
            return jax.tree.map(jnp.subtract, y1, y0)
        return self._at(t0, left, derivative=False)

    def derivative(self, t, left: bool = True) -> Y:
        """`dy/dt` of the interpolating polynomials at `t` (scalar or 1-D array).

        It is the derivative of the numerical solution's interpolant, not of the exact
        solution: less accurate than `f(t, evaluate(t), args)`. At a step boundary the
        two neighbouring polynomials' slopes differ: `left` takes the step before `t`
        (in the direction of `t`), `left=False` the step after it.
        """
        return self._at(t, left, derivative=True)

    def _at(self, t, left: bool, *, derivative: bool) -> Y:
        t = jnp.asarray(t)
        if t.ndim > 0:
            return jax.vmap(lambda s: self._at(s, left, derivative=derivative))(t)
        tau = self.direction * t
        step = jax.tree.map(lambda x: x[self._index(tau, left)], self.steps)
        if derivative:
            value = jax.tree.map(lambda d: d * self.direction.astype(d.dtype),
                                 step.derivative(tau))  # fmt: skip
            fill = lambda y: jnp.zeros_like(y)
        else:
            value, fill = step.evaluate(tau), lambda y: y
        if self.y0 is not None:
            # Without steps, row 0 is an unfilled (inf) buffer row: its polynomial is NaN.
            value = jax.tree.map(lambda v, y: jnp.where(self.num_steps > 0, v, fill(y)),
                                 value, self.y0)  # fmt: skip
        if self.reached is None:
            return value
        # Nothing was computed beyond where a failed solve stopped: inf there.
        beyond = tau > self.reached
        return jax.tree.map(lambda v: jnp.where(beyond, jnp.inf, v), value)

    def _index(self, tau, left: bool):
        """The step whose polynomial holds at internal time `tau`: at a boundary, the
        earlier of the two in `t` for `left` (in internal time: the earlier one when
        integrating forwards, the later one backwards)."""
        ends = self.ends
        direction = concrete(self.direction)
        if direction is None:  # traced: both searches, and a select
            before = jnp.searchsorted(ends, tau, side="left")
            after = jnp.searchsorted(ends, tau, side="right")
            i = jnp.where((self.direction > 0) == left, before, after)
        else:
            side = "left" if (direction > 0) == left else "right"
            i = jnp.searchsorted(ends, tau, side=side)
        return jnp.clip(i, 0, jnp.maximum(self.num_steps - 1, 0))


def _dense_needed(name: str) -> ValueError:
    return ValueError(f"`Solution.{name}` needs dense output: pass `saveat=SaveAt(dense=True)`.")


class Solution(eqx.Module):
    """What `diffeqsolve` returns (diffrax's fields).

    Attributes:
        t0, t1: the integration interval.
        ts: the times of the saved outputs, a PyTree like `SaveAt.subs` (for a plain
            `SaveAt(t0=, ts=, steps=, t1=)`, one array): per `SubSaveAt`,
            `[t0] + ts + steps + [t1]`, in time order (unfilled rows, e.g. unused
            step rows or beyond a failure, are `inf`). `None` without `subs`.
        ys: the saved values, a PyTree like `SaveAt.subs` of PyTrees like `fn`'s
            output (the state by default), each with a leading axis matching `ts`.
        interpolation: the `DenseInterpolation` with `SaveAt(dense=True)`, else `None`.
        stats: `num_steps`, `num_accepted_steps`, `num_rejected_steps`, `max_steps`,
            and `num_vf_evals` (vector-field evaluations of the forward solve).
        result: an integer `RESULTS` code; `0` (`RESULTS.successful`) on success.
        solver_state, controller_state: the final solver state (for Runge–Kutta
            methods, `f(t1, y1)`) and `ControllerState`, with
            `SaveAt(solver_state=True)` / `SaveAt(controller_state=True)`; else `None`.
        made_jump: with `SaveAt(made_jump=True)`, whether the last step ended at a
            jump of the vector field (`ClipStepSizeController(jump_ts=...)`): a bool
            array, or the Python `False` when the controller has no jump times.
        event_mask: which condition of `event=...` ended the solve (bools like `cond_fn`).
    """

    t0: jax.Array
    t1: jax.Array
    ts: PyTree | None
    ys: PyTree | None
    interpolation: DenseInterpolation | None
    stats: dict
    result: jax.Array
    solver_state: PyTree | None = None
    controller_state: PyTree | None = None
    made_jump: jax.Array | bool | None = None
    event_mask: PyTree | None = None

    def evaluate(self, t0, t1=None, left: bool = True) -> Y:
        """The dense solution at `t0` (scalar or 1-D array), or with `t1` the increment
        `y(t1) - y(t0)`. Needs `SaveAt(dense=True)`; see `DenseInterpolation.evaluate`.

        Raises:
            ValueError: without dense output.
        """
        if self.interpolation is None:
            raise _dense_needed("evaluate")
        return self.interpolation.evaluate(t0, t1, left)

    def derivative(self, t, left: bool = True) -> Y:
        """`dy/dt` of the dense solution at `t` (scalar or 1-D array). Needs
        `SaveAt(dense=True)`; see `DenseInterpolation.derivative`.

        Raises:
            ValueError: without dense output.
        """
        if self.interpolation is None:
            raise _dense_needed("derivative")
        return self.interpolation.derivative(t, left)


class _End(eqx.Module):
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


def build_solution(
    *,
    saveat: SaveAt,
    integrator: Integrator,
    problem: Problem,
    state0: State,
    out: LoopOutput,
    t0: jax.Array,
    t1: jax.Array,
    sign,
    y0: Y,
    dt0: jax.Array | None,
    fixed_times: bool,
    event=None,
) -> Solution:
    """The `Solution` of a solve from its loop's output `out`.

    Args:
        saveat: the `SaveAt` as the user passed it.
        integrator, problem, state0: what the loop ran (in internal time).
        out: the loop's `LoopOutput`.
        t0, t1: the interval as given (arrays of the time dtype).
        sign: +1 or -1 (or a traced value): internal time is `sign * t`.
        y0: the initial state; dt0: the first step in internal time, or `None`.
        fixed_times: `t0`, `t1` are not traced, so no time derivative is carried.
    """
    final = out.state
    reached = final.t >= problem.t1
    result = jnp.where(
        (final.result == RESULTS.successful) & ~reached, RESULTS.max_steps_reached, final.result
    ).astype(jnp.int32)
    ok = is_okay(result)
    end = _End(problem, state0, final, ok, out.num_steps, t0, t1, sign, y0,
               event_end(problem, final, t1, sign), fixed_times, integrator.max_steps)  # fmt: skip
    subs, structure = sub_saves(saveat)
    saved = integrator.outputs(out.buffers)
    rows = [
        _sub_rows(sub, layout, request, buffers, end)
        for sub, layout, request, buffers in zip(
            subs, integrator.saves, problem.saves, saved.subs, strict=True
        )
    ]
    dense = None
    if saved.dense is not None:
        reached = jnp.where(ok, jnp.inf, final.t)  # a failed solve's output ends here
        dense = DenseInterpolation(saved.dense, final.num_accepted, jnp.asarray(sign), y0,
                                   reached, start=t0)  # fmt: skip
    return Solution(
        t0=t0, t1=t1,
        ts=jax.tree.unflatten(structure, [ts for ts, _ in rows]),
        ys=jax.tree.unflatten(structure, [ys for _, ys in rows]),
        interpolation=dense, stats=_stats(integrator, problem, out, dt0), result=result,
        solver_state=final.solver_state if saveat.solver_state else None,
        controller_state=final.controller if saveat.controller_state else None,
        made_jump=_made_jump(problem, final) if saveat.made_jump else None,
        event_mask=event_mask(event, final),
    )  # fmt: skip


def _made_jump(problem: Problem, final: State):
    """Whether the last step ended at a jump (`False` if there are no jump times)."""
    return False if problem.controller.jump_times is None else final.made_jump


class _Rows(eqx.Module):
    """Some rows of one `SubSaveAt`: their times as given, their values, and the
    internal times that order them (`inf` for unfilled rows)."""

    ts: jax.Array
    ys: PyTree
    order: jax.Array


def _sub_rows(sub: SubSaveAt, layout: SaveLayout, request, buffers: SubOutputs, end: _End):
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


def _ts_rows(sub: SubSaveAt, layout: SaveLayout, request, buffers: SubOutputs, end: _End):
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


def _no_rows(sub: SubSaveAt, end: _End):
    shape = eqx.filter_eval_shape(sub.fn, end.t0, end.y0, end.problem.args)
    return jax.tree.map(lambda s: jnp.zeros((0, *s.shape), s.dtype), shape)


def _t1_row(sub: SubSaveAt, layout: SaveLayout, end: _End) -> _Rows:
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


def _stats(integrator: Integrator, problem: Problem, out: LoopOutput, dt0) -> dict:
    """`Solution.stats`: the loop's step counts and the forward vector-field evaluations."""
    solver = integrator.solver
    evals = int(solver.carries_first_stage) + solver.evals_per_step * out.num_steps
    evals = evals + problem.controller.first_step_evaluations(dt0)
    return {
        "num_steps": out.num_steps,
        "num_accepted_steps": out.state.num_accepted,
        "num_rejected_steps": out.state.num_rejected,
        "num_vf_evals": evals,
        "max_steps": integrator.max_steps,
    }


def _at_start(end: _End, given, ts, at_t0):
    """`y(ts[i])` for save times `ts` (internal time; `given`: as the user passed
    them) at `t0`: `y0`, with `dy/dts[i] = f(t0, y0)` and `dy/dt0 = -f(t0, y0)` (the
    solution's one-sided derivatives into the interval)."""
    if end.fixed_times and not isinstance(given, jax.core.Tracer):
        return jax.tree.map(lambda y: jnp.broadcast_to(y, (ts.shape[0], *y.shape)), end.y0)
    dt = _time_tangent(ts * end.sign, end.t0)  # `ts * sign`: the times as given
    return _plus_time_tangent(end, end.y0, dt, jnp.any(at_t0))


def _with_time_derivative(end: _End, y):
    """`y(t1)`, with `dy(t1)/dt1 = f` and `dy(t1)/dt0 = -f` when `t0 == t1`: a solve
    with `t0 == t1` takes no step, so the loop carries no derivative with respect to
    the times."""
    return _plus_time_tangent(end, y, _time_tangent(end.t1, end.t0), end.num_steps == 0)


def _time_tangent(t, t0):
    """`t - t0` in tangents only: zero in value."""
    sg = lax.stop_gradient
    return (t - sg(t)) - (t0 - sg(t0))


def _plus_time_tangent(end: _End, y, dt, needed):
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
