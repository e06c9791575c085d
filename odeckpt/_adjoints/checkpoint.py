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

    Reverse mode runs the solver's own steps backwards, storing at most `checkpoints`
    solver states (the initial one included) and recomputing the rest. While the
    forward pass runs, checkpoints are placed online (the number of steps is not
    known in advance); the backward pass then reverses each interval between stored
    states with the optimal binomial (Revolve) plan. Each step is reversed by one VJP
    of the step: one re-evaluation of its stages plus their transpose.

    Args:
        checkpoints: how many states to store. `None` sizes it from the memory they
            take, counted for the whole batch when the solve is traced inside
            `jax.vmap`. If `max_steps` full solver states take at most
            `memory_budget`, or 16 MiB when no budget is given
            (`STORE_EVERY_STEP_BYTES`), every state is stored (the fastest reverse
            pass: no recomputation). Otherwise
            `min(checkpoints that fit, useful_checkpoints(max_steps))`, each holding
            `y` and a few scalars, where `useful_checkpoints(max_steps)` is the
            least c with `(c + 1)(c + 2) / 2 >= max_steps` (90 for 4096): enough to
            reverse any solve with about one extra step evaluation per step. More
            would save at most that evaluation, while every checkpoint
            slot is allocated (and zero-filled) by each gradient: with large states
            that memory traffic costs more than the recomputation it saves.
        memory_budget: bytes for stored states when `checkpoints=None` (default
            128 MiB for the checkpoints; storing every step needs an explicit budget
            past 16 MiB: that store is zero-filled by every gradient, and for a short
            solve with a large `max_steps`, a batch under `jax.vmap` above all,
            filling it costs more than the recomputation it saves).

    The first stage. An FSAL method (`Tsit5`, `Dopri5`, `Dopri8`, `Bosh3`:
    `AbstractSolver.carries_first_stage`) starts each step from `f(t, y)`, which the
    step before computed; a restored checkpoint rebuilds it with one evaluation, one
    per reversed step in all (1/6 of a `Tsit5` step each). Storing it in the
    checkpoint costs one more `y` per checkpoint and no evaluation. With
    `checkpoints=None` the rule compares, for the step count n (known with fixed
    steps, else `max_steps`), the cost of c checkpoints without the stage,
    `e (n + t(n, c)) + n` vector-field evaluations (e = `evals_per_step`), with that
    of the c' checkpoints with it that the same rule sizes in the same budget,
    `e (n + t(n, c'))`, and stores the stage when that is fewer: always when the budget
    is not what limits c (c' = c), rarely when it is (halving c costs more than the
    restores save). With `checkpoints=c` the stage is stored when an explicit
    `memory_budget` holds c checkpoints with it. Methods whose steps evaluate all
    they need from `(t, y)` (`Euler`, `Heun`, `Midpoint`, `Ralston`, the implicit
    and Rosenbrock methods) carry no stage: their restores cost nothing.

    Cost: with n steps and c checkpoints, n + t(n, c) step evaluations for a
    gradient when n is known, t(n, c) = r n - C(c + r, r - 1) with r minimal such that
    C(c + r, c) >= n (Griewank & Walther 2000); the online placement stays near this.
    Memory: c states, plus a window of up to 32 steps' checkpoint records, or fewer
    so that it takes at most 64 KiB (at least 2 steps), held twice by the backward
    pass. Under `jax.vmap` the rule counts the whole batch, read from the tracers when
    `diffeqsolve` is traced inside the `jax.vmap`; a solve compiled on its own and
    vmapped afterwards (`jax.vmap(jax.jit(solve))`) is sized per batch element. Works
    with `jax.grad`/`jax.vjp`; use `ForwardMode` for `jax.jvp`. With `max_steps=None`
    the solve runs without a bound, for the forward pass only: reverse mode through it
    raises a `ValueError` saying so.

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
        """The checkpoint count this adjoint uses for a solve (see class docstring)."""
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
        the budget rule (class docstring) prefers it over `c` checkpoints without it
        (`num_checkpoints`); else `None`."""
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
    """The sizing rule's count (class docstring) for checkpoints of `extra` more bytes
    each than `integrator.compress` makes (for the whole batch)."""
    batch = batch_size(state0)
    per_checkpoint = max(batch * nbytes(jax.eval_shape(integrator.compress, state0)) + extra, 1)
    fit = min(max(budget // per_checkpoint, 2), max_steps - 1)
    return int(min(fit, max(useful_checkpoints(max_steps), 2)))
