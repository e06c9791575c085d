"""diffrax's deprecated discrete terminating events (`diffeqsolve(...,
discrete_terminating_event=...)`): they warn, stop where a boolean `Event` would, and
their states and gradients match closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

TIGHT = oc.PIDController(rtol=1e-9, atol=1e-9)


def _decay(t, y, args):
    return -args * y


def _solve(y0, rate, discrete, sign=1.0, dtype=jnp.float64, adjoint=oc.CheckpointAdjoint()):
    with pytest.warns(DeprecationWarning, match="discrete_terminating_event"):
        return oc.diffeqsolve(
            _decay,
            oc.Tsit5(),
            0.0,
            sign * jnp.inf,
            sign * 0.1,
            jnp.asarray(y0, dtype),
            jnp.asarray(rate, dtype),
            stepsize_controller=TIGHT,
            discrete_terminating_event=discrete,
            adjoint=adjoint,
            max_steps=128,
        )


def _past(limit, sign=1.0):
    return oc.DiscreteTerminatingEvent(lambda state, **kwargs: sign * state.tprev > limit)


@pytest.mark.parametrize("sign, dtype", [(1.0, jnp.float32), (-1.0, jnp.float64)])
def test_stops_after_the_first_step_past_the_condition(sign, dtype):
    sol = _solve(2.0, 0.7, _past(1.5, sign), sign, dtype)
    t, y = sol.ts[0], sol.ys[0]
    assert sign * t > 1.5
    # It stops at the end of the step where the condition first holds: the step
    # before it ended at or before 1.5, so t is within one (accepted) step of it.
    assert sign * t - 1.5 < 1.0
    rtol = 1e-5 if dtype == jnp.float32 else 1e-7
    np.testing.assert_allclose(y, 2.0 * np.exp(-0.7 * float(t)), rtol=rtol)
    assert sol.ys.dtype == dtype


def test_same_as_a_boolean_event_and_reads_the_state():
    seen = oc.DiscreteTerminatingEvent(lambda state, **kwargs: state.y < 0.5)
    sol = _solve(2.0, 0.7, seen)
    reference = oc.diffeqsolve(
        _decay,
        oc.Tsit5(),
        0.0,
        jnp.inf,
        0.1,
        jnp.asarray(2.0),
        jnp.asarray(0.7),
        stepsize_controller=TIGHT,
        max_steps=128,
        event=oc.Event(lambda t, y, args, **kwargs: y < 0.5),
    )
    assert float(sol.ys[0]) < 0.5
    np.testing.assert_array_equal(sol.ts, reference.ts)
    np.testing.assert_array_equal(sol.ys, reference.ys)


def test_gradient_against_the_closed_form():
    # The stopping time depends on t only, so y(T) = y0 exp(-k T) at the T reached:
    # dy/dy0 = exp(-k T), dy/dk = -T y0 exp(-k T).
    def final(p):
        return _solve(p[0], p[1], _past(1.5)).ys[0]

    p = jnp.asarray([2.0, 0.7])
    t = float(_solve(2.0, 0.7, _past(1.5)).ts[0])
    grad = jax.grad(final)(p)
    expected = [np.exp(-0.7 * t), -t * 2.0 * np.exp(-0.7 * t)]
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


def test_steady_state_event_matches_steady_state_event():
    sol = _solve(2.0, 0.7, oc.SteadyStateEvent(rtol=1e-3, atol=1e-6))
    cond = oc.steady_state_event(rtol=1e-3, atol=1e-6)
    reference = oc.diffeqsolve(
        _decay,
        oc.Tsit5(),
        0.0,
        jnp.inf,
        0.1,
        jnp.asarray(2.0),
        jnp.asarray(0.7),
        stepsize_controller=TIGHT,
        max_steps=128,
        event=oc.Event(cond),
    )
    np.testing.assert_array_equal(sol.ts, reference.ts)
    # Stopped where |f| = 0.7 |y| < 1e-6 + 1e-3 |y|, i.e. |y| < 1e-6 / 0.699.
    assert abs(float(sol.ys[0])) < 1e-6 / 0.699


def test_refusals():
    event = oc.Event(lambda t, y, args, **kwargs: y - 1.0)
    with pytest.raises(ValueError, match="one of `event=...` and `discrete_terminating_event"):
        oc.diffeqsolve(
            _decay,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            2.0,
            0.7,
            event=event,
            discrete_terminating_event=_past(0.5),
        )
    with pytest.raises(TypeError, match="expects an `AbstractDiscreteTerminatingEvent`"):
        oc.diffeqsolve(
            _decay,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            2.0,
            0.7,
            discrete_terminating_event=lambda state: True,
        )
    with pytest.raises(ValueError, match="does not differentiate event times"):
        _solve(2.0, 0.7, _past(1.5), adjoint=oc.ReversibleAdjoint())
