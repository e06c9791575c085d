"""What a loop runs (`ForwardBody`, `LoopBody`), what it returns, and the records the
checkpointed loop's passes share."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp


class Emitter(eqx.Module):
    """Writes `value(problem, record, j)` into row `j` of a buffer, for j in `span`."""

    span: Callable = eqx.field(static=True)  # (problem, state, new_state) -> (lo, hi)
    value: Callable = eqx.field(static=True)  # (problem, record, j) -> PyTree
    size: int = eqx.field(static=True)


class AbstractForwardBody(eqx.Module):
    """What `forward_loop` calls: a step, the loop's condition, the emitters that write
    the outputs, and an optional progress report. All static."""

    # (problem, state, decisions=None) -> (new_state, record, accepted); with recorded
    # `decisions`, the step is replayed: it takes them instead of deciding.
    step: eqx.AbstractVar[Callable]
    cond: eqx.AbstractVar[Callable]  # (problem, state) -> go on
    emitters: eqx.AbstractVar[tuple[Emitter, ...]]
    progress: eqx.AbstractVar[Callable | None]  # (problem, state0, state, i) -> None


class ForwardBody(AbstractForwardBody):
    """A body for `forward_loop` only (no reverse mode through the checkpointed loop)."""

    step: Callable = eqx.field(static=True)
    cond: Callable = eqx.field(static=True)
    emitters: tuple[Emitter, ...] = eqx.field(static=True)
    progress: Callable | None = eqx.field(static=True, default=None)


class LoopBody(AbstractForwardBody):
    """A body for `checkpointed_loop`: the forward body's functions, and those its reverse
    mode needs to record, replay, store and restore steps. All static."""

    step: Callable = eqx.field(static=True)
    decisions: Callable = eqx.field(static=True)  # (new_state, accepted) -> decisions
    skip: Callable = eqx.field(static=True)  # (problem, state, decisions) -> a rejected step
    cond: Callable = eqx.field(static=True)
    compress: Callable = eqx.field(static=True)  # state -> checkpoint
    restore: Callable = eqx.field(static=True)  # (problem, checkpoint) -> state
    emitters: tuple[Emitter, ...] = eqx.field(static=True)
    progress: Callable | None = eqx.field(static=True, default=None)


class Checksum(eqx.Module):
    """A summary of states, added up over the steps of a pass (a PyTree of arrays)."""

    sums: Any

    def merge(self, other: "Checksum") -> "Checksum":
        return Checksum(jax.tree.map(jnp.add, self.sums, other.sums))


class Inverse(eqx.Module):
    """What `reversible_loop` needs besides a `LoopBody`: each step's inverse, and how
    far the gradient through the states it reconstructs can be trusted. All static.

    Attributes:
        scalars: `state -> record`: what the inverse of the step from `state` needs
            besides the state after it (a few scalars, recorded every step: its start
            and end times).
        undo: `(problem, new_state, record) -> (state, decisions)`: the state the step
            to `new_state` started from, reconstructed (exactly up to round-off), and
            the decisions that step took (what `LoopBody.decisions` would have
            recorded).
        checksum: `(state, index) -> Checksum`: a summary of the state step `index`
            started from, merged over the steps by the forward pass, and again over the
            reconstructed states by the backward pass.
        size: `state -> scalar`: the largest magnitude in a state's cotangent (what the
            backward pass watches grow).
        initial_size: `(problem, state0, ct_state0) -> scalar`: the largest magnitude of
            the cotangent of the solve's initial value that the initial state's gives.
        refused: `(state0, reconstructed, forward, backward, amplification) -> bool`:
            whether the gradient is refused, given the initial state and its
            reconstruction, the two passes' checksums and how much the backward pass
            amplified round-off: the largest magnitude it handled (its cotangents'
            `size`, the problem's cotangents summed in magnitude over the steps) over
            the largest magnitude of the gradient it returns.
        message: raised (at run time) where it is; `None`: the cotangents are NaN.
    """

    scalars: Callable = eqx.field(static=True)
    undo: Callable = eqx.field(static=True)
    checksum: Callable = eqx.field(static=True)
    size: Callable = eqx.field(static=True)
    initial_size: Callable = eqx.field(static=True)
    refused: Callable = eqx.field(static=True)
    message: str | None = eqx.field(static=True, default=None)


class LoopOutput(eqx.Module):
    """The final state, the output buffers (one per emitter), and the steps taken."""

    state: Any
    buffers: tuple
    num_steps: jax.Array


class StepShapes(eqx.Module):
    """Shapes and dtypes of what one step produces: its output record and recorded
    decisions. Traced once per loop (tracing the step is most of a solve's trace time)."""

    record: Any
    decisions: Any


def step_shapes(body: LoopBody, problem, state) -> StepShapes:
    """The `StepShapes` of one step of `body` from `state`."""

    def fn(problem, state):
        new, record, accepted = body.step(problem, state)
        return record, body.decisions(new, accepted)

    return StepShapes(*eqx.filter_eval_shape(fn, problem, state))


class Residuals(eqx.Module):
    """What the checkpointed loop's forward pass leaves for its backward pass."""

    n: jax.Array  # steps taken
    decisions: object  # per step, what `body.decisions` recorded; a window of padding
    store: object  # every state (store-all pass), padded like `decisions`; or None
    slots: object  # compressed checkpoints (online pass), or None
    slot_pos: jax.Array | None  # the step each slot holds (-1: empty); online pass only
