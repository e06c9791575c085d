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
    memory: the exact gradient of the numerical solution, as `CheckpointAdjoint`'s (to
    round-off), without storing the forward states.

    The forward pass records per step only its start and end times (16 bytes in
    float64; the accept/reject decision is read back from them). The backward pass
    starts from the final state and, for each step from the last, reconstructs the
    state it started from with the solver's inverse step (`reverse_step`) and reverses
    the step there exactly as `CheckpointAdjoint` does: one `jax.vjp` of the step under
    its recorded decisions, adding the cotangents of the outputs it wrote (every
    `SaveAt` mode: `t0`, `t1`, `ts`, `steps`, `fn`, dense output). Gradients flow to
    `y0`, `args`, the vector field's parameters, `t0`, `t1` and `SaveAt(ts)`. Works
    under `jax.vmap`, in float32 and float64, and in both time directions.

    A gradient is returned only when it is right: the backward pass estimates the
    gradient's relative error from the drift of the reconstructed states (measured at
    the initial state, which it knows, and over every step by direction-sensitive
    checksums of the states) and from how much the backward pass amplified its
    cotangents (a coupled pair's parasitic mode grows them), and refuses the gradient
    where the estimate exceeds `gradient_tol`: with `throw=True` the backward pass
    raises `RESULTS.reversible_drifted`'s message (which names `CheckpointAdjoint`);
    with `throw=False` every gradient of the solve is NaN. (The check runs in the
    backward pass, after `Solution.result` exists, so NaN is how the failure travels,
    as for `BacksolveAdjoint`.) The estimate and its measured false-negative rate:
    `docs/adjoints.md`.

    Use it with `Reversible(solver)` (any explicit Runge–Kutta method made reversible)
    or `ReversibleHeun()`; another solver is refused, naming `Reversible(...)` and
    `CheckpointAdjoint()`. Not with an `Event` or `jump_ts` (a step's inverse cannot
    undo them), nor `max_steps=None` (the times are recorded in `max_steps` rows).

    Args:
        gradient_tol: the largest estimated relative error (max norm, against
            `CheckpointAdjoint`'s gradient through the same solver) of a returned
            gradient. `None`: `eps ** (1/3)` of the state's dtype (6e-6 in float64,
            4.9e-3 in float32).
        throw: `None` follows `diffeqsolve(throw=...)`.

    Cost: the forward solve plus, per step, its inverse, linearised as it is evaluated
    (`Reversible`'s inverse evaluates the step's own two base steps at the same points),
    and the transpose of that linearisation: two evaluations of each step in all, as a
    checkpointed gradient storing every step, whatever the number of steps (a reversible
    solver without `linearised_reverse_step`, e.g. `ReversibleHeun`, evaluates the step
    once more to linearise it). Memory: two solver states (the one in hand and
    its cotangent) and `max_steps` rows of two times; the outputs' buffers as for every
    adjoint.

    References:
        McCallum & Foster (2024), "Efficient, accurate and stable gradients for neural
        ODEs", arXiv:2410.11648.
        Kidger, Foster, Li & Lyons (2021), "Efficient and accurate gradients for
        neural SDEs", NeurIPS (the reversible Heun method).
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
