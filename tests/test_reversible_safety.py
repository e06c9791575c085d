"""A reversible solver never returns a silently wrong solution or gradient: its forward
solve stops where the coupled pair's parasitic mode grows (`RESULTS.reversible_unstable`),
and `ReversibleAdjoint` refuses a gradient whose estimated error exceeds `gradient_tol`.

The family of problems is `tests/reversible_family.py`; the full sweep (224 cases, float64
and float32) is marked slow, and `benchmarks/bench_reversible_safety.py` measures it.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reversible_family as family

import odeckpt as oc

Y0 = jnp.array([2.0, 0.0])


def _van_der_pol(t, y, args):
    mu = args[0]
    return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


def _steps(solver, t1, **kwargs):
    sol = oc.diffeqsolve(
        _van_der_pol,
        solver,
        0.0,
        t1,
        0.01,
        Y0,
        (1.0,),
        throw=False,
        stepsize_controller=oc.PIDController(rtol=1e-7, atol=1e-9),
        max_steps=100_000,
        **kwargs,
    )
    return int(sol.stats["num_steps"]), int(sol.result)


def test_adaptive_van_der_pol_stops_with_the_instability_code_early():
    """Van der Pol (mu = 1) to t = 8 at rtol 1e-7: `Reversible(Tsit5())` stops with
    `reversible_unstable` within twice Tsit5's steps (it ran out of 100000 steps and
    ended at inf before the monitor)."""
    tsit5, ok = _steps(oc.Tsit5(), 8.0)
    steps, result = _steps(oc.Reversible(oc.Tsit5()), 8.0)
    assert ok == oc.RESULTS.successful
    assert result == oc.RESULTS.reversible_unstable, result
    assert steps <= 2 * tsit5, (steps, tsit5)


def test_the_instability_is_raised_naming_the_alternatives():
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"(?s)Parasitic mode.*CheckpointAdjoint"):
        oc.diffeqsolve(
            _van_der_pol, oc.Reversible(oc.Tsit5()), 0.0, 16.0, 0.01, Y0, (1.0,), max_steps=4096
        )


def test_the_monitor_leaves_its_home_ground_alone():
    """An undamped oscillator over 100 time units, at constant and adaptive steps, and
    Van der Pol to t = 2: no stop."""
    oscillator = lambda t, y, args: jnp.stack([y[1], -y[0]])
    for controller in (oc.ConstantStepSize(), oc.PIDController(rtol=1e-8, atol=1e-10)):
        sol = oc.diffeqsolve(
            oscillator,
            oc.Reversible(oc.Tsit5()),
            0.0,
            100.0,
            0.05,
            Y0,
            stepsize_controller=controller,
            max_steps=4096,
        )
        np.testing.assert_allclose(
            sol.ys[-1], 2 * jnp.array([jnp.cos(100.0), -jnp.sin(100.0)]), atol=1e-5
        )
    assert _steps(oc.Reversible(oc.Tsit5()), 2.0)[1] == oc.RESULTS.successful


def _grad(t1, adjoint, max_amplification=1.0):
    solver = oc.Reversible(oc.Tsit5(), max_amplification=max_amplification)

    def loss(p):
        mu, scale = p
        sol = oc.diffeqsolve(
            _van_der_pol,
            solver,
            0.0,
            t1,
            0.01,
            Y0 * scale,
            (mu,),
            saveat=oc.SaveAt(ts=jnp.linspace(0.0, t1, 50)),
            max_steps=4096,
            adjoint=adjoint,
        )
        return jnp.sum(sol.ys**2)

    return jax.grad(loss)(jnp.array([1.0, 1.0]))


def test_constant_step_gradient_330_percent_off_is_refused():
    """Van der Pol, dt = 0.01 to t = 16 with the forward monitor off: `ReversibleAdjoint`
    gave (8.97, -54.5) where `CheckpointAdjoint` gives (22.2, 23.9), unrefused. Now the
    backward pass sees its cotangents amplified by ~1e10 and refuses."""
    with pytest.raises(eqx.EquinoxRuntimeError, match="gradient_tol.*CheckpointAdjoint"):
        _grad(16.0, oc.ReversibleAdjoint(), max_amplification=None)


# The default run: t1 = 4 with the forward monitor off, and a longer horizon with it on
# and off; the other cases (the same paths at other horizons): slow.
_CONSTANT_STEP_DEFAULT = {(None, 4.0), (1.0, 8.0), (None, 12.0)}


@pytest.mark.parametrize(
    "max_amplification, t1",
    [
        pytest.param(m, t1, marks=() if (m, t1) in _CONSTANT_STEP_DEFAULT else pytest.mark.slow)
        for m in (1.0, None)
        for t1 in (4.0, 8.0, 12.0)
    ],
)
def test_constant_step_gradient_is_right_or_refused(t1, max_amplification):
    """Right to the default `gradient_tol` against `CheckpointAdjoint` through the same
    solver, or refused: by the forward monitor (raised by the solve) or by the backward
    pass (raised with `throw=True`)."""
    try:
        got = _grad(t1, oc.ReversibleAdjoint(), max_amplification)
    except eqx.EquinoxRuntimeError as error:
        assert "CheckpointAdjoint" in str(error), str(error)
        return
    expected = _grad(t1, oc.CheckpointAdjoint(), max_amplification)
    error = float(jnp.max(jnp.abs(got - expected)) / jnp.max(jnp.abs(expected)))
    assert error <= family.tolerance(jnp.float64), error


def _check(outcome: family.Outcome, dtype):
    """Every returned gradient (forward not stopped, backward not refused) within the
    default tolerance of `CheckpointAdjoint`'s."""
    returned = ~outcome.stopped & ~outcome.refused
    errors = outcome.error[returned]
    assert np.all(errors <= family.tolerance(dtype)), (outcome.horizon[returned], errors)


# constant steps: slow; test_constant_step_gradient_is_right_or_refused and
# test_constant_step_gradient_330_percent_off_is_refused cover the backward pass's refusal
# at constant steps
@pytest.mark.parametrize(
    "kind, adaptive",
    [
        pytest.param(family.KINDS[0], False, marks=pytest.mark.slow),
        (family.KINDS[3], True),
    ],
    ids=["damped linear, constant", "neural ODE, adaptive"],
)
def test_family_gradients_are_right_or_refused_by_the_backward_pass(kind, adaptive):
    """With the forward monitor off the backward pass alone must refuse: horizons
    1-100 (one problem each)."""
    _check(family.evaluate(kind, adaptive, 1, jnp.float64, max_amplification=None), jnp.float64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("adaptive", [False, True], ids=["constant", "adaptive"])
@pytest.mark.parametrize("kind", family.KINDS, ids=[k.name for k in family.KINDS])
def test_family_gradients_are_right_or_refused(kind, adaptive, dtype):
    """The full family, 4 problems at each of 7 horizons per kind and controller, with
    the forward monitor off, so that the backward pass's refusal alone stands between
    the gradient and the user (with the monitor on, fewer gradients are returned:
    `benchmarks/bench_reversible_safety.py` counts both)."""
    outcome = family.evaluate(kind, adaptive, 4, dtype, max_amplification=None)
    _check(outcome, dtype)
