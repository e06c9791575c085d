"""`ReversibleAdjoint`: reverse mode through a reversible solver by reconstructing its
states backwards, and the loop it shares with `BacksolveAdjoint()` of a reversible
solver."""

import dataclasses
import numbers

from odeckpt._checkpointing import LoopOutput, reversible_loop
from odeckpt._core import RESULTS

from .base import AbstractAdjoint


def reconstructing_loop(
    integrator,
    problem,
    state0,
    max_steps: int,
    *,
    name: str,
    instead: str,
    message: str | None,
    tolerance: float | None = None,
) -> LoopOutput:
    """`reversible_loop` over the integrator's steps, their inverse from the solver's
    `reverse_step`: what `ReversibleAdjoint()` and `BacksolveAdjoint()` of a
    reversible solver run. `name` and `instead` (the alternatives to suggest) word the
    refusals of jumps of the vector field and of events; `message` and `tolerance`: see
    `Integrator.inverse`."""
    if problem.controller.jump_times is not None:
        raise ValueError(
            f"`{name}` reconstructs the states of {type(integrator.solver).__name__} "
            "backwards with its inverse step, which cannot cross a jump of the vector "
            f"field (`jump_ts`: the solver restarts there). Use {instead}."
        )
    if problem.event is not None:
        raise ValueError(
            f"`{name}` reconstructs the states of {type(integrator.solver).__name__} "
            "backwards with its inverse step, which cannot undo the step an `Event` cut "
            f"short. Use {instead}."
        )
    inverse = integrator.inverse(message, tolerance)
    return reversible_loop(integrator.body(), inverse, problem, state0, max_steps)


class ReversibleAdjoint(AbstractAdjoint):
    """Discretise-then-optimise through an algebraically reversible solver, in O(1)
    memory: `CheckpointAdjoint`'s gradient (to round-off) without storing the states.

    The forward pass records each step's start and end times; the backward pass
    rebuilds each state from the next with the solver's inverse step and reverses the
    step there as `CheckpointAdjoint` does. Gradients flow to everything
    `CheckpointAdjoint` differentiates, under `jax.vmap`, in float32 and float64, in
    both time directions. A gradient whose estimated relative error exceeds
    `gradient_tol` is refused (`RESULTS.reversible_drifted`'s message with
    `throw=True`, NaN with `throw=False`). Cost: two evaluations of each step in all;
    memory: two states and 16 bytes per step. For `Reversible(solver)` or
    `ReversibleHeun()`; not with an `Event`, `jump_ts` or `max_steps=None`. How it
    works, the error estimate and its measured false-negative rate: `docs/adjoints.md`,
    section "ReversibleAdjoint".

    Args:
        gradient_tol: the largest estimated relative error (max norm, against
            `CheckpointAdjoint`'s gradient through the same solver) of a returned
            gradient. `None`: `eps ** (1/3)` of the state's dtype (6e-6 in float64,
            4.9e-3 in float32).
        throw: `None` follows `diffeqsolve(throw=...)`.

    References:
        McCallum & Foster (2024), "Efficient, accurate and stable gradients for neural
        ODEs", arXiv:2410.11648.
    """

    gradient_tol: float | None = None
    throw: bool | None = None

    def __check_init__(self):
        tol = self.gradient_tol
        real = isinstance(tol, numbers.Real) and not isinstance(tol, bool)
        if tol is not None and (not real or not tol > 0):
            raise ValueError(
                "`ReversibleAdjoint(gradient_tol=...)` must be a positive number (a "
                f"relative error) or None; got {tol!r}."
            )

    @property
    def supports_events(self) -> bool:
        return False

    def with_throw(self, throw: bool) -> "ReversibleAdjoint":
        return self if self.throw is not None else dataclasses.replace(self, throw=throw)

    def loop(self, integrator, problem, state0, max_steps):
        solver = integrator.solver
        name = type(solver).__name__
        if not solver.reversible:
            raise ValueError(
                f"`ReversibleAdjoint()` reconstructs the forward states with the solver's "
                f"inverse step, and `{name}` has none. Make it reversible with "
                f"`Reversible({name}())` (an explicit Runge–Kutta method), or use "
                "`CheckpointAdjoint()`."
            )
        if max_steps is None:
            raise ValueError(
                "`ReversibleAdjoint()` records each step's times in `max_steps` rows: pass "
                "an integer `max_steps`."
            )
        message = RESULTS.reversible_drifted.message if self.throw else None
        return reconstructing_loop(
            integrator,
            problem,
            state0,
            max_steps,
            name="ReversibleAdjoint()",
            instead="`CheckpointAdjoint()`",
            message=message,
            tolerance=self.gradient_tol,
        )
