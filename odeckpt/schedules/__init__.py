"""Checkpointing schedules for reversing a chain of steps: offline Revolve, online placement.

This module is pure Python (it does not import JAX). It is the reference for the traced
integer bookkeeping in `odeckpt._schedule_jax`, which must make the same decisions.

## Definitions

- A run has `n` steps. *State i* is the state after i steps (state 0 is the initial
  state). *Step i* maps state i to state i + 1.
- `c` is the number of checkpoint slots. It counts *every* stored state, the initial one
  included (as diffrax's `checkpoints` does).
- `beta(c, r) = C(c + r, c)`, and `beta(., r) = 0` for `r < 0`. For n steps and c
  checkpoints, the *repetition number* r is the least r with `beta(c, r) >= n`; the fewest
  extra (non-taped) step evaluations of a reversal is
  `t(n, c) = r*n - beta(c + 1, r - 1)`.
- A full reversal costs `n + t(n, c)` step evaluations. The n counts the *taped*
  evaluations: each step i is evaluated once more immediately before it is reversed, as
  part of its VJP. `t(n, c)` counts the plain advances, the initial forward sweep
  included. E.g. n = 1 costs 1; c = 1, n = 2 costs 3 (advance 0 -> 1, tape step 1,
  restore 0, tape step 0).

## Execution model

*Forward pass* (n unknown while it runs). At each iteration i = 0, 1, 2, ... the engine
holds state i and calls `online_decide(state, i)`, which answers a slot in `[0, c)`
("store state i into that slot, overwriting what it held") or -1 ("do not store"). At
i = 0 it always stores. Then the engine performs step i. The loop ends after n steps.

*Backward pass* (n now known). The engine holds the stored checkpoints as a stack sorted
by position, `p_0 = 0 < p_1 < ... < p_m`, and `b = n` (the next step to reverse is
`b - 1`). With `p` the top position, it loops:

- if `p == b - 1`: restore p (unless it is the state in hand), tape and reverse step
  `b - 1`, `b -= 1`, pop the top;
- else, with `l = b - p` and `s = (c - stack size) + 1` (the free slots plus the top's
  own): if `s == 1`, advance from p to `b - 1`, tape and reverse step `b - 1`, `b -= 1`
  (the top stays); otherwise advance `m = revolve_split(l, s)` steps from p and push
  `p + m` (the state in hand is now `p + m`).

The loop ends when the stack is empty. From the stack `[0]` with `b = n` (no separate
forward pass) it *is* the offline Revolve schedule, of cost `n + t(n, c)` exactly
(`offline_plan`). Online (`online_plan`) the cost is the n forward advances plus the
backward loop from the forward pass's surviving checkpoints.

## Cost of an online schedule

From a stack with segment lengths `d_j = p_{j+1} - p_j` (`p_{m+1} = n`), the backward
loop reverses segment j with `c - j` snapshots, optimally, so an online schedule costs
`2n + sum_j t(d_j, c - j)`. Even knowing n in advance, no schedule of this model can do
better than `online_lower_bound(n, c) = 2n + G(n, c)`, where `G(n, c)` is the sum of the
n smallest marginal costs `r(e, s)` (e = 2, 3, ... within a segment of s snapshots,
s = 1, ..., c; the first step of a segment is free). Since the forward pass evaluates
step n - 1 for nothing and cannot anticipate n, the offline optimum `n + t(n, c)` is out
of reach: `online_lower_bound(n, c) / optimal_total(n, c)` is as large as 1.4 (c = 2,
n = 3) and tends to 1 as n grows.

## Online placement

`kind="greedy"` (the default) keeps the c stored positions and, at each iteration with
every slot in use, picks the cheapest of: not storing, or storing state i in place of the
checkpoint at stack index q (1 <= q < c), where the cost of a choice is the increase of
the backward cost `sum_j t(d_j, c - j)` of the configuration for `n = i + 1`. Ties go to
storing, then to the earliest q. Storing at q merges segments q - 1 and q and gives every
later segment one more snapshot. Each `t(d, s)` is convex and piecewise linear in d; the
rule evaluates it through its pieces at the repetition levels `rho - 2 .. rho + 2`
around the current level `rho` (the least rho with `beta(c, rho + 1) - 1 >= i + 1`), a
lower envelope that is exact for every segment whose own repetition number lies in that
window, and exactly as `d(d - 1)/2` for the last segment (one snapshot). A merge whose
segment of s snapshots would exceed `beta(s, rho + 1)` is not considered, so that merged
segments stay where the envelope is exact. The per-iteration work is O(c) integer
operations on fixed-size arrays.

The published placement rules of Stumm & Walther (2010), Algorithms I and II, could not be
recovered for this module, so this rule is our own design. It meets the headline property
of their Algorithm I: for every `n < beta(c, 2)` its configuration attains
`online_lower_bound(n, c)` (checked in the tests for c <= 12 and c = 16, 32, 64).
Beyond, measured for n <= 10^5 and c in 2..12, 16, 32, 64, 128: at most 10.3% above the
bound for c = 2, 5.5% for c = 3 and 5% for c >= 4; against the offline optimum, for
n >= 100, within 8.7% (c = 2), 6.5% (c = 3) and 5% (c >= 4).

`kind="wang"` is the dynamic checkpointing of Wang, Moin & Iaccarino (2009): every state
is stored; a full memory evicts the latest *dispensable* checkpoint (one with a lower
level than a later checkpoint), else the most recent checkpoint, whose level the new one
inherits plus one. It is kept as a baseline; on this cost model it is worse than
`"greedy"`.

## Known number of steps

With fixed step sizes the number of steps is known before the forward pass runs.
`known_slots` then stores where Revolve's first sweep would (or where the greedy rule
would, if that is cheaper for this n), and `known_plan` is the resulting schedule: the
offline optimum plus the forward pass's evaluation of the last step and a few restarts
(within 0.2% of `n + t(n, c)` for n >= 1000).

## References

- A. Griewank, A. Walther (2000), "Algorithm 799: Revolve: an implementation of
  checkpointing for the reverse or adjoint mode of computational differentiation",
  ACM Trans. Math. Softw. 26(1):19-45.
- P. Stumm, A. Walther (2010), "New algorithms for optimal online checkpointing",
  SIAM J. Sci. Comput. 32(2):836-854.
- Q. Wang, P. Moin, G. Iaccarino (2009), "Minimal repetition dynamic checkpointing
  algorithm for unsteady adjoint calculation", SIAM J. Sci. Comput. 31(4):2549-2567.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import pairwise

__all__ = [
    "SATURATION",
    "KINDS",
    "Advance",
    "Store",
    "Restore",
    "Reverse",
    "Free",
    "Action",
    "Plan",
    "OnlineState",
    "beta",
    "repetition_number",
    "revolve_extra_cost",
    "optimal_total",
    "online_lower_bound",
    "revolve_split",
    "offline_plan",
    "online_init",
    "online_decide",
    "online_positions",
    "online_total",
    "online_plan",
    "known_slots",
    "known_plan",
    "validate",
]

SATURATION = 2**30 - 1
"""Cap of the saturating binomials (`revolve_split`, `online_decide`): lengths and step
counts must stay below it, so that the int32 port never overflows."""

KINDS = ("greedy", "wang")
"""The online placement rules; `"default"` is an alias of `"greedy"`."""


# ----------------------------------------------------------------------------------
# Binomial arithmetic


def _check_int(name: str, value: object, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def beta(c: int, r: int) -> int:
    """The binomial `beta(c, r) = C(c + r, c)`: steps reversible with c checkpoints and
    r repetitions.

    Args:
        c: number of checkpoints, `c >= 0`.
        r: number of repetitions; `beta(c, r) = 0` for `r < 0`.

    Returns:
        The exact (unbounded) integer.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    _check_int("c", c, 0)
    _check_int("r", r)
    return 0 if r < 0 else math.comb(c + r, c)


def repetition_number(n: int, c: int) -> int:
    """The least r with `beta(c, r) >= n`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        The repetition number r (0 for n <= 1).
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    if c == 1:
        return max(n - 1, 0)
    r, b = 0, 1
    while b < n:
        r += 1
        b = b * (c + r) // r
    return r


def revolve_extra_cost(n: int, c: int) -> int:
    """The fewest plain (non-taped) step evaluations of a reversal, `t(n, c)`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints (the initial state included), `c >= 1`.

    Returns:
        `r*n - beta(c + 1, r - 1)` with r the repetition number.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    r = repetition_number(n, c)
    return r * n - beta(c + 1, r - 1)


def optimal_total(n: int, c: int) -> int:
    """The offline optimum of a full reversal: `n + t(n, c)` step evaluations.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        Taped plus plain evaluations of the optimal (Revolve) schedule.
    """
    return n + revolve_extra_cost(n, c)


def online_lower_bound(n: int, c: int) -> int:
    """The fewest step evaluations of any forward-then-reverse schedule of n steps.

    A schedule of the execution model (module docstring) evaluates every step once on the
    forward pass, then runs the backward loop from the checkpoints that survive; this is
    the least total over every choice of surviving checkpoints, i.e. even knowing n in
    advance: `2n + G(n, c)`, with `G` the sum of the n smallest segment marginal costs.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        The bound, `>= optimal_total(n, c) + 1` for `n >= 1`.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    total, taken, rho = 0, 0, 0
    while taken < n:
        # Marginal costs <= rho: beta(s, rho) in a segment of s snapshots, summed over s.
        upto = min(n, beta(c, rho + 1) - 1)
        total += rho * (upto - taken)
        taken, rho = upto, rho + 1
    return 2 * n + total


def _next_beta(prev: int, s: int, r: int) -> int:
    """`beta(s, r)` from `prev = beta(s, r - 1)`, saturating at `SATURATION`.

    Uses `beta(s, r) = prev + prev*s/r`, the division split so that no intermediate
    exceeds int32 (the same operations run in `odeckpt._schedule_jax`).
    """
    quotient, remainder = divmod(prev, r)
    if quotient > (SATURATION - prev) // s:
        return SATURATION
    return min(prev + quotient * s + (remainder * s) // r, SATURATION)


def revolve_split(l: int, s: int) -> int:  # noqa: E741
    """The optimal advance distance m of Revolve: reversing l steps from a checkpoint with
    s snapshots (the checkpoint itself counted), advance m steps and store.

    Reversing the remaining `l - m` steps with `s - 1` snapshots, then the first m with s,
    costs `t(l, s)` in all. The distance follows from O(1) binomials at the repetition
    number r of `(l, s)`, found by a short loop over r with saturating integers.

    Args:
        l: steps to reverse, `2 <= l <= SATURATION`.
        s: snapshots, `s >= 2`.

    Returns:
        m with `1 <= m <= l - 1`.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve (the `numforw`/`adjust`
        binomial split).
    """
    _check_int("l", l, 2)
    _check_int("s", s, 2)
    if l > SATURATION:
        raise ValueError(f"l must be <= {SATURATION}, got {l}")
    return _split(l, s)


def _split(l: int, s: int) -> int:  # noqa: E741
    """`revolve_split` without the argument checks."""
    # b0..b3 = beta(s, r), beta(s, r-1), beta(s, r-2), beta(s, r-3).
    r, b0, b1, b2, b3 = 0, 1, 0, 0, 0
    while b0 < l:
        r += 1
        b0, b1, b2, b3 = _next_beta(b0, s, r), b0, b1, b2
    big = b1  # beta(s, r-1)
    mid = b1 - b2  # beta(s-1, r-1)
    small = mid - (b2 - b3)  # beta(s-2, r-1)
    if l - big <= small:
        m = b2  # beta(s, r-2)
    elif l - big - mid >= small:
        m = big
    else:
        m = l - mid - small
    return max(m, 1)


# ----------------------------------------------------------------------------------
# Actions and plans


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


Action = Advance | Store | Restore | Reverse | Free


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
        taped: taped evaluations (n).
        total: `forward_evaluations + backward_advances + taped`.
        max_live: the most checkpoints held at once.
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


@dataclass
class _Builder:
    """Accumulates actions and their counts (mutable; internal)."""

    c: int
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


def _reverse_from(out: _Builder, position: int, slot: int, b: int) -> None:
    """Reverse steps b - 1, ..., position + 1, each by advancing from checkpoint `position`
    (the `s == 1` branch of the backward loop, repeated)."""
    actions, restore = out.actions, Restore(position, slot)
    if out.current != position:
        actions.append(restore)
    for step in range(b - 1, position, -1):
        if step < b - 1:
            actions.append(restore)
        actions.append(Advance(position, step))
        actions.append(Reverse(step))
    count = b - 1 - position
    out.advances += count * (count + 1) // 2
    out.taped += count
    out.current = None


def _backward(out: _Builder, stack: list[tuple[int, int]], n: int, c: int) -> None:
    """Run the backward loop (module docstring) from `stack` of (position, slot).

    A pushed checkpoint takes the smallest free slot.
    """
    used = {slot for _, slot in stack}
    free = [k for k in range(c) if k not in used]  # ascending: a valid heap
    b = n
    while stack and b > 0:
        position, slot = stack[-1]
        out.restore(position, slot)
        if position == b - 1:
            out.reverse(position)
            out.free(position, slot)
            heapq.heappush(free, slot)
            del stack[-1]
            b -= 1
        elif len(stack) == c:  # one snapshot: b - 1, ..., position + 1 from position
            _reverse_from(out, position, slot, b)
            b = position + 1
        else:
            target = position + _split(b - position, c - len(stack) + 1)
            out.advance(target)
            new_slot = heapq.heappop(free)
            out.store(target, new_slot)
            stack.append((target, new_slot))


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
    )


def offline_plan(n: int, c: int) -> Plan:
    """The optimal offline (Revolve) schedule: the backward loop from the stack `[0]`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.

    Returns:
        A `Plan` with `total == optimal_total(n, c)`.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    out = _Builder(c)
    if n > 0:
        out.store(0, 0)
        _backward(out, [(0, 0)], n, c)
    return _finish(out, n, c, forward_length=0, forward=0)


# ----------------------------------------------------------------------------------
# Online placement: state


@dataclass(frozen=True)
class OnlineState:
    """The online placement's state: fixed-size integer arrays and a few ints.

    Attributes:
        kind: the placement rule, one of `KINDS`.
        positions: per slot, the position stored there; -1 when empty.
        order: the slots by ascending position (stack order), -1 past `count`.
        count: slots in use.
        rho: `"greedy"`: the current repetition level, the least rho with
            `beta(c, rho + 1) - 1 >= i + 1`.
        table: `"greedy"`: `table[k][s] = beta(s, rho - 2 + k)`, k = 0..3,
            s = 0..c + 2, saturated at `SATURATION`.
        levels: `"wang"`: per stack index, the checkpoint's level.
    """

    kind: str
    positions: tuple[int, ...]
    order: tuple[int, ...]
    count: int
    rho: int
    table: tuple[tuple[int, ...], ...]
    levels: tuple[int, ...]

    @property
    def c(self) -> int:
        return len(self.positions)


def _cumsum_saturated(row: tuple[int, ...]) -> tuple[int, ...]:
    out, total = [], 0
    for value in row:
        total = min(total + value, SATURATION)
        out.append(total)
    return tuple(out)


def _initial_table(c: int) -> tuple[tuple[int, ...], ...]:
    zeros = (0,) * (c + 3)
    return (zeros, zeros, (1,) * (c + 3), tuple(range(1, c + 4)))


def online_init(c: int, kind: str = "greedy") -> OnlineState:
    """The state before the first `online_decide`.

    Args:
        c: number of checkpoint slots, `c >= 1`.
        kind: `"greedy"` (alias `"default"`) or `"wang"`.

    Returns:
        An empty `OnlineState`.
    """
    _check_int("c", c, 1)
    kind = "greedy" if kind == "default" else kind
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS + ('default',)}, got {kind!r}")
    empty = (-1,) * c
    return OnlineState(kind, empty, empty, 0, 0, _initial_table(c), (0,) * c)


def _level_up(state: OnlineState, i: int) -> OnlineState:
    """Raise `rho` once `beta(c, rho + 1) - 1 < i + 1` (at most once per iteration)."""
    table = state.table
    if table[3][state.c] > i + 1:
        return state
    table = (table[1], table[2], table[3], _cumsum_saturated(table[3]))
    return OnlineState(
        state.kind, state.positions, state.order, state.count, state.rho + 1, table,
        state.levels,
    )  # fmt: skip


def _stored(state: OnlineState, i: int, slot: int, evict: int, level: int) -> OnlineState:
    """The state after storing position i in `slot`, evicted from stack index `evict`
    (`evict == count` when the slot was free)."""
    positions = state.positions[:slot] + (i,) + state.positions[slot + 1 :]
    c, count = state.c, min(state.count + 1, state.c)
    order = state.order[:evict] + state.order[evict + 1 : count] + (slot,)
    levels = state.levels[:evict] + state.levels[evict + 1 : count] + (level,)
    pad = (-1,) * (c - count)
    return OnlineState(
        state.kind, positions, order + pad, count, state.rho, state.table,
        levels + (0,) * (c - count),
    )  # fmt: skip


# ----------------------------------------------------------------------------------
# Online placement: the greedy rule


def _excess(d: int, s: int, table: tuple[tuple[int, ...], ...]) -> int:
    """`V(d, s)`: `t(d, s)` minus its piece at level rho, over the window of levels.

    The sum of the hinges `(beta(s, rho-1) - d)+`, `(beta(s, rho-2) - d)+`,
    `(d - beta(s, rho))+` and `(d - beta(s, rho+1))+` (the rows are nondecreasing).
    """
    low = table[1][s]
    if d < low:
        lower = table[0][s]
        return low - d + (lower - d if d < lower else 0)
    up = table[2][s]
    if d <= up:
        return 0
    upper = table[3][s]
    return d - up + (d - upper if d > upper else 0)


def _segments(state: OnlineState, i: int) -> list[int]:
    """Segment lengths between stacked positions, the last one up to state i."""
    pos = [state.positions[slot] for slot in state.order[: state.count]]
    return [b - a for a, b in zip(pos, pos[1:] + [i], strict=True)]


def _shift_gain(d: int, s: int, state: OnlineState) -> int:
    """Change of the backward cost of a segment of length d when s -> s + 1."""
    table = state.table
    if s == 1:  # exact t(d, 1) = d(d-1)/2; the envelope for s = 2
        return state.rho * d - table[1][3] + _excess(d, 2, table) - d * (d - 1) // 2
    return _excess(d, s + 1, table) - _excess(d, s, table) - table[0][s + 2]


def _merge_cost(a: int, b: int, s: int, state: OnlineState) -> int | None:
    """Change of cost when segments a (s + 1 snapshots) and b (s) merge into one of s + 1.

    `None` (not allowed) when the merged segment would leave the window of levels, i.e.
    `a + b > beta(s + 1, rho + 1)`: there the envelope underestimates `t`.
    """
    table = state.table
    if a + b > table[3][s + 1]:
        return None
    merged = _excess(a + b, s + 1, table) - _excess(a, s + 1, table)
    if s == 1:
        return merged + state.rho * b - b * (b - 1) // 2
    return merged - _excess(b, s, table) + table[1][s + 1]


def _inner_costs(state: OnlineState, d: list[int]) -> list[int | None]:
    """For q = 1..c-2: the cost of evicting stack index q, less the last segment's gain
    (`None`: not allowed)."""
    c = state.c
    out: list[int | None] = [None] * max(c - 2, 0)
    suffix = 0
    for q in range(c - 2, 0, -1):
        merge = _merge_cost(d[q - 1], d[q], c - q, state)
        out[q - 1] = None if merge is None else merge + suffix
        suffix += _shift_gain(d[q], c - q, state)
    return out


def _greedy_pick(inner: list[int | None], d: list[int], state: OnlineState) -> int:
    """The stack index to evict (1..c-1), or -1 to not store, given `_inner_costs`."""
    last = d[-1]
    gain = _shift_gain(last, 1, state)
    options = [(cost + gain, q) for q, cost in enumerate(inner, start=1) if cost is not None]
    merge = _merge_cost(d[-2], last, 1, state)
    if merge is not None:
        options.append((merge, len(d) - 1))
    if not options:
        return -1
    best, q = min(options)
    return q if best <= last else -1


def _greedy_decide(state: OnlineState, i: int) -> tuple[OnlineState, int]:
    state = _level_up(state, i)
    if state.count < state.c:
        return _stored(state, i, state.count, state.count, 0), state.count
    if state.c == 1:
        return state, -1
    d = _segments(state, i)
    q = _greedy_pick(_inner_costs(state, d), d, state)
    if q < 0:
        return state, -1
    slot = state.order[q]
    return _stored(state, i, slot, q, 0), slot


# ----------------------------------------------------------------------------------
# Online placement: Wang, Moin & Iaccarino


def _wang_decide(state: OnlineState, i: int) -> tuple[OnlineState, int]:
    c = state.c
    if state.count < c:
        return _stored(state, i, state.count, state.count, 0), state.count
    if c == 1:
        return state, -1
    levels, top = state.levels, c - 1
    evict, highest = -1, levels[top]
    for j in range(top - 1, 0, -1):
        if evict < 0 and levels[j] < highest:
            evict = j
        highest = max(highest, levels[j])
    level = 0 if evict > 0 else levels[top] + 1
    evict = evict if evict > 0 else top
    slot = state.order[evict]
    return _stored(state, i, slot, evict, level), slot


def online_decide(state: OnlineState, i: int) -> tuple[OnlineState, int]:
    """Decide whether to store state i, for i = 0, 1, 2, ... in order.

    Args:
        state: the state from `online_init` or the previous call.
        i: the iteration (the state in hand is state i), `0 <= i < SATURATION - 1`.

    Returns:
        `(new_state, slot)`: store state i into `slot` (overwriting it), or `slot == -1`
        for no store. At i = 0 the slot is 0.

    References:
        Module docstring (greedy rule); Wang, Moin & Iaccarino (2009) for `"wang"`.
    """
    _check_int("i", i, 0)
    if i >= SATURATION - 1:
        raise ValueError(f"i must be < {SATURATION - 1}, got {i}")
    if state.kind == "wang":
        return _wang_decide(state, i)
    return _greedy_decide(state, i)


class _GreedyRunner:
    """`online_decide` for `"greedy"` over i = 0, 1, ..., incrementally.

    The cost of evicting stack index q < c - 1 is `M[q] + sum_{q < j < c-1} G[j]` plus the
    last segment's gain (`_inner_costs`), i.e. `key[q] + P[c-1]` with `P` the prefix sums
    of `G` and `key[q] = M[q] - P[q+1]`. A store at q* changes `M`, `G` and `key` only from
    index q* - 1 on, so only that tail (and the running minimum of `key`) is recomputed.
    The decisions are those of `online_decide`, exactly (same integers).
    """

    def __init__(self, c: int):
        self.state = online_init(c, "greedy")
        self.d: list[int] = []
        self.key = [0] * c  # key[q], q = 1..c-2
        self.prefix = [0] * (c + 1)  # prefix[k] = sum_{1 <= j < k} G[j]
        self.best: list[tuple[int, int] | None] = [None] * c  # (min key[1..q], first argmin)

    def decide(self, i: int) -> int:
        state = _level_up(self.state, i)
        refresh = state is not self.state
        self.state = state
        if state.count < state.c or state.c == 1:
            self.state, slot = _greedy_decide(state, i)
            if self.state.count == state.c and state.c > 1:
                self.d = _segments(self.state, i + 1)
                self._recompute(1)
            return slot
        if refresh:
            self._recompute(1)
        self.d[-1] = i - state.positions[state.order[-1]]
        q = self._pick()
        if q < 0:
            return -1
        slot = state.order[q]
        self.state = _stored(state, i, slot, q, 0)
        d = self.d
        self.d = d[: q - 1] + [d[q - 1] + d[q]] + d[q + 1 :] + [0]
        self._recompute(max(q - 1, 1))
        return slot

    def _recompute(self, lo: int) -> None:
        c, d, state = self.state.c, self.d, self.state
        for q in range(lo, c - 1):
            self.prefix[q + 1] = self.prefix[q] + _shift_gain(d[q], c - q, state)
            merge = _merge_cost(d[q - 1], d[q], c - q, state)
            key = None if merge is None else merge - self.prefix[q + 1]
            best = self.best[q - 1] if q > 1 else None
            if key is not None and (best is None or key < best[0]):
                best = (key, q)
            self.best[q] = best

    def _pick(self) -> int:
        c, d, state = self.state.c, self.d, self.state
        last = d[-1]
        options = []
        best = self.best[c - 2] if c >= 3 else None
        if best is not None:
            key, q = best
            options.append((key + self.prefix[c - 1] + _shift_gain(last, 1, state), q))
        merge = _merge_cost(d[-2], last, 1, state)
        if merge is not None:
            options.append((merge, c - 1))
        if not options:
            return -1
        cost, q = min(options)
        return q if cost <= last else -1


def _forward_slots(n: int, c: int, kind: str):
    """Yield the slot decided at each iteration i = 0..n-1."""
    if online_init(c, kind).kind == "greedy":
        runner = _GreedyRunner(c)
        for i in range(n):
            yield runner.decide(i)
        return
    state = online_init(c, kind)
    for i in range(n):
        state, slot = online_decide(state, i)
        yield slot


def online_slots(n: int, c: int, kind: str = "greedy") -> tuple[int, ...]:
    """The slot decided at each forward iteration i = 0..n-1 (-1: no store).

    What `online_decide` returns for i = 0, 1, ..., computed incrementally; the traced
    loop reads this table when it is small enough to build at trace time.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    return tuple(_forward_slots(n, c, kind))


def online_positions(n: int, c: int, kind: str = "greedy") -> tuple[tuple[int, int], ...]:
    """The checkpoints that survive an online forward pass of n steps.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.
        kind: the placement rule (`online_init`).

    Returns:
        `(position, slot)` pairs by ascending position.
    """
    _check_int("n", n, 0)
    return _survivors(_forward_slots(n, c, kind))


def _survivors(slots) -> tuple[tuple[int, int], ...]:
    """The `(position, slot)` pairs left by storing per `slots` (one entry per step)."""
    held: dict[int, int] = {}
    for i, slot in enumerate(slots):
        if slot >= 0:
            held[slot] = i
    return tuple(sorted((p, k) for k, p in held.items()))


def online_total(n: int, c: int, kind: str = "greedy") -> int:
    """The cost of `online_plan(n, c, kind)`, from the surviving checkpoints alone.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.
        kind: the placement rule (`online_init`).

    Returns:
        `2n + sum_j t(d_j, c - j)` over the segments between surviving checkpoints.
    """
    return _stack_cost([p for p, _ in online_positions(n, c, kind)], n, c)


def _forward(out: _Builder, n: int, slots) -> list[tuple[int, int]]:
    """Emit the forward pass's actions for the slot decided at each iteration; return
    the surviving (position, slot) stack."""
    held: dict[int, int] = {}
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        if out.current is not None and i > out.current:
            out.advance(i)
        if slot in held:
            out.free(held[slot], slot)
        out.store(i, slot)
        held[slot] = i
    out.advance(n)
    return sorted((p, k) for k, p in held.items())


def online_plan(n: int, c: int, kind: str = "greedy") -> Plan:
    """An online schedule: the forward pass's decisions, then the backward loop.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.
        kind: the placement rule (`online_init`).

    Returns:
        A `Plan` whose forward pass is `actions[:forward_length]` (n evaluations).
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    out = _Builder(c)
    if n == 0:
        _ = online_init(c, kind)  # checks kind
        return _finish(out, n, c, forward_length=0, forward=0)
    stack = _forward(out, n, _forward_slots(n, c, kind))
    forward_length = len(out.actions)
    _backward(out, stack, n, c)
    return _finish(out, n, c, forward_length=forward_length, forward=n)


# ----------------------------------------------------------------------------------
# Placement when the number of steps is known in advance


def _revolve_positions(n: int, c: int) -> list[int]:
    """The checkpoints of Revolve's first sweep over n steps: from the stack `[0]`, push
    `p + revolve_split(n - p, s)` while a split is possible (see `_backward`)."""
    stack = [0]
    while stack[-1] < n - 1 and len(stack) < c:
        p = stack[-1]
        stack.append(p + _split(n - p, c - len(stack) + 1))
    return stack


def _stack_cost(positions: list[int], n: int, c: int) -> int:
    """`2n + sum_j t(d_j, c - j)`: the cost of a run whose forward pass leaves `positions`."""
    pos = [*positions, n]
    extra = sum(revolve_extra_cost(b - a, c - j) for j, (a, b) in enumerate(pairwise(pos)))
    return 2 * n + extra


KNOWN_GREEDY_LIMIT = 2**19
"""`known_slots` also tries the greedy placement while `n * c` is at most this."""


def known_slots(n: int, c: int) -> tuple[int, ...]:
    """The slot to store at each forward iteration i = 0..n-1 when n is known in advance.

    With fixed step sizes the number of steps is known before the forward pass, so the
    forward pass can store where the offline Revolve schedule's first sweep would (the
    states `_revolve_positions(n, c)`, in slots 0, 1, ...) instead of guessing online.
    The backward loop is the same as for online plans, so the cost is
    `2n + sum_j t(d_j, c - j)` over the stored positions: it exceeds the offline optimum
    `n + t(n, c)` only by the forward pass's evaluation of the last step and by
    restarting the reversal from the stored states (measured: within 0.2% for n >= 1000,
    c <= 128). The greedy online placement is used instead where it is cheaper (some
    small n), compared while `n * c <= KNOWN_GREEDY_LIMIT`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.

    Returns:
        Per iteration the slot (or -1: no store), as `online_slots` returns.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    if n == 0:
        return ()
    positions = _revolve_positions(n, c)
    slots = [-1] * n
    for slot, p in enumerate(positions):
        slots[p] = slot
    if n * c <= KNOWN_GREEDY_LIMIT:
        greedy = online_slots(n, c)
        kept = [p for p, _ in _survivors(greedy)]
        if _stack_cost(kept, n, c) < _stack_cost(positions, n, c):
            return greedy
    return tuple(slots)


def known_plan(n: int, c: int) -> Plan:
    """The schedule of a run whose step count n is known before the forward pass.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.

    Returns:
        A `Plan` whose forward pass stores per `known_slots(n, c)` (n evaluations),
        followed by the backward loop.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    out = _Builder(c)
    if n == 0:
        return _finish(out, n, c, forward_length=0, forward=0)
    stack = _forward(out, n, known_slots(n, c))
    forward_length = len(out.actions)
    _backward(out, stack, n, c)
    return _finish(out, n, c, forward_length=forward_length, forward=n)


# ----------------------------------------------------------------------------------
# Validation


@dataclass
class _Replay:
    """The state of a replayed plan (mutable; internal)."""

    plan: Plan
    current: int | None = 0
    live: dict = field(default_factory=dict)
    next_step: int = 0
    forward: int = 0
    backward: int = 0
    taped: int = 0
    max_live: int = 0


def _fail(k: int, action: object, message: str) -> ValueError:
    return ValueError(f"invalid plan at action {k} ({action!r}): {message}")


def _replay_advance(rp: _Replay, k: int, a: Advance) -> None:
    in_forward = k < rp.plan.forward_length
    limit = rp.plan.n if in_forward else rp.next_step
    if rp.current != a.start:
        raise _fail(k, a, f"advance starts from the state in hand ({rp.current})")
    if not a.start < a.stop <= limit:
        raise _fail(k, a, f"advance must end after its start and at most at state {limit}")
    if in_forward:
        rp.forward += a.stop - a.start
    else:
        rp.backward += a.stop - a.start
    rp.current = a.stop


def _replay_slot_range(rp: _Replay, k: int, a: Store | Free | Restore) -> int | None:
    if not 0 <= a.slot < rp.plan.c:
        raise _fail(k, a, f"slot out of range [0, {rp.plan.c})")
    return rp.live.get(a.slot)


def _replay_store(rp: _Replay, k: int, a: Store) -> None:
    held = _replay_slot_range(rp, k, a)
    if rp.current != a.position:
        raise _fail(k, a, f"stores a state not in hand ({rp.current})")
    if held is not None:
        raise _fail(k, a, f"slot holds state {held}; free it first")
    rp.live[a.slot] = a.position
    rp.max_live = max(rp.max_live, len(rp.live))


def _replay_free(rp: _Replay, k: int, a: Free) -> None:
    held = _replay_slot_range(rp, k, a)
    if held != a.position:
        raise _fail(k, a, f"slot holds {held}, not state {a.position}")
    del rp.live[a.slot]


def _replay_restore(rp: _Replay, k: int, a: Restore) -> None:
    held = _replay_slot_range(rp, k, a)
    if held != a.position:
        raise _fail(k, a, f"slot holds {held}, not state {a.position}")
    if k < rp.plan.forward_length:
        raise _fail(k, a, "restore during the forward pass")
    rp.current = a.position


def _replay_reverse(rp: _Replay, k: int, a: Reverse) -> None:
    if k < rp.plan.forward_length:
        raise _fail(k, a, "reverse during the forward pass")
    if a.step != rp.next_step:
        raise _fail(k, a, f"expected to reverse step {rp.next_step}")
    if rp.current != a.step:
        raise _fail(k, a, f"state in hand is {rp.current}, not {a.step}")
    rp.taped += 1
    rp.next_step -= 1
    rp.current = None


def _check_counts(rp: _Replay) -> None:
    plan = rp.plan
    if rp.next_step != -1:
        raise ValueError(f"invalid plan: steps {rp.next_step}..0 were never reversed")
    if plan.forward_length and rp.forward != plan.n:
        raise ValueError(f"invalid plan: the forward pass evaluates {rp.forward} != n steps")
    found = (rp.forward, rp.backward, rp.taped, rp.max_live)
    claimed = (plan.forward_evaluations, plan.backward_advances, plan.taped, plan.max_live)
    if found != claimed or plan.total != sum(found[:3]):
        raise ValueError(
            f"invalid plan: counts (forward, backward, taped, max_live) = {found}, plan "
            f"says {claimed} with total {plan.total}"
        )


def validate(plan: Plan) -> None:
    """Replay a plan and check it reverses every step, correctly and within c slots.

    Checks: each step is reversed exactly once, in the order n-1, ..., 0, from the state
    in hand; every advance starts from the state in hand; restores and frees name a live
    checkpoint; stores use a free slot in `[0, c)` (so never more than c are live); the
    forward pass (online plans) only advances and stores, through exactly n steps; the
    plan's counts match the replay.

    Args:
        plan: the plan to check.

    Raises:
        ValueError: naming the first offending action, or the mismatching counts.
    """
    rp = _Replay(plan, next_step=plan.n - 1, current=0 if plan.n else None)
    for k, action in enumerate(plan.actions):
        replay = _REPLAYS.get(type(action))
        if replay is None:
            raise _fail(k, action, "unknown action")
        replay(rp, k, action)
    _check_counts(rp)


_REPLAYS = {
    Advance: _replay_advance,
    Reverse: _replay_reverse,
    Store: _replay_store,
    Free: _replay_free,
    Restore: _replay_restore,
}
