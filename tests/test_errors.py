"""Failed solves say why and where they failed; edge cases that are not errors.

Each bad input's error is a row of `docs/errors.md`, tested in `test_bad_inputs.py`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DECAY

import odeckpt as oc
from odeckpt._core.results import _FailureMessages, failure_index


def _decay(t, y, args):
    return -y


def _solve(y0=None, t0=0.0, t1=1.0, dt0=0.1, **kwargs):
    y0 = jnp.asarray(DECAY.y0) if y0 is None else y0
    kwargs.setdefault("solver", oc.Tsit5())
    solver = kwargs.pop("solver")
    return oc.diffeqsolve(_decay, solver, t0, t1, dt0, y0, **kwargs)


# ----------------------------------------------------------------------------------
# Failed solves: a result code with `throw=False`; with `throw=True` an error naming
# the cause and the time reached

MAX_STEPS_MESSAGE = r"`max_steps` \(20\) reached at t = 0.2 of \[0, 1\]"


@pytest.mark.parametrize(
    "jit, error",
    [(eqx.filter_jit, eqx.EquinoxRuntimeError), (jax.jit, jax.errors.JaxRuntimeError)],
    ids=["filter_jit", "jax.jit"],
)
def test_max_steps_reached_raises_under_jit(jit, error):
    solve = jit(lambda y0: _solve(y0=y0, dt0=0.01, max_steps=20).ys)
    with pytest.raises(error, match=MAX_STEPS_MESSAGE):
        jax.block_until_ready(solve(jnp.asarray(DECAY.y0)))


def test_max_steps_reached_raises_with_dense_output_only():
    with pytest.raises(eqx.EquinoxRuntimeError, match=MAX_STEPS_MESSAGE):
        _solve(dt0=0.01, max_steps=20, saveat=oc.SaveAt(dense=True))


def test_max_steps_reached_result_and_outputs():
    # 20 steps of 0.01 reach t = 0.2: outputs before it are filled, the rest are inf.
    ts = jnp.asarray([0.1, 0.15, 0.5, 0.9])
    sol = _solve(dt0=0.01, max_steps=20, throw=False, saveat=oc.SaveAt(ts=ts, t1=True))
    assert sol.result == oc.RESULTS.max_steps_reached
    assert int(sol.stats["num_steps"]) == 20
    ys = np.asarray(sol.ys)
    np.testing.assert_allclose(ys[:2], DECAY.y0 * np.exp(-np.asarray(ts[:2, None])), rtol=1e-8)
    assert np.all(np.isinf(ys[2:]))  # ts beyond the failure and t1
    assert np.isinf(sol.ts[-1])


def _nan_after_half(t, y, args):
    return jnp.where(t > 0.5, jnp.nan, -y)


@pytest.mark.parametrize("solver", [oc.Euler(), oc.Tsit5()], ids=["Euler", "Tsit5"])
def test_nonfinite_state_result(solver):
    ts = jnp.asarray([0.25, 0.75])
    sol = oc.diffeqsolve(
        _nan_after_half,
        solver,
        0.0,
        1.0,
        0.1,
        jnp.asarray(DECAY.y0),
        saveat=oc.SaveAt(ts=ts, t1=True),
        throw=False,
    )
    assert sol.result == oc.RESULTS.nonfinite_state
    ys = np.asarray(sol.ys)
    assert np.all(np.isfinite(ys[0]))
    assert np.all(np.isinf(ys[1:]))  # never NaN: unfilled outputs are inf


def _too_tight(**kwargs):
    # Tolerances far too tight for steps of 0.05 on Lotka–Volterra-like dynamics.
    controller = oc.PIDController(rtol=1e-13, atol=1e-13, dtmin=0.05, force_dtmin=False)
    return oc.diffeqsolve(
        lambda t, y, args: jnp.stack([1.5 * y[0] - y[0] * y[1], y[0] * y[1] - 3 * y[1]]),
        oc.Tsit5(),
        0.0,
        10.0,
        0.1,
        jnp.asarray([1.0, 1.0]),
        stepsize_controller=controller,
        **kwargs,
    )


def test_dt_min_reached_result():
    sol = _too_tight(throw=False, saveat=oc.SaveAt(t1=True))
    assert sol.result == oc.RESULTS.dt_min_reached
    assert int(sol.stats["num_accepted_steps"]) < 10
    assert np.all(np.isinf(np.asarray(sol.ys)))


def test_failed_outputs_beyond_the_time_reached_are_inf():
    # NaN appears in the step from t = 0.5 (its stages pass 0.5): steps and dense output
    # stop there.
    sol = oc.diffeqsolve(
        _nan_after_half,
        oc.Tsit5(),
        0.0,
        1.0,
        0.1,
        jnp.asarray(DECAY.y0),
        saveat=oc.SaveAt(steps=True, dense=True),
        throw=False,
    )
    assert sol.result == oc.RESULTS.nonfinite_state
    assert sol.ts is not None
    np.testing.assert_allclose(sol.ts[:5], [0.1, 0.2, 0.3, 0.4, 0.5], rtol=1e-12)
    assert np.all(np.isinf(np.asarray(sol.ts[5:]))) and np.all(np.isinf(np.asarray(sol.ys[5:])))
    ts = jnp.asarray([0.0, 0.25, 0.5, 0.51, 0.9])
    dense = np.asarray(sol.evaluate(ts))
    exact = DECAY.y0 * np.exp(-np.asarray(ts[:3, None]))
    np.testing.assert_allclose(dense[:3], exact, rtol=1e-5)
    assert np.all(np.isinf(dense[3:]))


def test_failure_message_under_vmap_names_the_failed_element():
    # t1 = 0.1 needs 10 steps of 0.01; t1 = 1 fails at t = 0.2 after 20 steps.
    solve = jax.vmap(lambda t1: _solve(t1=t1, dt0=0.01, max_steps=20).ys)
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"reached at t = 0.2 \(before `t1`\)"):
        jax.block_until_ready(solve(jnp.asarray([0.1, 1.0])))


@pytest.mark.parametrize("t", [0.0, -0.0, 0.4213, -3.5, 1e-7, 12345.6, -1e30, 7.0e8])
@pytest.mark.parametrize("code", [c for c in oc.RESULTS if not oc.is_okay(c)])
def test_failure_message_carries_time_and_cause(t, code):
    index = int(failure_index(jnp.asarray(code), jnp.asarray(t)))
    message = _FailureMessages(0.0, 10.0, 16)[index]
    assert message.endswith(code.message)
    if code != oc.RESULTS.backsolve_diverged:  # raised by the backward pass, not here
        assert f"t = {t:.6g} of [0, 10]" in message


def test_successful_index_loses_to_any_failure():
    success = failure_index(jnp.asarray(oc.RESULTS.successful), jnp.asarray(-1e30))
    failures = [
        failure_index(jnp.asarray(c), jnp.asarray(t))
        for c in oc.RESULTS
        if not oc.is_okay(c)
        for t in (-np.inf, -1e30, -0.0, 0.0, 1e30)
    ]
    assert all(int(f) > int(success) for f in failures)


@pytest.mark.parametrize("jit", [eqx.filter_jit, jax.jit], ids=["filter_jit", "jax.jit"])
def test_nonfinite_y0_in_a_batch_raises(jit):
    y0 = jnp.asarray([[1.0, 2.0], [jnp.nan, 1.0]])
    solve = jit(jax.vmap(lambda y0: _solve(y0=y0).ys))
    with pytest.raises(Exception, match=r"`y0` has NaN or inf values in leaf y0"):
        jax.block_until_ready(solve(y0))


def test_bad_traced_values_without_throw_set_invalid_input():
    y0 = jnp.asarray([[1.0, 2.0], [jnp.nan, 1.0]])
    solve = jax.jit(jax.vmap(lambda y0: _solve(y0=y0, throw=False)))
    sol = solve(y0)
    np.testing.assert_array_equal(sol.result, [oc.RESULTS.successful, oc.RESULTS.invalid_input])
    np.testing.assert_allclose(sol.ys[0], DECAY.y0[None] * np.exp(-1.0), rtol=1e-6)
    assert np.all(np.isinf(np.asarray(sol.ys[1])))
    np.testing.assert_array_equal(sol.stats["num_steps"], [10, 0])


def test_throw_false_compiles_no_callback():
    def solve(y0, k, dt0, ts):
        saveat = oc.SaveAt(ts=ts, t1=True)
        return oc.diffeqsolve(
            lambda t, y, k: -k * y,
            oc.Tsit5(),
            0.0,
            1.0,
            dt0,
            y0,
            args=k,
            saveat=saveat,
            throw=False,
        ).ys

    args = (jnp.ones(2), jnp.asarray(0.5), jnp.asarray(0.1), jnp.asarray([0.5]))
    assert "callback" not in jax.jit(solve).lower(*args).as_text()


def test_args_leaves_that_are_not_floating_arrays_are_not_checked():
    sol = oc.diffeqsolve(
        lambda t, y, a: -a["k"] * a["g"](y),
        oc.Tsit5(),
        0.0,
        1.0,
        0.1,
        jnp.ones(2),
        args={"k": 1.0, "g": jnp.tanh, "n": 3},
    )
    assert sol.result == oc.RESULTS.successful


# ----------------------------------------------------------------------------------
# t0 == t1: no step, y0 returned, gradients defined


def _rate(t, y, a):
    return -a * y


def _empty_solve(y0, a, t0=0.5, t1=0.5, adjoint=None, **kwargs):
    return oc.diffeqsolve(
        _rate,
        oc.Tsit5(),
        t0,
        t1,
        0.1,
        y0,
        args=a,
        adjoint=adjoint or oc.CheckpointAdjoint(),
        **kwargs,
    )


def test_zero_length_solve_returns_y0():
    y0 = jnp.asarray(DECAY.y0)
    saveat = oc.SaveAt(t0=True, t1=True, ts=[0.5], steps=True, dense=True)
    sol = _empty_solve(y0, 0.7, saveat=saveat, max_steps=4)
    assert sol.result == oc.RESULTS.successful and int(sol.stats["num_steps"]) == 0
    np.testing.assert_array_equal(np.asarray(sol.ys)[:2], [DECAY.y0, DECAY.y0])
    # No steps: the step rows stay inf (`steps=True` saves t1 as its last step, as in
    # diffrax, so no row of its own).
    assert sol.ys.shape[0] == 2 + 4 and np.all(np.isinf(np.asarray(sol.ys)[2:]))
    np.testing.assert_array_equal(sol.evaluate(0.5), DECAY.y0)


ADJOINTS = [
    oc.CheckpointAdjoint(),
    oc.CheckpointAdjoint(checkpoints=2),
    oc.BacksolveAdjoint(),
    oc.InterpolatingAdjoint(),
    oc.InterpolatingAdjoint(checkpoints=2),
]


SAVEATS = {"t1": oc.SaveAt(t1=True), "ts+t1": oc.SaveAt(ts=[0.5], t1=True)}


def _zero_length_case(saveat, adjoint):
    """Each adjoint class by default, once, saving `ts` and `t1`; `t1` alone and the
    second checkpoint count are slow (the same paths, fewer outputs or another count)."""
    name = f"{saveat}-{type(adjoint).__name__}-{adjoint.checkpoints}"
    fast = saveat == "ts+t1" and adjoint.checkpoints is None
    return pytest.param(SAVEATS[saveat], adjoint, id=name, marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(
    "saveat, adjoint", [_zero_length_case(s, a) for a in ADJOINTS for s in SAVEATS]
)
def test_zero_length_solve_gradients(adjoint, saveat):
    y0 = jnp.asarray(DECAY.y0)

    def loss(y0, a):
        return jnp.sum(_empty_solve(y0, a, adjoint=adjoint, saveat=saveat).ys ** 2)

    g_y0, g_a = jax.grad(loss, argnums=(0, 1))(y0, 0.7)
    rows = 1 + (saveat.subs.ts is not None)
    np.testing.assert_allclose(g_y0, 2 * rows * DECAY.y0, rtol=1e-14)
    assert float(g_a) == 0.0


# negative times: slow; the same zero-length path as `forward`
@pytest.mark.parametrize(
    "t0, t1",
    [(0.5, 0.5), pytest.param(-1.0, -1.0, marks=pytest.mark.slow)],
    ids=["forward", "negative"],
)
def test_zero_length_solve_time_gradients(t0, t1):
    # y(t1) = y0 exp(-a (t1 - t0)): dy/dt1 = -a y0 and dy/dt0 = a y0 at t1 = t0.
    y0, a = jnp.asarray(DECAY.y0), 0.7

    def loss(t0, t1):
        return jnp.sum(_empty_solve(y0, a, t0, t1).ys)

    g_t0, g_t1 = jax.grad(loss, argnums=(0, 1))(t0, t1)
    np.testing.assert_allclose([g_t0, g_t1], [a * y0.sum(), -a * y0.sum()], rtol=1e-14)
    # and continuous in t1: the same as a solve of one tiny step
    near = jax.grad(loss, argnums=1)(t0, t1 + 1e-9)
    np.testing.assert_allclose(near, g_t1, rtol=1e-6)


def test_zero_length_solve_time_tangent_in_forward_mode():
    y0 = jnp.asarray(DECAY.y0)
    solve = lambda t1: _empty_solve(y0, 0.7, adjoint=oc.ForwardMode(), t1=t1).ys
    _, tangent = jax.jvp(solve, (0.5,), (1.0,))
    np.testing.assert_allclose(tangent, -0.7 * y0[None], rtol=1e-14)
