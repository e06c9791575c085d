"""The step pipeline: one attempted step, its decisions and its outputs.

Everything here is written in the solver's internal time, which always increases.
The loop that drives `Integrator.step` is chosen by the adjoint (see
`odeckpt._checkpointing`); the records it reads and writes are in `state`, the
output writers in `outputs`.
"""

import dataclasses
import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._checkpointing import SMALL_STATE_BYTES, Emitter, Inverse, LoopBody
from odeckpt._controllers import ControllerState, Decision, stretched_to_end
from odeckpt._core import RESULTS, Y, all_finite, batch_cond, pack, unpack
from odeckpt._solvers import AbstractReversibleSolver, AbstractSolver, DenseStep

from . import outputs as _outputs, reconstruction
from .events import event_at_start, event_step
from .outputs import Outputs, SaveLayout
from .state import Checkpoint, Problem, Record, RecordedDecisions, State, pack_counts


def _select(pred, new, old):
    return jax.tree.map(ft.partial(jnp.where, pred), new, old)


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
    derivatives `clip_to_end` gives it (of `t1` where the step was clipped, else those
    the controller gives it: of `t`, or of a time it lands on)."""
    sg = jax.lax.stop_gradient
    clipped = _clipped(t, problem, accepted)
    free = problem.controller.replayed_next(t, recorded)
    moved = jnp.where(recorded == clipped, clipped, free)
    # `sg(recorded)`: under forward-over-reverse the record carries the forward pass's
    # tangent too, which `moved` already gives (counted twice, the replayed steps of the
    # backward pass would move by twice it)
    return sg(recorded) + (moved - sg(moved))


def restart_after(problem: Problem, end):
    """`(start, made_jump)`: where the step after an accepted one ending at `end`
    starts. At `end`, or, where the controller stops before a jump of the vector field,
    just past the jump (never past t1). Only for a controller with `jump_times`."""
    start, jumped = problem.controller.restart(end)
    jumped = jumped & (end < problem.t1)
    return jnp.where(jumped, jnp.minimum(start, problem.t1), end), jumped


def fresh_stage(solver: AbstractSolver, problem: Problem, jumped, t, y, solver_state):
    """The solver state evaluated afresh at `t` (just after a jump of the vector field)
    where the step `jumped`, else `solver_state`: an FSAL value from before a jump must
    not be carried past it."""
    # `lax.cond`, not `batch_cond`: the step is differentiated in reverse mode.
    fresh = lambda t, y, k: solver.init_state(problem.term, t, y, problem.args)
    return jax.lax.cond(jumped, fresh, lambda t, y, k: k, t, y, solver_state)


def attempt_step(solver: AbstractSolver, problem: Problem, t0, dt, y, solver_state, dense=True):
    """`solver.attempt` of the step from `t0` to `t0 + dt`, on the term as that step
    evaluates it (`AbstractTerm.for_step`). A term stepped by increments (a
    `ControlTerm`) has a field of the step's own: its first stage is evaluated afresh
    rather than carried from the step before."""
    term = problem.term.for_step(t0, dt)
    if term.steps_by_increments:
        solver_state = solver.init_state(term, t0, y, problem.args)
    return solver.attempt(term, t0, dt, y, solver_state, problem.args, dense=dense)


def _landed(problem: Problem, state: State, accepted):
    """`(t, made_jump)` after a step from `state`: where the next starts if it was
    accepted (`restart_after`), else `state.t` (and the flag unchanged)."""
    if problem.controller.jump_times is None:
        return jnp.where(accepted, state.t_next, state.t), state.made_jump
    start, jumped = restart_after(problem, state.t_next)
    return jnp.where(accepted, start, state.t), jnp.where(accepted, jumped, state.made_jump)


class Integrator(eqx.Module):
    """One attempted step and its outputs, for a fixed solver and output request.

    Attributes:
        solver: the solver (positional; every other field is keyword-only).
        max_steps: bound on attempted steps (0 for an unbounded loop): the number of
            rows of the per-step outputs.
        saves: the rows the steps write for each `SubSaveAt` (`SaveLayout`s).
        save_dense: the steps also write their dense output (`SaveAt(dense=True)`).
        report: progress callback `(t0, t1, t, i, final=False) -> None`, or `None`.
        locates_events: the solve has an `Event` (`Problem.event`): every step
            computes its dense output, on which crossings are located.
        stores_solver_state: checkpoints keep the solver state even where `init_state`
            could rebuild it (`storing_solver_state`).
    """

    solver: AbstractSolver
    max_steps: int = eqx.field(kw_only=True)
    saves: tuple[SaveLayout, ...] = eqx.field(kw_only=True)
    save_dense: bool = eqx.field(kw_only=True)
    report: Callable | None = eqx.field(kw_only=True, default=None)
    locates_events: bool = eqx.field(kw_only=True, default=False)
    stores_solver_state: bool = eqx.field(kw_only=True, default=False)

    def init(self, problem: Problem, t0, y0: Y, dt0) -> State:
        k0 = self.solver.init_state(problem.term, t0, y0, problem.args)
        dt = problem.controller.first_step(self.solver, problem.term, t0, y0, dt0, problem.args)
        dt, memory = jax.lax.stop_gradient(dt).astype(t0.dtype), ControllerState.initial(t0.dtype)
        first = Decision(jnp.asarray(True), dt, memory, jnp.asarray(0))
        t_next = self._next_time(problem, t0, first, jnp.asarray(True))
        zero = jnp.asarray(0, jnp.int32)
        state = State(
            t=t0,
            t_next=t_next,
            y=y0,
            solver_state=k0,
            controller=memory,
            counts=pack_counts(
                zero, zero, RESULTS.successful, False, None if problem.event is None else 0
            ),
        )
        return event_at_start(problem, state)

    def step(self, problem: Problem, state: State, decisions: RecordedDecisions | None = None):
        """Attempt one step; returns the next state, its output record, and accept.

        With recorded `decisions` the step is replayed: their values are used
        (derivatives still flow through the recomputed `t_next`)."""
        t0, dt = state.t, state.t_next - state.t
        known = None if decisions is None else decisions.known
        solver = self.solver if known is None else known
        out = attempt_step(
            solver, problem, t0, dt, state.y, state.solver_state, dense=self.evaluates_dense
        )
        if decisions is not None and _light_replay(problem, state):
            return self._replayed(problem, state, decisions, out)
        error_order = self.solver.error_order(problem.term)
        decision = problem.controller.decide(
            t0, dt, state.y, out.y1, out.y_error, error_order, state.controller
        )
        # With fixed steps nothing else reads the error estimate: checking it as well
        # makes a non-finite stage count, and this one reduction over every stage keeps
        # XLA from re-evaluating each stage inside every later one (which it does when
        # only elementwise code reads them: 1.8x the time on a 4096-point stencil).
        checked = (out.y1, out.state)
        if not problem.controller.adaptive:
            checked = (*checked, out.y_error)
        finite = all_finite(checked)
        # The solver's own failure: its solve (implicit methods, `y1` NaN), or a reason
        # to stop although `y1` is finite (`Reversible`'s growing parasitic mode).
        refused = jnp.asarray(False if out.failure is None else out.failure != RESULTS.successful)
        ok = finite & ~refused
        accepted = decision.accept & ok if decisions is None else decisions.accepted
        failed = decision.accept & ~ok
        cause = RESULTS.nonfinite_state
        if out.failure is not None:
            cause = jnp.where(refused, out.failure, cause)
        result = jnp.where(failed, cause, decision.result)
        t, jumped = _landed(problem, state, accepted)
        t_next = self._next_time(problem, t, decision, accepted)
        if decisions is not None:
            t_next = decisions.t_next + (t_next - jax.lax.stop_gradient(t_next))
        result = jnp.where(state.result == 0, result, state.result).astype(jnp.int32)
        landed = (t, jumped, t_next)
        return self._advanced(problem, state, out, accepted, landed, decision.state, result)

    def _replayed(self, problem: Problem, state: State, decisions: RecordedDecisions, out):
        """`step` under a replay, without error control (see `_light_replay`): the
        recorded decisions, and the derivatives of `t_next` that `step` would give."""
        accepted = decisions.accepted
        t, jumped = _landed(problem, state, accepted)
        t_next = _recorded_next(problem, t, accepted, decisions.t_next)
        landed = (t, jumped, t_next)
        return self._advanced(problem, state, out, accepted, landed, state.controller, state.result)

    def _advanced(self, problem, state: State, out, accepted, landed, controller, result):
        """The step's new state, output record and accept flag, given its decisions
        (`landed`: the new `t`, `made_jump` and `t_next`)."""
        t, jumped, t_next = landed
        y = _select(accepted, out.y1, state.y)
        solver_state = _select(accepted, out.state, state.solver_state)
        if problem.controller.jump_times is not None:
            solver_state = fresh_stage(self.solver, problem, accepted & jumped, t, y, solver_state)
        new = State(
            t=t,
            t_next=t_next,
            y=y,
            solver_state=solver_state,
            controller=controller,
            counts=pack_counts(
                state.num_accepted + accepted.astype(jnp.int32),
                state.num_rejected + (~accepted).astype(jnp.int32),
                result,
                jumped,
                None if problem.event is None else state.event,
            ),
        )
        record = Record(DenseStep(state.t, state.t_next, state.y, out.coeffs), out.y1)
        if problem.event is not None:
            end = new.t
            new, record = event_step(problem, state, new, record, accepted)
            # Cut short at a crossing: the carried state (an FSAL stage) is evaluated
            # afresh there, as after a jump (`sol.solver_state` is the solver's at t*).
            fresh = fresh_stage(self.solver, problem, new.t != end, new.t, new.y, new.solver_state)
            new = eqx.tree_at(lambda s: s.solver_state, new, fresh)
        return new, record, accepted

    def record_decisions(self, new: State, accepted) -> RecordedDecisions:
        """What a replay of the step that gave `new` imposes."""
        return RecordedDecisions(accepted, new.t_next)

    def skip(self, problem: Problem, state: State, decisions: RecordedDecisions) -> State:
        """A rejected step replayed from its record, without evaluating it: only `t_next`
        (to the recorded value) and the rejection count move. The step's candidate, and
        so the controller's memory of it, are not recomputed; under a replay every
        decision is imposed, so nothing downstream reads them (`ControllerState` is
        non-differentiable). The derivatives are those of a rejected step: `t_next`
        depends on `t` (and on `t1`, where a step was halved to land on it), never on
        the rejected candidate."""
        t_next = _recorded_next(problem, state.t, jnp.asarray(False), decisions.t_next)
        return state.with_rejected_step(t_next)

    def _next_time(self, problem, t, decision, accepted):
        proposal = problem.controller.next_time(t, decision)
        return clip_to_end(t, proposal.astype(t.dtype), problem, accepted)

    def cond(self, problem: Problem, state: State) -> jax.Array:
        return (state.t < problem.t1) & (state.result == RESULTS.successful)

    def compress(self, state: State) -> Checkpoint:
        """The checkpoint of `state`: its solver state only where `init_state` cannot rebuild
        it (`AbstractSolver.state_rebuildable`) or it is asked to be kept
        (`stores_solver_state`)."""
        kept = None if self._rebuilds else state.solver_state
        return Checkpoint(state.y, _scalars(state), kept)

    def restore(self, problem: Problem, ckpt: Checkpoint) -> State:
        rest = unpack(ckpt.rest)
        solver_state = ckpt.solver_state
        if self._rebuilds:
            solver_state = self.solver.init_state(problem.term, rest["t"], ckpt.y, problem.args)
        return State(y=ckpt.y, solver_state=solver_state, **rest)

    @property
    def _rebuilds(self) -> bool:
        """Whether a restore rebuilds the solver state with `init_state` (one evaluation of
        the vector field where `AbstractSolver.carries_first_stage`)."""
        return self.solver.state_rebuildable and not self.stores_solver_state

    def storing_solver_state(self) -> "Integrator":
        """This integrator with checkpoints that keep the solver state (for an FSAL
        method, its first stage: one more `y` per checkpoint, and no evaluation per
        restore). Its steps are the same."""
        return dataclasses.replace(self, stores_solver_state=True)

    def inverse(self, message: str | None = None, tolerance: float | None = None) -> Inverse:
        """Each step's inverse, for a reversible solver (`AbstractReversibleSolver`):
        what `reversible_loop` reconstructs the states with, recording per step only
        its start and end times, and the refusal of a gradient whose estimated relative
        error exceeds `tolerance` (`reconstruction.refused`; `None`: its default).
        `message`: raised where it is refused (`None`: the gradient is NaN there). Not
        for a solve with an `Event` or jumps of the vector field (which a step's
        inverse cannot undo)."""
        solver = self.solver
        assert isinstance(solver, AbstractReversibleSolver)
        part = solver.reconstructed
        return Inverse(
            scalars=_step_times,
            undo=self._undo,
            checksum=ft.partial(reconstruction.checksum, part=part),
            size=ft.partial(reconstruction.largest, part=part),
            initial_size=ft.partial(reconstruction.initial_gradient_size, solver),
            refused=ft.partial(reconstruction.refused, part=part, tolerance=tolerance),
            message=message,
        )

    def _undo(self, problem: Problem, new: State, times):
        """The state the step to `new` started from, and that step's decisions: its
        times as recorded, accepted where `new.t` moved; `y` and the solver state by the
        solver's `reverse_step` (unchanged by a rejected step); the counts one step
        back (the loop only runs from a successful state). The controller's memory is
        `new`'s: a replay imposes every decision, and no derivative reads the memory
        (`UniformSteps` finds its grid point from `t` when its count does not match)."""
        solver, t, t_next = self.solver, times[0], times[1]
        assert isinstance(solver, AbstractReversibleSolver)
        accepted = new.t != t
        known = None
        linearised = solver.linearised_reverse_step(
            problem.term, t, t_next - t, new.y, new.solver_state, problem.args, self.evaluates_dense
        )
        if linearised is not None:  # the replay reuses the inverse's evaluations
            y, k, known = linearised
            y, k = _select(accepted, y, new.y), _select(accepted, k, new.solver_state)
        else:

            def undone(problem, t, t_next, y, k):  # `problem` an operand: it may be traced
                return solver.reverse_step(problem.term, t, t_next - t, y, k, problem.args)

            kept = lambda problem, t, t_next, y, k: (y, k)
            y, k = batch_cond(accepted, undone, kept, problem, t, t_next, new.y, new.solver_state)
        step = accepted.astype(jnp.int32)
        event = None if problem.event is None else 0
        counts = pack_counts(
            new.num_accepted - step, new.num_rejected - (1 - step), RESULTS.successful, False, event
        )
        state = State(
            t=t, t_next=t_next, y=y, solver_state=k, controller=new.controller, counts=counts
        )
        return state, RecordedDecisions(accepted, new.t_next, known)

    def body(self) -> LoopBody:
        return LoopBody(
            step=self.step,
            decisions=self.record_decisions,
            skip=self.skip,
            cond=self.cond,
            compress=self.compress,
            restore=self.restore,
            emitters=self._emitters(),
            progress=None if self.report is None else self._progress,
        )

    def _progress(self, problem: Problem, state0: State, state: State, i):
        assert self.report is not None
        self.report(state0.t, problem.t1, state.t, i)

    @property
    def evaluates_dense(self) -> bool:
        """Whether a step computes its dense output (for save times or dense output)."""
        dense = self.save_dense or self.locates_events
        return dense or any(layout.num_ts for layout in self.saves)

    def _emitters(self) -> tuple[Emitter, ...]:
        return _outputs.emitters(self.saves, save_dense=self.save_dense, max_steps=self.max_steps)

    def state_emitters(self) -> tuple[Emitter, ...]:
        """Emitters of `y` itself at the rows of each `SubSaveAt` whose `fn` is not
        `save_y` (what the continuous adjoints pull `fn`'s cotangents back through)."""
        return _outputs.emitters(
            self.saves, save_dense=False, max_steps=self.max_steps, of_state=True
        )

    def outputs(self, buffers: tuple, *, of_state: bool = False) -> Outputs:
        """The loop's output buffers (or their cotangents), one per emitter, as a record;
        with `of_state`, those of `state_emitters`."""
        return _outputs.outputs(buffers, self.saves, save_dense=self.save_dense, of_state=of_state)

    def computing_dense(self) -> "Integrator":
        """This integrator with `save_dense=True`: its steps also compute their dense
        output (a step is otherwise the same). For a loop that keeps the polynomials
        itself and writes the outputs of `self` (the continuous adjoints' tape)."""
        return dataclasses.replace(self, save_dense=True)


def _step_times(state: State) -> jax.Array:
    """`(t, t_next)`: what `Integrator.inverse` records per step."""
    return jnp.stack([state.t, state.t_next])


def _scalars(state: State):
    """The state less `y` and the solver state, packed (see `odeckpt._core.pack`)."""
    return pack({k: v for k, v in vars(state).items() if k not in ("y", "solver_state")})


_LIGHT_REPLAY_BYTES = SMALL_STATE_BYTES
"""The largest state replayed without error control: the loops' "small state", whose
window of checkpoint records is full. A state whose record's 53 bytes of scalars tip it
over gets both this and the loops' skipping of rejected steps, which is harmless."""


def _light_replay(problem: Problem, state: State) -> bool:
    """Whether a replayed step skips error control: with a `replayable` controller, for a
    state of at most `_LIGHT_REPLAY_BYTES` (`docs/performance.md`, "Gradient wall time").
    """
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.y))
    return problem.controller.replayable and size <= _LIGHT_REPLAY_BYTES
