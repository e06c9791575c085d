"""`diffeqsolve`: the pipeline. Validate the inputs, normalise them to the solver's
internal time (which increases), build the problem and the integrator, run the
adjoint's loop, build the `Solution`, and raise if the solve failed."""

import functools as ft

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from odeckpt._adjoints import AbstractAdjoint, CheckpointAdjoint
from odeckpt._controllers import (
    AbstractStepSizeController,
    ConstantStepSize,
    expected_step_count,
    t1_floor,
)
from odeckpt._core import (
    RESULTS,
    as_arrays,
    closure_convert,
    concrete,
    host_check,
    promoted_dtype,
    raise_if_failed,
)
from odeckpt._integrator import EventRequest, Integrator, Problem, SaveLayout, SaveRequest
from odeckpt._solvers import AbstractSolver

from . import _compiled as compiled
from ._event import AbstractDiscreteTerminatingEvent, Event
from ._progress import AbstractProgressMeter, progress_callback
from ._saveat import SaveAt, SubSaveAt, save_y, sub_saves
from ._solution import Solution, build_solution
from ._solvers import filled_tolerances
from ._terms import as_term, time_reversed
from ._validate import (
    check_autodiff,
    check_controls,
    check_event,
    check_inputs,
    check_save_fns,
    check_spans_now,
    check_state_values,
    check_term_parts,
    check_terms,
    check_times,
    check_values,
    check_vector_field,
    control_spans,
    event_from_discrete,
    floating_state,
    known_direction,
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
    event: Event | None = None,
    discrete_terminating_event: AbstractDiscreteTerminatingEvent | None = None,
) -> Solution:
    """Solve `dy/dt = f(t, y, args)` from `t0` to `t1` (either direction).

    Args:
        terms: an `ODETerm(f)` or a callable `f(t, y, args)` returning a PyTree like `y`;
            for a partitioned solver (`SemiImplicitEuler`), a tuple of two terms
            `(ODETerm(f), ODETerm(g))` with `y0 = (q0, p0)`: `dq/dt = f(t, p, args)`,
            `dp/dt = g(t, q, args)` (as the solver's `term_structure` says).
        solver: e.g. `Tsit5()`.
        t0, t1: the interval; `t1 < t0` integrates backwards in time.
        dt0: the first step (signed like `t1 - t0`), or `None` to choose it
            automatically (adaptive controllers only).
        y0: the initial state: any PyTree of floating arrays.
        args: passed to `f` unchanged; may hold arrays to differentiate.
        saveat: which outputs to save (`SaveAt`).
        stepsize_controller: `ConstantStepSize()`, `StepTo(ts)` or `PIDController(...)`.
        adjoint: how reverse mode runs (`CheckpointAdjoint()` by default).
        max_steps: bound on attempted steps (accepted + rejected); `None` for no bound
            (forward solves and `ForwardMode`; reverse mode needs a bound).
        throw: raise if the solve fails; with `False` inspect `Solution.result`.
        progress_meter: `TextProgressMeter()` or `TqdmProgressMeter()` to report
            progress from inside the compiled loop; `None` (default) costs nothing.
        event: an `Event` that ends the solve where it triggers (`t1` may then be
            infinite); see `docs/events.md`. `None` (default) costs nothing.
        discrete_terminating_event: diffrax's deprecated form of a boolean `event`
            (`DiscreteTerminatingEvent(cond_fn)`, `cond_fn(state, **kwargs)` reading
            `state.tprev` and `state.y`); warns, and runs as `event`.

    Returns:
        A `Solution`.

    Raises:
        ValueError / TypeError: for malformed input, at trace time (also for bad values,
            e.g. NaN in `y0`, when they are known at trace time).
        EquinoxRuntimeError: for bad values known only at run time; and, with
            `throw=True`, if the solve fails (the message names why, and the time
            reached). See `docs/errors.md` for every case.
    """
    event = event_from_discrete(discrete_terminating_event, event)
    state = (terms, y0, args, event)
    config = (solver, t0, t1, dt0, saveat, stepsize_controller, adjoint, max_steps, throw)
    config += (progress_meter,)
    if compiled.staging():  # under `jax.jit`: traced into the caller's program
        return _solve(*state, *config, False)  # pyright: ignore[reportReturnType]
    check_state_values(y0, args)  # concrete: raise now, not from the compiled program
    check_spans_now(control_spans(terms, y0), t0, t1)
    # With JAX's persistent cache on, a call with nothing traced checks its result on
    # the host once the program has run: then the program holds no host callback, which
    # the persistent cache would refuse to store. (Otherwise the check stays in the
    # program, and the call returns before the solve has finished.)
    host = config + (True,) if throw and _persistent_cache() else None
    out, checked_on_host = compiled.call(_solve, state, config + (False,), host)
    if not checked_on_host:
        return out
    solution, check = out
    check.raise_if_failed()
    return solution


def _persistent_cache() -> bool:
    """Whether JAX's persistent compilation cache is on (`docs/performance.md`)."""
    config = jax.config
    directory = config.jax_compilation_cache_dir  # pyright: ignore[reportAttributeAccessIssue]
    return bool(directory) and config.jax_enable_compilation_cache  # pyright: ignore


def _solve(
    terms,
    y0,
    args,
    event,
    solver,
    t0,
    t1,
    dt0,
    saveat,
    stepsize_controller,
    adjoint,
    max_steps,
    throw,
    progress_meter,
    host_checks,
):
    """The solve itself, traced once per program (`_compiled`). With `host_checks`
    (and `throw`) it returns `(solution, HostCheck)`: the caller raises a failure on
    the host, and no value check runs at run time (the caller checked the state's
    values, and every other input is concrete)."""
    check_inputs(solver, stepsize_controller, adjoint, saveat, max_steps, dt0)
    solver = filled_tolerances(solver, stepsize_controller)
    check_terms(terms, solver, y0)
    term = as_term(terms)
    check_term_parts(solver, term)
    # Integers in `args` under `jax.grad(..., allow_int=True)` arrive as typed Python
    # scalars, which the loops' custom VJPs see as arrays: the vector field is traced
    # (closure-converted) with them as arrays too.
    args = as_arrays(args)
    subs = sub_saves(saveat)[0]
    ts = tuple(sub.ts for sub in subs if sub.ts is not None and sub.ts.shape[0] > 0)
    check_times(t0, t1, dt0, ts)
    max_steps = None if max_steps is None else int(max_steps)
    tdtype = promoted_dtype(*[x for x in (t0, t1, dt0, *ts) if x is not None], float)
    y0 = floating_state(y0, tdtype)
    direction = known_direction(t0, t1)  # from the raw values: jnp.asarray traces under jit
    check_controls(term, solver, stepsize_controller, adjoint, jnp.asarray(t0, tdtype), y0, args)
    check_vector_field(term, jnp.asarray(t0, tdtype), y0, args)
    check_save_fns(subs, jnp.asarray(t0, tdtype), y0, args)
    given = dict(
        terms=term,
        solver=solver,
        t0=t0,
        t1=t1,
        dt0=dt0,
        saveat=saveat,
        stepsize_controller=stepsize_controller,
        max_steps=max_steps,
    )
    real = check_event(event, adjoint, jnp.asarray(t0, tdtype), y0, args, given)
    y0, invalid = check_values(
        y0,
        args,
        t0,
        t1,
        dt0,
        ts,
        stepsize_controller,
        throw and not host_checks,
        event=event is not None,
        spans=control_spans(term, y0),
    )
    span = (concrete(t0), concrete(t1))  # for error messages, when known at trace time
    expected = expected_step_count(stepsize_controller, t0, t1, dt0, tdtype)
    fixed = not any(isinstance(t, jax.core.Tracer) for t in (t0, t1))  # no time derivative
    t0, t1 = jnp.asarray(t0, tdtype), jnp.asarray(t1, tdtype)
    sign, term = _in_internal_time(term, direction, t0, t1, tdtype)
    tau0, tau1 = t0 * sign, t1 * sign
    term = term.closure_converted(tau0, y0, args)
    dt0 = None if dt0 is None else jnp.asarray(dt0, tdtype) * sign
    # An infinite t1 (a solve an `Event` ends) stays known to the controller under jit.
    endless = span[1] is not None and bool(np.isinf(span[1]))
    horizon = np.asarray(np.inf, tdtype) if endless else tau1
    controller = stepsize_controller.for_solve(tau0, horizon, dt0, sign)
    saves = tuple(_save_request(sub, sign, tau0, y0, args) for sub in subs)
    request = _event_request(event, real, given, sign, tau0, y0, args)
    problem = Problem(term, args, controller, tau1, t1_floor(tau1), saves, expected, request)
    integrator = Integrator(
        solver,
        max_steps=max_steps or 0,
        saves=tuple(_layout(sub) for sub in subs),
        save_dense=saveat.dense,
        report=progress_callback(progress_meter),
        locates_events=event is not None,
    )
    state0 = integrator.init(problem, tau0, y0, dt0)
    if invalid is not None:  # with `throw=False`: a bad input value stops the solve at t0
        code = jnp.where(invalid, RESULTS.invalid_input, state0.result).astype(jnp.int32)
        state0 = state0.with_result(code)
    adjoint = adjoint.with_throw(throw)
    problem, state0 = check_autodiff(adjoint, problem, state0)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((problem, state0)))
    loop = adjoint.loop if traced else ft.partial(_compiled_loop, adjoint)
    out = loop(integrator, problem, state0, max_steps)
    if integrator.report is not None:
        integrator.report(tau0, tau1, out.state.t, out.num_steps, final=True)
    solution = build_solution(
        saveat=saveat,
        integrator=integrator,
        problem=problem,
        state0=state0,
        out=out,
        t0=t0,
        t1=t1,
        sign=sign,
        y0=y0,
        dt0=dt0,
        fixed_times=fixed,
        event=event,
    )
    if not throw:
        return solution
    if host_checks:
        return solution, host_check(solution.result, out.state.t * sign, *span, max_steps or 0)
    # Thread the error onto every output (not only `ys`): a dense-only solve has no `ys`.
    return raise_if_failed(solution, solution.result, out.state.t * sign, *span, max_steps or 0)


@eqx.filter_jit
def _compiled_loop(adjoint, integrator, problem, state0, max_steps):
    """The adjoint's loop, compiled, for a solve whose inputs are all concrete and
    that runs uncompiled: an eager call `_compiled` cannot key (an unhashable static
    input). A call with the same vector field (compared by its closure-converted text),
    options and shapes reuses it. (Under `jax.jit` the caller's compilation serves;
    under autodiff or `jax.vmap` the loop runs as it is traced.)"""
    return adjoint.loop(integrator, problem, state0, max_steps)


def _in_internal_time(term, direction, t0, t1, tdtype):
    """`(sign, term)`: the internal time `tau = sign * t` increases, and the term is
    written in it. `sign` is `1.0` or `-1.0` when the direction is known at trace time,
    else traced."""
    if direction is not None and direction > 0:
        return 1.0, term
    sign = jnp.where(t1 >= t0, 1, -1).astype(tdtype) if direction is None else -1.0
    return sign, time_reversed(term, sign)


def _save_request(sub: SubSaveAt, sign, tau0, y0, args) -> SaveRequest:
    """What the steps read of `sub`: its save times in internal time (`None` for none)
    and its `fn` written in internal time, closure-converted so that gradients reach
    the arrays it closes over."""
    ts = None
    if sub.ts is not None and sub.ts.shape[0] > 0:
        ts = sub.ts.astype(tau0.dtype) * sign
    if sub.fn is save_y:
        return SaveRequest(ts, save_y)
    fn = sub.fn
    return SaveRequest(
        ts, closure_convert(lambda tau, y, args: fn(tau * sign, y, args), tau0, y0, args)
    )


def _event_request(event: Event | None, real, given: dict, sign, tau0, y0, args):
    """What the steps read of `event`: its conditions written in internal time and
    closure-converted (so that gradients reach the arrays they close over)."""
    if event is None:
        return None
    conds = tuple(
        closure_convert(
            lambda tau, y, args, cond=cond: jnp.asarray(cond(tau * sign, y, args, **given)),
            tau0,
            y0,
            args,
        )
        for cond in event.conditions
    )
    return EventRequest(conds, event.directions, real)


def _layout(sub: SubSaveAt) -> SaveLayout:
    """How many rows the steps write for `sub` (static)."""
    num_ts = 0 if sub.ts is None else sub.ts.shape[0]
    return SaveLayout(num_ts=num_ts, steps=sub.steps, saves_y=sub.fn is save_y)
