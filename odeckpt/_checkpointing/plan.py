"""The traced plan: the schedule decisions of `odeckpt.schedules` as int32 JAX code.

`revolve_split` and `online_init`/`online_decide` (the greedy rule, the only one
ported) make exactly the decisions of their plain-Python references, in int32 on
fixed-size arrays, so they run under `jax.jit`, `jax.vmap` and inside loop bodies. See
`docs/schedules.md`, "Where each part lives", for the references and the int32 limits.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt.schedules import SATURATION

_I32 = jnp.int32


def _int(x) -> jax.Array:
    return jnp.asarray(x, _I32)


def _next_beta(prev: jax.Array, s: jax.Array, r: jax.Array) -> jax.Array:
    """`beta(s, r)` from `prev = beta(s, r - 1)`, saturating (as `schedules.revolve_split`
    computes it)."""
    # all non-negative: truncating division is floor division, without its sign fix-up
    quotient, remainder = lax.div(prev, r), lax.rem(prev, r)
    saturate = quotient > lax.div(SATURATION - prev, s)
    value = jnp.minimum(prev + quotient * s + lax.div(remainder * s, r), SATURATION)
    return jnp.where(saturate, SATURATION, value)


def revolve_split(l, s) -> jax.Array:  # noqa: E741
    """The optimal Revolve advance distance (`odeckpt.schedules.revolve_split`).

    Args:
        l: steps to reverse, an int32 scalar; clipped to `[2, SATURATION]`.
        s: snapshots (the starting checkpoint included), an int32 scalar; clipped to
            `>= 2`.

    Returns:
        The int32 distance m, `1 <= m <= l - 1`.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    l = jnp.clip(_int(l), 2, SATURATION)  # noqa: E741
    s = jnp.maximum(_int(s), 2)

    def cond(carry):
        return carry[1] < l

    def body(carry):
        r, b0, b1, b2, _ = carry
        r = r + 1
        return r, _next_beta(b0, s, r), b0, b1, b2

    init = (_int(0), _int(1), _int(0), _int(0), _int(0))
    _, _, big, b2, b3 = lax.while_loop(cond, body, init)
    mid = big - b2
    small = mid - (b2 - b3)
    m = jnp.where(l - big <= small, b2, jnp.where(l - big - mid >= small, big, l - mid - small))
    return jnp.maximum(m, 1)


class OnlineState(eqx.Module):
    """The traced state of the greedy rule (`odeckpt.schedules.OnlineState`, as int32
    arrays).

    Attributes:
        positions: (c,) per slot, the stored position; -1 when empty.
        order: (c,) the slots by ascending position; -1 past `count`.
        count: () slots in use.
        rho: () the current repetition level.
        table: (4, c + 3) `table[k, s] = beta(s, rho - 2 + k)`, saturated.
    """

    positions: jax.Array
    order: jax.Array
    count: jax.Array
    rho: jax.Array
    table: jax.Array


def online_init(c: int) -> OnlineState:
    """The state before the first `online_decide` (`odeckpt.schedules.online_init`).

    Args:
        c: number of checkpoint slots (static), `c >= 1`.

    Returns:
        An empty `OnlineState`.
    """
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ValueError(f"c must be an int >= 1, got {c!r}")
    s = jnp.arange(c + 3, dtype=_I32)
    table = jnp.stack([jnp.zeros_like(s), jnp.zeros_like(s), jnp.ones_like(s), s + 1])
    empty = jnp.full((c,), -1, _I32)
    zero = _int(0)
    return OnlineState(empty, empty, zero, zero, table)


def _cumsum_saturated(row: jax.Array) -> jax.Array:
    return lax.associative_scan(lambda a, b: jnp.minimum(a + b, SATURATION), row)


def _level_up(state: OnlineState, i: jax.Array) -> OnlineState:
    """Raise `rho` once `beta(c, rho + 1) - 1 < i + 1`."""
    c = state.positions.shape[0]
    t = state.table
    up = t[3, c] <= i + 1
    raised = jnp.stack([t[1], t[2], t[3], _cumsum_saturated(t[3])])
    return eqx.tree_at(
        lambda st: (st.table, st.rho),
        state,
        (jnp.where(up, raised, t), state.rho + up.astype(_I32)),
    )


def _stored(state: OnlineState, i, slot, evict) -> OnlineState:
    """Store position i in `slot`, evicted from stack index `evict` (`== count`: free)."""
    c = state.positions.shape[0]
    count = jnp.minimum(state.count + 1, c)
    k = jnp.arange(c, dtype=_I32)
    after = jnp.minimum(k + 1, c - 1)

    def reorder(values, new, pad):
        kept = jnp.where(k < evict, values, values[after])
        return jnp.where(k < count - 1, kept, jnp.where(k == count - 1, new, pad))

    return eqx.tree_at(
        lambda st: (st.positions, st.order, st.count),
        state,
        (state.positions.at[slot].set(i), reorder(state.order, slot, -1), count),
    )


def _keep_or_store(state: OnlineState, i, slot, evict) -> OnlineState:
    """`_stored` where `slot >= 0`, else the state unchanged."""
    stored = _stored(state, i, jnp.maximum(slot, 0), evict)
    return jax.tree.map(lambda a, b: jnp.where(slot >= 0, a, b), stored, state)


# ----------------------------------------------------------------------------------
# The greedy rule


def _excess(d: jax.Array, s: jax.Array, table: jax.Array) -> jax.Array:
    """`V(d, s)` elementwise (the envelope excess of the reference greedy rule)."""
    t = table[:, s]
    lows = jnp.maximum(t[1] - d, 0) + jnp.maximum(t[0] - d, 0)
    return lows + jnp.maximum(d - t[2], 0) + jnp.maximum(d - t[3], 0)


def _segments(state: OnlineState, i) -> jax.Array:
    pos = state.positions[state.order]
    return jnp.concatenate([pos[1:], jnp.reshape(i, (1,))]) - pos


def _last_costs(state: OnlineState, d: jax.Array):
    """The last segment's shift gain, and the cost and allowance of merging it (q = c-1)."""
    t, rho = state.table, state.rho
    a, b = d[-2], d[-1]
    half = b * (b - 1) // 2
    two = _int(2)
    gain = rho * b - t[1, 3] + _excess(b, two, t) - half
    merge = _excess(a + b, two, t) - _excess(a, two, t) + rho * b - half
    return gain, merge, a + b <= t[3, 2]


def _greedy_costs(state: OnlineState, d: jax.Array):
    """Costs and allowances of evicting each stack index q (index 0: never)."""
    c = d.shape[0]
    t = state.table
    q = jnp.arange(c, dtype=_I32)
    s = c - q
    a = d[jnp.maximum(q - 1, 0)]
    merge = _excess(a + d, s + 1, t) - _excess(a, s + 1, t) - _excess(d, s, t) + t[1, s + 1]
    gains = _excess(d, s + 1, t) - _excess(d, s, t) - t[0, jnp.minimum(s + 2, c + 2)]
    gains = jnp.where((q >= 2) & (q <= c - 2), gains, 0)  # the ones any q > 0 uses
    after = jnp.cumsum(gains[::-1], dtype=_I32)[::-1] - gains  # sum_{q < j <= c-2} gains[j]
    last_gain, last_merge, last_ok = _last_costs(state, d)
    costs = jnp.where(q == c - 1, last_merge, merge + after + last_gain)
    allowed = jnp.where(q == c - 1, last_ok, a + d <= t[3, s + 1]) & (q >= 1)
    return costs, allowed


def _greedy_decide(state: OnlineState, i) -> tuple[OnlineState, jax.Array]:
    """The greedy rule's decision at iteration i, every eviction costed at once."""
    c = state.positions.shape[0]
    state = _level_up(state, i)
    full = state.count >= c
    if c == 1:
        slot = jnp.where(full, -1, state.count)
        return _keep_or_store(state, i, slot, state.count), slot
    d = _segments(state, i)
    costs, allowed = _greedy_costs(state, d)
    q = jnp.argmin(jnp.where(allowed, costs, SATURATION)).astype(_I32)
    store = allowed[q] & (costs[q] <= d[-1])
    slot = jnp.where(full, jnp.where(store, state.order[q], -1), state.count)
    evict = jnp.where(full, q, state.count)
    return _keep_or_store(state, i, slot, evict), slot


def online_decide(state: OnlineState, i) -> tuple[OnlineState, jax.Array]:
    """Decide whether to store state i (`odeckpt.schedules.online_decide`).

    Args:
        state: from `online_init` or the previous call.
        i: the iteration, an int32 scalar; calls must come for i = 0, 1, 2, ...

    Returns:
        `(new_state, slot)`: the int32 slot to store state i into, or -1 for no store.
    """
    return _greedy_decide(state, _int(i))
