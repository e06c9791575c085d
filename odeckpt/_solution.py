"""The result of a solve, and how `diffeqsolve` builds it from the loop's output."""

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
from jax import lax

from ._checkpointing import LoopOutput
from ._core import RESULTS, Y
from ._integrator import Integrator, Problem, State
from ._saveat import SaveAt
from ._solvers import DenseStep


class DenseInterpolation(eqx.Module):
    """Every accepted step's polynomial, for `Solution.evaluate`."""

    steps: DenseStep  # stacked: leaves have a leading axis of length max_steps
    num_steps: jax.Array
    direction: jax.Array
    y0: Y | None = None  # returned when no step was taken (e.g. t0 == t1)
    reached: jax.Array | None = None  # internal time a failed solve reached; inf beyond

    def evaluate(self, t) -> Y:
        t = jnp.asarray(t)
        if t.ndim > 0:
            return jax.vmap(self.evaluate)(t)
        tau = self.direction * t
        ends = jnp.where(
            jnp.arange(self.steps.t1.shape[0], dtype=jnp.int32) < self.num_steps,
            self.steps.t1,
            jnp.inf,
        )
        i = jnp.clip(
            jnp.searchsorted(ends, tau, side="left"), 0, jnp.maximum(self.num_steps - 1, 0)
        )
        value = jax.tree.map(lambda x: x[i], self.steps).evaluate(tau)
        if self.y0 is not None:
            # Without steps, row 0 is an unfilled (inf) buffer row: its polynomial is NaN.
            value = jax.tree.map(lambda v, y: jnp.where(self.num_steps > 0, v, y), value, self.y0)
        if self.reached is None:
            return value
        # Nothing was computed beyond where a failed solve stopped: inf there.
        beyond = tau > self.reached
        return jax.tree.map(lambda v: jnp.where(beyond, jnp.inf, v), value)


class Solution(eqx.Module):
    """What `diffeqsolve` returns.

    Attributes:
        t0, t1: the integration interval.
        ts: the times of the saved outputs: `[t0] + ts + steps + [t1]`, as requested
            by `SaveAt` (unfilled rows, e.g. beyond a failure, are `inf`).
        ys: the saved states, a PyTree like `y0` with a leading axis matching `ts`.
        stats: `num_steps`, `num_accepted_steps`, `num_rejected_steps`,
            `num_vf_evals` (vector-field evaluations of the forward solve).
        result: an integer `RESULTS` code; `0` (`RESULTS.successful`) on success.
    """

    t0: jax.Array
    t1: jax.Array
    ts: jax.Array | None
    ys: Y | None
    stats: dict
    result: jax.Array
    interpolation: DenseInterpolation | None

    def evaluate(self, t) -> Y:
        """The dense solution at `t` (scalar or 1-D array). Needs `SaveAt(dense=True)`."""
        if self.interpolation is None:
            raise ValueError(
                "`Solution.evaluate` needs dense output: pass `saveat=SaveAt(dense=True)`."
            )
        return self.interpolation.evaluate(t)


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
    ok = result == RESULTS.successful
    ts_parts, ys_parts = [], []
    saved = integrator.outputs(out.buffers)
    if saveat.t0:
        ts_parts.append(t0[None])
        ys_parts.append(jax.tree.map(lambda y: y[None], y0))
    if problem.ts is not None:  # (`saved.ts` is `None` too when `y0` is `None`)
        at_t0 = problem.ts == state0.t
        start = _at_start(problem, t0, sign, y0, saveat.ts, at_t0, fixed_times)
        ys = jax.tree.map(
            lambda b, y: jnp.where(at_t0.reshape((-1,) + (1,) * (y.ndim - 1)), y, b),
            saved.ts, start,
        )  # fmt: skip
        ts_parts.append(problem.ts * sign)
        ys_parts.append(ys)
    elif saveat.ts is not None:  # `SaveAt(ts=[])`: no rows
        ts_parts.append(jnp.zeros((0,), t0.dtype))
        ys_parts.append(jax.tree.map(lambda y: jnp.zeros((0, *y.shape), y.dtype), y0))
    if saved.steps is not None:
        step_ts, step_ys = saved.steps
        ts_parts.append(jnp.where(step_ts < jnp.inf, step_ts * sign, step_ts))  # inf pads
        ys_parts.append(step_ys)
    if saveat.t1:
        y1 = final.y
        if not fixed_times:
            y1 = _with_time_derivative(problem, out.num_steps, t0, t1, sign, y1)
        ts_parts.append(jnp.where(ok, t1, jnp.inf)[None])
        ys_parts.append(jax.tree.map(lambda y: jnp.where(ok, y, jnp.inf)[None], y1))
    ts = jnp.concatenate(ts_parts) if ts_parts else None
    ys = jax.tree.map(lambda *p: jnp.concatenate(p), *ys_parts) if ys_parts else None
    dense = None
    if saved.dense is not None:
        reached = jnp.where(ok, jnp.inf, final.t)  # a failed solve's output ends here
        dense = DenseInterpolation(saved.dense, final.num_accepted, jnp.asarray(sign), y0, reached)
    return Solution(t0, t1, ts, ys, _stats(integrator, problem, out, dt0), result, dense)


def _stats(integrator: Integrator, problem: Problem, out: LoopOutput, dt0) -> dict:
    """`Solution.stats`: the loop's step counts and the forward vector-field evaluations."""
    evals = 1 + integrator.solver.evals_per_step * out.num_steps
    evals = evals + problem.controller.first_step_evaluations(dt0)
    return {
        "num_steps": out.num_steps,
        "num_accepted_steps": out.state.num_accepted,
        "num_rejected_steps": out.state.num_rejected,
        "num_vf_evals": evals,
        "max_steps": integrator.max_steps,
    }


def _at_start(problem, t0, sign, y0, ts, at_t0, fixed_times):
    """`y(ts[i])` for save times at `t0`: `y0`, with `dy/dts[i] = f(t0, y0)` and
    `dy/dt0 = -f(t0, y0)` (the solution's one-sided derivatives into the interval)."""
    if fixed_times and not isinstance(ts, jax.core.Tracer):
        rows = problem.ts.shape[0]
        return jax.tree.map(lambda y: jnp.broadcast_to(y, (rows, *y.shape)), y0)
    dt = _time_tangent(problem.ts * sign, t0)  # `problem.ts * sign`: the times as given
    return _plus_time_tangent(problem, t0, sign, y0, dt, jnp.any(at_t0))


def _with_time_derivative(problem, num_steps, t0, t1, sign, y):
    """`y(t1)`, with `dy(t1)/dt1 = f` and `dy(t1)/dt0 = -f` when `t0 == t1`: a solve
    with `t0 == t1` takes no step, so the loop carries no derivative with respect to
    the times."""
    return _plus_time_tangent(problem, t0, sign, y, _time_tangent(t1, t0), num_steps == 0)


def _time_tangent(t, t0):
    """`t - t0` in tangents only: zero in value."""
    sg = lax.stop_gradient
    return (t - sg(t)) - (t0 - sg(t0))


def _plus_time_tangent(problem, t0, sign, y, dt, needed):
    """`y + dt f(t0, y)`, one row per entry of `dt` (a scalar or a vector of times),
    with `dt` zero in value (`_time_tangent`): the first-order time dependence of a
    state that no step carries. The vector field is evaluated only when `needed`."""

    def rows(v):
        return dt.reshape(dt.shape + (1,) * v.ndim)

    def first_order():  # `problem.term` runs in internal time: f = sign * f_internal
        f = problem.term.vf(t0 * sign, y, problem.args)
        lead = lambda v: v.reshape((1,) * dt.ndim + v.shape)  # noqa: E731
        return jax.tree.map(lambda v: (rows(v) * sign * lead(v)).astype(v.dtype), f)

    base = jax.tree.map(lambda v: jnp.broadcast_to(v, dt.shape + v.shape), y)
    zero = lambda: jax.tree.map(jnp.zeros_like, base)  # noqa: E731
    return jax.tree.map(jnp.add, base, lax.cond(needed, first_order, zero))
