"""`diffeqsolve`: validate once, normalise, run the adjoint's loop, build the Solution."""

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._adjoints.checkpoint import AbstractAdjoint, CheckpointAdjoint
from ._adjoints.continuous.adjoints import AbstractContinuousAdjoint
from ._controllers.controllers import (
    AbstractStepSizeController,
    ConstantStepSize,
    PIDController,
    StepTo,
    _UniformSteps,
    uniform_steps,
)
from ._core.results import RESULTS, raise_if_failed
from ._integrator.integrator import Integrator, Problem
from ._progress import AbstractProgressMeter, progress_callback
from ._saveat import SaveAt
from ._solution import DenseInterpolation, Solution
from ._solvers.runge_kutta import AbstractSolver
from ._terms import ODETerm, as_term, time_reversed
from ._validate import (
    check_inputs,
    check_times,
    check_values,
    check_vector_field,
    concrete,
    floating_state,
)


def diffeqsolve(
    terms,
    solver: AbstractSolver,
    t0,
    t1,
    dt0,
    y0,
    args=None,
    *,
    saveat: SaveAt = SaveAt(t1=True),
    stepsize_controller: AbstractStepSizeController = ConstantStepSize(),
    adjoint: AbstractAdjoint = CheckpointAdjoint(),
    max_steps: int | None = 4096,
    throw: bool = True,
    progress_meter: AbstractProgressMeter | None = None,
) -> Solution:
    """Solve `dy/dt = f(t, y, args)` from `t0` to `t1` (either direction).

    Args:
        terms: an `ODETerm(f)` or a callable `f(t, y, args)` returning a PyTree like `y`.
        solver: e.g. `Tsit5()`.
        t0, t1: the interval; `t1 < t0` integrates backwards in time.
        dt0: the first step (signed like `t1 - t0`), or `None` to choose it
            automatically (adaptive controllers only).
        y0: the initial state: any PyTree of floating arrays.
        args: passed to `f` unchanged; may hold arrays to differentiate.
        saveat: which outputs to save (`SaveAt`).
        stepsize_controller: `ConstantStepSize()`, `StepTo(ts)` or `PIDController(...)`.
        adjoint: how reverse mode runs (`CheckpointAdjoint()` by default).
        max_steps: bound on attempted steps (accepted + rejected).
        throw: raise if the solve fails; with `False` inspect `Solution.result`.
        progress_meter: `TextProgressMeter()` or `TqdmProgressMeter()` to report
            progress from inside the compiled loop; `None` (default) costs nothing.

    Returns:
        A `Solution`.

    Raises:
        ValueError / TypeError: for malformed input, at trace time (also for bad values,
            e.g. NaN in `y0`, when they are known at trace time).
        EquinoxRuntimeError: for bad values known only at run time; and, with
            `throw=True`, if the solve fails (the message names why, and the time
            reached). See `docs/errors.md` for every case.
    """
    term = as_term(terms)
    y0 = floating_state(y0)
    check_inputs(solver, stepsize_controller, adjoint, saveat, max_steps, dt0)
    check_times(t0, t1, dt0)
    max_steps = None if max_steps is None else int(max_steps)
    tdtype = jnp.result_type(*[x for x in (t0, t1, dt0, saveat.ts) if x is not None], float)
    direction = _direction(t0, t1, dt0)  # from the raw values: jnp.asarray traces under jit
    no_ts = saveat.ts is None or saveat.ts.shape[0] == 0  # an empty ts saves no row
    ts = None if no_ts else _check_ts(saveat.ts, t0, t1)
    check_vector_field(term, jnp.asarray(t0, tdtype), y0, args)
    if isinstance(stepsize_controller, StepTo):  # its own messages, when concrete
        _check_step_to(stepsize_controller.ts, t0, t1)
    y0, invalid = check_values(y0, args, t0, t1, dt0, ts, stepsize_controller, throw)
    span = (concrete(t0), concrete(t1))  # for error messages, when known at trace time
    expected = _expected_steps(stepsize_controller, t0, t1, dt0, tdtype)
    fixed = not any(isinstance(t, jax.core.Tracer) for t in (t0, t1))  # no time derivative
    t0, t1 = jnp.asarray(t0, tdtype), jnp.asarray(t1, tdtype)
    if direction is None or direction < 0:
        sign = jnp.where(t1 >= t0, 1, -1).astype(tdtype) if direction is None else -1.0
        term = time_reversed(term, sign)
    else:
        sign = 1.0
    ts = None if ts is None else ts.astype(tdtype) * sign
    tau0, tau1 = t0 * sign, t1 * sign
    term = ODETerm(eqx.filter_closure_convert(term.vf, tau0, y0, args))
    dt0 = None if dt0 is None else jnp.asarray(dt0, tdtype) * sign
    controller = _internal_controller(stepsize_controller, tau0, tau1, dt0, sign)
    problem = Problem(term, args, controller, tau1, _floor(tau1), ts, expected)
    integrator = Integrator(
        solver, max_steps or 0, ts is not None, saveat.steps, saveat.dense,
        0 if ts is None else ts.shape[0], progress_callback(progress_meter),
    )  # fmt: skip
    state0 = integrator.init(problem, tau0, y0, dt0)
    if invalid is not None:  # with `throw=False`: a bad input value stops the solve at t0
        code = jnp.where(invalid, RESULTS.invalid_input, state0.result).astype(jnp.int32)
        state0 = state0.with_result(code)
    if isinstance(adjoint, AbstractContinuousAdjoint):
        adjoint = adjoint.with_throw(throw)
    out = adjoint.loop(integrator, problem, state0, max_steps)
    if integrator.report is not None:
        integrator.report(tau0, tau1, out.state.t, out.num_steps, final=True)
    solution = _solution(saveat, integrator, problem, state0, out, t0, t1, sign, y0, dt0, fixed)
    if not throw:
        return solution
    # Thread the error onto every output (not only `ys`): a dense-only solve has no `ys`.
    return raise_if_failed(solution, solution.result, out.state.t * sign, *span, max_steps or 0)


def _direction(t0, t1, dt0):
    """+1/-1 when t0, t1 are concrete; None when traced. Checks dt0's sign."""
    c0, c1 = concrete(t0), concrete(t1)
    if c0 is None or c1 is None:
        return None
    direction = 1 if c1 >= c0 else -1
    d = None if dt0 is None else concrete(jnp.asarray(dt0))
    if d is not None and (d == 0 or (c1 != c0 and np.sign(d) != direction)):
        raise ValueError(
            f"`dt0` must be nonzero with the sign of `t1 - t0`; got dt0={d} for t0={c0}, t1={c1}."
        )
    return direction


def _check_ts(ts, t0, t1):
    values, c0, c1 = concrete(ts), concrete(t0), concrete(t1)
    if values is None or c0 is None or c1 is None or values.size == 0:
        return ts
    lo, hi = min(c0, c1), max(c0, c1)
    bad = np.nonzero((values < lo) | (values > hi))[0]
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"`SaveAt(ts=...)` must lie within [t0, t1] = [{c0}, {c1}]; got ts[{i}]={values[i]}."
        )
    steps = np.diff(values) * (1 if c1 >= c0 else -1)
    if np.any(steps < 0):
        i = int(np.nonzero(steps < 0)[0][0])
        raise ValueError(
            "`SaveAt(ts=...)` must run from t0 towards t1; got "
            f"ts[{i + 1}]={values[i + 1]} after ts[{i}]={values[i]}."
        )
    return ts


def _internal_controller(controller, tau0, tau1, dt0, sign):
    """The controller in the solver's internal (increasing) time `tau = sign * t`:
    `StepTo`'s times flip; `ConstantStepSize` becomes its grid of equal steps."""
    if isinstance(controller, ConstantStepSize):
        span = lax.stop_gradient((tau0, tau1))
        return _UniformSteps(tau0, tau1, jnp.asarray(uniform_steps(*span, lax.stop_gradient(dt0))))
    if not isinstance(controller, StepTo):
        return controller
    return StepTo(jnp.asarray(controller.ts, tau0.dtype) * sign)


def _check_step_to(ts, t0, t1):
    values, c0, c1 = concrete(ts), concrete(t0), concrete(t1)
    if values is None or c0 is None or c1 is None:
        return
    if values[0] != c0 or values[-1] != c1:
        raise ValueError(
            "`StepTo(ts=...)` must start at t0 and end at t1; got "
            f"ts[0]={values[0]}, ts[-1]={values[-1]} for t0={c0}, t1={c1}."
        )
    steps = np.diff(values) * (1 if c1 >= c0 else -1)
    if np.any(steps <= 0):
        i = int(np.nonzero(steps <= 0)[0][0])
        raise ValueError(
            "`StepTo(ts=...)` must be strictly monotone from t0 to t1; got "
            f"ts[{i + 1}]={values[i + 1]} after ts[{i}]={values[i]}."
        )


def _expected_steps(controller, t0, t1, dt0, tdtype):
    """The number of steps if the controller fixes it and the times are concrete (they
    must be the raw inputs: under `jax.jit` anything computed from them is traced)."""
    values = [concrete(x) for x in (t0, t1)] + [None if dt0 is None else concrete(dt0)]
    if any(v is None or v.ndim for v in values[:2]) or (dt0 is not None and values[2] is None):
        return controller.expected_steps(None, None, None, None)
    c0, c1 = (np.asarray(v, tdtype) for v in values[:2])
    sign = np.asarray(1 if c1 >= c0 else -1, tdtype)
    tau1 = sign * c1
    dt = None if values[2] is None else sign * np.asarray(values[2], tdtype)
    return controller.expected_steps(sign * c0, tau1, _floor_numpy(tau1), dt)


def _floor_numpy(t1: np.ndarray) -> np.ndarray:
    """`_floor` on a concrete NumPy scalar, without staging JAX operations: the same
    bit arithmetic, so that both give the same value."""
    itype = {2: np.int16, 4: np.int32, 8: np.int64}[t1.dtype.itemsize]
    bits = t1.view(itype)
    down = (bits - 100 if t1 > 0 else bits + 100).astype(itype).view(t1.dtype)
    below_zero = -100 * np.finfo(t1.dtype).smallest_subnormal
    return np.asarray(below_zero if t1 == 0 else down, t1.dtype)


def _floor(t1):
    """t1 less 100 ulp: a step ending beyond it ends at t1 instead."""
    t1 = lax.stop_gradient(t1)
    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[t1.dtype.itemsize]
    bits = lax.bitcast_convert_type(t1, itype)
    # Floats of one sign are ordered like their bit patterns: step 100 ulp towards -inf.
    down = lax.bitcast_convert_type(jnp.where(t1 > 0, bits - 100, bits + 100), t1.dtype)
    below_zero = -100 * jnp.finfo(t1.dtype).smallest_subnormal
    return jnp.where(t1 == 0, below_zero, down).astype(t1.dtype)


def _solution(saveat, integrator, problem, state0, out, t0, t1, sign, y0, dt0, fixed_times):
    final = out.state
    reached = final.t >= problem.t1
    result = jnp.where(
        (final.result == RESULTS.successful) & ~reached, RESULTS.max_steps_reached, final.result
    ).astype(jnp.int32)
    ok = result == RESULTS.successful
    ts_parts, ys_parts = [], []
    buffers = dict(zip([e.name for e in integrator.body().emitters], out.buffers, strict=True))
    if saveat.t0:
        ts_parts.append(t0[None])
        ys_parts.append(jax.tree.map(lambda y: y[None], y0))
    if "ts" in buffers:
        at_t0 = problem.ts == state0.t
        start = _at_start(problem, t0, sign, y0, saveat.ts, at_t0, fixed_times)
        ys = jax.tree.map(
            lambda b, y: jnp.where(at_t0.reshape((-1,) + (1,) * (y.ndim - 1)), y, b),
            buffers["ts"], start,
        )  # fmt: skip
        ts_parts.append(problem.ts * sign)
        ys_parts.append(ys)
    elif saveat.ts is not None:  # `SaveAt(ts=[])`: no rows
        ts_parts.append(jnp.zeros((0,), t0.dtype))
        ys_parts.append(jax.tree.map(lambda y: jnp.zeros((0, *y.shape), y.dtype), y0))
    if "steps" in buffers:
        step_ts, step_ys = buffers["steps"]
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
    if "dense" in buffers:
        reached = jnp.where(ok, jnp.inf, final.t)  # a failed solve's output ends here
        dense = DenseInterpolation(
            buffers["dense"], final.num_accepted, jnp.asarray(sign), y0, reached
        )
    evals = 1 + integrator.solver.evals_per_step * out.num_steps
    if dt0 is None and isinstance(problem.controller, PIDController):
        evals = evals + 2  # the starting-step heuristic's two evaluations
    stats = {
        "num_steps": out.num_steps,
        "num_accepted_steps": final.num_accepted,
        "num_rejected_steps": final.num_rejected,
        "num_vf_evals": evals,
        "max_steps": integrator.max_steps,
    }
    return Solution(t0, t1, ts, ys, stats, result, dense)


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
