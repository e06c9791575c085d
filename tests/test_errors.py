"""Bad inputs get clear errors at trace time; failed solves say why they failed."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DECAY

import odeckpt as oc


def _decay(t, y, args):
    return -y


def _solve(y0=None, t0=0.0, t1=1.0, dt0=0.1, **kwargs):
    y0 = jnp.asarray(DECAY.y0) if y0 is None else y0
    kwargs.setdefault("solver", oc.Tsit5())
    solver = kwargs.pop("solver")
    return oc.diffeqsolve(_decay, solver, t0, t1, dt0, y0, **kwargs)


# ----------------------------------------------------------------------------------
# Malformed input: raised at trace time, before anything runs


@pytest.mark.parametrize(
    "y0, match",
    [
        (jnp.array([1, 2]), r"`y0` must hold floating arrays; leaf y0 has dtype int"),
        ({"a": jnp.array([1.0]), "n": jnp.array(3)}, r"leaf \['n'\] has dtype int"),
        ((jnp.array([1.0]), jnp.array([True])), r"leaf \[1\] has dtype bool"),
    ],
    ids=["int", "dict-with-int", "tuple-with-bool"],
)
def test_non_floating_y0(y0, match):
    with pytest.raises(TypeError, match=match):
        _solve(y0=y0)


def test_mixed_dtype_y0():
    y0 = {"a": jnp.array([1.0], jnp.float32), "b": jnp.array([1.0], jnp.float64)}
    with pytest.raises(TypeError, match=r"`y0` mixes floating dtypes \['float32', 'float64'\]"):
        _solve(y0=y0)


def test_empty_y0():
    with pytest.raises(ValueError, match=r"`y0` is an empty PyTree"):
        _solve(y0={})


@pytest.mark.parametrize(
    "t0, t1, dt0",
    [(0.0, 1.0, -0.1), (0.0, 1.0, 0.0), (1.0, 0.0, 0.1), (1.0, 0.0, 0.0)],
    ids=["forward-negative", "forward-zero", "backward-positive", "backward-zero"],
)
def test_dt0_sign_or_zero(t0, t1, dt0):
    match = rf"`dt0` must be nonzero with the sign of `t1 - t0`; got dt0={dt0}"
    with pytest.raises(ValueError, match=match):
        _solve(t0=t0, t1=t1, dt0=dt0)


def test_dt0_none_with_constant_step_size():
    with pytest.raises(ValueError, match=r"`dt0=None` needs an adaptive controller"):
        _solve(dt0=None, stepsize_controller=oc.ConstantStepSize())


def test_euler_with_pid_controller():
    controller = oc.PIDController(rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"`Euler` has no error estimate.*`PIDController`"):
        _solve(solver=oc.Euler(), stepsize_controller=controller)


def test_step_to_with_dt0():
    controller = oc.StepTo(ts=jnp.asarray([0.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match=r"`StepTo\(ts\)` fixes the steps itself: pass `dt0=None`"):
        _solve(stepsize_controller=controller)


@pytest.mark.parametrize(
    "ts, match",
    [
        ([0.0, 0.5, 0.8], r"must start at t0 and end at t1; got ts\[0\]=0.0, ts\[-1\]=0.8"),
        ([0.1, 0.5, 1.0], r"must start at t0 and end at t1; got ts\[0\]=0.1"),
        ([0.0, 0.7, 0.5, 1.0], r"must be strictly monotone .* got ts\[2\]=0.5 after ts\[1\]=0.7"),
        ([0.0, 0.5, 0.5, 1.0], r"must be strictly monotone .* got ts\[2\]=0.5 after ts\[1\]=0.5"),
    ],
    ids=["short", "late-start", "decreasing", "repeated"],
)
def test_step_to_times(ts, match):
    controller = oc.StepTo(ts=jnp.asarray(ts))
    with pytest.raises(ValueError, match=r"`StepTo\(ts=...\)` " + match):
        _solve(dt0=None, stepsize_controller=controller)


def test_step_to_shape():
    with pytest.raises(ValueError, match=r"`StepTo\(ts=...\)` needs a 1-D array of at least 2"):
        oc.StepTo(ts=jnp.asarray([0.0]))


def test_empty_saveat():
    with pytest.raises(ValueError, match=r"`SaveAt\(\)` saves nothing"):
        oc.SaveAt()


def test_saveat_ts_not_monotone():
    with pytest.raises(ValueError, match=r"must be monotone .* got ts\[2\]=0.3 after ts\[1\]=0.5"):
        oc.SaveAt(ts=[0.1, 0.5, 0.3])


def test_saveat_ts_two_dimensional():
    with pytest.raises(ValueError, match=r"`SaveAt\(ts=...\)` must be 1-D; got shape \(2, 1\)"):
        oc.SaveAt(ts=[[0.1], [0.5]])


def test_saveat_ts_against_direction():
    saveat = oc.SaveAt(ts=[0.2, 0.5])  # increasing, but the solve runs from 1 to 0
    with pytest.raises(ValueError, match=r"must run from t0 towards t1; got ts\[1\]=0.5 after"):
        _solve(t0=1.0, t1=0.0, dt0=-0.1, saveat=saveat)


@pytest.mark.parametrize("ts", [[-0.1, 0.5], [0.5, 1.5]], ids=["before-t0", "after-t1"])
def test_saveat_ts_outside_interval(ts):
    with pytest.raises(ValueError, match=r"`SaveAt\(ts=...\)` must lie within \[t0, t1\]"):
        _solve(saveat=oc.SaveAt(ts=ts))


@pytest.mark.parametrize("max_steps", [0, -3, 2.5], ids=["zero", "negative", "float"])
def test_max_steps(max_steps):
    with pytest.raises(ValueError, match=r"`max_steps` must be a positive integer or None"):
        _solve(max_steps=max_steps)


@pytest.mark.parametrize(
    "rtol, atol, name",
    [(0.0, 1e-6, "rtol"), (-1e-6, 1e-6, "rtol"), (1e-6, -1e-9, "atol")],
    ids=["rtol=0", "rtol<0", "atol<0"],
)
def test_tolerances_positive(rtol, atol, name):
    controller = oc.PIDController(rtol=rtol, atol=atol)
    with pytest.raises(ValueError, match=rf"`PIDController\({name}=...\)` must be positive"):
        _solve(stepsize_controller=controller)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(terms="f"), r"`diffeqsolve\(terms, ...\)` needs an `ODETerm\(f\)`"),
        (dict(solver="Tsit5"), r"`diffeqsolve\(solver=...\)` expects an `AbstractSolver`"),
        (
            dict(stepsize_controller=1e-6),
            r"`diffeqsolve\(stepsize_controller=...\)` expects an `AbstractStepSizeController`",
        ),
        (dict(saveat=(0.5,)), r"`diffeqsolve\(saveat=...\)` expects an `SaveAt`"),
    ],
    ids=["terms", "solver", "controller", "saveat"],
)
def test_wrong_argument_types(kwargs, match):
    terms = kwargs.pop("terms", _decay)
    solver = kwargs.pop("solver", oc.Tsit5())
    with pytest.raises(TypeError, match=match):
        oc.diffeqsolve(terms, solver, 0.0, 1.0, 0.1, jnp.asarray(DECAY.y0), **kwargs)


def test_evaluate_without_dense():
    sol = _solve()
    with pytest.raises(ValueError, match=r"`Solution.evaluate` needs dense output"):
        sol.evaluate(0.5)


# ----------------------------------------------------------------------------------
# Failed solves: a result code with `throw=False`, the code's message with `throw=True`

MAX_STEPS_MESSAGE = r"The maximum number of solver steps was reached"


def test_max_steps_reached_raises():
    with pytest.raises(eqx.EquinoxRuntimeError, match=MAX_STEPS_MESSAGE):
        _solve(dt0=0.01, max_steps=20, stepsize_controller=oc.ConstantStepSize())


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
        _nan_after_half, solver, 0.0, 1.0, 0.1, jnp.asarray(DECAY.y0),
        saveat=oc.SaveAt(ts=ts, t1=True), throw=False,
    )  # fmt: skip
    assert sol.result == oc.RESULTS.nonfinite_state
    ys = np.asarray(sol.ys)
    assert np.all(np.isfinite(ys[0]))
    assert np.all(np.isinf(ys[1:]))  # never NaN: unfilled outputs are inf


def test_nonfinite_state_raises():
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"The solution became non-finite"):
        oc.diffeqsolve(_nan_after_half, oc.Tsit5(), 0.0, 1.0, 0.1, jnp.asarray(DECAY.y0))


def _too_tight(**kwargs):
    # Tolerances far too tight for steps of 0.05 on Lotka–Volterra-like dynamics.
    controller = oc.PIDController(rtol=1e-13, atol=1e-13, dtmin=0.05, force_dtmin=False)
    return oc.diffeqsolve(
        lambda t, y, args: jnp.stack([1.5 * y[0] - y[0] * y[1], y[0] * y[1] - 3 * y[1]]),
        oc.Tsit5(), 0.0, 10.0, 0.1, jnp.asarray([1.0, 1.0]),
        stepsize_controller=controller, **kwargs,
    )  # fmt: skip


def test_dt_min_reached_result():
    sol = _too_tight(throw=False, saveat=oc.SaveAt(t1=True))
    assert sol.result == oc.RESULTS.dt_min_reached
    assert int(sol.stats["num_accepted_steps"]) < 10
    assert np.all(np.isinf(np.asarray(sol.ys)))


def test_dt_min_reached_raises():
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"The step size fell below `PIDController"):
        _too_tight()
