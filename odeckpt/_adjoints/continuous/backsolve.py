"""`BacksolveAdjoint`: the adjoint ODE solved backwards with `y` integrated alongside."""

import numbers

import jax

from odeckpt._adjoints.base import DEFAULT_MEMORY_BUDGET, check_checkpoints
from odeckpt._adjoints.reversible import reconstructing_loop
from odeckpt._controllers import AbstractLoopController, rms_norm
from odeckpt._core import batch_size, nbytes
from odeckpt._solvers import AbstractSolver

from .base import AbstractContinuousAdjoint, ceil_div
from .sweep import Sweep, sweep_to
from .tape import TapePlan

_DRIFTED = (
    "`BacksolveAdjoint()`: the gradient through the forward states of {} reconstructed "
    "backwards with its inverse step would be wrong (its estimated error exceeds "
    "eps ** (1/3) relatively): the inverse steps amplified round-off, as a reversible "
    "method does on damped modes. "
    "Use `CheckpointAdjoint()`, or `BacksolveAdjoint(solver=Tsit5())` for the "
    "continuous adjoint."
)
"""The message `BacksolveAdjoint()` of a reversible solver raises (`throw=True`) where
the gradient's estimated error is too large (see `ReversibleAdjoint`)."""


def adjoint_rms_seminorm(x) -> jax.Array:
    """diffrax's error norm for the backward pass's controller
    (`BacksolveAdjoint(stepsize_controller=PIDController(norm=adjoint_rms_seminorm))`):
    the RMS norm of the state and its adjoint, leaving the parameters' adjoint `g` out
    (Kidger, Chen & Lyons 2021).

    Under odeckpt's continuous adjoints the controller's norm sees only the state and
    its adjoint already (`seminorm=True`, the default), so this is `rms_norm` of what
    it is given; it exists so that diffrax code passing it runs. With `seminorm=False`
    the norm is given `g` too, and so is this one."""
    return rms_norm(x)


class BacksolveAdjoint(AbstractContinuousAdjoint):
    """Continuous adjoint that integrates `y` backwards alongside the adjoint.

    The backward pass solves `(y, a, g)` from `t1` to `t0` (`a = dL/dy`, `g =
    dL/dtheta`), re-anchoring `y` to the forward solution wherever one is stored and
    refusing the gradient, never returning it wrong, where `y` has left it (a damped
    system integrated backwards). Memory: one `y` per anchor. Of a reversible solver
    without `solver=`, the backward pass is the discrete adjoint instead
    (`CheckpointAdjoint`'s gradient in O(1) memory). Works with `jax.grad`/`jax.vjp` and
    `jax.vmap`; not `jax.jvp` (use `ForwardMode`). See `docs/adjoints.md`, "The continuous
    adjoints".

    Args:
        solver: Runge–Kutta method for the adjoint ODE; `None`: the forward solver.
        stepsize_controller: `None` (default) steps across the forward pass's accepted
            step times (split at saved outputs, and on stiff steps); an adaptive
            controller (e.g. `PIDController(rtol, atol)`) chooses its own steps,
            bounded by the solve's `max_steps`.
        checkpoints: forward states kept as anchors (`y` only). `None`: one per
            accepted step if `max_steps` copies of `y` fit in `memory_budget`,
            otherwise as many as fit.
        memory_budget: bytes for anchors when `checkpoints=None` (default 128 MiB;
            for the whole batch when the solve is traced inside `jax.vmap`).
        seminorm: with an adaptive controller, leave `g` out of the error norm
            (Kidger et al. 2021); controlling `g`'s error only ever adds steps.
        divergence_tol: anchor distance `max |y_back - y| / (atol + rtol max |y|)`
            beyond which the reconstruction has left the forward solution (default
            100): the backward pass then raises (`throw=True`) or returns NaN.
        throw: `None` follows `diffeqsolve(throw=...)`.

    References:
        Chen, Rubanova, Bettencourt & Duvenaud (2018), "Neural ordinary
        differential equations", NeurIPS.
        Kidger, Chen & Lyons (2021), "'Hey, that's not an ODE': faster ODE adjoints
        via seminorms", ICML.
        Kidger, Foster, Li & Lyons (2021), "Efficient and accurate gradients for
        neural SDEs", NeurIPS (reversible Heun; its exact backward pass).
        McCallum & Foster (2024), "Efficient, accurate and stable gradients for neural
        ODEs" (reversible methods from any explicit Runge–Kutta method).
    """

    solver: AbstractSolver | None = None
    stepsize_controller: AbstractLoopController | None = None
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

    def loop(self, integrator, problem, state0, max_steps):
        solver = integrator.solver
        if self.solver is not None or not solver.reversible:
            return super().loop(integrator, problem, state0, max_steps)
        if max_steps is None or self.stepsize_controller is not None:
            return super().loop(integrator, problem, state0, max_steps)  # raises its error
        message = _DRIFTED.format(type(solver).__name__) if self.throw else None
        return reconstructing_loop(
            integrator,
            problem,
            state0,
            max_steps,
            name="BacksolveAdjoint()",
            instead="`CheckpointAdjoint()`, or `BacksolveAdjoint(solver=Tsit5())` for the "
            "continuous adjoint",
            message=message,
        )

    def diverged(self, sw: Sweep) -> jax.Array:
        return ~(sw.worst <= self.divergence_tol)

    def give_up_above(self) -> float:
        return float(self.divergence_tol)

    def tape_plan(self, integrator, problem, state0, max_steps):
        c = self.checkpoints
        if c is None:
            budget = self.memory_budget or DEFAULT_MEMORY_BUDGET
            per_anchor = batch_size(state0) * nbytes(state0.y)
            c = int(min(max(budget // max(per_anchor, 1), 1), max_steps))
        return TapePlan(every=ceil_div(max_steps, c), keep_k=False, keep_dense=False)

    def sweep(self, ctx, field, sw, inputs):
        return sweep_to(ctx, field, sw, inputs.tape.grid[0])
