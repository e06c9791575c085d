"""`CheckpointAdjoint`: reverse mode through the solver's own steps, and its sizing rule."""

import jax

from odeckpt._checkpointing import checkpointed_loop, forward_only_loop
from odeckpt._core import batch_size, nbytes
from odeckpt._integrator import Integrator, State
from odeckpt.schedules import beta, optimal_total

from .base import (
    DEFAULT_MEMORY_BUDGET,
    STORE_EVERY_STEP_BYTES,
    AbstractAdjoint,
    check_checkpoints,
)

_UNBOUNDED = (
    "`CheckpointAdjoint` cannot run reverse mode through a solve with `max_steps=None`: "
    "its checkpoints need a bound on the steps. Pass an integer `max_steps`, or use "
    "`adjoint=ForwardMode()` with `jax.jvp`/`jax.jacfwd`."
)


def useful_checkpoints(max_steps: int) -> int:
    """The least c with `beta(c, 2) = (c + 1)(c + 2) / 2 >= max_steps`: with c
    checkpoints any solve of up to `max_steps` steps is reversed with repetition number
    at most 2: about one extra evaluation per step (`schedules.beta`)."""
    c = 1
    while beta(c, 2) < max_steps:
        c += 1
    return c


class CheckpointAdjoint(AbstractAdjoint):
    """Discretise-then-optimise: the exact gradient of the numerical solution.

    Reverse mode stores at most `checkpoints` states (the initial one included), placed
    online, and recomputes the rest with the optimal binomial (Revolve) plan: `n + t(n,
    c)` step evaluations for n steps and c checkpoints when n is known. Each step is
    reversed by one VJP of the step under the forward pass's recorded decisions, so every
    checkpoint count gives the same gradient. Works with `jax.grad`/`jax.vjp` and forward
    over reverse; use `ForwardMode` for `jax.jvp`. See `docs/adjoints.md`,
    "CheckpointAdjoint: how reverse mode works".

    Args:
        checkpoints: how many states to store. `None` sizes it from the memory they
            take (the whole batch under `jax.vmap`): every state if `max_steps` of them
            fit in `memory_budget`, or 16 MiB when no budget is given; otherwise as
            many as fit, up to the least c with `(c + 1)(c + 2) / 2 >= max_steps`.
        memory_budget: bytes for stored states when `checkpoints=None` (default
            128 MiB for the checkpoints); whether the checkpoints also store an FSAL
            method's first stage.

    References:
        Griewank & Walther (2000), "Algorithm 799: Revolve", ACM TOMS 26(1).
        Stumm & Walther (2010), "New algorithms for optimal online checkpointing",
        SIAM J. Sci. Comput. 32(2).
    """

    checkpoints: int | None = None
    memory_budget: int | None = None

    def __check_init__(self):
        check_checkpoints(self)
        if self.memory_budget is not None and self.memory_budget <= 0:
            raise ValueError(
                "`CheckpointAdjoint(memory_budget=...)` must be a positive number of bytes; "
                f"got {self.memory_budget}."
            )

    def memory_budget_bytes(self) -> int:
        return self.memory_budget or DEFAULT_MEMORY_BUDGET

    def num_checkpoints(self, integrator: Integrator, state0: State, max_steps: int) -> int:
        """The checkpoint count this adjoint uses for a solve (docs/adjoints.md)."""
        if self.checkpoints is not None:
            return min(self.checkpoints, max_steps)
        budget = self.memory_budget_bytes()
        store_all = self.memory_budget or STORE_EVERY_STEP_BYTES
        if batch_size(state0) * max_steps * nbytes(state0) <= store_all:
            return max_steps
        return _fitting(integrator, state0, max_steps, budget, extra=0)

    def first_stage_checkpoints(
        self,
        integrator: Integrator,
        state0: State,
        max_steps: int,
        expected: int | None,
        c: int,
    ) -> int | None:
        """The checkpoint count with the first stage stored in each checkpoint, where
        the budget rule (docs/adjoints.md, "The first stage") prefers it over `c`
        checkpoints without it (`num_checkpoints`); else `None`."""
        solver = integrator.solver
        stage = batch_size(state0) * nbytes(state0.solver_state)
        if c >= max_steps or not (solver.carries_first_stage and solver.state_rebuildable):
            return None
        if self.checkpoints is not None:  # the count is the user's: store if it fits
            per = batch_size(state0) * nbytes(jax.eval_shape(integrator.compress, state0))
            budget = self.memory_budget
            return c if budget is not None and c * (per + stage) <= budget else None
        staged = _fitting(integrator, state0, max_steps, self.memory_budget_bytes(), stage)
        n = expected if expected is not None and expected <= max_steps else max_steps
        e = solver.evals_per_step
        # One evaluation per reversed step rebuilds the restored first stage (n in all).
        without, with_stage = e * optimal_total(n, c) + n, e * optimal_total(n, staged)
        return staged if with_stage < without else None

    def loop(self, integrator, problem, state0, max_steps):
        if max_steps is None:  # a forward solve only: reverse mode would need a bound
            return forward_only_loop(integrator.body(), problem, state0, _UNBOUNDED)
        expected = problem.expected_steps
        c = self.num_checkpoints(integrator, state0, max_steps)
        staged = self.first_stage_checkpoints(integrator, state0, max_steps, expected, c)
        if staged is not None:
            c, integrator = staged, integrator.storing_solver_state()
        return checkpointed_loop(integrator.body(), problem, state0, max_steps, c, expected)


def _fitting(integrator: Integrator, state0: State, max_steps: int, budget: int, extra: int):
    """The sizing rule's count (docs/adjoints.md) for checkpoints of `extra` more bytes
    each than `integrator.compress` makes (for the whole batch)."""
    batch = batch_size(state0)
    per_checkpoint = max(batch * nbytes(jax.eval_shape(integrator.compress, state0)) + extra, 1)
    fit = min(max(budget // per_checkpoint, 2), max_steps - 1)
    return int(min(fit, max(useful_checkpoints(max_steps), 2)))
