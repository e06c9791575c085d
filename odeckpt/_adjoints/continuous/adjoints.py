"""Continuous adjoints: `BacksolveAdjoint` and `InterpolatingAdjoint`.

Both differentiate a solve by solving the adjoint ODE backwards in time
(optimise-then-discretise) instead of reversing the solver's own steps. The loop is a
`filter_custom_vjp` over `(problem, state0)`: its forward pass is `forward_loop`,
recording the accepted step times and anchors as it goes (`_tape`); its backward pass
sweeps the adjoint ODE from the end of the solve down to `t0` (`_sweep`), adding the
cotangent of every saved output at the time it was saved.

Gradients flow to `y0`, to `args` and to arrays the vector field closes over (e.g. an
equinox module's weights; `diffeqsolve` closure-converts the vector field). Not
supported, each with an error naming `CheckpointAdjoint`: gradients with respect to
`t0`, `t1` or `SaveAt(ts=...)`, and through `SaveAt(dense=True)` outputs. Forward mode
(`jax.jvp`) is not available through a custom VJP: use `ForwardMode`.
"""

import dataclasses
import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._adjoints.checkpoint import (
    DEFAULT_MEMORY_BUDGET,
    STORE_EVERY_STEP_BYTES,
    AbstractAdjoint,
    _nbytes,
    check_checkpoints,
)
from odeckpt._controllers.controllers import AbstractStepSizeController
from odeckpt._core.batching import batch_size
from odeckpt._core.results import RESULTS
from odeckpt._integrator.integrator import Integrator, Problem, State
from odeckpt._solution import DenseInterpolation
from odeckpt._solvers.dense import DenseStep
from odeckpt._solvers.runge_kutta import AbstractRungeKutta

from .adjoint_ode import AdjointField
from .sweep import Sweep, SweepContext, sweep_to
from .tape import Tape, TapePlan
from .vjp import SweepInputs, continuous_loop


class AbstractContinuousAdjoint(AbstractAdjoint):
    """The adjoint ODE solved backwards; subclasses choose where `y(t)` comes from."""

    solver: eqx.AbstractVar[AbstractRungeKutta | None]
    stepsize_controller: eqx.AbstractVar[AbstractStepSizeController | None]
    seminorm: eqx.AbstractVar[bool]
    throw: eqx.AbstractVar[bool | None]

    def __check_init__(self):
        name = type(self).__name__
        if self.solver is not None and not isinstance(self.solver, AbstractRungeKutta):
            raise ValueError(
                f"`{name}(solver=...)` must be an explicit Runge–Kutta solver such as "
                f"`Tsit5()`, or None (the forward solver); got {type(self.solver).__name__}."
            )
        controller = self.stepsize_controller
        if controller is not None and not (
            isinstance(controller, AbstractStepSizeController) and controller.adaptive
        ):
            raise ValueError(
                f"`{name}(stepsize_controller=...)` must be an adaptive controller such "
                "as `PIDController(rtol, atol)`, or None to step exactly across the "
                f"forward pass's accepted step times; got {type(controller).__name__}."
            )

    def with_throw(self, throw: bool) -> "AbstractContinuousAdjoint":
        """This adjoint, taking `throw` from `diffeqsolve` unless it sets its own."""
        if self.throw is not None:
            return self
        return eqx.tree_at(lambda a: a.throw, self, throw, is_leaf=lambda x: x is None)

    def tape_plan(
        self, integrator: Integrator, problem: Problem, state0: State, max_steps: int
    ) -> TapePlan:
        """What the forward pass records for this adjoint."""
        raise NotImplementedError

    def sweep(
        self, ctx: SweepContext, field: AdjointField, sw: Sweep, inputs: SweepInputs
    ) -> Sweep:
        """The backward sweep from the end of the solve down to `t0`."""
        raise NotImplementedError

    def integrates_y(self) -> bool:
        """Whether the backward pass integrates `y` (and so re-anchors it)."""
        raise NotImplementedError

    def diverged(self, sw: Sweep) -> jax.Array:
        return jnp.asarray(False)

    def give_up_above(self) -> float:
        """The anchor distance at which the backward sweep stops early."""
        return math.inf

    def loop(self, integrator, problem, state0, max_steps):
        name = type(self).__name__
        if max_steps is None:
            raise ValueError(
                f"`{name}` needs a bounded loop: pass an integer `max_steps` "
                "(`max_steps=None` only works with `adjoint=ForwardMode()`)."
            )
        solver = self.solver or integrator.solver
        if not isinstance(solver, AbstractRungeKutta):
            raise ValueError(
                f"`{name}` solves the adjoint ODE with an explicit Runge–Kutta method; "
                f"pass `{name}(solver=Tsit5())` to use one with {type(solver).__name__}."
            )
        if self.stepsize_controller is not None and solver.error_order is None:
            raise ValueError(
                f"`{name}(stepsize_controller=...)` needs a solver with an error "
                f"estimate; {type(solver).__name__} has none: pass e.g. `solver=Tsit5()`."
            )
        plan = self.tape_plan(integrator, problem, state0, max_steps)
        return continuous_loop(integrator, problem, state0, max_steps, self, plan)


# ----------------------------------------------------------------------------------
# The two adjoints


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class BacksolveAdjoint(AbstractContinuousAdjoint):
    """Continuous adjoint that integrates `y` backwards alongside the adjoint.

    The backward pass solves the augmented system `(y, a, g)` from `t1` to `t0`
    (`a = dL/dy`, `g = dL/dtheta`, see `References`), adding the cotangent of every
    saved output to `a` where it was saved. `y` is re-anchored to the forward
    solution wherever one is stored: at every `SaveAt(ts=...)` and
    `SaveAt(steps=True)` output, and at every `max_steps // checkpoints`-th accepted
    step, so it is never integrated backwards further than one interval.

    Integrating a damped system backwards is unstable (a mode decaying at rate
    1000 grows by e^1000 per time unit backwards). At every anchor the backward `y`
    is measured against the forward one, `max |y_back - y| / (atol + rtol max |y|)`
    per leaf of `y`, with the forward controller's `rtol, atol` (`1e-3` each if it
    has none). Above `divergence_tol` the gradient is not returned: with
    `throw=True` the backward pass raises `RESULTS.backsolve_diverged`'s message
    (which names `InterpolatingAdjoint` and `CheckpointAdjoint`); with `throw=False`
    every gradient of the solve is NaN. (The check runs in the backward pass, after
    `Solution.result` exists, so NaN is how the failure travels; `jnp.isfinite` or
    `jax.debug_nans` finds it.)

    Args:
        solver: Runge–Kutta method for the adjoint ODE; `None`: the forward solver.
        stepsize_controller: `None` (default) steps exactly across the forward
            pass's accepted step times (split at saved outputs): the backward pass
            costs what the forward pass did, whatever the cotangent's size; a step
            at the method's stability limit (stiff problems), where the adjoint's
            fast modes carry an output's cotangent, is taken in halves. An adaptive
            controller (e.g. `PIDController(rtol, atol)`) chooses its own steps
            instead, bounded by the solve's `max_steps`.
        checkpoints: forward states kept as anchors (`y` only). `None`: one per
            accepted step if `max_steps` copies of `y` fit in `memory_budget`,
            otherwise as many as fit.
        memory_budget: bytes for anchors when `checkpoints=None` (default 128 MiB;
            for the whole batch when the solve is traced inside `jax.vmap`).
        seminorm: with an adaptive controller, leave `g` out of the error norm
            (Kidger et al. 2021); controlling `g`'s error only ever adds steps.
        divergence_tol: anchor distance beyond which the reconstruction has left the
            forward solution (default 100: a `y` that far off perturbs the gradient by
            about 100 `rtol`, relatively).
        throw: `None` follows `diffeqsolve(throw=...)`.

    Cost: one adjoint step (a VJP of the vector field per stage) per forward
    accepted step and per saved output, plus one evaluation per output and anchor.
    Memory: `max_steps + 1` step times and `checkpoints` copies of `y`; the adjoint
    state `(y, a)` and `g` in the backward pass.
    Works with `jax.grad`/`jax.vjp` and `jax.vmap`; not `jax.jvp` (use `ForwardMode`).

    References:
        Chen, Rubanova, Bettencourt & Duvenaud (2018), "Neural ordinary
        differential equations", NeurIPS.
        Kidger, Chen & Lyons (2021), "'Hey, that's not an ODE': faster ODE adjoints
        via seminorms", ICML.
    """

    solver: AbstractRungeKutta | None = None
    stepsize_controller: AbstractStepSizeController | None = None
    checkpoints: int | None = None
    memory_budget: int | None = None
    seminorm: bool = True
    divergence_tol: float = 100.0
    throw: bool | None = None

    def __check_init__(self):
        check_checkpoints(self)
        tol = self.divergence_tol
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not tol > 0:
            raise ValueError(
                "`BacksolveAdjoint(divergence_tol=...)` must be a positive number (an "
                f"anchor distance in units of the forward tolerance); got {tol!r}."
            )

    def integrates_y(self) -> bool:
        return True

    def diverged(self, sw: Sweep) -> jax.Array:
        return ~(sw.worst <= self.divergence_tol)

    def give_up_above(self) -> float:
        return float(self.divergence_tol)

    def tape_plan(self, integrator, problem, state0, max_steps):
        c = self.checkpoints
        if c is None:
            budget = self.memory_budget or DEFAULT_MEMORY_BUDGET
            per_anchor = batch_size(state0) * _nbytes(state0.y)
            c = int(min(max(budget // max(per_anchor, 1), 1), max_steps))
        return TapePlan(every=_ceil_div(max_steps, c), keep_k=False, keep_dense=False)

    def sweep(self, ctx, field, sw, inputs):
        return sweep_to(ctx, field, sw, inputs.tape.grid[0])


class InterpolatingAdjoint(AbstractContinuousAdjoint):
    """Continuous adjoint whose `y(t)` comes from the forward solve, never backwards.

    The backward pass solves the adjoint system `(a, g)` from `t1` to `t0`, reading
    `y(t)` from the forward solver's dense output. Either every accepted step's
    polynomial is stored during the forward pass, or `checkpoints` forward states
    are, and the backward pass re-solves each interval between them forwards (on
    the forward pass's own step times: exactly the same `y`) before sweeping it.
    Stable on damped systems, unlike `BacksolveAdjoint`.

    Args:
        checkpoints: forward states to store (`y` and its first stage). `None`: if
            every step's dense polynomial fits in `memory_budget` (for the whole
            batch when the solve is traced inside `jax.vmap`), store those (no
            re-solve); otherwise `c = ceil(sqrt(max_steps * D / A))`, which
            minimises the `c * A + (max_steps / c) * D` bytes held at once (`A`:
            one state, `D`: one step's polynomial). `checkpoints >= max_steps`
            stores every polynomial.
        solver, stepsize_controller, seminorm, throw: as for `BacksolveAdjoint`.
        memory_budget: bytes for stored polynomials when `checkpoints=None`
            (default 16 MiB, `STORE_EVERY_STEP_BYTES`: the store is zero-filled by
            every gradient, whatever the number of steps taken).

    Cost: one adjoint step per forward accepted step and per saved output; with
    checkpoints also one re-solve of the accepted steps (no rejected ones).
    Memory: as above, plus `max_steps + 1` step times.
    Works with `jax.grad`/`jax.vjp` and `jax.vmap`; not `jax.jvp` (use `ForwardMode`).

    References:
        Chen, Rubanova, Bettencourt & Duvenaud (2018), "Neural ordinary
        differential equations", NeurIPS.
        Rackauckas et al. (2020), "Universal differential equations for scientific
        machine learning" (SciMLSensitivity's `InterpolatingAdjoint`).
    """

    checkpoints: int | None = None
    solver: AbstractRungeKutta | None = None
    stepsize_controller: AbstractStepSizeController | None = None
    memory_budget: int | None = None
    seminorm: bool = True
    throw: bool | None = None

    def __check_init__(self):
        check_checkpoints(self)

    def integrates_y(self) -> bool:
        return False

    def tape_plan(self, integrator, problem, state0, max_steps):
        dense = dataclasses.replace(integrator, save_dense=True)
        _, record, _ = eqx.filter_eval_shape(dense.step, problem, state0)
        row, state = _nbytes(record.dense), _nbytes((state0.y, state0.solver_state))
        budget = self.memory_budget or STORE_EVERY_STEP_BYTES
        c = self.checkpoints
        everything = batch_size(state0) * max_steps * row
        if (c is None and everything <= budget) or (c is not None and c >= max_steps):
            return TapePlan(every=0, keep_k=False, keep_dense=True)
        if c is None:
            c = math.ceil(math.sqrt(max_steps * row / max(state, 1)))
        return TapePlan(every=_ceil_div(max_steps, c), keep_k=True, keep_dense=False)

    def sweep(self, ctx, field, sw, inputs):
        tape, plan, n = inputs.tape, inputs.plan, inputs.num_accepted
        if tape.dense is not None:
            dense = DenseInterpolation(tape.dense, n, jnp.asarray(1.0, tape.grid.dtype))
            field = AdjointField(field.theta, field.static, dense)
            return sweep_to(ctx, field, sw, tape.grid[0])

        def interval(carry):
            q, sw = carry
            dense = _replay(inputs.solver, inputs.problem, tape, plan.every, q, n)
            field_q = AdjointField(field.theta, field.static, dense)
            return q - 1, sweep_to(ctx, field_q, sw, tape.anchor_t[q])

        def going(carry):
            return (carry[0] >= 0) & (carry[1].result == RESULTS.successful)

        last = (n + plan.every - 1) // plan.every - 1  # the last anchor before t1
        return lax.while_loop(going, interval, (last, sw))[1]


def _replay(solver, problem: Problem, tape: Tape, every: int, q, n) -> DenseInterpolation:
    """Re-solve the accepted steps after anchor `q`, returning their polynomials."""
    first = q * every
    y = jax.tree.map(lambda x: x[q], tape.anchor_y)
    k = jax.tree.map(lambda x: x[q], tape.anchor_k)
    t = tape.grid[0]
    shape = eqx.filter_eval_shape(solver.step, problem.term, t, t, y, k, problem.args)
    rows = jax.tree.map(lambda s: jnp.zeros((every, *s.shape), s.dtype), shape.coeffs)
    ends = jnp.full((every,), jnp.inf, t.dtype)
    starts = jnp.zeros((every,), t.dtype)
    ys = jax.tree.map(lambda x: jnp.zeros((every, *x.shape), x.dtype), y)

    def step(r, carry):
        y, k, starts, ends, ys, rows = carry
        t0, t1 = tape.grid[first + r], tape.grid[first + r + 1]
        out = solver.step(problem.term, t0, t1 - t0, y, k, problem.args)
        put = lambda b, v: b.at[r].set(v)  # noqa: E731
        ys, rows = jax.tree.map(put, ys, y), jax.tree.map(put, rows, out.coeffs)
        return out.y1, out.state, starts.at[r].set(t0), ends.at[r].set(t1), ys, rows

    count = jnp.clip(n - first, 0, every)
    init = (y, k, starts, ends, ys, rows)
    _, _, starts, ends, ys, rows = lax.fori_loop(0, count, step, init)
    return DenseInterpolation(DenseStep(starts, ends, ys, rows), count, jnp.asarray(1.0, t.dtype))
