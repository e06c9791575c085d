"""The traced schedule decisions agree with the pure-Python reference, action for action."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from odeckpt import schedules as S
from odeckpt._checkpointing import plan as J


def test_revolve_split_matches_reference_vmapped():
    ls, ss = np.meshgrid(np.arange(2, 300), np.arange(2, 12), indexing="ij")
    ls, ss = ls.ravel().astype(np.int32), ss.ravel().astype(np.int32)
    got = np.asarray(jax.jit(jax.vmap(J.revolve_split))(ls, ss))
    want = np.array([S.revolve_split(int(a), int(b)) for a, b in zip(ls, ss, strict=True)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


def test_revolve_split_large_values():
    cases = [(a, b) for a in (10**6, 10**9, S.SATURATION) for b in (2, 3, 5, 128, 10_000)]
    ls = jnp.array([a for a, _ in cases], jnp.int32)
    ss = jnp.array([b for _, b in cases], jnp.int32)
    got = np.asarray(jax.jit(jax.vmap(J.revolve_split))(ls, ss))
    np.testing.assert_array_equal(got, [S.revolve_split(a, b) for a, b in cases])


def traced_slots(n: int, c: int):
    @jax.jit
    def run():
        def body(state, i):
            return J.online_decide(state, i)

        return lax.scan(body, J.online_init(c), jnp.arange(n, dtype=jnp.int32))

    return run()


def reference(n: int, c: int):
    state, slots = S.online_init(c, "greedy"), []
    for i in range(n):
        state, slot = S.online_decide(state, i)
        slots.append(slot)
    return state, slots


def assert_same_state(traced: J.OnlineState, ref: S.OnlineState):
    np.testing.assert_array_equal(traced.positions, ref.positions)
    np.testing.assert_array_equal(traced.order, ref.order)
    assert int(traced.count) == ref.count
    assert int(traced.rho) == ref.rho
    np.testing.assert_array_equal(traced.table, ref.table)


@pytest.mark.parametrize("c, n", [(c, 2000) for c in (1, 2, 3, 4, 7, 12, 40)])
def test_online_decide_matches_reference(c, n):
    state, slots = traced_slots(n, c)
    ref_state, ref_slots = reference(n, c)
    assert slots.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(slots), ref_slots)
    assert_same_state(state, ref_state)


def to_traced(state: S.OnlineState) -> J.OnlineState:
    arr = lambda x: jnp.asarray(x, jnp.int32)
    return J.OnlineState(
        arr(state.positions),
        arr(state.order),
        arr(state.count),
        arr(state.rho),
        arr(state.table),
    )


def test_online_decide_vmaps_over_heterogeneous_states():
    c, stops = 6, (0, 3, 5, 6, 9, 40, 41, 77, 300)
    states, expected = [], []
    state = S.online_init(c, "greedy")
    for i in range(max(stops) + 1):
        if i in stops:
            states.append(to_traced(state))
            expected.append(S.online_decide(state, i)[1])
        state, _ = S.online_decide(state, i)
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    _, slots = jax.jit(jax.vmap(J.online_decide))(batch, jnp.array(stops, jnp.int32))
    np.testing.assert_array_equal(np.asarray(slots), expected)


def test_online_decide_inside_while_loop():
    c, n = 5, 137

    def body(carry):
        state, i, stored = carry
        state, slot = J.online_decide(state, i)
        return state, i + 1, stored + (slot >= 0).astype(jnp.int32)

    init = (J.online_init(c), jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))
    state, _, stored = jax.jit(lambda: lax.while_loop(lambda x: x[1] < n, body, init))()
    ref_state, ref_slots = reference(n, c)
    assert int(stored) == sum(slot >= 0 for slot in ref_slots)
    assert_same_state(state, ref_state)


def test_online_init_checks_arguments():
    with pytest.raises(ValueError):
        J.online_init(0)
