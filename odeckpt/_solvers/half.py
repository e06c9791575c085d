"""`HalfSolver`: an error estimate for any solver, from two half steps."""

from typing import final

import jax
import jax.numpy as jnp

from .base import AbstractAdaptiveSolver, AbstractSolver, AbstractWrappedSolver, StepOutput


@final
class HalfSolver(AbstractAdaptiveSolver, AbstractWrappedSolver):
    """Wraps a solver to give it an error estimate, as diffrax's `HalfSolver`: each step
    is made twice, as one full step and as two half steps, and the difference of the
    two results is the error estimate. The two half steps give the solution, so a step
    costs three of the wrapped solver's and is about twice as accurate.

    Use it to drive a solver without an embedded method (e.g. `Euler`) with
    `PIDController`. `isinstance` checks answer for the wrapped solver too (a
    `HalfSolver(Kvaerno5())` is an `AbstractImplicitSolver`). Dense output is the full
    step's (as in diffrax), so between steps it is as accurate as the wrapped solver's.
    `InterpolatingAdjoint` and `BacksolveAdjoint` integrate the adjoint ODE with the
    wrapped solver's method (or their own `solver=`).

    Args:
        solver: the solver to wrap.
    """

    solver: AbstractSolver

    @property
    def term_structure(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        """The wrapped solver's (a tuple of terms for `SemiImplicitEuler`)."""
        return self.solver.term_structure

    def error_order(self, terms) -> int | None:
        """One more than the wrapped solver's order: the two results differ by the
        wrapped solver's local error, of that order plus one."""
        order = self.solver.order(terms)
        return None if order is None else order + 1

    @property
    def evals_per_step(self) -> int:
        return 3 * self.solver.evals_per_step

    @property
    def carries_first_stage(self) -> bool:
        return self.solver.carries_first_stage

    @property
    def state_rebuildable(self) -> bool:
        return self.solver.state_rebuildable

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        half = dt / 2
        first = self.solver.attempt(term, t0, half, y0, solver_state, args, dense=False)
        second = self.solver.attempt(term, t0 + half, half, first.y1, first.state, args, False)
        full = self.solver.attempt(term, t0, dt, y0, solver_state, args, dense)
        y_error = jax.tree.map(lambda a, b: jnp.abs(a - b), second.y1, full.y1)
        failures = [out.failure for out in (first, second, full) if out.failure is not None]
        failure = None
        for code in failures:  # the first failure met, as the steps ran
            failure = code if failure is None else jnp.where(failure != 0, failure, code)
        return StepOutput(second.y1, y_error, second.state, full.coeffs, failure)
