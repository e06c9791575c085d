"""Regression guards: retracing, program size, batching and sharding."""

import subprocess
import sys
import textwrap
import time

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


def _decay(t, y, a):
    return -a * y + jnp.sin(t)


def _solve(y0, a, max_steps=256, adjoint=None):
    return oc.diffeqsolve(
        _decay,
        oc.Tsit5(),
        0.0,
        3.0,
        0.1,
        y0,
        args=a,
        max_steps=max_steps,
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
        adjoint=adjoint or oc.CheckpointAdjoint(),
    )


def test_repeated_calls_do_not_retrace():
    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def loss(y0, a):
        return _solve(y0, a).ys.sum()

    grad = jax.jit(jax.grad(loss))
    for k in range(3):
        jax.block_until_ready(loss(jnp.ones(3) * k, 0.5 + k))
        jax.block_until_ready(grad(jnp.ones(3) * k, 0.5 + k))


def _num_equations(fn, *args) -> int:
    jaxpr = jax.make_jaxpr(fn)(*args)

    def count(j):
        total = 0
        for eqn in j.eqns:
            total += 1
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                total += count(sub)
        return total

    return count(jaxpr.jaxpr)


@pytest.mark.parametrize("checkpoints", [None, 8])
def test_program_size_does_not_grow_with_max_steps(checkpoints):
    def grad(max_steps):
        adjoint = oc.CheckpointAdjoint(checkpoints)
        return jax.grad(lambda y0: _solve(y0, 0.5, max_steps, adjoint).ys.sum())

    small = _num_equations(grad(64), jnp.ones(2))
    large = _num_equations(grad(16384), jnp.ones(2))
    assert small == large


def test_batched_gradients_equal_unbatched_with_different_step_counts():
    y0s = jnp.array([[1.0], [10.0], [1e-3]])
    rates = jnp.array([0.5, 20.0, 3.0])

    def loss(y0, a):
        return _solve(y0, a, adjoint=oc.CheckpointAdjoint(3)).ys.sum()

    num_steps = jax.jit(lambda y, a: _solve(y, a).stats["num_steps"])
    steps = [int(num_steps(y, a)) for y, a in zip(y0s, rates, strict=True)]
    assert len(set(steps)) > 1
    batched = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))(y0s, rates)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))  # traced once for the three rows
    for i in range(3):
        single = grad(y0s[i], rates[i])
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(batched[1][i], single[1], rtol=1e-10, atol=1e-14)


_SHARDED = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import odeckpt as oc

    def loss(y0, a):
        sol = oc.diffeqsolve(lambda t, y, a: -a * y + jnp.sin(t), oc.Tsit5(), 0.0, 3.0, 0.1,
                             y0, args=a, stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
                             adjoint=oc.CheckpointAdjoint(4))
        return sol.ys.sum()

    assert len(jax.devices()) == 2
    grad = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))
    y0s = jnp.linspace(0.1, 5.0, 8)[:, None]
    rates = jnp.linspace(0.2, 30.0, 8)
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    shard = NamedSharding(mesh, P("batch"))
    sharded = grad(jax.device_put(y0s, shard), jax.device_put(rates, shard))
    plain = grad(y0s, rates)
    assert len(sharded[0].sharding.device_set) == 2
    np.testing.assert_allclose(sharded[0], plain[0], rtol=1e-10)
    np.testing.assert_allclose(sharded[1], plain[1], rtol=1e-10)
    print("sharded ok")
    """
)


def test_sharded_batch_matches_unsharded():
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sharded ok" in out.stdout


@pytest.mark.slow
def test_loop_cost_grows_linearly_with_steps():
    def timed(n):
        ts = jnp.linspace(0.0, 1.0, n + 1)
        fn = jax.jit(
            lambda y0: (
                oc.diffeqsolve(
                    _decay,
                    oc.Tsit5(),
                    0.0,
                    1.0,
                    None,
                    y0,
                    args=0.5,
                    stepsize_controller=oc.StepTo(ts),
                    max_steps=n + 1,
                ).ys
            )
        )
        jax.block_until_ready(fn(jnp.ones(2)))
        best = np.inf
        for _ in range(5):
            start = time.perf_counter()
            jax.block_until_ready(fn(jnp.ones(2)))
            best = min(best, time.perf_counter() - start)
        return best

    small, large = timed(20_000), timed(80_000)
    assert large / small < 4 * 1.8  # linear: ~4x; quadratic would be ~16x


_RATE = jnp.asarray(0.5)


def _global_rate(t, y, args):
    return -_RATE * y


def _loop_compilations(caplog) -> int:
    return sum(r.getMessage().startswith("Compiling jit(solve)") for r in caplog.records)


def test_eager_calls_reuse_the_compiled_loop_and_read_globals_afresh(caplog, monkeypatch):
    """Called outside any JAX transformation, a solve compiles its loop once per program
    (not once per call); an array the vector field reads from a global is an input of that program,
    so changing it changes the answer (never a stale value baked into the cache)."""

    def solve(y0):
        return oc.diffeqsolve(_global_rate, oc.Tsit5(), 0.0, 2.0, 0.1, y0).ys[0]

    with caplog.at_level("WARNING"), jax.log_compiles():
        first = solve(jnp.ones(2))
        monkeypatch.setattr(sys.modules[__name__], "_RATE", jnp.asarray(2.0))
        second = solve(jnp.ones(2) * 3)
    assert _loop_compilations(caplog) == 1
    np.testing.assert_allclose(first, np.exp(-0.5 * 2.0) * np.ones(2), rtol=1e-5)
    np.testing.assert_allclose(second, 3 * np.exp(-2.0 * 2.0) * np.ones(2), rtol=1e-5)


def test_fields_alike_but_for_their_callbacks_keep_their_own():
    """Two vector fields whose programs print alike (a callback prints without its
    identity) are compiled apart: each solve calls its own callback."""

    def counting():
        calls = []

        def field(t, y, args):
            jax.debug.callback(lambda: calls.append(1))
            return -y

        return field, calls

    (first, first_calls), (second, second_calls) = counting(), counting()
    for field in (first, second):
        jax.block_until_ready(oc.diffeqsolve(field, oc.Euler(), 0.0, 1.0, 0.25, jnp.ones(2)).ys)
    assert len(first_calls) == len(second_calls) > 0
