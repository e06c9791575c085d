"""The greedy online placement rule (`kind="greedy"`, the default), and its incremental runner.

`_greedy_decide` is the reference, one decision from the state alone; `_GreedyRunner`
makes the same decisions over i = 0, 1, ... incrementally. Both share the cost terms
(`_shift_gain`, `_merge_cost`), the choice (`_greedy_pick`) and the store (`_evict`).
The rule and its measured cost: `docs/schedules.md`, "Online placement".

References:
    P. Stumm, A. Walther (2010), "New algorithms for optimal online checkpointing",
    SIAM J. Sci. Comput. 32(2):836-854 (the property the rule meets: the online lower
    bound for every `n < beta(c, 2)`; their placement rules themselves are not used).
"""

from __future__ import annotations

from ._placement import OnlineState, _level_up, _stored, online_init


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


def _cheapest_inner(inner: list[int | None]) -> tuple[int, int] | None:
    """`(cost, q)` of the cheapest allowed entry of `_inner_costs` (the earliest q on ties),
    or `None` when none is allowed."""
    allowed = [(cost, q) for q, cost in enumerate(inner, start=1) if cost is not None]
    return min(allowed, default=None)


def _greedy_pick(inner: tuple[int, int] | None, d: list[int], state: OnlineState) -> int:
    """The stack index to evict (1..c-1), or -1 to not store.

    Args:
        inner: `(cost, q)` of the cheapest eviction of an inner stack index q
            (1 <= q <= c - 2), its cost less the last segment's gain (`_inner_costs`), or
            `None` when no inner eviction is allowed.
        d: the segment lengths (`_segments`), the last one up to state i.
        state: the full state.

    Returns:
        The index whose eviction is cheapest, if that costs at most what not storing
        costs (the last segment's length); ties go to the earlier index.
    """
    last = d[-1]
    options = []
    if inner is not None:
        cost, q = inner
        options.append((cost + _shift_gain(last, 1, state), q))
    merge = _merge_cost(d[-2], last, 1, state)
    if merge is not None:
        options.append((merge, len(d) - 1))
    if not options:
        return -1
    best, q = min(options)
    return q if best <= last else -1


def _evict(state: OnlineState, i: int, q: int) -> tuple[OnlineState, int]:
    """Store state i in the slot of stack index q (evicting its checkpoint); `q < 0`: no
    store. Returns the new state and the slot (-1: no store)."""
    if q < 0:
        return state, -1
    slot = state.order[q]
    return _stored(state, i, slot, q, 0), slot


def _greedy_decide(state: OnlineState, i: int) -> tuple[OnlineState, int]:
    """The greedy rule's decision at iteration i (`online_decide` for `"greedy"`)."""
    state = _level_up(state, i)
    if state.count < state.c:
        return _stored(state, i, state.count, state.count, 0), state.count
    if state.c == 1:
        return state, -1
    d = _segments(state, i)
    return _evict(state, i, _greedy_pick(_cheapest_inner(_inner_costs(state, d)), d, state))


class _GreedyRunner:
    """`_greedy_decide` over i = 0, 1, ..., incrementally: the same decisions, exactly.

    A deliberate fast path (`online_slots` runs the rule up to `max_steps` when a
    checkpointed solve is traced): most iterations are O(1) instead of O(c). See
    `docs/schedules.md`, "Online placement" (the incremental runner).
    """

    def __init__(self, c: int):
        self.state = online_init(c, "greedy")
        self.d: list[int] = []
        self.prefix = [0] * (c + 1)  # prefix[k] = sum_{1 <= j < k} G[j]
        self.best: list[tuple[int, int] | None] = [None] * c  # (min key[1..q], first argmin)

    def decide(self, i: int) -> int:
        """The slot to store state i into (-1: none); calls come for i = 0, 1, 2, ..."""
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
        q = _greedy_pick(self._cheapest_inner(), self.d, state)
        self.state, slot = _evict(state, i, q)
        if q >= 0:
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

    def _cheapest_inner(self) -> tuple[int, int] | None:
        """`_cheapest_inner(_inner_costs(state, d))`, from the running minimum of `key`."""
        c = self.state.c
        best = self.best[c - 2] if c >= 3 else None
        if best is None:
            return None
        key, q = best
        return key + self.prefix[c - 1], q
