"""Events (`Event`, `diffeqsolve(..., event=...)`): where a solve stops, what it saves,
and the derivatives of the event time and of the state there, against closed forms and
finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

TIGHT = oc.PIDController(rtol=1e-10, atol=1e-10)


def _ballistic(t, y, args):
    h, v = y
    return jnp.stack([v, -args + 0 * v])


def _height(t, y, args, **kwargs):
    return y[0]


def _fall(params, adjoint=oc.CheckpointAdjoint(), dtype=jnp.float64, controller=TIGHT):
    """`(t*, v(t*))` of a ball from height h0 with velocity v0 under gravity g."""
    h0, v0, g = params
    y0, t0 = jnp.stack([h0, v0]).astype(dtype), jnp.asarray(0.0, dtype)
    sol = oc.diffeqsolve(
        _ballistic,
        oc.Tsit5(),
        t0,
        10.0,
        0.01,
        y0,
        g.astype(dtype),
        event=oc.Event(_height),
        stepsize_controller=controller,
        adjoint=adjoint,
    )
    return sol.ts[0], sol.ys[0, 1]


def _fall_exact(params):
    h0, v0, g = params
    t = (v0 + jnp.sqrt(v0**2 + 2 * g * h0)) / g
    return t, v0 - g * t


P = jnp.asarray([10.0, 2.0, 9.81])


def test_ballistic_time_and_velocity():
    sol = oc.diffeqsolve(
        _ballistic,
        oc.Tsit5(),
        0.0,
        10.0,
        0.01,
        P[:2],
        P[2],
        event=oc.Event(_height),
        stepsize_controller=TIGHT,
    )
    t, v = _fall_exact(P)
    np.testing.assert_allclose(sol.ts[0], t, rtol=0, atol=1e-10)
    np.testing.assert_allclose(sol.ys[0, 1], v, rtol=0, atol=1e-10)
    assert sol.result == oc.RESULTS.event_occurred and sol.event_mask
    assert abs(float(sol.ys[0, 0])) < 1e-12


@pytest.mark.parametrize("adjoint", [oc.CheckpointAdjoint(), oc.InterpolatingAdjoint()])
def test_solver_state_at_the_event_is_the_field_there(adjoint):
    """A step cut short at a crossing ends with its FSAL stage evaluated afresh at t*:
    `sol.solver_state` is f(t*, y*) = (v*, -g), and so is its derivative."""

    def final_stage(params):
        sol = oc.diffeqsolve(
            _ballistic,
            oc.Tsit5(),
            0.0,
            10.0,
            0.01,
            params[:2],
            params[2],
            event=oc.Event(_height),
            stepsize_controller=TIGHT,
            adjoint=adjoint,
            saveat=oc.SaveAt(t1=True, solver_state=True),
        )
        return sol.solver_state

    np.testing.assert_allclose(final_stage(P), [_fall_exact(P)[1], -P[2]], rtol=0, atol=1e-10)
    got = jax.grad(lambda p: final_stage(p)[0])(P)
    want = jax.grad(lambda p: _fall_exact(p)[1])(P)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


# the velocity, recomputed: slow; `all-time` (another checkpoint count) and
# test_solver_state_at_the_event_is_the_field_there (the velocity's gradient) cover the path
@pytest.mark.parametrize(
    "adjoint, output",
    [
        (oc.CheckpointAdjoint(), 0),
        pytest.param(oc.CheckpointAdjoint(), 1, marks=pytest.mark.slow),
        pytest.param(oc.CheckpointAdjoint(checkpoints=4), 0, marks=pytest.mark.slow),
        pytest.param(oc.CheckpointAdjoint(checkpoints=4), 1, marks=pytest.mark.slow),
    ],
    ids=["all-time", "all-velocity", "c4-time", "c4-velocity"],
)
def test_ballistic_gradients(adjoint, output):
    got = jax.grad(lambda p: _fall(p, adjoint)[output])(P)
    want = jax.grad(lambda p: _fall_exact(p)[output])(P)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_ballistic_forward_mode():
    tangent = jnp.asarray([1.0, 0.3, -0.2])
    _, got = jax.jvp(lambda p: _fall(p, oc.ForwardMode()), (P,), (tangent,))
    _, want = jax.jvp(_fall_exact, (P,), (tangent,))
    np.testing.assert_allclose(jnp.stack(got), jnp.stack(want), rtol=0, atol=1e-8)


def test_ballistic_float32_under_strict_promotion():
    p32 = P.astype(jnp.float32)
    loose = oc.PIDController(rtol=1e-6, atol=1e-6)
    with jax.numpy_dtype_promotion("strict"):
        t, v = _fall(p32, dtype=jnp.float32, controller=loose)
        grad = jax.grad(lambda p: _fall(p, dtype=jnp.float32, controller=loose)[0])(p32)
    assert t.dtype == jnp.float32 and grad.dtype == jnp.float32
    np.testing.assert_allclose(jnp.stack([t, v]), jnp.stack(_fall_exact(P)), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(lambda p: _fall_exact(p)[0])(P), rtol=1e-4)


def _decay_time(params, checkpoints):
    """The time `y' = -k y` from y0 falls to 1/4, after a few hundred fixed steps."""
    y0, k = params
    event = oc.Event(lambda t, y, args, **kw: y - 0.25)
    adjoint = oc.CheckpointAdjoint(checkpoints=checkpoints)
    sol = oc.diffeqsolve(
        lambda t, y, k: -k * y, oc.Tsit5(), 0.0, 5.0, 0.004, y0, k, event=event, adjoint=adjoint
    )
    return sol.ts[0]


@pytest.mark.parametrize(
    "checkpoints",
    [None, pytest.param(2, marks=pytest.mark.slow), pytest.param(7, marks=pytest.mark.slow)],
)
def test_decay_event_time_gradient(checkpoints):
    params = jnp.asarray([1.0, 1.0])
    got = jax.grad(_decay_time)(params, checkpoints)
    y0, k = params
    want = [1 / (k * y0), -jnp.log(4 * y0) / k**2]  # t* = log(4 y0) / k
    np.testing.assert_allclose(_decay_time(params, checkpoints), jnp.log(4.0), atol=1e-10)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def _ramp(t, y, args):
    return jnp.ones_like(y)


def test_earliest_crossing_wins_not_the_first_condition():
    # Both cross in the one step [0, 1]: the second condition first.
    event = oc.Event((lambda t, y, a, **kw: y - 0.7, lambda t, y, a, **kw: y - 0.3))
    sol = oc.diffeqsolve(_ramp, oc.Tsit5(), 0.0, 5.0, 1.0, 0.0, event=event)
    np.testing.assert_allclose(sol.ts, [0.3], atol=1e-14)
    assert not sol.event_mask[0] and sol.event_mask[1]


@pytest.mark.parametrize("direction, when", [(None, 1.0), (True, 3.0), (False, 1.0)])
def test_direction(direction, when):
    # sin(pi t / 2) - 1/2 ... via y = (t - 2)^2 - 1: down through 0 at t=1, up at t=3.
    event = oc.Event(lambda t, y, a, **kw: (t - 2) ** 2 - 1, direction=direction)
    sol = oc.diffeqsolve(_ramp, oc.Tsit5(), 0.0, 5.0, 0.25, 0.0, event=event)
    np.testing.assert_allclose(sol.ts, [when], atol=1e-12)


def _after_event(params):
    """The state at the event of a first solve, then integrated further by a second
    (the setting of diffrax's issue 729)."""
    y0, k = params
    event = oc.Event(lambda t, y, args, **kw: y[0] - 0.5)
    f = lambda t, y, k: jnp.stack([-k * y[0], y[0]])
    first = oc.diffeqsolve(
        f,
        oc.Tsit5(),
        0.0,
        10.0,
        0.05,
        jnp.stack([y0, 0.0]),
        k,
        event=event,
        adjoint=oc.CheckpointAdjoint(checkpoints=3),
    )
    t_event, y_event = first.ts[0], first.ys[0]
    second = oc.diffeqsolve(f, oc.Tsit5(), t_event, t_event + 1.0, 0.05, y_event, k)
    return second.ys[0, 1] + t_event


@pytest.mark.slow
def test_gradient_after_the_event_matches_finite_differences():
    params = jnp.asarray([1.3, 0.8])
    got = jax.grad(_after_event)(params)
    eps, value = 1e-6, jax.jit(jax.vmap(_after_event))
    shifts = jnp.concatenate([params[None] + eps * jnp.eye(2), params[None] - eps * jnp.eye(2)])
    ups_downs = value(shifts)
    fd = (ups_downs[:2] - ups_downs[2:]) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-6)


def _time_from(h0):
    # Tsit5 integrates the quadratic exactly: loose tolerances, few steps.
    loose = oc.PIDController(rtol=1e-3, atol=1e-3)
    return _fall(jnp.stack([h0, jnp.asarray(0.0), jnp.asarray(9.81)]), controller=loose)[0]


@pytest.mark.slow
def test_vmap_over_heights():
    heights = jnp.asarray([1.0, 5.0, 20.0])
    times, grads = jax.vmap(jax.value_and_grad(_time_from))(heights)
    one = jax.jit(jax.value_and_grad(_time_from))
    single = [one(h) for h in heights]
    np.testing.assert_allclose(times, [t for t, _ in single], rtol=0, atol=1e-12)
    np.testing.assert_allclose(grads, [g for _, g in single], rtol=0, atol=1e-12)
    np.testing.assert_allclose(times, jnp.sqrt(2 * heights / 9.81), atol=1e-10)


@pytest.mark.parametrize("t1", [pytest.param(-10.0, marks=pytest.mark.slow), -jnp.inf])
def test_backwards_in_time(t1):
    # y' = -y from y(0) = 1 backwards: y = e^{-t} reaches 4 at t = -log 4.
    event = oc.Event(lambda t, y, args, **kw: y - 4.0)
    y0 = jnp.asarray(1.0)
    grad, sol = jax.grad(lambda y0: _backwards_time(y0, t1, event), has_aux=True)(y0)
    np.testing.assert_allclose(sol.ts, [-jnp.log(4.0)], atol=1e-12)
    np.testing.assert_allclose(grad, 1.0 / 1.0, atol=1e-8)  # t* = log(y0 / 4): dt*/dy0 = 1/y0


def _backwards_time(y0, t1, event):
    sol = oc.diffeqsolve(
        lambda t, y, a: -y, oc.Tsit5(), 0.0, t1, -0.01, y0, event=event, stepsize_controller=TIGHT
    )
    return sol.ts[0], sol


def test_boolean_condition_stops_at_the_step_end():
    event = oc.Event(lambda t, y, a, **kw: y > 2.5)

    def end(y0):
        sol = oc.diffeqsolve(_ramp, oc.Tsit5(), 0.0, 10.0, 1.0, y0, event=event)
        return sol.ts[0]

    t, grad = jax.value_and_grad(end)(jnp.asarray(0.0))
    assert t == 3.0  # the end of the step [2, 3], where y = 3 > 2.5 first holds
    assert grad == 0.0  # the time of a fixed grid's step end does not move with y0


def test_boolean_condition_at_t0_takes_no_step():
    event = oc.Event(lambda t, y, a, **kw: y > -1.0)
    sol = oc.diffeqsolve(_ramp, oc.Tsit5(), 0.0, 10.0, 1.0, 0.0, event=event)
    assert sol.stats["num_steps"] == 0 and sol.ts[0] == 0.0 and sol.event_mask


def test_save_times_after_the_event_are_inf():
    event = oc.Event(lambda t, y, a, **kw: y - 2.5)
    saveat = oc.SaveAt(ts=jnp.asarray([1.0, 2.0, 3.0, 4.0]), t1=True)
    sol = oc.diffeqsolve(_ramp, oc.Tsit5(), 0.0, 5.0, 0.5, 0.0, saveat=saveat, event=event)
    # The rows of `ts`, then the `t1` row (at the event).
    np.testing.assert_allclose(sol.ts, [1.0, 2.0, np.inf, np.inf, 2.5], atol=1e-12)
    np.testing.assert_allclose(sol.ys, [1.0, 2.0, np.inf, np.inf, 2.5], atol=1e-12)


def test_steps_and_dense_output_end_at_the_event():
    event = oc.Event(lambda t, y, a, **kw: y - 2.3)
    saveat = oc.SaveAt(steps=True, dense=True)
    sol = oc.diffeqsolve(
        _ramp, oc.Tsit5(), 0.0, 5.0, 1.0, 0.0, saveat=saveat, event=event, max_steps=8
    )
    np.testing.assert_allclose(sol.ts[:4], [1.0, 2.0, 2.3, np.inf], atol=1e-12)
    np.testing.assert_allclose(sol.interpolation.t1, 2.3, atol=1e-12)
    np.testing.assert_allclose(sol.evaluate(2.2), 2.2, atol=1e-12)


def test_event_that_never_fires_reaches_t1():
    sol = oc.diffeqsolve(
        _ramp, oc.Tsit5(), 0.0, 1.0, 0.1, 0.0, event=oc.Event([_height_of_ramp, _height_of_ramp])
    )
    assert sol.result == oc.RESULTS.successful and sol.ts[0] == 1.0
    assert sol.event_mask == [False, False]


def _height_of_ramp(t, y, args, **kwargs):
    return y - 7.0


def test_steady_state_event():
    event = oc.Event(oc.steady_state_event())
    controller = oc.PIDController(rtol=1e-4, atol=1e-6)
    sol = oc.diffeqsolve(
        lambda t, y, a: -y,
        oc.Tsit5(),
        0.0,
        jnp.inf,
        0.1,
        1.0,
        stepsize_controller=controller,
        event=event,
    )
    assert sol.event_mask and abs(float(sol.ys[0])) < 1e-5


def test_pytree_and_complex_states():
    event = oc.Event(lambda t, y, a, **kw: jnp.real(y["z"]) - 0.5)
    y0 = {"z": jnp.asarray(1.0 + 0.0j), "w": jnp.zeros(2)}
    f = lambda t, y, a: {"z": 1j * y["z"], "w": jnp.ones(2)}  # z = e^{it}
    sol = oc.diffeqsolve(f, oc.Tsit5(), 0.0, 5.0, 0.01, y0, event=event, stepsize_controller=TIGHT)
    np.testing.assert_allclose(sol.ts, [jnp.pi / 3], atol=1e-9)
    np.testing.assert_allclose(sol.ys["w"][0], [jnp.pi / 3] * 2, atol=1e-9)


# 1/3: slow; the cube root of 2 covers the path
@pytest.mark.parametrize(
    "root",
    [pytest.param(1 / 3, marks=pytest.mark.slow), 2 ** (1 / 3)],
    ids=["third", "cube-root-2"],
)
def test_crossing_located_to_a_few_ulp(root):
    # y = t (up to the rounding of Tsit5's dense output): the condition changes sign on
    # the step's polynomial within a few ulp either side of the located time.
    cond = lambda y: y**3 - root**3
    event = oc.Event(lambda t, y, a, **kw: cond(y))
    sol = oc.diffeqsolve(
        _ramp,
        oc.Tsit5(),
        0.0,
        5.0,
        0.7,
        0.0,
        event=event,
        saveat=oc.SaveAt(t1=True, dense=True),
        max_steps=16,
    )
    t = sol.ts[0]
    ulps = 8 * np.finfo(np.float64).eps * root
    below, above = cond(sol.evaluate(t - ulps)), cond(sol.evaluate(t + ulps))
    assert below < 0 < above
    np.testing.assert_allclose(t, root, rtol=1e-14)
