"""Placement when the number of steps is known in advance (fixed step sizes).

See `docs/schedules.md`, "Known number of steps".
"""

from __future__ import annotations

from ._actions import Plan, _Builder, _finish
from ._binomial import _check_int, _split
from ._offline import _backward
from ._online import _forward, _stack_cost, _survivors, online_slots


def _revolve_positions(n: int, c: int) -> list[int]:
    """The checkpoints of Revolve's first sweep over n steps: from the stack `[0]`, push
    `p + revolve_split(n - p, s)` while a split is possible (see `_backward`)."""
    stack = [0]
    while stack[-1] < n - 1 and len(stack) < c:
        p = stack[-1]
        stack.append(p + _split(n - p, c - len(stack) + 1))
    return stack


KNOWN_GREEDY_LIMIT = 2**19
"""`known_slots` also tries the greedy placement while `n * c` is at most this."""


def known_slots(n: int, c: int) -> tuple[int, ...]:
    """The slot to store at each forward iteration i = 0..n-1 when n is known in advance.

    Stores where Revolve's first sweep would (or where the greedy rule would, if cheaper,
    compared while `n * c <= KNOWN_GREEDY_LIMIT`); the backward loop is that of online
    plans, so the cost is `2n + sum_j t(d_j, c - j)` over the stored positions. See
    `docs/schedules.md`, "Known number of steps".

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
