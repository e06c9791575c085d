"""Mixed (stage-storing) schedules: checkpoints that hold a state or a step's tape.

`mixed_total` and `mixed_plan` are the optimum over states and tapes, by a dynamic
programme over `G(n, m)` and `H(n, m)`; see `docs/schedules.md`, "Mixed schedules",
for the recursion and the references.
"""

from __future__ import annotations

import functools
import heapq

import numpy as np

from ._actions import Plan, _Builder, _finish
from ._binomial import _check_int

_INF = np.iinfo(np.int64).max // 4
_TAPE_FIRST = 0  # a `G` choice: tape the first step, free the start's unit
_STORE, _TAPE = 1, 2  # `H` choices


@functools.lru_cache(maxsize=16)
def _tables(n: int, budget: int, tape_units: int):
    """`(G, H, g_choice, h_choice)`, each indexed `[m, length]` for `m <= budget`,
    `length <= n`. `g_choice`: the split k, or `_TAPE_FIRST`; `h_choice`: `_STORE` or
    `_TAPE` (0 where neither is possible)."""
    g = np.full((budget + 1, n + 1), _INF, np.int64)
    h = np.full((budget + 1, n + 1), _INF, np.int64)
    g_choice = np.zeros((budget + 1, n + 1), np.int64)
    h_choice = np.zeros((budget + 1, n + 1), np.int64)
    g[:, 0] = h[:, 0] = 0
    if n >= 1:
        g[:, 1] = h[:, 1] = 1
    for m in range(budget + 1):
        _fill_row(g, h, g_choice, h_choice, m, tape_units)
    return g, h, g_choice, h_choice


def _fill_row(g, h, g_choice, h_choice, m: int, tape_units: int) -> None:
    """Row m of the tables, from the rows below it (lengths in increasing order)."""
    n = g.shape[1] - 1
    freed = m + 1 - tape_units  # units left after taping the first step of a `G`
    for length in range(2, n + 1):
        k = np.arange(1, length)
        costs = k + h[m, length - k] + g[m, k]
        best = int(np.argmin(costs))
        g[m, length], g_choice[m, length] = costs[best], best + 1
        if 0 <= freed <= m and 1 + h[freed, length - 1] < g[m, length]:
            g[m, length], g_choice[m, length] = 1 + h[freed, length - 1], _TAPE_FIRST
        if m >= 1:
            h[m, length], h_choice[m, length] = g[m - 1, length], _STORE
        # Ties go to taping: storing and then taping the first step costs the same.
        if m >= tape_units and 1 + h[m - tape_units, length - 1] <= h[m, length]:
            h[m, length], h_choice[m, length] = 1 + h[m - tape_units, length - 1], _TAPE


def _check_sizes(n: int, budget: int, tape_units: int) -> None:
    _check_int("n", n, 0)
    _check_int("budget", budget, 1)
    _check_int("tape_units", tape_units, 1)


def mixed_total(n: int, budget: int, tape_units: int) -> int:
    """The fewest step evaluations of a mixed schedule of n steps in `budget` units.

    Args:
        n: number of steps, `n >= 0`.
        budget: memory in units of one state (state 0 included, as `c` counts it),
            `budget >= 1`.
        tape_units: memory of one step's tape in the same units, `>= 1` (a state-only
            schedule is `tape_units > budget`).

    Returns:
        `H(n, budget)` (docs/schedules.md): at most `optimal_total(n, budget)`.
    """
    _check_sizes(n, budget, tape_units)
    return int(_tables(n, budget, min(tape_units, budget + 1))[1][budget, n])


def mixed_plan(n: int, budget: int, tape_units: int) -> Plan:
    """The optimal mixed schedule (docs/schedules.md) of n steps in `budget` units.

    Args:
        n: number of steps, `n >= 0`.
        budget: memory in units of one state, `budget >= 1`.
        tape_units: memory of one tape, `>= 1`.

    Returns:
        A `Plan` (offline: `forward_length == 0`) with `total == mixed_total(...)`,
        `c == budget`, `tape_units == tape_units` and `max_live` the most units held.

    References:
        Maddison (2024); Zhang & Constantinescu (2021) (docs/schedules.md).
    """
    _check_sizes(n, budget, tape_units)
    out = _Builder(budget, tape_units=tape_units)
    fits = min(tape_units, budget + 1)  # a tape larger than the budget is never made
    if n > 0:
        _emit(out, _tables(n, budget, fits), n, budget, fits)
    return _finish(out, n, budget, forward_length=0, forward=0)


def _emit(out: _Builder, tables, n: int, budget: int, tape_units: int) -> None:
    """The actions of `H(n, budget)` from state 0, by an explicit stack of tasks (the
    recursion is as deep as the number of steps)."""
    _, _, g_choice, h_choice = tables
    free = list(range(budget))  # ascending: a valid heap
    tasks: list[tuple] = [("H", 0, n, budget)]
    while tasks:
        task = tasks.pop()
        if task[0] == "G":
            _, start, length, m, slot = task
            out.restore(start, slot)
            if length == 1:
                out.reverse(start)
                out.free(start, slot)
                heapq.heappush(free, slot)
            elif g_choice[m, length] == _TAPE_FIRST:
                out.free(start, slot)
                heapq.heappush(free, slot)
                out.tape(start)
                tasks.append(("untape", start))
                tasks.append(("H", start + 1, length - 1, m + 1 - tape_units))
            else:
                k = int(g_choice[m, length])
                out.advance(start + k)
                tasks.append(("G", start, k, m, slot))
                tasks.append(("H", start + k, length - k, m))
        elif task[0] == "H":
            _, start, length, m = task
            if length == 1:
                out.reverse(start)
            elif h_choice[m, length] == _STORE:
                slot = heapq.heappop(free)
                out.store(start, slot)
                tasks.append(("G", start, length, m - 1, slot))
            else:
                out.tape(start)
                tasks.append(("untape", start))
                tasks.append(("H", start + 1, length - 1, m - tape_units))
        else:
            out.reverse_tape(task[1])
