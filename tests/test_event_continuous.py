"""Events under the continuous adjoints (`InterpolatingAdjoint`, `BacksolveAdjoint`):
the adjoint ODE started at the event time with the event's jump term, against closed
forms and against `CheckpointAdjoint`'s gradient of the same solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

TIGHT = oc.PIDController(rtol=1e-10, atol=1e-10)
INTERPOLATING, BACKSOLVE = oc.InterpolatingAdjoint(), oc.BacksolveAdjoint()
CONTINUOUS = [
    pytest.param(INTERPOLATING, id="interpolating"),
    pytest.param(BACKSOLVE, id="backsolve"),
]


def _ballistic(t, y, args):
    h, v = y
    return jnp.stack([v, -args[0] + 0 * v])


def _fall(params, adjoint, dtype=jnp.float64, controller=TIGHT):
    """`(t*, v(t*))` of a ball from height h0, velocity v0, under gravity g, hitting a
    floor at height `floor_args + floor_closed` (one given in `args`, the other closed
    over by the condition)."""
    h0, v0, g, floor_args, floor_closed = (p.astype(dtype) for p in params)
    event = oc.Event(lambda t, y, args, **kw: y[0] - args[1] - floor_closed)
    y0, t0 = jnp.stack([h0, v0]), jnp.asarray(0.0, dtype)
    sol = oc.diffeqsolve(
        _ballistic,
        oc.Tsit5(),
        t0,
        10.0,
        0.01,
        y0,
        (g, floor_args),
        event=event,
        stepsize_controller=controller,
        adjoint=adjoint,
    )
    return jnp.stack([sol.ts[0], sol.ys[0, 1]])


def _fall_exact(params):
    h0, v0, g, floor_args, floor_closed = params
    drop = h0 - floor_args - floor_closed
    t = (v0 + jnp.sqrt(v0**2 + 2 * g * drop)) / g
    return jnp.stack([t, v0 - g * t])


P = jnp.asarray([10.0, 2.0, 9.81, 0.0, 0.0])
RAISED = jnp.asarray([10.0, 2.0, 9.81, 0.7, 0.4])  # the floor in `args` and in a closure


@pytest.mark.parametrize(
    "params",
    [pytest.param(P, id="ground"), pytest.param(RAISED, id="floor", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("adjoint", CONTINUOUS)
def test_ballistic_time_and_velocity_gradients(adjoint, params):
    # d(t*, v(t*)) / d(h0, v0, g, floor in args, floor closed over by the condition)
    got = jax.jacrev(_fall)(params, adjoint)
    np.testing.assert_allclose(got, jax.jacrev(_fall_exact)(params), rtol=0, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", CONTINUOUS)
def test_ballistic_equals_checkpoint_adjoint(adjoint):
    got = jax.jacrev(_fall)(RAISED, adjoint)
    want = jax.jacrev(_fall)(RAISED, oc.CheckpointAdjoint())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def _decay_time(params, adjoint):
    """The time `y' = -k y` from y0 falls to 1/4, after a few hundred fixed steps."""
    y0, k = params
    event = oc.Event(lambda t, y, args, **kw: y - 0.25)
    sol = oc.diffeqsolve(
        lambda t, y, k: -k * y, oc.Tsit5(), 0.0, 5.0, 0.004, y0, k, event=event, adjoint=adjoint
    )
    return sol.ts[0]


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
        pytest.param(
            oc.InterpolatingAdjoint(checkpoints=5), id="interpolating-c5", marks=pytest.mark.slow
        ),
        pytest.param(oc.BacksolveAdjoint(checkpoints=3), id="backsolve-c3", marks=pytest.mark.slow),
    ],
)
def test_decay_event_time_gradient(adjoint):
    params = jnp.asarray([1.0, 1.0])
    y0, k = params
    want = [1 / (k * y0), -jnp.log(4 * y0) / k**2]  # t* = log(4 y0) / k
    np.testing.assert_allclose(jax.grad(_decay_time)(params, adjoint), want, rtol=0, atol=1e-8)


def _oscillator(t, y, w):
    x, v = y
    return jnp.stack([v, -(w**2) * x])


def _zero_crossing(params, direction, adjoint):
    """`(t*, v(t*))` where `x = x0 cos(w t)` first crosses zero in `direction`."""
    x0, w = params
    event = oc.Event(lambda t, y, args, **kw: y[0], direction=direction)
    sol = oc.diffeqsolve(
        _oscillator,
        oc.Tsit5(),
        0.0,
        10.0,
        0.01,
        jnp.stack([x0, 0.0]),
        w,
        event=event,
        stepsize_controller=TIGHT,
        adjoint=adjoint,
    )
    return jnp.stack([sol.ts[0], sol.ys[0, 1]])


def _zero_crossing_exact(params, direction):
    x0, w = params
    quarters = 3 if direction else 1  # up through zero at 3 pi / 2, down at pi / 2
    t = quarters * jnp.pi / (2 * w)
    return jnp.stack([t, -x0 * w * jnp.sin(w * t)])


@pytest.mark.parametrize(
    "direction, adjoint",
    [
        pytest.param(True, BACKSOLVE, id="up-backsolve"),
        pytest.param(False, BACKSOLVE, id="down-backsolve", marks=pytest.mark.slow),
        pytest.param(True, INTERPOLATING, id="up-interpolating", marks=pytest.mark.slow),
    ],
)
def test_direction(direction, adjoint):
    params = jnp.asarray([1.3, 2.0])
    got = jax.jacrev(_zero_crossing)(params, direction, adjoint)
    want = jax.jacrev(_zero_crossing_exact)(params, direction)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def _throw(params, adjoint):
    """A ball thrown up from 10 m between a floor (0) and a ceiling (12 m), the two
    conditions a dict: the one met first ends the solve."""
    h0, v0, g = params
    event = oc.Event(
        {"floor": lambda t, y, a, **kw: y[0], "ceiling": lambda t, y, a, **kw: y[0] - 12.0}
    )
    sol = oc.diffeqsolve(
        _ballistic,
        oc.Tsit5(),
        0.0,
        10.0,
        0.01,
        jnp.stack([h0, v0]),
        (g,),
        event=event,
        stepsize_controller=TIGHT,
        adjoint=adjoint,
    )
    return jnp.stack([sol.ts[0], sol.ys[0, 1]]), sol.event_mask


def _throw_exact(params, ceiling: bool):
    h0, v0, g = params
    if ceiling:  # the first root of h0 + v0 t - g t^2 / 2 = 12
        t = (v0 - jnp.sqrt(v0**2 - 2 * g * (12.0 - h0))) / g
    else:
        t = (v0 + jnp.sqrt(v0**2 + 2 * g * h0)) / g
    return jnp.stack([t, v0 - g * t])


@pytest.mark.parametrize(
    "v0, adjoint",
    [
        pytest.param(10.0, BACKSOLVE, id="ceiling-backsolve"),
        pytest.param(2.0, INTERPOLATING, id="floor-interpolating", marks=pytest.mark.slow),
    ],
)
def test_only_the_condition_that_fired_contributes(v0, adjoint):
    params = jnp.asarray([10.0, v0, 9.81])
    got, mask = jax.jacrev(_throw, has_aux=True)(params, adjoint)
    ceiling = v0 > 5  # it reaches 10 + v0^2 / 2g
    assert bool(mask["ceiling"]) == ceiling and bool(mask["floor"]) != ceiling
    want = jax.jacrev(_throw_exact)(params, ceiling)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def _landing(h0, adjoint):
    # Tsit5 integrates the quadratic exactly: loose tolerances, few steps.
    loose = oc.PIDController(rtol=1e-3, atol=1e-3)
    params = jnp.stack([h0, 0.0, 9.81, 0.0, 0.0])
    return jnp.sum(_fall(params, adjoint, controller=loose))


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", CONTINUOUS)
def test_vmap_over_heights(adjoint):
    heights = jnp.asarray([1.0, 5.0, 20.0])  # each lands at its own time
    values, grads = jax.vmap(jax.value_and_grad(_landing), (0, None))(heights, adjoint)
    one = jax.jit(jax.value_and_grad(_landing), static_argnums=1)
    single = [one(h, adjoint) for h in heights]
    np.testing.assert_allclose(values, [v for v, _ in single], rtol=0, atol=1e-12)
    np.testing.assert_allclose(grads, [g for _, g in single], rtol=0, atol=1e-12)
    exact = jax.vmap(jax.grad(lambda h: jnp.sum(_fall_exact(jnp.stack([h, 0, 9.81, 0, 0])))))
    np.testing.assert_allclose(grads, exact(heights), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
    ],
)
def test_float32_under_strict_promotion(adjoint):
    loose = oc.PIDController(rtol=1e-6, atol=1e-6)
    p32 = RAISED.astype(jnp.float32)
    with jax.numpy_dtype_promotion("strict"):
        got = jax.grad(lambda p: jnp.sum(_fall(p, adjoint, jnp.float32, loose)))(p32)
    assert got.dtype == jnp.float32
    want = jax.grad(lambda p: jnp.sum(_fall_exact(p)))(RAISED)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _backwards(params, adjoint):
    """`y' = -k y` from `y(0) = y0` backwards in time until `y = 4`:
    `t* = log(y0 / 4) / k` (negative), `y(t*) = 4` whatever `y0` and `k`."""
    event = oc.Event(lambda t, y, args, **kw: y - 4.0)
    y0, k = params
    sol = oc.diffeqsolve(
        lambda t, y, k: -k * y,
        oc.Tsit5(),
        0.0,
        -jnp.inf,
        -0.01,
        y0,
        k,
        event=event,
        stepsize_controller=TIGHT,
        adjoint=adjoint,
    )
    return jnp.stack([sol.ts[0], sol.ys[0]])


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
    ],
)
def test_backwards_in_time(adjoint):
    params = jnp.asarray([1.0, 1.5])
    y0, k = params
    got = jax.jacrev(_backwards)(params, adjoint)
    want = [[1 / (k * y0), -jnp.log(y0 / 4) / k**2], [0.0, 0.0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def _observed(params, adjoint, event):
    """A damped nonlinear pendulum observed at save times before the event, at every
    step and at the event: a loss of all of them."""
    theta0, damping = params

    def pendulum(t, y, args):
        angle, speed = y
        return jnp.stack([speed, -jnp.sin(angle) - args * speed])

    ts = jnp.asarray([0.3, 0.9, 1.7, 50.0])  # the last one after the event: inf
    sol = oc.diffeqsolve(
        pendulum,
        oc.Tsit5(),
        0.0,
        60.0,
        0.01,
        jnp.stack([theta0, 0.0]),
        damping,
        event=event,
        stepsize_controller=TIGHT,
        adjoint=adjoint,
        saveat=oc.SaveAt(ts=ts, steps=True, t1=True),
        max_steps=256,
    )
    finite = jnp.isfinite(sol.ts)
    weights = jnp.where(finite, jnp.linspace(0.5, 1.5, sol.ts.shape[0]), 0.0)
    ys = jnp.where(finite[:, None], sol.ys, 0.0)
    return jnp.sum(weights * jnp.where(finite, sol.ts, 0.0)) + jnp.sum(weights[:, None] * ys**2)


SWING = oc.Event(lambda t, y, args, **kw: y[0] + 0.5, direction=False)  # past -0.5 rad
SLOW = oc.Event(lambda t, y, args, **kw: jnp.abs(y[1]) < 0.05)  # boolean: at a step end


@pytest.mark.parametrize(
    "event, adjoint",
    [
        pytest.param(SWING, BACKSOLVE, id="real-backsolve", marks=pytest.mark.slow),
        pytest.param(SWING, INTERPOLATING, id="real-interpolating", marks=pytest.mark.slow),
        pytest.param(SLOW, INTERPOLATING, id="boolean-interpolating", marks=pytest.mark.slow),
        pytest.param(SLOW, BACKSOLVE, id="boolean-backsolve", marks=pytest.mark.slow),
    ],
)
def test_every_output_equals_checkpoint_adjoint(event, adjoint):
    # Save times before the event (an ordinary jump of the adjoint), one after it (inf,
    # no cotangent), every step (the last at the event: its time moves), the t1 row.
    params = jnp.asarray([1.2, 0.3])
    got = jax.grad(_observed)(params, adjoint, event)
    want = jax.grad(_observed)(params, oc.CheckpointAdjoint(), event)
    np.testing.assert_allclose(got, want, rtol=1e-7)


def _fall_saved(params, adjoint):
    """A loss of every kind of output: the ballistic fall saved at `t = 0.5` (before
    the impact), at `t = 5` (after it: inf) and at every step (the last at the impact,
    its time included)."""
    h0, v0, g = params
    sol = oc.diffeqsolve(
        _ballistic,
        oc.Tsit5(),
        0.0,
        10.0,
        0.01,
        jnp.stack([h0, v0]),
        (g,),
        event=oc.Event(lambda t, y, args, **kw: y[0]),
        adjoint=adjoint,
        saveat=oc.SaveAt(ts=jnp.asarray([0.5, 5.0]), steps=True),
        stepsize_controller=TIGHT,
        max_steps=64,
    )
    finite = jnp.isfinite(sol.ts)
    last = jnp.arange(sol.ts.shape[0]) == jnp.sum(finite) - 1  # the step at the impact
    at_half = sol.ts == 0.5
    ys = jnp.where(finite[:, None], sol.ys, 0.0)
    impact = jnp.sum(jnp.where(last, jnp.where(finite, sol.ts, 0.0) + 2 * ys[:, 1], 0.0))
    return impact + jnp.sum(jnp.where(at_half, 0.3 * ys[:, 0] + 0.7 * ys[:, 1], 0.0))


def _fall_saved_exact(params):
    h0, v0, g = params
    t, v = _fall_exact(jnp.stack([h0, v0, g, 0.0, 0.0]))
    return t + 2 * v + 0.3 * (h0 + 0.5 * v0 - g / 8) + 0.7 * (v0 - g / 2)


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
    ],
)
def test_step_rows_and_save_times_around_the_event(adjoint):
    params = jnp.asarray([10.0, 2.0, 9.81])
    got = jax.grad(_fall_saved)(params, adjoint)
    np.testing.assert_allclose(got, jax.grad(_fall_saved_exact)(params), rtol=0, atol=1e-8)


def _threshold(params, adjoint):
    """`y' = -k y` under an adaptive controller until the boolean `y < 0.3` holds at a
    step's end: `(t* + y(t*), t*)`."""
    y0, k = params
    sol = oc.diffeqsolve(
        lambda t, y, k: -k * y,
        oc.Tsit5(),
        0.0,
        10.0,
        0.1,
        y0,
        k,
        event=oc.Event(lambda t, y, a, **kw: y < 0.3),
        adjoint=adjoint,
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
    )
    return sol.ts[0] + sol.ys[0], sol.ts[0]


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
        pytest.param(oc.CheckpointAdjoint(), id="checkpoint", marks=pytest.mark.slow),
    ],
)
def test_boolean_event_time_is_a_fixed_step_end(adjoint):
    # The step grid does not move with y0 or k (the controller's decisions are not
    # differentiated), so only y(t*) = y0 exp(-k t*) at that fixed time does.
    params = jnp.asarray([1.0, 0.7])
    got, t_end = jax.grad(_threshold, has_aux=True)(params, adjoint)
    y0, k = params
    assert y0 * jnp.exp(-k * t_end) < 0.3 < y0 * jnp.exp(-k * (t_end - 0.05))  # a step's end
    want = [jnp.exp(-k * t_end), -t_end * y0 * jnp.exp(-k * t_end)]
    np.testing.assert_allclose(got, want, rtol=1e-7)


def _fall_observed(params, adjoint):
    """The last step row of `SaveAt(steps=True, fn=t v)`: `t* v(t*)`, backwards in time
    (the ball's fall run from the impact back up: `t -> -t`)."""
    h0, v0, g = params

    def up(t, y, args):  # the ballistic field in time -t
        return jnp.stack([-y[1], args[0] + 0 * y[1]])

    saveat = oc.SaveAt(steps=True, fn=lambda t, y, args: t * y[1])
    sol = oc.diffeqsolve(
        up,
        oc.Tsit5(),
        0.0,
        -10.0,
        -0.01,
        jnp.stack([h0, v0]),
        (g,),
        event=oc.Event(lambda t, y, args, **kw: y[0]),
        adjoint=adjoint,
        saveat=saveat,
        stepsize_controller=TIGHT,
        max_steps=64,
    )
    last = jnp.arange(sol.ys.shape[0]) == jnp.sum(jnp.isfinite(sol.ts)) - 1
    return jnp.sum(jnp.where(last, sol.ys, 0.0))


@pytest.mark.parametrize(
    "adjoint",
    [
        pytest.param(INTERPOLATING, id="interpolating", marks=pytest.mark.slow),
        pytest.param(BACKSOLVE, id="backsolve"),
    ],
)
def test_a_step_row_of_fn_moves_with_the_event_time(adjoint):
    # In time s = -t the state is the fall's at t = -s: the impact at s* = -t*, where
    # fn = s* v(s*) = -t* v(t*).
    params = jnp.asarray([10.0, 2.0, 9.81])

    def exact(p):
        t, v = _fall_exact(jnp.stack([*p, 0.0, 0.0]))
        return -t * v

    got = jax.grad(_fall_observed)(params, adjoint)
    np.testing.assert_allclose(_fall_observed(params, adjoint), exact(params), atol=1e-9)
    np.testing.assert_allclose(got, jax.grad(exact)(params), rtol=0, atol=1e-8)


def _after_event(params, adjoint):
    """The state at the event of a first solve, then integrated further by a second
    (the setting of diffrax's issue 729), the first under `adjoint`."""
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
        adjoint=adjoint,
        stepsize_controller=TIGHT,
    )
    t_event, y_event = first.ts[0], first.ys[0]
    second = oc.diffeqsolve(f, oc.Tsit5(), t_event, t_event + 1.0, 0.05, y_event, k)
    return second.ys[0, 1] + t_event


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", CONTINUOUS)
def test_gradient_after_the_event_matches_finite_differences(adjoint):
    params = jnp.asarray([1.3, 0.8])
    got = jax.grad(_after_event)(params, adjoint)
    eps, value = 1e-6, jax.jit(jax.vmap(lambda p: _after_event(p, oc.CheckpointAdjoint())))
    shifts = jnp.concatenate([params[None] + eps * jnp.eye(2), params[None] - eps * jnp.eye(2)])
    ups_downs = value(shifts)
    fd = (ups_downs[:2] - ups_downs[2:]) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-6)
