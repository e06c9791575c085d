"""`DirectAdjoint`: reverse and forward mode through the same solve, against the
closed form of `y' = -k y` (y(t) = y0 exp(-k (t - t0))) and against the other adjoints."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

TS = np.array([0.25, 0.5, 1.0, 1.5])


def _solve(k, y0, *, adjoint, saveat=None, t1=2.0, dtype=jnp.float64, max_steps=64, dt0=None):
    ts = jnp.asarray(TS if t1 > 0 else -TS, dtype)
    return oc.diffeqsolve(
        lambda t, y, args: -args * y,
        oc.Tsit5(),
        jnp.asarray(0.0, dtype),
        jnp.asarray(t1, dtype),
        dt0,
        y0,
        args=k,
        saveat=saveat or oc.SaveAt(ts=ts, t1=True),
        stepsize_controller=(
            oc.PIDController(rtol=1e-9, atol=1e-9) if dt0 is None else oc.ConstantStepSize()
        ),
        adjoint=adjoint,
        max_steps=max_steps,
    )


def _exact(k, y0, t):
    return y0 * jnp.exp(-k * t)


@pytest.mark.slow
@pytest.mark.parametrize("t1", [2.0, -2.0], ids=["forward", "backward"])
def test_gradient_jvp_and_hessian_equal_the_closed_form(t1):
    y0 = jnp.array([1.0, -2.0])
    times = np.append(TS if t1 > 0 else -TS, t1)

    def loss(k, adjoint):
        return jnp.sum(_solve(k, y0, adjoint=adjoint, t1=t1).ys ** 2)

    def exact_loss(k):
        return jnp.sum(jax.vmap(lambda t: _exact(k, y0, t))(jnp.asarray(times)) ** 2)

    direct = oc.DirectAdjoint()
    k = 0.7
    assert np.allclose(loss(k, direct), exact_loss(k), rtol=1e-7)
    assert np.allclose(jax.grad(loss)(k, direct), jax.grad(exact_loss)(k), rtol=1e-6)
    tangent = jax.jvp(lambda k: loss(k, direct), (k,), (1.0,))[1]
    assert np.allclose(tangent, jax.grad(exact_loss)(k), rtol=1e-6)
    hessian = jax.jacfwd(jax.grad(loss))(k, direct)  # forward over reverse
    assert np.allclose(hessian, jax.hessian(exact_loss)(k), rtol=1e-5)


@pytest.mark.slow
def test_equals_checkpoint_adjoint_and_forward_mode_on_every_output():
    """Same loop, same steps: the derivative of the same numerical solution, to round-off,
    for `SaveAt(ts, t1)`, `SaveAt(steps=True)` and dense output."""
    y0 = jnp.array([1.0, 0.5])

    def outputs(k, adjoint):
        a = _solve(k, y0, adjoint=adjoint)
        b = _solve(k, y0, adjoint=adjoint, saveat=oc.SaveAt(steps=True, dense=True))
        steps = jnp.where(jnp.isfinite(b.ys), b.ys, 0.0)
        return a.ys, jnp.sum(steps), b.evaluate(0.8), b.evaluate(1.7)

    k = 0.9
    direct = jax.jacrev(outputs)(k, oc.DirectAdjoint())
    checkpoint = jax.jacrev(outputs)(k, oc.CheckpointAdjoint(checkpoints=3))
    forward = jax.jacfwd(outputs)(k, oc.ForwardMode())
    direct_fwd = jax.jacfwd(outputs)(k, oc.DirectAdjoint())
    for ref in (checkpoint, forward, direct_fwd):
        for a, b in zip(direct, ref, strict=True):
            assert np.allclose(a, b, rtol=1e-10, atol=1e-12)
    assert np.allclose(outputs(k, oc.DirectAdjoint())[2], _exact(k, y0, 0.8), rtol=1e-7)


def test_steps_rows_gradient_and_tangent_equal_the_closed_form():
    """`SaveAt(steps=True)` with 20 steps of 0.1 and `max_steps=24`: rows 0-19 are
    y(0.1 (j + 1)) and the 4 unwritten rows stay `inf`; the gradient of a loss that
    masks them is finite, and reverse and forward mode give the closed form's."""
    y0 = jnp.array([1.0, -0.5])
    saveat = oc.SaveAt(steps=True)

    def rows(k):
        return _solve(k, y0, adjoint=oc.DirectAdjoint(), saveat=saveat, dt0=0.1, max_steps=24).ys

    def loss(k):
        ys = rows(k)
        return jnp.sum(jnp.where(jnp.isfinite(ys), ys, 0.0) ** 2)

    def exact_loss(k):
        ts = 0.1 * jnp.arange(1.0, 21.0)
        return jnp.sum(jax.vmap(lambda t: _exact(k, y0, t))(ts) ** 2)

    k = 0.8
    ys = rows(k)
    assert np.isinf(ys[20:]).all()
    assert np.allclose(
        ys[:20], jax.vmap(lambda t: _exact(k, y0, t))(0.1 * jnp.arange(1.0, 21.0)), rtol=1e-6
    )
    gradient = jax.grad(loss)(k)
    tangent = jax.jvp(loss, (k,), (1.0,))[1]
    assert np.isfinite(gradient)
    assert np.allclose(gradient, jax.grad(exact_loss)(k), rtol=1e-6)
    assert np.allclose(tangent, gradient, rtol=1e-12)


@pytest.mark.slow
def test_vmap_float32_and_stats():
    y0 = jnp.array([1.0, 2.0], jnp.float32)
    ks = jnp.array([0.3, 0.8, 1.5], jnp.float32)

    def loss(k):
        sol = _solve(k, y0, adjoint=oc.DirectAdjoint(), dtype=jnp.float32)
        return jnp.sum(sol.ys), sol.stats["num_steps"]

    grads = jax.vmap(jax.grad(lambda k: loss(k)[0]))(ks)
    exact = jax.vmap(
        jax.grad(
            lambda k: jnp.sum(
                jax.vmap(lambda t: _exact(k, y0, t))(jnp.asarray(np.append(TS, 2.0), jnp.float32))
            )
        )
    )(ks)
    assert grads.dtype == jnp.float32
    assert np.allclose(grads, exact, rtol=1e-4)
    unbatched = _solve(ks[1], y0, adjoint=oc.CheckpointAdjoint(), dtype=jnp.float32)
    assert jax.vmap(loss)(ks)[1][1] == unbatched.stats["num_steps"]


def test_max_steps_reached_and_max_steps_none():
    with pytest.raises(eqx.EquinoxRuntimeError, match="max_steps"):
        oc.diffeqsolve(
            lambda t, y, args: -y,
            oc.Tsit5(),
            0.0,
            2.0,
            0.01,
            1.0,
            adjoint=oc.DirectAdjoint(),
            max_steps=3,
        )
    with pytest.raises(ValueError, match="`DirectAdjoint` runs a loop of `max_steps`"):
        _solve(1.0, jnp.array([1.0]), adjoint=oc.DirectAdjoint(), max_steps=None)


@pytest.mark.slow
def test_event_time_and_its_derivatives_equal_the_closed_form():
    """A ball dropped from h0 hits the ground at t* = sqrt(2 h0 / g): the located time,
    its gradient and its tangent through `DirectAdjoint`."""
    g = 9.81

    def impact(h0):
        sol = oc.diffeqsolve(
            lambda t, y, args: jnp.stack([y[1], -g * jnp.ones_like(y[1])]),
            oc.Tsit5(),
            0.0,
            10.0,
            0.01,
            jnp.stack([h0, 0.0]),
            adjoint=oc.DirectAdjoint(),
            max_steps=64,
            event=oc.Event(lambda t, y, args, **kwargs: y[0]),
            stepsize_controller=oc.PIDController(rtol=1e-10, atol=1e-10),
        )
        return sol.ts[-1]

    exact = lambda h0: jnp.sqrt(2 * h0 / g)
    h0 = jnp.asarray(2.0)
    np.testing.assert_allclose(impact(h0), exact(h0), rtol=1e-10)
    np.testing.assert_allclose(jax.grad(impact)(h0), jax.grad(exact)(h0), rtol=1e-8)
    np.testing.assert_allclose(jax.jvp(impact, (h0,), (1.0,))[1], jax.grad(exact)(h0), rtol=1e-8)
