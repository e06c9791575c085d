"""Online plans: `online_decide` and the forward pass's slots, survivors, totals and plans.

`online_decide` dispatches to the state's placement rule; the others run a whole
forward pass of n steps, and `online_plan` the backward loop from the survivors. See
`docs/schedules.md`, "Online placement".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import pairwise

from ._actions import Plan, _Builder, _finish
from ._binomial import SATURATION, _check_int, revolve_extra_cost
from ._greedy import _greedy_decide, _GreedyRunner
from ._offline import _backward
from ._placement import OnlineState, online_init
from ._wang import _wang_decide


def online_decide(state: OnlineState, i: int) -> tuple[OnlineState, int]:
    """Decide whether to store state i, for i = 0, 1, 2, ... in order.

    Args:
        state: the state from `online_init` or the previous call.
        i: the iteration (the state in hand is state i), `0 <= i < SATURATION - 1`.

    Returns:
        `(new_state, slot)`: store state i into `slot` (overwriting it), or `slot == -1`
        for no store. At i = 0 the slot is 0.

    References:
        The greedy rule: `odeckpt.schedules` ("Online placement"), after Stumm & Walther
        (2010), whose online lower bound it attains for `n < beta(c, 2)`; `"wang"`:
        Wang, Moin & Iaccarino (2009).
    """
    _check_int("i", i, 0)
    if i >= SATURATION - 1:
        raise ValueError(f"i must be < {SATURATION - 1}, got {i}")
    if state.kind == "wang":
        return _wang_decide(state, i)
    return _greedy_decide(state, i)


def _forward_slots(n: int, c: int, kind: str) -> Iterator[int]:
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

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoint slots, `c >= 1`.
        kind: the placement rule (`online_init`).

    Returns:
        Per iteration the slot (or -1: no store).
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


def _survivors(slots: Iterable[int]) -> tuple[tuple[int, int], ...]:
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


def _stack_cost(positions: list[int], n: int, c: int) -> int:
    """`2n + sum_j t(d_j, c - j)`: the cost of a run whose forward pass leaves `positions`."""
    pos = [*positions, n]
    extra = sum(revolve_extra_cost(b - a, c - j) for j, (a, b) in enumerate(pairwise(pos)))
    return 2 * n + extra


def _forward(out: _Builder, n: int, slots: Iterable[int]) -> list[tuple[int, int]]:
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
