"""The custom VJP shared by the continuous adjoints.

`continuous_loop` is `forward_loop` with a reverse mode that solves the adjoint ODE: its
forward pass records the accepted step times and anchors (`_tape`); its backward pass
builds the marks (outputs, anchors, the forward grid) and the adjoint's right-hand
side, asks the adjoint to sweep from the end of the solve down to `t0` (`_sweep`), and
returns dL/dy0 and dL/dtheta, or NaN / an error where the sweep failed.

The adjoint is passed as a value with these methods (see `_continuous`):
`integrates_y()`, `diverged(sweep)`, `sweep(ctx, field, sweep, inputs)`, and the
fields `solver`, `stepsize_controller`, `seminorm`, `throw`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._checkpointing.loops import LoopOutput, forward_loop
from odeckpt._controllers.controllers import _initial_state
from odeckpt._core.results import RESULTS
from odeckpt._integrator.integrator import Integrator, Problem, State, _all_finite
from odeckpt._solvers.runge_kutta import AbstractRungeKutta, AbstractSolver

from .adjoint_ode import AdjointField, Flow, Slopes, stability_limit
from .sweep import Marks, Sweep, SweepContext, arrive
from .tape import Tape, TapePlan, taped_loop

DEFAULT_TOLERANCE = 1e-3
"""rtol = atol of `BacksolveAdjoint`'s anchor check when the forward solve has none."""

STIFF_FRACTION = 0.9
"""On the forward grid, a step with `h rho` beyond this fraction of the method's
stability limit on the negative real axis is taken in halves (see `_sweep._too_stiff`):
the forward pass's steps on a stiff problem sit at about the limit (3.5 for Tsit5),
while accuracy-limited steps stay well inside it."""


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
    return _continuous((problem, state0), integrator, max_steps, adjoint, plan)


def _as_arrays(tree):
    """Typed Python scalars (how JAX hands weakly typed primals to a custom VJP) back
    into arrays, so the closure-converted vector field sees what it was traced with."""
    typed = lambda x: isinstance(x, float | int | complex) and hasattr(x, "dtype")  # noqa: E731
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if typed(x) else x, tree)


@eqx.filter_custom_vjp
def _continuous(vjp_arg, integrator, max_steps, adjoint, plan):
    problem, state0 = _as_arrays(vjp_arg)
    return forward_loop(integrator.body(), problem, state0, max_steps)


@_continuous.def_fwd
def _continuous_fwd(perturbed, vjp_arg, integrator, max_steps, adjoint, plan):
    problem, state0 = _as_arrays(vjp_arg)
    _check_times_unperturbed(perturbed, type(adjoint).__name__)
    out, tape = taped_loop(integrator, problem, state0, max_steps, plan)
    return out, (out, tape)


def _check_times_unperturbed(perturbed, name: str) -> None:
    p_problem, p_state = perturbed
    if any(jax.tree.leaves((p_problem.t1, p_problem.ts, p_state.t, p_state.t_next))):
        raise ValueError(
            f"`{name}` cannot differentiate with respect to `t0`, `t1` or "
            "`SaveAt(ts=...)`: the adjoint ODE gives gradients with respect to `y0`, "
            "`args` and the vector field's parameters only. Use "
            "`adjoint=CheckpointAdjoint()` for gradients with respect to times."
        )


@_continuous.def_bwd
def _continuous_bwd(residuals, grad_obj, perturbed, vjp_arg, integrator, max_steps, adjoint, plan):
    problem, state0 = _as_arrays(vjp_arg)
    out, tape = residuals
    cts = _output_cotangents(grad_obj, out, integrator, type(adjoint).__name__)
    p_problem = perturbed[0]
    theta, static = eqx.partition((problem.term, problem.args), (p_problem.term, p_problem.args))
    solver = adjoint.solver or integrator.solver
    ctx = _context(adjoint, solver, problem, integrator, state0, out, tape, plan, cts, max_steps)
    field = AdjointField(theta, static, None)
    sw = arrive(ctx, _initial_sweep(adjoint, ctx, field, integrator.solver, out, tape, cts))
    inputs = SweepInputs(tape, plan, problem, integrator.solver, out.state.num_accepted)
    sw = adjoint.sweep(ctx, field, sw, inputs)
    ct_y0, g = _checked(sw, adjoint, max_steps)
    return _cotangent_tree(vjp_arg, ct_y0, g)


# ----------------------------------------------------------------------------------
# Pieces of the backward pass


def _materialise(ct, like):
    return jax.tree.map(
        lambda c, x: jnp.zeros_like(x) if c is None else c, ct, like, is_leaf=lambda c: c is None
    )


def _is_zero(ct) -> bool:
    return all(c is None for c in jax.tree.leaves(ct, is_leaf=lambda c: c is None))


def _output_cotangents(grad_obj, out: LoopOutput, integrator: Integrator, name: str) -> dict:
    """Cotangents of the final `y` and `k`, and of each output buffer (None: zero)."""
    names = [e.name for e in integrator.body().emitters]
    buffers = dict(zip(names, grad_obj.buffers, strict=True))
    if "dense" in buffers and not _is_zero(buffers["dense"]):
        raise ValueError(
            f"`{name}` cannot differentiate through `SaveAt(dense=True)` outputs "
            "(`Solution.evaluate`). Use `adjoint=CheckpointAdjoint()`, or save the "
            "times you need with `SaveAt(ts=...)`."
        )
    final = grad_obj.state
    steps = buffers.get("steps")
    return {
        "y": _materialise(final.y, out.state.y),
        "k": None
        if _is_zero(final.solver_state)
        else _materialise(final.solver_state, out.state.solver_state),
        "ts": None if _is_zero(buffers.get("ts")) else buffers["ts"],
        "steps": None if steps is None or _is_zero(steps[1]) else steps[1],
    }


def _output_marks(problem, integrator, state0, out: LoopOutput, cts, anchors: bool) -> list:
    """Marks at the `SaveAt(ts=...)` and `SaveAt(steps=True)` outputs."""
    names = [e.name for e in integrator.body().emitters]
    values = dict(zip(names, out.buffers, strict=True))
    marks = []
    if "ts" in values:
        jump = None if cts["ts"] is None else _materialise(cts["ts"], values["ts"])
        marks.append(
            Marks(
                problem.ts,
                state0.save_index,
                out.state.save_index,
                jump,
                values["ts"] if anchors else None,
            )
        )
    if "steps" in values:
        step_ts, step_ys = values["steps"]
        jump = None if cts["steps"] is None else _materialise(cts["steps"], step_ys)
        marks.append(
            Marks(
                step_ts,
                jnp.asarray(0, jnp.int32),
                out.state.num_accepted,
                jump,
                step_ys if anchors else None,
            )
        )
    return marks


def _anchor_tolerances(problem: Problem, dtype):
    controller = problem.controller
    rtol = atol = DEFAULT_TOLERANCE
    if controller.adaptive:
        rtol = getattr(controller, "rtol", rtol)
        atol = getattr(controller, "atol", atol)
    return jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype)


def _context(adjoint, solver, problem, integrator, state0, out, tape, plan, cts, max_steps):
    backsolve = adjoint.integrates_y()
    marks = _output_marks(problem, integrator, state0, out, cts, backsolve)
    n = out.state.num_accepted
    if backsolve and plan.every:
        recorded = (n + plan.every - 1) // plan.every  # anchors before the last step
        marks.append(Marks(tape.anchor_t, jnp.asarray(0, jnp.int32), recorded, None, tape.anchor_y))
    if adjoint.stepsize_controller is None:
        marks.append(Marks(tape.grid, jnp.asarray(0, jnp.int32), n + 1))
    dtype = jax.tree.leaves(state0.y)[0].dtype
    rtol, atol = _anchor_tolerances(problem, dtype)
    return SweepContext(
        solver.tableau,
        tuple(marks),
        adjoint.stepsize_controller,
        adjoint.seminorm,
        solver.error_order,
        stability_limit(solver.tableau) * STIFF_FRACTION,
        adjoint.give_up_above(),
        rtol,
        atol,
        max_steps,
    )


def _initial_sweep(adjoint, ctx, field: AdjointField, solver, out: LoopOutput, tape: Tape, cts):
    """The backward state at the end of the solve (before that time's marks)."""
    final = out.state
    a, g = cts["y"], jax.tree.map(jnp.zeros_like, field.theta)
    if cts["k"] is not None:  # the final solver state k = f(t1, y1) is an output too
        if not isinstance(solver, AbstractRungeKutta):
            raise ValueError(
                f"`{type(adjoint).__name__}` cannot differentiate the final solver state "
                f"of {type(solver).__name__}; use `CheckpointAdjoint()`."
            )
        da, dg = field.pullback(final.t, final.y, cts["k"])
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
        controller=_initial_state(final.t.dtype),
        worst=jnp.zeros((), jax.tree.leaves(final.y)[0].dtype),
        num_steps=zero,
        result=jnp.asarray(RESULTS.successful, jnp.int32),
    )


def _checked(sw: Sweep, adjoint, max_steps: int):
    """The gradients, or NaN (or an error, with `throw`) when the sweep failed."""
    diverged = adjoint.diverged(sw)
    # A non-finite adjoint or gradient is the adjoint ODE's own instability (the forward
    # values were finite): reported, never returned as a gradient.
    unstable = (sw.result == RESULTS.nonfinite_state) | ~_all_finite((sw.flow.a, sw.g))
    failed = diverged | unstable | (sw.result != RESULTS.successful)
    nan = lambda x: jnp.where(failed, jnp.nan, x)  # noqa: E731
    ct_y0, g = jax.tree.map(nan, (sw.flow.a, sw.g))
    if adjoint.throw:
        name = type(adjoint).__name__
        reason = jnp.where(sw.result == RESULTS.dt_min_reached, 2, 1)
        reason = jnp.where(diverged, 0, jnp.where(unstable, 3, reason))
        messages = [
            RESULTS.backsolve_diverged.message,
            f"{name}: the backward solve reached `max_steps={max_steps}` before `t0`. "
            f"Pass `{name}(stepsize_controller=None)` to step on the forward pass's "
            "step times, or use `InterpolatingAdjoint()` or `CheckpointAdjoint()`.",
            f"{name}: the backward solve's step size fell below `dtmin`. "
            f"Pass `{name}(stepsize_controller=None)` to step on the forward pass's "
            "step times, or use `CheckpointAdjoint()`.",
            f"{name}: the adjoint ODE's solution became non-finite. Either the vector "
            "field's derivative is not finite along the solution (e.g. sqrt at 0), or the "
            "adjoint ODE was unstable on the steps taken (a stiff mode that the forward "
            f"solution never excited). Pass `{name}(stepsize_controller=PIDController("
            "rtol, atol))` to choose the backward steps, or use `CheckpointAdjoint()`.",
        ]
        ct_y0, g = eqx.branched_error_if((ct_y0, g), failed, reason, messages)
    return ct_y0, g


def _cotangent_tree(vjp_arg, ct_y0, g):
    """Cotangents shaped like `(problem, state0)`: only `y0`, `term`, `args` nonzero."""
    is_none = lambda x: x is None  # noqa: E731
    nothing = jax.tree.map(lambda _: None, vjp_arg)
    where = lambda ct: (ct[0].term, ct[0].args, ct[1].y)  # noqa: E731
    return eqx.tree_at(where, nothing, (*g, ct_y0), is_leaf=is_none)
