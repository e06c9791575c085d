"""The step pipeline: the loop state, one attempted step, and what each step saves.

Everything here is written in the solver's internal time, which always increases.
The loop that drives `Integrator.step` is chosen by the adjoint (see `_loops`).
"""

import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._checkpointing.loops import _WINDOW, _WINDOW_BYTES, Emitter, LoopBody
from odeckpt._controllers.controllers import (
    AbstractStepSizeController,
    ControllerState,
    Decision,
    PIDController,
    _initial_state,
    stretched_to_end,
)
from odeckpt._core.custom_types import Args, Y
from odeckpt._core.pack import Packed, pack, unpack
from odeckpt._core.results import RESULTS
from odeckpt._solvers.dense import DenseStep
from odeckpt._solvers.runge_kutta import AbstractSolver
from odeckpt._terms import AbstractTerm

# Positions in `State.counts`.
_ACCEPTED, _REJECTED, _SAVE_INDEX, _RESULT = range(4)


def _counter(position: int, doc: str) -> property:
    return property(lambda state: state.counts[position], doc=doc)


class State(eqx.Module):
    """The loop state between two attempted steps.

    The four int32 counters travel as one vector (`counts`): each step updates them
    in one kernel instead of four (XLA's CPU runtime launches a kernel per value a
    loop carries, and a step's own work on a small state is a dozen kernels)."""

    t: jax.Array  # current time
    t_next: jax.Array  # end of the next attempted step
    y: Y
    solver_state: PyTree  # e.g. f(t, y) for Runge–Kutta: recomputed on restore
    controller: ControllerState
    counts: jax.Array  # int32 (num_accepted, num_rejected, save_index, result)

    num_accepted = _counter(_ACCEPTED, "Accepted steps so far.")
    num_rejected = _counter(_REJECTED, "Rejected steps so far.")
    save_index = _counter(_SAVE_INDEX, "The next row of `SaveAt(ts)` to fill.")
    result = _counter(_RESULT, "The `RESULTS` code: 0 while the solve goes well.")

    def with_result(self, result) -> "State":
        return eqx.tree_at(lambda s: s.counts, self, self.counts.at[_RESULT].set(result))


def _counts(num_accepted, num_rejected, save_index, result) -> jax.Array:
    """`State.counts` from its four values (in the order of the positions above)."""
    values = (num_accepted, num_rejected, save_index, result)
    return jnp.stack([jnp.asarray(v).astype(jnp.int32) for v in values])


class Checkpoint(eqx.Module):
    """What a checkpoint stores: the state less `solver_state` (recomputed on restore),
    its scalars packed into a few vectors (see `_pack`)."""

    y: Y
    rest: Packed  # t, t_next, controller, counts


class Problem(eqx.Module):
    """The values a step reads; gradients flow to its floating leaves."""

    term: AbstractTerm
    args: Args
    controller: AbstractStepSizeController
    t1: jax.Array
    t1_floor: jax.Array  # t1 less ~100 ulp: a step ending past it is clipped to t1
    ts: jax.Array | None
    # The number of steps when known before the solve (fixed steps, concrete times).
    expected_steps: int | None = eqx.field(static=True, default=None)


class Replay(eqx.Module):
    """A step's decisions, recorded in the forward pass and imposed when the step is
    recomputed: floating-point reassociation in a recomputation must not move the
    time grid (the error estimate amplifies ulp differences) or flip accept/reject."""

    accepted: jax.Array
    t_next: jax.Array


class Record(eqx.Module):
    """What an accepted step hands to the output writers."""

    dense: DenseStep
    y1: Y


def _select(pred, new, old):
    return jax.tree.map(ft.partial(jnp.where, pred), new, old)


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


_COMPARE_ALL = 256  # up to this many save times, count by comparing with all of them


def _count_at_or_before(ts, t) -> jax.Array:
    """How many of the ascending `ts` are <= t. A sum of comparisons for few save times
    (one fused kernel, where a binary search is a loop nested in every step), a binary
    search for many."""
    if ts.shape[0] <= _COMPARE_ALL:
        return jnp.sum(ts <= t, dtype=jnp.int32)
    return jnp.searchsorted(ts, t, side="right").astype(jnp.int32)


def _clipped(t_new, problem: Problem, accepted):
    """Where a step from `t_new` ends when it is clipped to land on t1: at t1 after an
    accepted step, halfway there after a rejected one."""
    t_new = jnp.minimum(t_new, problem.t1)
    halfway = t_new + 0.5 * (problem.t1 - t_new)
    return jnp.where(accepted, problem.t1, halfway)


def clip_to_end(t_new, t_next, problem: Problem, accepted):
    """Land exactly on t1 when the next step would end within ~100 ulp of it (see
    `stretched_to_end`)."""
    stretch = stretched_to_end(t_new, t_next, problem.t1, problem.t1_floor)
    return jnp.where(stretch, _clipped(t_new, problem, accepted), t_next)


def _recorded_next(problem: Problem, t, accepted, recorded):
    """A replayed step's `t_next`: the `recorded` value, bit for bit, with the
    derivatives `clip_to_end` gives it (of `t1` where the step was clipped, else of `t`;
    the controller's step size is not differentiated)."""
    sg = jax.lax.stop_gradient
    clipped = _clipped(t, problem, accepted)
    moved = jnp.where(recorded == clipped, clipped, t + sg(recorded - t))
    return recorded + (moved - sg(moved))


class Integrator(eqx.Module):
    """One attempted step and its outputs, for a fixed solver and output request."""

    solver: AbstractSolver
    max_steps: int
    save_ts: bool
    save_steps: bool
    save_dense: bool
    num_ts: int
    report: Callable | None = None  # progress: (t0, t1, t, i, final=False) -> None

    def init(self, problem: Problem, t0, y0: Y, dt0) -> State:
        k0 = self.solver.init(problem.term, t0, y0, problem.args)
        dt = problem.controller.first_step(self.solver, problem.term, t0, y0, dt0, problem.args)
        dt, memory = jax.lax.stop_gradient(dt).astype(t0.dtype), _initial_state(t0.dtype)
        first = Decision(jnp.asarray(True), dt, memory, jnp.asarray(0))
        t_next = self._next_time(problem, t0, first, jnp.asarray(True))
        zero = jnp.asarray(0, jnp.int32)
        save_index = zero
        if problem.ts is not None:
            save_index = _count_at_or_before(problem.ts, t0)
        return State(
            t=t0, t_next=t_next, y=y0, solver_state=k0, controller=memory,
            counts=_counts(zero, zero, save_index, RESULTS.successful),
        )  # fmt: skip

    def step(self, problem: Problem, state: State, replay: Replay | None = None):
        """Attempt one step; returns the next state, its output record, and accept.

        With `replay`, the recorded decisions are used (their values; derivatives still
        flow through the recomputed `t_next`)."""
        t0, dt = state.t, state.t_next - state.t
        out = self.solver.step(problem.term, t0, dt, state.y, state.solver_state, problem.args,
                               dense=self.save_ts or self.save_dense)  # fmt: skip
        if replay is not None and _light_replay(problem, state):
            return self._replayed(problem, state, replay, out)
        decision = problem.controller.decide(
            t0, dt, state.y, out.y1, out.y_error, self.solver.error_order, state.controller
        )
        # With fixed steps nothing else reads the error estimate: checking it as well
        # makes a non-finite stage count, and this one reduction over every stage keeps
        # XLA from re-evaluating each stage inside every later one (which it does when
        # only elementwise code reads them: 1.8x the time on a 4096-point stencil).
        checked = (out.y1, out.state)
        if not problem.controller.adaptive:
            checked = (*checked, out.y_error)
        finite = _all_finite(checked)
        accepted = decision.accept & finite if replay is None else replay.accepted
        failed = decision.accept & ~finite
        cause = RESULTS.nonfinite_state
        if out.failure is not None:  # the step's own solve failed (implicit methods)
            cause = jnp.where(out.failure != RESULTS.successful, out.failure, cause)
        result = jnp.where(failed, cause, decision.result)
        t = jnp.where(accepted, state.t_next, t0)
        t_next = self._next_time(problem, t, decision, accepted)
        if replay is not None:
            t_next = replay.t_next + (t_next - jax.lax.stop_gradient(t_next))
        result = jnp.where(state.result == 0, result, state.result).astype(jnp.int32)
        return self._advanced(problem, state, out, accepted, t, t_next, decision.state, result)

    def _replayed(self, problem: Problem, state: State, replay: Replay, out):
        """`step` under a replay, without error control (see `_light_replay`): the
        recorded decisions, and the derivatives of `t_next` that `step` would give."""
        accepted = replay.accepted
        t = jnp.where(accepted, state.t_next, state.t)
        t_next = _recorded_next(problem, t, accepted, replay.t_next)
        return self._advanced(problem, state, out, accepted, t, t_next, state.controller,
                              state.result)  # fmt: skip

    def _advanced(self, problem, state: State, out, accepted, t, t_next, controller, result):
        """The step's new state, output record and accept flag, given its decisions."""
        new = State(
            t=t,
            t_next=t_next,
            y=_select(accepted, out.y1, state.y),
            solver_state=_select(accepted, out.state, state.solver_state),
            controller=controller,
            counts=_counts(state.num_accepted + accepted, state.num_rejected + ~accepted,
                           self._save_index(problem, t, state.save_index), result),
        )  # fmt: skip
        record = Record(DenseStep(state.t, state.t_next, state.y, out.coeffs), out.y1)
        return new, record, accepted

    def replay(self, new: State, accepted) -> Replay:
        return Replay(accepted, new.t_next)

    def skip(self, problem: Problem, state: State, replay: Replay) -> State:
        """A rejected step replayed from its record, without evaluating it: only `t_next`
        (to the recorded value) and the rejection count move. The step's candidate, and
        so the controller's memory of it, are not recomputed; under a replay every
        decision is imposed, so nothing downstream reads them (`ControllerState` is
        non-differentiable). The derivatives are those of a rejected step: `t_next`
        depends on `t` (and on `t1`, where a step was halved to land on it), never on
        the rejected candidate."""
        t_next = _recorded_next(problem, state.t, jnp.asarray(False), replay.t_next)
        counts = state.counts.at[_REJECTED].add(1)
        return eqx.tree_at(lambda s: (s.t_next, s.counts), state, (t_next, counts))

    def _next_time(self, problem, t, decision, accepted):
        proposal = problem.controller.next_time(t, decision)
        return clip_to_end(t, proposal.astype(t.dtype), problem, accepted)

    def _save_index(self, problem, t, index):
        if problem.ts is None:
            return index
        return _count_at_or_before(problem.ts, t)

    def cond(self, problem: Problem, state: State) -> jax.Array:
        return (state.t < problem.t1) & (state.result == RESULTS.successful)

    def compress(self, state: State) -> Checkpoint:
        rest = {k: v for k, v in vars(state).items() if k not in ("y", "solver_state")}
        return Checkpoint(state.y, pack(rest))

    def restore(self, problem: Problem, ckpt: Checkpoint) -> State:
        rest = unpack(ckpt.rest)
        solver_state = self.solver.init(problem.term, rest["t"], ckpt.y, problem.args)
        return State(y=ckpt.y, solver_state=solver_state, **rest)

    def body(self) -> LoopBody:
        return LoopBody(
            step=self.step, replay=self.replay, skip=self.skip, cond=self.cond,
            compress=self.compress, restore=self.restore, emitters=self._emitters(),
            progress=None if self.report is None else self._progress,
        )  # fmt: skip

    def _progress(self, problem: Problem, state0: State, state: State, i):
        assert self.report is not None
        self.report(state0.t, problem.t1, state.t, i)

    def _emitters(self) -> tuple[Emitter, ...]:
        emitters = []
        if self.save_ts:
            emitters.append(Emitter("ts", _ts_span, _ts_value, self.num_ts))
        if self.save_steps:
            emitters.append(Emitter("steps", _step_span, _step_value, self.max_steps))
        if self.save_dense:
            emitters.append(Emitter("dense", _step_span, _dense_value, self.max_steps))
        return tuple(emitters)


_LIGHT_REPLAY_BYTES = _WINDOW_BYTES // _WINDOW
"""The largest state replayed without error control: the size up to which
`_loops.window_size` gives a full window of checkpoint records (the loops' "small
state"). A state whose record's 53 bytes of scalars tip it over gets both this and
`_loops.advance`'s skipping, which is harmless."""


def _light_replay(problem: Problem, state: State) -> bool:
    """Whether a replayed step skips error control: with `PIDController` (whose
    decisions are all recorded, and whose memory nothing under a replay reads), for a
    state of at most `_LIGHT_REPLAY_BYTES`. There the error norm and the NaN check are
    a good part of a step's work. For a larger state they stay: the norm is the one
    reduction that reads every stage, and without it XLA re-evaluates each stage inside
    every later one (1.25-1.5x the gradient's time on a 4096-point stencil)."""
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.y))
    return isinstance(problem.controller, PIDController) and size <= _LIGHT_REPLAY_BYTES


def _ts_span(state: State, new: State):
    return state.save_index, new.save_index


def _ts_value(problem: Problem, record: Record, j):
    assert problem.ts is not None
    return record.dense.evaluate(problem.ts[j])


def _step_span(state: State, new: State):
    return state.num_accepted, new.num_accepted


def _step_value(problem: Problem, record: Record, j):
    return record.dense.t1, record.y1


def _dense_value(problem: Problem, record: Record, j):
    return record.dense
