"""The records of the step pipeline: the loop state, what a step reads, what it
records for a replay, and what it hands to the output writers.

All times are the solver's internal time, which always increases.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._controllers import AbstractLoopController, ControllerState
from odeckpt._core import RESULTS, Args, Packed, Y
from odeckpt._solvers import DenseStep
from odeckpt._terms import AbstractTerm

from .conditions import EventRequest

# Positions in `State.counts`.
_ACCEPTED, _REJECTED, _RESULT, _MADE_JUMP, _EVENT = range(5)


def _counter(position: int, doc: str) -> property:
    return property(lambda state: state.counts[position], doc=doc)


def pack_counts(num_accepted, num_rejected, result, made_jump, event=None) -> jax.Array:
    """`State.counts` from its values (in the order of the positions above); `event`
    only in a solve with an `Event` (`None`: four counts, as without events)."""
    values = (num_accepted, num_rejected, result, made_jump)
    values = values if event is None else (*values, event)
    return jnp.stack([jnp.asarray(v).astype(jnp.int32) for v in values])


class State(eqx.Module):
    """The loop state between two attempted steps.

    The int32 counters and the `made_jump` flag travel as one vector (`counts`):
    each step updates them in one kernel instead of four (XLA's CPU runtime launches a
    kernel per value a loop carries, and a step's own work on a small state is a
    dozen kernels)."""

    t: jax.Array  # current time
    t_next: jax.Array  # end of the next attempted step
    y: Y
    solver_state: PyTree  # e.g. f(t, y) for Runge–Kutta (see `Checkpoint`)
    controller: ControllerState
    counts: jax.Array  # int32 (num_accepted, num_rejected, result, made_jump[, event])

    num_accepted = _counter(_ACCEPTED, "Accepted steps so far.")
    num_rejected = _counter(_REJECTED, "Rejected steps so far.")
    result = _counter(_RESULT, "The `RESULTS` code: 0 while the solve goes well.")

    @property
    def event(self) -> jax.Array:
        """1 + the index of the event condition that ended the solve; 0: none (always,
        in a solve without an `Event`, whose counts have no entry for it)."""
        return self.counts[_EVENT] if self.counts.shape[0] > _EVENT else jnp.asarray(0)

    @property
    def made_jump(self) -> jax.Array:
        """Whether the last accepted step ended at a jump of the vector field, so that
        `t` is just after the jump and the solver state was evaluated afresh there
        (`ClipStepSizeController(jump_ts=...)`): a bool scalar."""
        return self.counts[_MADE_JUMP] != 0

    def with_result(self, result) -> "State":
        return eqx.tree_at(lambda s: s.counts, self, self.counts.at[_RESULT].set(result))

    def with_event(self, fired, event) -> "State":
        """This state with `event` (see `State.event`) and `RESULTS.event_occurred`
        where `fired`."""
        code = jnp.where(fired, RESULTS.event_occurred, self.result)
        counts = self.counts.at[_RESULT].set(code).at[_EVENT].set(jnp.where(fired, event, 0))
        return eqx.tree_at(lambda s: s.counts, self, counts.astype(jnp.int32))

    def with_rejected_step(self, t_next) -> "State":
        """This state after one more rejected step, whose next attempt ends at `t_next`."""
        counts = self.counts.at[_REJECTED].add(1)
        return eqx.tree_at(lambda s: (s.t_next, s.counts), self, (t_next, counts))


class Checkpoint(eqx.Module):
    """What a checkpoint stores: `y` and the state's scalars packed into a few vectors
    (see `odeckpt._core.pack`); `solver_state` only for a solver whose state `init_state`
    cannot rebuild (`AbstractSolver.state_rebuildable`), else `None` (recomputed on
    restore, so a checkpoint costs one `y`)."""

    y: Y
    rest: Packed  # t, t_next, controller, counts
    solver_state: PyTree = None


class Problem(eqx.Module):
    """The values a step reads; gradients flow to its floating leaves."""

    term: AbstractTerm
    args: Args
    controller: AbstractLoopController  # the controller the loop runs (`for_solve`)
    t1: jax.Array
    t1_floor: jax.Array  # t1 less ~100 ulp: a step ending past it is clipped to t1
    saves: tuple  # one `SaveRequest` per `SubSaveAt` (its save times and `fn`)
    # The number of steps when known before the solve (fixed steps, concrete times).
    expected_steps: int | None = eqx.field(static=True, default=None)
    event: EventRequest | None = None  # the solve's `Event`, or `None`


class RecordedDecisions(eqx.Module):
    """A step's decisions, recorded in the forward pass and imposed when the step is
    replayed (recomputed): floating-point reassociation in a recomputation must not
    move the time grid (the error estimate amplifies ulp differences) or flip
    accept/reject. `known`: the step itself, already evaluated and linearised where a
    reversible solver's inverse evaluated it (a `LinearisedStep`, which the replay
    takes instead of the solver), or `None`."""

    accepted: jax.Array
    t_next: jax.Array
    known: Any = None


class Record(eqx.Module):
    """What an accepted step hands to the output writers."""

    dense: DenseStep
    y1: Y
