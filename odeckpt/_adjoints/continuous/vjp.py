"""The continuous adjoint's VJP: `continuous_loop`, `forward_loop` with a reverse mode
that solves the adjoint ODE.

Its forward pass records a `tape`; its backward pass builds the marks and the
right-hand side, asks the adjoint (passed as a value: `integrates_y()`,
`diverged(sweep)`, `give_up_above()`, `sweep(...)`, `solver`, `stepsize_controller`,
`seminorm`, `throw`) to sweep down to `t0`, and returns dL/dy0 and dL/dtheta, or NaN /
an error where the sweep failed. See `docs/architecture.md`, "How a solve flows", step 8.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._checkpointing import LoopOutput, forward_loop
from odeckpt._controllers import ControllerState
from odeckpt._core import RESULTS, Y, all_finite, as_arrays, materialize, real_dtype, tree_add
from odeckpt._integrator import Integrator, Problem, State
from odeckpt._solvers import AbstractExplicitSolver, AbstractSolver, AbstractWrappedSolver

from .adjoint_ode import AdjointField, Flow, Slopes, stability_limit
from .event_jump import EventSplit, event_jump
from .saved import SavedCotangents, SavedPullback, saved_pullback
from .sweep import Marks, Sweep, SweepContext, arrive
from .tape import Tape, TapePlan, taped_loop

DEFAULT_TOLERANCE = 1e-3
"""rtol = atol of `BacksolveAdjoint`'s anchor check when the forward solve has none."""

STIFF_FRACTION = 0.9
"""On the forward grid, a step with `h rho` beyond this fraction of the method's
stability limit on the negative real axis is taken in halves (see `sweep._too_stiff`):
the forward pass's steps on a stiff problem sit at about the limit (3.5 for Tsit5),
while accuracy-limited steps stay well inside it."""


class OutputCotangents(eqx.Module):
    """The cotangents of the loop's outputs that the backward pass reads.

    Attributes:
        y: of the final `y` (zeros where the cotangent is symbolically zero).
        k: of the final solver state, or `None` (zero).
        subs: of each `SubSaveAt`'s rows.
        t: with an `Event`, of the time the solve ended (`t*`: the final time and the
            time of a step row saved there); `None` without one.
    """

    y: Y
    k: PyTree | None
    subs: tuple[SavedCotangents, ...]
    t: jax.Array | None = None


class ForwardPass(eqx.Module):
    """What the backward pass reads of the forward pass: its inputs, the loop's
    output, and what the tape recorded."""

    integrator: Integrator
    problem: Problem
    state0: State
    out: LoopOutput
    tape: Tape
    plan: TapePlan


class SweepInputs(eqx.Module):
    """What an adjoint's `sweep` may read besides the context and the field."""

    tape: Tape
    plan: TapePlan
    problem: Problem
    solver: AbstractSolver  # the forward solver (to re-solve between checkpoints)
    num_accepted: jax.Array


def continuous_loop(
    integrator: Integrator, problem: Problem, state0: State, max_steps: int, adjoint, plan: TapePlan
) -> LoopOutput:
    """`forward_loop(integrator.body(), ...)`, differentiated by `adjoint`'s sweep."""
    return _vjp_loop((problem, state0), integrator, max_steps, adjoint, plan)


@eqx.filter_custom_vjp
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _vjp_loop(vjp_arg, integrator, max_steps, adjoint, plan):
    problem, state0 = as_arrays(vjp_arg)
    return forward_loop(integrator.body(), problem, state0, max_steps)


@_vjp_loop.def_fwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _vjp_forward_pass(perturbed, vjp_arg, integrator, max_steps, adjoint, plan):
    problem, state0 = as_arrays(vjp_arg)
    _check_times_unperturbed(perturbed, type(adjoint).__name__)
    out, tape = taped_loop(integrator, problem, state0, max_steps, plan)
    return out, (out, tape)


def _check_times_unperturbed(perturbed, name: str) -> None:
    p_problem, p_state = perturbed
    save_ts = [save.ts for save in p_problem.saves]
    times = (p_problem.t1, save_ts, p_state.t, p_state.t_next, p_problem.controller)
    if any(jax.tree.leaves(times)):
        raise ValueError(
            f"`{name}` cannot differentiate with respect to `t0`, `t1` or "
            "`SaveAt(ts=...)` (nor the controller's, e.g. `ClipStepSizeController(jump_ts="
            "...)`): the adjoint ODE gives gradients with respect to `y0`, "
            "`args` and the vector field's parameters only. Use "
            "`adjoint=CheckpointAdjoint()` for gradients with respect to times."
        )


@_vjp_loop.def_bwd
@eqx.filter_jit  # compiled once per program, also when called eagerly
def _vjp_backward_pass(
    residuals, grad_obj, perturbed, vjp_arg, integrator, max_steps, adjoint, plan
):
    problem, state0 = as_arrays(vjp_arg)
    out, tape = residuals
    fwd = ForwardPass(integrator, problem, state0, out, tape, plan)
    cts = _output_cotangents(grad_obj, fwd, type(adjoint).__name__)
    p_problem = perturbed[0]
    theta, static = eqx.partition((problem.term, problem.args), (p_problem.term, p_problem.args))
    split = (theta, static, *eqx.partition(problem.saves, p_problem.saves))
    values = (integrator.outputs(out.buffers), integrator.outputs(tape.saved_y, of_state=True))
    saved = saved_pullback(
        integrator, problem, state0, out.state, values, cts.subs, split, adjoint.integrates_y()
    )
    solver = sweep_solver(adjoint.solver, integrator.solver)
    ctx = _context(adjoint, solver, fwd, saved, max_steps)
    field = AdjointField(theta, static, None)
    sw = arrive(ctx, _initial_sweep(adjoint, ctx, field, fwd, cts))
    ct_event = None
    if problem.event is not None:  # the jump term at t*, on `a` with every mark there
        events = EventSplit(*eqx.partition(problem.event, p_problem.event))
        t_end = cts.t + saved.t_end  # pyright: ignore[reportOptionalOperand]
        sw, ct_event = event_jump(field, events, problem.event.real, out.state, t_end, sw)
    inputs = SweepInputs(
        tape=tape,
        plan=plan,
        problem=problem,
        solver=integrator.solver,
        num_accepted=out.state.num_accepted,
    )
    sw = adjoint.sweep(ctx, field, sw, inputs)
    sw = eqx.tree_at(lambda s: s.g, sw, tree_add(sw.g, saved.g))
    ct_y0, g = _checked(sw, adjoint, max_steps)
    return _cotangent_tree(vjp_arg, ct_y0, g, saved.saves, ct_event)


# ----------------------------------------------------------------------------------
# Pieces of the backward pass


def _is_zero(ct) -> bool:
    return all(c is None for c in jax.tree.leaves(ct, is_leaf=lambda c: c is None))


def _output_cotangents(grad_obj, fwd: ForwardPass, name: str) -> OutputCotangents:
    """Cotangents of the final `y` and `k`, and of each output buffer (None: zero)."""
    out, buffers = fwd.out, fwd.integrator.outputs(grad_obj.buffers)
    if buffers.dense is not None and not _is_zero(buffers.dense):
        raise ValueError(
            f"`{name}` cannot differentiate through `SaveAt(dense=True)` outputs "
            "(`Solution.evaluate`). Use `adjoint=CheckpointAdjoint()`, or save the "
            "times you need with `SaveAt(ts=...)`."
        )
    final = grad_obj.state
    t = None if fwd.problem.event is None else _end_time_cotangent(grad_obj, fwd)
    subs = tuple(
        SavedCotangents(
            ts=None if _is_zero(sub.ts) else sub.ts,
            steps=None if sub.steps is None or _is_zero(sub.steps[1]) else sub.steps[1],
        )
        for sub in buffers.subs
    )
    return OutputCotangents(
        y=materialize(final.y, out.state.y),
        k=None
        if _is_zero(final.solver_state)
        else materialize(final.solver_state, out.state.solver_state),
        subs=subs,
        t=t,
    )


def _end_time_cotangent(grad_obj, fwd: ForwardPass) -> jax.Array:
    """The cotangent of the time the solve ended: of the final time, and of the step
    rows saved there (`SaveAt(steps=...)`; earlier step times do not move with `y0` or
    `args`)."""
    end = fwd.out.state.t
    total = materialize(grad_obj.state.t, end)
    saved = fwd.integrator.outputs(fwd.out.buffers).subs
    for sub, ct in zip(saved, fwd.integrator.outputs(grad_obj.buffers).subs, strict=True):
        if sub.steps is None or ct.steps is None or _is_zero(ct.steps[0]):
            continue
        times, ct_times = sub.steps[0], materialize(ct.steps[0], sub.steps[0])
        total = total + jnp.sum(jnp.where(times == end, ct_times, 0)).astype(end.dtype)
    return total


def sweep_solver(chosen: AbstractSolver | None, forward: AbstractSolver) -> AbstractSolver:
    """The method the adjoint ODE is integrated with: the adjoint's own `solver`, else the
    forward solver; a wrapped solver's own method (`HalfSolver(Tsit5())` gives `Tsit5()`:
    its step-doubling estimate is for the forward steps, which the sweep follows)."""
    solver = chosen or forward
    while isinstance(solver, AbstractWrappedSolver):
        solver = solver.solver
    return solver


def _anchor_tolerances(problem: Problem, dtype):
    """The forward controller's `(rtol, atol)` when it is adaptive and has them, else
    `DEFAULT_TOLERANCE` for each."""
    controller = problem.controller
    tolerances = controller.tolerances if controller.adaptive else None
    rtol, atol = (DEFAULT_TOLERANCE, DEFAULT_TOLERANCE) if tolerances is None else tolerances
    return jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype)


def _context(adjoint, solver, fwd: ForwardPass, saved: SavedPullback, max_steps: int):
    """The sweep's context: the marks it stops at, and how it steps between them."""
    backsolve, tape, plan = adjoint.integrates_y(), fwd.tape, fwd.plan
    marks = list(saved.marks)
    n = fwd.out.state.num_accepted
    if backsolve and plan.every:
        recorded = (n + plan.every - 1) // plan.every  # anchors before the last step
        marks.append(Marks(tape.anchor_t, jnp.asarray(0, jnp.int32), recorded, None, tape.anchor_y))
    if adjoint.stepsize_controller is None:
        marks.append(Marks(tape.grid, jnp.asarray(0, jnp.int32), n + 1))
    if (jumps := _jump_marks(fwd.problem)) is not None:
        marks.append(jumps)
    dtype = real_dtype(jax.tree.leaves(fwd.state0.y)[0].dtype)
    rtol, atol = _anchor_tolerances(fwd.problem, dtype)
    explicit = isinstance(solver, AbstractExplicitSolver)
    return SweepContext(
        tableau=solver.tableau if explicit else None,
        implicit=None if explicit else solver.for_adjoint_ode(backsolve),
        marks=tuple(marks),
        controller=adjoint.stepsize_controller,
        seminorm=adjoint.seminorm,
        error_order=solver.error_order(fwd.problem.term),
        # an implicit method is stable on the adjoint's stiff modes: no halving
        stiff_limit=stability_limit(solver.tableau) * STIFF_FRACTION if explicit else None,
        give_up_above=adjoint.give_up_above(),
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
    )


def _jump_marks(problem: Problem) -> Marks | None:
    """Stops on both sides of every jump of the vector field (the floats just before
    and just after it), where the forward steps stopped and restarted: the adjoint ODE
    jumps there too, and no step of the sweep may cross it. `None` without jumps."""
    jumps = problem.controller.jump_times
    if jumps is None:
        return None
    before, after = jnp.nextafter(jumps, -jnp.inf), jnp.nextafter(jumps, jnp.inf)
    times = jnp.sort(jnp.concatenate([before, after]))
    return Marks(times, jnp.asarray(0, jnp.int32), jnp.asarray(times.shape[0], jnp.int32))


def _initial_sweep(adjoint, ctx, field: AdjointField, fwd: ForwardPass, cts: OutputCotangents):
    """The backward state at the end of the solve (before that time's marks)."""
    final, solver, tape = fwd.out.state, fwd.integrator.solver, fwd.tape
    a, g = cts.y, jax.tree.map(jnp.zeros_like, field.theta)
    if cts.k is not None:  # the final solver state k = f(t1, y1) is an output too
        if not isinstance(solver, AbstractExplicitSolver):
            raise ValueError(
                f"`{type(adjoint).__name__}` cannot differentiate the final solver state "
                f"of {type(solver).__name__}; use `CheckpointAdjoint()`."
            )
        da, dg = field.pullback(final.t, final.y, cts.k)
        a, g = jax.tree.map(jnp.add, a, da), jax.tree.map(jnp.add, g, dg)
    y = final.y if adjoint.integrates_y() else None
    zeros = jax.tree.map(jnp.zeros_like, Slopes(Flow(y, a), g))
    n = final.num_accepted
    last_dt = final.t - tape.grid[jnp.maximum(n - 1, 0)]
    zero = jnp.asarray(0, jnp.int32)
    return Sweep(
        tau=final.t,
        flow=Flow(y, a),
        g=g,
        slopes=zeros,
        fresh=jnp.asarray(True),
        splits=jnp.asarray(0, jnp.int32),
        pointers=tuple(m.hi for m in ctx.marks),
        dt=jnp.where(last_dt > 0, last_dt, 1.0).astype(final.t.dtype),
        controller=ControllerState.initial(final.t.dtype),
        worst=jnp.zeros((), real_dtype(jax.tree.leaves(final.y)[0].dtype)),
        num_steps=zero,
        result=jnp.asarray(RESULTS.successful, jnp.int32),
    )


def _checked(sw: Sweep, adjoint, max_steps: int):
    """The gradients, or NaN (or an error, with `throw`) when the sweep failed."""
    diverged = adjoint.diverged(sw)
    # A non-finite adjoint or gradient is the adjoint ODE's own instability (the forward
    # values were finite): reported, never returned as a gradient.
    unstable = (sw.result == RESULTS.nonfinite_state) | ~all_finite((sw.flow.a, sw.g))
    failed = diverged | unstable | (sw.result != RESULTS.successful)
    nan = lambda x: jnp.where(failed, jnp.nan, x)
    ct_y0, g = jax.tree.map(nan, (sw.flow.a, sw.g))
    if adjoint.throw:
        name = type(adjoint).__name__
        # dt_min on the forward pass's step times: an implicit step failed however small
        small = 2 if adjoint.stepsize_controller is not None else 4
        reason = jnp.where(sw.result == RESULTS.dt_min_reached, small, 1)
        reason = jnp.where(diverged, 0, jnp.where(unstable, 3, reason))
        if adjoint.stepsize_controller is not None:
            too_many = (
                f"{name}: the backward solve reached `max_steps={max_steps}` before `t0`. "
                f"Pass `{name}(stepsize_controller=None)` to step on the forward pass's "
                "step times, or use `InterpolatingAdjoint()` or `CheckpointAdjoint()`."
            )
        else:
            too_many = (
                f"{name}: the backward solve took `2 * max_steps = {2 * max_steps}` steps "
                "(the forward pass's step times, split where the adjoint ODE needed "
                "smaller steps) before reaching `t0`. Pass a larger `max_steps`, or use "
                + (
                    "`InterpolatingAdjoint()` (`y` is not integrated backwards) or "
                    if adjoint.integrates_y()
                    else ""
                )
                + "`CheckpointAdjoint()`."
            )
        messages = [
            RESULTS.backsolve_diverged.message,
            too_many,
            f"{name}: the backward solve's step size fell below `dtmin`. "
            f"Pass `{name}(stepsize_controller=None)` to step on the forward pass's "
            "step times, or use `CheckpointAdjoint()`.",
            f"{name}: the adjoint ODE's solution became non-finite. Either the vector "
            "field's derivative is not finite along the solution (e.g. sqrt at 0), or the "
            "adjoint ODE was unstable on the steps taken (a stiff mode that the forward "
            f"solution never excited). Pass `{name}(stepsize_controller=PIDController("
            "rtol, atol))` to choose the backward steps, or use `CheckpointAdjoint()`.",
            f"{name}: an implicit step of the adjoint ODE within a forward step could not "
            "reach the forward tolerances however small it was taken (its stage solves "
            "failed or its error estimate stayed too large). Pass "
            f"`{name}(stepsize_controller=PIDController(rtol, atol))` to choose the "
            "backward steps with tolerances of your own, or use `CheckpointAdjoint()`.",
        ]
        ct_y0, g = eqx.branched_error_if((ct_y0, g), failed, reason, messages)
    return ct_y0, g


def _cotangent_tree(vjp_arg, ct_y0, g, ct_saves, ct_event=None):
    """Cotangents shaped like `(problem, state0)`: only `y0`, `term`, `args`, the
    arrays of the saved outputs' `fn`s and of the event's conditions nonzero."""
    is_none = lambda x: x is None
    nothing = jax.tree.map(lambda _: None, vjp_arg)
    where = lambda ct: (ct[0].term, ct[0].args, ct[0].saves, ct[1].y)
    tree = eqx.tree_at(where, nothing, (*g, ct_saves, ct_y0), is_leaf=is_none)
    if ct_event is None:
        return tree
    return eqx.tree_at(lambda ct: ct[0].event, tree, ct_event, is_leaf=is_none)
