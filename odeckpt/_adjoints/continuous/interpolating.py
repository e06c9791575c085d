"""`InterpolatingAdjoint`: the adjoint ODE solved backwards, `y` read from the forward solve."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._adjoints.base import STORE_EVERY_STEP_BYTES, check_checkpoints
from odeckpt._controllers import AbstractLoopController
from odeckpt._core import RESULTS, batch_size, nbytes, set_row
from odeckpt._integrator import Problem, attempt_step, fresh_stage, restart_after
from odeckpt._solution import DenseInterpolation
from odeckpt._solvers import AbstractSolver, DenseStep

from .adjoint_ode import AdjointField
from .base import AbstractContinuousAdjoint, ceil_div
from .sweep import sweep_to
from .tape import Tape, TapePlan


class InterpolatingAdjoint(AbstractContinuousAdjoint):
    """Continuous adjoint whose `y(t)` comes from the forward solve, never backwards.

    The backward pass solves `(a, g)` from `t1` to `t0`, reading `y(t)` from the forward
    solver's dense output: every accepted step's polynomial stored, or `checkpoints`
    forward states from which each interval is re-solved (on the forward pass's own step
    times: exactly the same `y`). Stable on damped systems, unlike `BacksolveAdjoint`.
    Works with `jax.grad`/`jax.vjp` and `jax.vmap`; not `jax.jvp` (use `ForwardMode`).
    See `docs/adjoints.md`, "Which adjoint?" (memory and compute) and "The continuous
    adjoints".

    Args:
        checkpoints: forward states to store (`y` and its first stage). `None`: every
            step's polynomial if they fit in `memory_budget` (the whole batch under
            `jax.vmap`), else `c = ceil(sqrt(max_steps * D / A))` (`A`: one state, `D`:
            one step's polynomial), which minimises the bytes held at once.
            `checkpoints >= max_steps` stores every polynomial.
        solver, stepsize_controller, seminorm, throw: as for `BacksolveAdjoint`.
        memory_budget: bytes for stored polynomials when `checkpoints=None`
            (default 16 MiB, `STORE_EVERY_STEP_BYTES`: the store is zero-filled by
            every gradient, whatever the number of steps taken).

    References:
        Chen, Rubanova, Bettencourt & Duvenaud (2018), "Neural ordinary
        differential equations", NeurIPS.
        Rackauckas et al. (2020), "Universal differential equations for scientific
        machine learning" (SciMLSensitivity's `InterpolatingAdjoint`).
    """

    checkpoints: int | None = None
    solver: AbstractSolver | None = None
    stepsize_controller: AbstractLoopController | None = None
    memory_budget: int | None = None
    seminorm: bool = True
    throw: bool | None = None

    def __check_init__(self):
        check_checkpoints(self)

    def integrates_y(self) -> bool:
        return False

    def tape_plan(self, integrator, problem, state0, max_steps):
        _, record, _ = eqx.filter_eval_shape(integrator.computing_dense().step, problem, state0)
        row, state = nbytes(record.dense), nbytes((state0.y, state0.solver_state))
        budget = self.memory_budget or STORE_EVERY_STEP_BYTES
        c = self.checkpoints
        everything = batch_size(state0) * max_steps * row
        if (c is None and everything <= budget) or (c is not None and c >= max_steps):
            return TapePlan(every=0, keep_k=False, keep_dense=True)
        if c is None:
            c = math.ceil(math.sqrt(max_steps * row / max(state, 1)))
        return TapePlan(every=ceil_div(max_steps, c), keep_k=True, keep_dense=False)

    def sweep(self, ctx, field, sw, inputs):
        tape, plan, n = inputs.tape, inputs.plan, inputs.num_accepted
        if tape.dense is not None:
            dense = DenseInterpolation(tape.dense, n, jnp.asarray(1.0, tape.grid.dtype))
            field = AdjointField(field.theta, field.static, dense)
            return sweep_to(ctx, field, sw, tape.grid[0])

        def interval(carry):
            q, sw = carry
            dense = _re_solve(inputs.solver, inputs.problem, tape, plan.every, q, n)
            field_q = AdjointField(field.theta, field.static, dense)
            return q - 1, sweep_to(ctx, field_q, sw, tape.anchor_t[q])

        def going(carry):
            return (carry[0] >= 0) & (carry[1].result == RESULTS.successful)

        last = (n + plan.every - 1) // plan.every - 1  # the last anchor before t1
        return lax.while_loop(going, interval, (last, sw))[1]


def _re_solve(solver, problem: Problem, tape: Tape, every: int, q, n) -> DenseInterpolation:
    """Re-solve the accepted steps after anchor `q`, returning their polynomials."""
    first = q * every
    y = jax.tree.map(lambda x: x[q], tape.anchor_y)
    k = jax.tree.map(lambda x: x[q], tape.anchor_k)
    t = tape.grid[0]
    shape = eqx.filter_eval_shape(solver.attempt, problem.term, t, t, y, k, problem.args)
    rows = jax.tree.map(lambda s: jnp.zeros((every, *s.shape), s.dtype), shape.coeffs)
    ends = jnp.full((every,), jnp.inf, t.dtype)
    starts = jnp.zeros((every,), t.dtype)
    ys = jax.tree.map(lambda x: jnp.zeros((every, *x.shape), x.dtype), y)

    def step(r, carry):
        y, k, starts, ends, ys, rows = carry
        t0, t1 = tape.grid[first + r], tape.grid[first + r + 1]
        if problem.controller.jump_times is not None:  # the first step starts at t0 itself
            t0 = jnp.where(first + r > 0, restart_after(problem, t0)[0], t0)
        out = attempt_step(solver, problem, t0, t1 - t0, y, k)
        ys, rows = set_row(ys, r, y), set_row(rows, r, out.coeffs)
        k = out.state
        if problem.controller.jump_times is not None:  # as the forward pass did
            start, jumped = restart_after(problem, t1)
            k = fresh_stage(solver, problem, jumped, start, out.y1, k)
        return out.y1, k, starts.at[r].set(t0), ends.at[r].set(t1), ys, rows

    count = jnp.clip(n - first, 0, every)
    init = (y, k, starts, ends, ys, rows)
    _, _, starts, ends, ys, rows = lax.fori_loop(0, count, step, init)
    return DenseInterpolation(DenseStep(starts, ends, ys, rows), count, jnp.asarray(1.0, t.dtype))
