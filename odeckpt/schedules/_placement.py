"""The online placement's state (`OnlineState`), shared by every placement rule.

`online_init` builds the empty state; `_level_up` raises the greedy rule's repetition
level and its window of binomials; `_stored` records a store (evicting a checkpoint when
every slot is in use). The rules themselves live in `_greedy` and `_wang`, the dispatch
`online_decide` in `_online`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._binomial import SATURATION, _check_int

KINDS = ("greedy", "wang")
"""The online placement rules; `"default"` is an alias of `"greedy"`."""


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
        """The number of checkpoint slots."""
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
        state.kind,
        state.positions,
        state.order,
        state.count,
        state.rho + 1,
        table,
        state.levels,
    )


def _stored(state: OnlineState, i: int, slot: int, evict: int, level: int) -> OnlineState:
    """The state after storing position i in `slot`, evicted from stack index `evict`
    (`evict == count` when the slot was free)."""
    positions = state.positions[:slot] + (i,) + state.positions[slot + 1 :]
    c, count = state.c, min(state.count + 1, state.c)
    order = state.order[:evict] + state.order[evict + 1 : count] + (slot,)
    levels = state.levels[:evict] + state.levels[evict + 1 : count] + (level,)
    pad = (-1,) * (c - count)
    return OnlineState(
        state.kind,
        positions,
        order + pad,
        count,
        state.rho,
        state.table,
        levels + (0,) * (c - count),
    )
