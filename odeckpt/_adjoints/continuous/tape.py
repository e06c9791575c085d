"""The forward pass of a continuous adjoint: `forward_loop` over `(State, Tape)`, recording.

The tape holds the accepted step times (`grid`), every `every`-th accepted state as an
anchor (`anchor_t`, `anchor_y`, and `anchor_k` when steps are replayed from there) or
every step's dense polynomial (`dense`), and `y` at the rows of each `SubSaveAt` whose
`fn` is not `save_y` (`saved_y`). The solve's own steps and buffers are exactly
`forward_loop`'s.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._checkpointing import Emitter, ForwardBody, LoopOutput, forward_loop
from odeckpt._core import set_row, zero_rows
from odeckpt._integrator import Integrator, Problem, State
from odeckpt._solvers import DenseStep


class TapePlan(eqx.Module):
    """What the forward pass records (all static).

    Attributes:
        every: anchor every `every` accepted steps (0: no anchors).
        keep_k: anchors also hold the first stage `k` (to replay from them).
        keep_dense: store every accepted step's dense polynomial.
    """

    every: int = eqx.field(static=True)
    keep_k: bool = eqx.field(static=True)
    keep_dense: bool = eqx.field(static=True)

    def slots(self, max_steps: int) -> int:
        return max_steps // self.every + 1 if self.every else 0


class Tape(eqx.Module):
    """What the forward pass recorded (see the module docstring)."""

    # (max_steps + 1,): grid[0] = t0, grid[i + 1] = end of step i. After a jump of the
    # vector field the next step starts a little later, at `controller.restart(end)`.
    grid: jax.Array
    anchor_t: jax.Array  # (slots,): time of anchor q = grid[q * every]
    anchor_y: object  # y at anchor q, leaves (slots, ...)
    anchor_k: object  # the solver state (f(t, y) for Runge–Kutta) at anchor q, or None
    dense: DenseStep | None  # every accepted step's polynomial (max_steps rows)
    saved_y: tuple = ()  # the buffers of `Integrator.state_emitters()`


def empty_tape(integrator: Integrator, problem: Problem, state0: State, plan: TapePlan):
    max_steps, slots = integrator.max_steps, plan.slots(integrator.max_steps)
    grid = jnp.full((max_steps + 1,), jnp.inf, state0.t.dtype).at[0].set(state0.t)
    dense = None
    if plan.keep_dense:
        _, record, _ = eqx.filter_eval_shape(_stepper(integrator, plan).step, problem, state0)
        dense = zero_rows(record.dense, max_steps)
    return Tape(
        grid=grid,
        anchor_t=jnp.full((slots,), jnp.inf, state0.t.dtype),
        anchor_y=zero_rows(state0.y, slots),
        anchor_k=zero_rows(state0.solver_state, slots) if plan.keep_k else None,
        dense=dense,
    )


def _record_anchor(tape: Tape, state: State, plan: TapePlan) -> Tape:
    if not plan.every:
        return tape
    m = state.num_accepted
    slot = jnp.where(m % plan.every == 0, m // plan.every, tape.anchor_t.shape[0])
    return Tape(
        grid=tape.grid,
        anchor_t=tape.anchor_t.at[slot].set(state.t, mode="drop"),
        anchor_y=set_row(tape.anchor_y, slot, state.y),
        anchor_k=None
        if tape.anchor_k is None
        else set_row(tape.anchor_k, slot, state.solver_state),
        dense=tape.dense,
    )


def _record_step(tape: Tape, state: State, new: State, record, accepted) -> Tape:
    index = jnp.where(accepted, state.num_accepted, tape.grid.shape[0])
    # The step's end: `new.t` but after a jump, where the next step starts just past it.
    grid = tape.grid.at[index + 1].set(state.t_next, mode="drop")
    dense = None if tape.dense is None else set_row(tape.dense, index, record.dense)
    return Tape(grid, tape.anchor_t, tape.anchor_y, tape.anchor_k, dense)


def _stepper(integrator: Integrator, plan: TapePlan) -> Integrator:
    """The integrator whose steps are taken: it computes dense output if it is kept
    (the step is otherwise the same; outputs are still written as `integrator` asks)."""
    return integrator.computing_dense() if plan.keep_dense else integrator


def _taped_body(integrator: Integrator, plan: TapePlan) -> ForwardBody:
    """`integrator.body()`'s forward part over the state `(State, Tape)`."""
    body, stepper = integrator.body(), _stepper(integrator, plan)

    def step(problem, carry):
        state, tape = carry
        tape = _record_anchor(tape, state, plan)
        new, record, accepted = stepper.step(problem, state)
        return (new, _record_step(tape, state, new, record, accepted)), record, accepted

    emitters = tuple(
        Emitter(lambda p, s, n, e=e: e.span(p, s[0], n[0]), e.value, e.size)
        for e in (*body.emitters, *integrator.state_emitters())
    )
    cond = lambda problem, carry: body.cond(problem, carry[0])
    progress = None
    if body.progress is not None:
        report = body.progress
        progress = lambda problem, c0, c, i: report(problem, c0[0], c[0], i)
    return ForwardBody(step=step, cond=cond, emitters=emitters, progress=progress)


def taped_loop(
    integrator: Integrator, problem: Problem, state0: State, max_steps: int, plan: TapePlan
) -> tuple[LoopOutput, Tape]:
    """`forward_loop(integrator.body(), ...)`, also returning what `plan` records."""
    tape0 = empty_tape(integrator, problem, state0, plan)
    out = forward_loop(_taped_body(integrator, plan), problem, (state0, tape0), max_steps)
    final, tape = out.state
    outputs = len(integrator.body().emitters)
    tape = dataclasses.replace(tape, saved_y=out.buffers[outputs:])
    return LoopOutput(final, out.buffers[:outputs], out.num_steps), tape
