"""The backward loop of every plan and the offline (Revolve) schedule.

`_backward` runs the execution model's backward loop (`docs/schedules.md`) from a stack
of checkpoints; from `[0]` it is `offline_plan`, of cost `n + t(n, c)` exactly.

References:
    A. Griewank, A. Walther (2000), "Algorithm 799: Revolve: an implementation of
    checkpointing for the reverse or adjoint mode of computational differentiation",
    ACM Trans. Math. Softw. 26(1):19-45.
"""

from __future__ import annotations

import heapq

from ._actions import Advance, Plan, Restore, Reverse, _Builder, _finish
from ._binomial import _check_int, _split


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
    """Run the backward loop (docs/schedules.md) from `stack` of (position, slot).

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
