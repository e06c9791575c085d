"""`validate`: execute a plan on a model of the slots and check it, action by action.

Every test of a schedule goes through it: each step reversed exactly once, in order,
from the state in hand; never more than c live checkpoints; the plan's counts exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._actions import Advance, Free, Plan, Restore, Reverse, ReverseTaped, Store, TapeStep


@dataclass
class _Execution:
    """The state of a plan being executed on a model of the slots (mutable; internal)."""

    plan: Plan
    current: int | None = 0
    live: dict = field(default_factory=dict)
    tapes: set = field(default_factory=set)  # steps whose tape is held (mixed plans)
    next_step: int = 0
    forward: int = 0
    backward: int = 0
    taped: int = 0
    max_live: int = 0


def _fail(k: int, action: object, message: str) -> ValueError:
    return ValueError(f"invalid plan at action {k} ({action!r}): {message}")


def _execute_advance(ex: _Execution, k: int, a: Advance) -> None:
    in_forward = k < ex.plan.forward_length
    limit = ex.plan.n if in_forward else ex.next_step
    if ex.current != a.start:
        raise _fail(k, a, f"advance starts from the state in hand ({ex.current})")
    if not a.start < a.stop <= limit:
        raise _fail(k, a, f"advance must end after its start and at most at state {limit}")
    if in_forward:
        ex.forward += a.stop - a.start
    else:
        ex.backward += a.stop - a.start
    ex.current = a.stop


def _holder_of_slot(ex: _Execution, k: int, a: Store | Free | Restore) -> int | None:
    if not 0 <= a.slot < ex.plan.c:
        raise _fail(k, a, f"slot out of range [0, {ex.plan.c})")
    return ex.live.get(a.slot)


def _execute_store(ex: _Execution, k: int, a: Store) -> None:
    held = _holder_of_slot(ex, k, a)
    if ex.current != a.position:
        raise _fail(k, a, f"stores a state not in hand ({ex.current})")
    if held is not None:
        raise _fail(k, a, f"slot holds state {held}; free it first")
    ex.live[a.slot] = a.position
    _held(ex, k, a)


def _held(ex: _Execution, k: int, a: Store | TapeStep) -> None:
    """Count the memory held after `a`: one unit per checkpoint, `tape_units` per tape."""
    units = len(ex.live) + ex.plan.tape_units * len(ex.tapes)
    if units > ex.plan.c:
        raise _fail(k, a, f"holds {units} units of memory, more than c = {ex.plan.c}")
    ex.max_live = max(ex.max_live, units)


def _execute_free(ex: _Execution, k: int, a: Free) -> None:
    held = _holder_of_slot(ex, k, a)
    if held != a.position:
        raise _fail(k, a, f"slot holds {held}, not state {a.position}")
    del ex.live[a.slot]


def _execute_restore(ex: _Execution, k: int, a: Restore) -> None:
    held = _holder_of_slot(ex, k, a)
    if held != a.position:
        raise _fail(k, a, f"slot holds {held}, not state {a.position}")
    if k < ex.plan.forward_length:
        raise _fail(k, a, "restore during the forward pass")
    ex.current = a.position


def _execute_reverse(ex: _Execution, k: int, a: Reverse) -> None:
    if k < ex.plan.forward_length:
        raise _fail(k, a, "reverse during the forward pass")
    if a.step != ex.next_step:
        raise _fail(k, a, f"expected to reverse step {ex.next_step}")
    if ex.current != a.step:
        raise _fail(k, a, f"state in hand is {ex.current}, not {a.step}")
    ex.taped += 1
    ex.next_step -= 1
    ex.current = None


def _execute_tape(ex: _Execution, k: int, a: TapeStep) -> None:
    if k < ex.plan.forward_length:
        raise _fail(k, a, "tape during the forward pass")
    if not 0 <= a.step <= ex.next_step or ex.current != a.step:
        raise _fail(k, a, f"tapes a step not in hand or already reversed ({ex.current})")
    if a.step in ex.tapes:
        raise _fail(k, a, "a tape of this step is already held")
    ex.tapes.add(a.step)
    ex.taped += 1
    ex.current = a.step + 1
    _held(ex, k, a)


def _execute_reverse_tape(ex: _Execution, k: int, a: ReverseTaped) -> None:
    if a.step != ex.next_step:
        raise _fail(k, a, f"expected to reverse step {ex.next_step}")
    if a.step not in ex.tapes:
        raise _fail(k, a, "no tape of this step is held")
    ex.tapes.remove(a.step)
    ex.next_step -= 1


def _check_counts(ex: _Execution) -> None:
    plan = ex.plan
    if ex.next_step != -1:
        raise ValueError(f"invalid plan: steps {ex.next_step}..0 were never reversed")
    if ex.tapes:
        raise ValueError(f"invalid plan: the tapes of steps {sorted(ex.tapes)} are never used")
    if plan.forward_length and ex.forward != plan.n:
        raise ValueError(f"invalid plan: the forward pass evaluates {ex.forward} != n steps")
    found = (ex.forward, ex.backward, ex.taped, ex.max_live)
    claimed = (plan.forward_evaluations, plan.backward_advances, plan.taped, plan.max_live)
    if found != claimed or plan.total != sum(found[:3]):
        raise ValueError(
            f"invalid plan: counts (forward, backward, taped, max_live) = {found}, plan "
            f"says {claimed} with total {plan.total}"
        )


def validate(plan: Plan) -> None:
    """Execute a plan on a model of the slots and check it reverses every step, correctly
    and within c slots.

    Checks: each step is reversed exactly once, in the order n-1, ..., 0, from the state
    in hand; every advance starts from the state in hand; restores and frees name a live
    checkpoint; stores use a free slot in `[0, c)`, and the memory held (a unit per
    checkpoint, `tape_units` per tape of a mixed plan) never exceeds c; a step is
    reversed from its tape only if a `TapeStep` of it is held, and every tape is used;
    the forward pass (online plans) only advances and stores, through exactly n steps;
    the plan's counts match the execution.

    Args:
        plan: the plan to check.

    Raises:
        ValueError: naming the first offending action, or the mismatching counts.
    """
    ex = _Execution(plan, next_step=plan.n - 1, current=0 if plan.n else None)
    for k, action in enumerate(plan.actions):
        execute = _EXECUTE.get(type(action))
        if execute is None:
            raise _fail(k, action, "unknown action")
        execute(ex, k, action)
    _check_counts(ex)


_EXECUTE = {
    Advance: _execute_advance,
    Reverse: _execute_reverse,
    Store: _execute_store,
    Free: _execute_free,
    Restore: _execute_restore,
    TapeStep: _execute_tape,
    ReverseTaped: _execute_reverse_tape,
}
