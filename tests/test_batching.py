"""The batching primitives of the checkpointed loop: values unchanged, batching as
documented, a loop under `jax.vmap` traced once per body, a `cond` whose branches
keep unbatched operands unbatched, and the batch size read at trace time."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import odeckpt as oc
from odeckpt._core.batching import any_in_batch, batch_cond as cond, batch_size, batched_like


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
            return i + 1, acc + x * i.astype(x.dtype)

        init = batched_like((jnp.asarray(0), jnp.asarray(0.0)), x)
        return lax.while_loop(lambda c: c[0] < jnp.where(x > 1, 6, 5), body, init)[1]

    xs = jnp.asarray([0.5, 1.5, 2.0])
    np.testing.assert_allclose(jax.vmap(solve)(xs), [solve(x) for x in xs])
    _, tangent = jax.jvp(jax.vmap(solve), (xs,), (jnp.ones(3),))  # forward mode works
    np.testing.assert_allclose(tangent, [10.0, 15.0, 15.0])


def _branchy(x, w):
    """A `cond` whose true branch reads the matrix `w` and a static integer."""
    return cond(x[0] > 0, lambda x, w, k: w @ x * k, lambda x, w, k: -x[:2], x, w, 2)


XS = jnp.asarray([[1.0, 2.0, 3.0], [-1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
W = jnp.arange(6.0).reshape(2, 3)


def test_cond_matches_lax_cond_batched_or_not():
    w, xs = np.asarray(W), np.asarray(XS)
    reference = [w @ x * 2 if x[0] > 0 else -x[:2] for x in xs]
    np.testing.assert_allclose(jnp.stack([_branchy(x, W) for x in XS]), reference)
    np.testing.assert_allclose(jax.vmap(_branchy, in_axes=(0, None))(XS, W), reference)
    np.testing.assert_allclose(jax.jit(jax.vmap(_branchy, in_axes=(0, None)))(XS, W), reference)
    # Unbatched predicate, batched operand: one branch runs, vmapped.
    ws = jnp.stack([W, 2 * W])
    np.testing.assert_allclose(jax.vmap(lambda w: _branchy(XS[0], w))(ws), [[16, 52], [32, 104]])


def test_cond_keeps_unbatched_operands_unbatched():
    """Under `jax.vmap` with a batched predicate, `lax.cond` broadcasts `w` to the batch
    (a batched matrix product); `cond` keeps it one matrix."""

    def dot_shapes(fn):
        jaxpr = jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None)))(XS, W)
        shapes = []

        def visit(jaxpr):
            for eqn in jaxpr.eqns:
                if eqn.primitive.name == "dot_general":
                    shapes.append(tuple(v.aval.shape for v in eqn.invars))
            for sub in jax.extend.core.subjaxprs(jaxpr):
                visit(sub)

        visit(jaxpr.jaxpr)
        return shapes

    plain = lambda x, w: lax.cond(x[0] > 0, lambda: w @ x * 2, lambda: -x[:2])
    assert (3, 2, 3) in [s[0] for s in dot_shapes(plain)]  # lax.cond: one copy per element
    assert all(s[0] == (2, 3) for s in dot_shapes(_branchy))


def test_cond_forward_mode_under_vmap():
    primal, tangent = jax.jvp(
        lambda w: jax.vmap(_branchy, in_axes=(0, None))(XS, w), (W,), (jnp.ones_like(W),)
    )
    np.testing.assert_allclose(tangent, [[12, 12], [0, 0], [30, 30]])


def test_batch_size_reads_vmap_through_grad():
    seen = []

    def record(y):
        seen.append(batch_size((y, jnp.zeros(2))))
        return jnp.sum(y**2)

    record(jnp.ones(2))
    jax.vmap(record)(jnp.ones((3, 2)))
    jax.vmap(jax.vmap(record))(jnp.ones((4, 3, 2)))
    jax.grad(lambda ys: jnp.sum(jax.vmap(record)(ys)))(jnp.ones((5, 2)))
    jax.vmap(jax.grad(record))(jnp.ones((6, 2)))
    jax.vmap(record, in_axes=1)(jnp.ones((2, 7)))
    jax.vmap(jax.jit(record))(jnp.ones((3, 2)))  # traced before it is vmapped
    assert seen == [1, 3, 12, 5, 6, 7, 1]


def _record_returns(monkeypatch, cls, name: str) -> list:
    """Patch `cls.name` to call through and record what it returns."""
    returned = []
    original = getattr(cls, name)

    def spy(self, *args):
        returned.append(original(self, *args))
        return returned[-1]

    monkeypatch.setattr(cls, name, spy)
    return returned


def _gradient_alone_and_in_batch(loss, batch: int):
    """The gradient of `loss` at ones(2), checked equal (to 1e-12) to every element's
    gradient under `jax.vmap` over `batch` copies."""
    g = jax.grad(loss)(jnp.ones(2))
    gs = jax.grad(lambda ys: jnp.sum(jax.vmap(loss)(ys)))(jnp.ones((batch, 2)))
    np.testing.assert_allclose(gs, jnp.broadcast_to(g, (batch, 2)), rtol=1e-12)
    return g


def test_default_checkpoints_count_the_whole_batch(monkeypatch):
    """Storing every step of 4096 is 350 KB for one 2-D solve: stored. Under
    `jax.vmap` over 256 initial values it is 87 MiB, zero-filled by every gradient:
    the default then places `useful_checkpoints(4096)` = 90 checkpoints instead."""
    from odeckpt._adjoints import checkpoint as _adjoints

    used = _record_returns(monkeypatch, _adjoints.CheckpointAdjoint, "num_checkpoints")

    def loss(y0):
        sol = oc.diffeqsolve(lambda t, y, a: -y, oc.Tsit5(), 0.0, 1.0, 0.1, y0, max_steps=4096)
        return jnp.sum(sol.ys)

    g = _gradient_alone_and_in_batch(loss, 256)
    assert used == [4096, 90]
    np.testing.assert_allclose(g, np.full(2, np.exp(-1.0)), rtol=1e-5)


@pytest.mark.slow
def test_interpolating_default_counts_the_whole_batch(monkeypatch):
    """Every step's dense polynomial of a 2-D solve with `max_steps=4096` is ~0.4 MB:
    stored. Under `jax.vmap` over 512 initial values it is ~200 MB: the default
    re-solves from checkpoints instead, with the same gradient."""
    from odeckpt._adjoints.continuous import interpolating as _continuous

    plans = _record_returns(monkeypatch, _continuous.InterpolatingAdjoint, "tape_plan")

    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: -y,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            y0,
            saveat=oc.SaveAt(ts=jnp.linspace(0.1, 1.0, 4)),
            adjoint=oc.InterpolatingAdjoint(),
            max_steps=4096,
        )
        return jnp.sum(sol.ys)

    g = _gradient_alone_and_in_batch(loss, 512)
    assert [p.keep_dense for p in plans] == [True, False]
    expected = np.sum(np.exp(-np.linspace(0.1, 1.0, 4)))
    np.testing.assert_allclose(g, np.full(2, expected), rtol=1e-3)
