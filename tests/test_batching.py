"""The two batching primitives of the checkpointed loop: values unchanged, batching as
documented, and a loop under `jax.vmap` traced once per body."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from odeckpt._batching import any_in_batch, batched_like


def test_any_in_batch_is_the_identity_unbatched_and_any_under_vmap():
    assert bool(any_in_batch(jnp.asarray(True)))
    assert not bool(any_in_batch(jnp.asarray(False)))
    out = jax.vmap(any_in_batch)(jnp.asarray([False, True, False]))
    assert out.shape == (3,) and bool(jnp.all(out))  # unbatched, broadcast by out_axes
    out = jax.vmap(any_in_batch, out_axes=None)(jnp.asarray([False, False]))
    assert out.shape == () and not bool(out)


def test_batched_like_keeps_values_and_batches_the_carry():
    tree = (jnp.asarray(0, jnp.int32), jnp.zeros((2,)))
    same = batched_like(tree, jnp.ones(3))
    assert all(a is b or np.array_equal(a, b) for a, b in zip(same, tree, strict=True))

    def batch(x):
        return batched_like(tree, x)

    out = jax.vmap(batch)(jnp.arange(3.0))
    assert out[0].shape == (3,) and out[1].shape == (3, 2)
    with pytest.raises(ValueError):  # out_axes=None: only an unbatched leaf could pass
        jax.vmap(batch, out_axes=None)(jnp.arange(3.0))
    # Nothing batched in `like`: the tree stays unbatched.
    unbatched = jax.vmap(lambda x: batched_like(tree, jnp.ones(2)), out_axes=None)(jnp.arange(3.0))
    assert unbatched[1].shape == (2,)


def test_batched_like_gives_the_same_loop_result_under_vmap():
    def solve(x):
        def body(carry):
            i, acc = carry
            return i + 1, acc + x * i

        init = batched_like((jnp.asarray(0), jnp.asarray(0.0)), x)
        return lax.while_loop(lambda c: c[0] < 5 + (x > 1), body, init)[1]

    xs = jnp.asarray([0.5, 1.5, 2.0])
    np.testing.assert_allclose(jax.vmap(solve)(xs), [solve(x) for x in xs])
    _, tangent = jax.jvp(jax.vmap(solve), (xs,), (jnp.ones(3),))  # forward mode works
    np.testing.assert_allclose(tangent, [10.0, 15.0, 15.0])
