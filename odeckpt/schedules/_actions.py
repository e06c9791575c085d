"""Actions of a schedule (`Advance`, `Store`, `Restore`, `Reverse`, `Free`; `TapeStep` and
`ReverseTaped` in mixed plans) and the `Plan`.

A `Plan` is a complete schedule, its actions in order, with its counts. `_Builder`
accumulates the actions of a plan as the offline, online and known-step planners emit
them, and `_finish` turns it into a `Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Advance:
    """Evaluate steps `start, ..., stop - 1` without taping: state start -> state stop."""

    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class Store:
    """Copy the state in hand (state `position`) into the empty slot `slot`."""

    position: int
    slot: int


@dataclass(frozen=True, slots=True)
class Restore:
    """Make state `position`, held in slot `slot`, the state in hand."""

    position: int
    slot: int


@dataclass(frozen=True, slots=True)
class Reverse:
    """Tape and reverse step `step` (one evaluation plus its VJP) from state `step`."""

    step: int


@dataclass(frozen=True, slots=True)
class Free:
    """Release slot `slot`, which holds state `position`."""

    position: int
    slot: int


@dataclass(frozen=True, slots=True)
class TapeStep:
    """Evaluate step `step` from the state in hand and keep its tape (mixed plans):
    state `step + 1` is then in hand."""

    step: int


@dataclass(frozen=True, slots=True)
class ReverseTaped:
    """Reverse step `step` from its tape, without evaluating it, and free the tape."""

    step: int


Action = Advance | Store | Restore | Reverse | Free | TapeStep | ReverseTaped


@dataclass(frozen=True)
class Plan:
    """A complete schedule and its counts.

    Attributes:
        actions: the actions in order.
        n: number of steps.
        c: number of checkpoint slots.
        forward_length: `actions[:forward_length]` is the forward pass (0 offline).
        forward_evaluations: steps evaluated by the forward pass (n online, 0 offline).
        backward_advances: plain step evaluations after the forward pass.
        taped: taped evaluations (n: `Reverse` from the state in hand, or `TapeStep`).
        total: `forward_evaluations + backward_advances + taped`.
        max_live: the most memory held at once: checkpoints, plus `tape_units` per
            tape held (mixed plans).
        tape_units: the memory of one tape, in units of one checkpoint (mixed plans;
            every other plan holds no tape).
    """

    actions: tuple[Action, ...]
    n: int
    c: int
    forward_length: int
    forward_evaluations: int
    backward_advances: int
    taped: int
    total: int
    max_live: int
    tape_units: int = 1


@dataclass
class _Builder:
    """Accumulates actions and their counts (mutable; internal). `live` counts units:
    one per checkpoint, `tape_units` per tape."""

    c: int
    tape_units: int = 1
    current: int | None = 0
    actions: list = field(default_factory=list)
    advances: int = 0
    taped: int = 0
    live: int = 0
    max_live: int = 0

    def advance(self, stop: int) -> None:
        if self.current is None or stop <= self.current:
            raise RuntimeError(f"cannot advance from {self.current} to {stop}")
        self.actions.append(Advance(self.current, stop))
        self.advances += stop - self.current
        self.current = stop

    def store(self, position: int, slot: int) -> None:
        self.actions.append(Store(position, slot))
        self.live += 1
        self.max_live = max(self.max_live, self.live)

    def free(self, position: int, slot: int) -> None:
        self.actions.append(Free(position, slot))
        self.live -= 1

    def restore(self, position: int, slot: int) -> None:
        if self.current != position:
            self.actions.append(Restore(position, slot))
            self.current = position

    def reverse(self, step: int) -> None:
        self.actions.append(Reverse(step))
        self.taped += 1
        self.current = None

    def tape(self, step: int) -> None:
        if self.current != step:
            raise RuntimeError(f"cannot tape step {step} from state {self.current}")
        self.actions.append(TapeStep(step))
        self.taped += 1
        self.current = step + 1
        self.live += self.tape_units
        self.max_live = max(self.max_live, self.live)

    def reverse_tape(self, step: int) -> None:
        self.actions.append(ReverseTaped(step))
        self.live -= self.tape_units


def _finish(out: _Builder, n: int, c: int, forward_length: int, forward: int) -> Plan:
    backward = out.advances - forward
    return Plan(
        actions=tuple(out.actions),
        n=n,
        c=c,
        forward_length=forward_length,
        forward_evaluations=forward,
        backward_advances=backward,
        taped=out.taped,
        total=forward + backward + out.taped,
        max_live=out.max_live,
        tape_units=out.tape_units,
    )
