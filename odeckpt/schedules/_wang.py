"""The dynamic checkpointing rule of Wang, Moin & Iaccarino (`kind="wang"`), a baseline.

It has no traced port. See `docs/schedules.md`, "Online placement".

References:
    Q. Wang, P. Moin, G. Iaccarino (2009), "Minimal repetition dynamic checkpointing
    algorithm for unsteady adjoint calculation", SIAM J. Sci. Comput. 31(4):2549-2567.
"""

from __future__ import annotations

from ._placement import OnlineState, _stored


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
