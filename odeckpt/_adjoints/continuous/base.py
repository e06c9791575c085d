"""What the continuous adjoints share: `AbstractContinuousAdjoint`.

The loop is a `filter_custom_vjp` over `(problem, state0)` (`vjp`): `forward_loop`
recording a `tape`, then a `sweep` of the adjoint ODE down to `t0`. What they
differentiate and what they refuse: `docs/adjoints.md`, "The continuous adjoints".
"""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._adjoints.base import AbstractAdjoint
from odeckpt._controllers import AbstractLoopController
from odeckpt._integrator import Integrator, Problem, State
from odeckpt._solvers import AbstractAdaptiveSolver, AbstractExplicitSolver, AbstractSolver

from .adjoint_ode import AdjointField
from .sweep import Sweep, SweepContext
from .tape import TapePlan
from .vjp import SweepInputs, continuous_loop, sweep_solver


def ceil_div(a: int, b: int) -> int:
    """`ceil(a / b)` for positive integers."""
    return -(-a // b)


def _steps_adjoint(solver: AbstractSolver, integrates_y: bool) -> bool:
    """Whether `solver` can step the adjoint ODE: an explicit Runge–Kutta method by its
    tableau, an implicit one by its own steps (`for_adjoint_ode`).

    Raises:
        ValueError: for an implicit solver's setting that has no meaning there.
    """
    if not isinstance(solver, AbstractSolver):
        return False
    explicit = isinstance(solver, AbstractExplicitSolver)
    return explicit or solver.for_adjoint_ode(integrates_y) is not None


class AbstractContinuousAdjoint(AbstractAdjoint):
    """The adjoint ODE solved backwards; subclasses choose where `y(t)` comes from."""

    solver: eqx.AbstractVar[AbstractSolver | None]
    stepsize_controller: eqx.AbstractVar[AbstractLoopController | None]
    seminorm: eqx.AbstractVar[bool]
    throw: eqx.AbstractVar[bool | None]

    def __check_init__(self):
        name = type(self).__name__
        if self.solver is not None and not _steps_adjoint(self.solver, self.integrates_y()):
            raise ValueError(
                f"`{name}(solver=...)` must be a Runge–Kutta solver, explicit such as "
                "`Tsit5()` or implicit such as `Kvaerno5()`, `Rodas5P()` or `RadauIIA5()` "
                f"(for stiff problems), or None (the forward solver); got "
                f"{type(self.solver).__name__}."
            )
        controller = self.stepsize_controller
        if controller is not None and not (
            isinstance(controller, AbstractLoopController) and controller.adaptive
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

    @abc.abstractmethod
    def tape_plan(
        self, integrator: Integrator, problem: Problem, state0: State, max_steps: int
    ) -> TapePlan:
        """What the forward pass records for this adjoint."""

    @abc.abstractmethod
    def sweep(
        self, ctx: SweepContext, field: AdjointField, sw: Sweep, inputs: SweepInputs
    ) -> Sweep:
        """The backward sweep from the end of the solve down to `t0`."""

    @abc.abstractmethod
    def integrates_y(self) -> bool:
        """Whether the backward pass integrates `y` (and so re-anchors it)."""

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
                "(`max_steps=None` works with `ForwardMode()`, and with `CheckpointAdjoint()` "
                "for a solve that is not differentiated in reverse mode)."
            )
        solver = sweep_solver(self.solver, integrator.solver)
        if not _steps_adjoint(solver, self.integrates_y()):
            raise ValueError(
                f"`{name}` solves the adjoint ODE with a Runge–Kutta method, explicit or "
                f"implicit, and {type(solver).__name__} is neither; pass "
                f"`{name}(solver=Tsit5())` (or `solver=Kvaerno5()` for a stiff problem) "
                "to use one."
            )
        if self.stepsize_controller is not None and not isinstance(solver, AbstractAdaptiveSolver):
            raise ValueError(
                f"`{name}(stepsize_controller=...)` needs a solver with an error "
                f"estimate; {type(solver).__name__} has none: pass e.g. `solver=Tsit5()`."
            )
        plan = self.tape_plan(integrator, problem, state0, max_steps)
        return continuous_loop(integrator, problem, state0, max_steps, self, plan)
