"""CheckpointAdjoint: schedules change cost, never values."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import sampled_matrix

import odeckpt as oc
from odeckpt import schedules

A = jnp.array([[-0.3, 1.0], [-1.0, -0.2]])
Y0 = jnp.array([1.0, 0.5])
TS = jnp.array([0.3, 1.1, 2.0, 2.9])


def _linear(t, y, a):
    return a @ y


def _lotka_volterra(t, y, a):
    x, z = y[0], y[1]
    return jnp.stack([a[0] * x - a[1] * x * z, -a[2] * z + a[3] * x * z])


def _loss(adjoint, saveat, vf=_linear, args=A, controller=None, dt0=0.05, t1=3.0):
    controller = controller or oc.PIDController(rtol=1e-7, atol=1e-9)

    def loss(y0, args):
        sol = oc.diffeqsolve(
            vf,
            oc.Tsit5(),
            0.0,
            t1,
            dt0,
            y0,
            args=args,
            saveat=saveat,
            stepsize_controller=controller,
            adjoint=adjoint,
            max_steps=256,
        )
        weights = jnp.arange(1, sol.ys.shape[0] + 1, dtype=sol.ys.dtype)[:, None]
        return jnp.sum(jnp.where(jnp.isfinite(sol.ys), sol.ys, 0.0) ** 2 * weights)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


SAVEATS = {
    "t1": oc.SaveAt(t1=True),
    "ts": oc.SaveAt(ts=TS),
    "ts+t1": oc.SaveAt(ts=TS, t1=True),
    "steps": oc.SaveAt(steps=True),
}


EVERY_COUNT_FAST = {
    ("ts+t1", "3"),
    ("steps", "5"),
}
"""`ts+t1` (the rows of `ts` and of `t1`) and `steps` by default; `-m slow` runs every
pair. The other counts: c = 1 in test_gradients.py's
test_every_checkpoint_count_gives_the_stored_gradient, c = 40 in
test_windows_where_every_step_pushes_keep_the_plan_and_the_gradient."""


@pytest.mark.parametrize(
    "save, c",
    sampled_matrix(EVERY_COUNT_FAST, save=list(SAVEATS), c=["1", "2", "3", "5", "9", "40"]),
)
def test_every_checkpoint_count_gives_the_stored_gradient(save, c):
    c = int(c)
    args = jnp.array([1.5, 1.0, 3.0, 1.0])
    stored = _loss(oc.CheckpointAdjoint(), SAVEATS[save], _lotka_volterra, args)(Y0, args)
    recomputed = _loss(oc.CheckpointAdjoint(c), SAVEATS[save], _lotka_volterra, args)(Y0, args)
    for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(recomputed), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


# the other checkpoint count: slow; test_every_checkpoint_count_gives_the_stored_gradient
# covers the path
@pytest.mark.parametrize("c", [None, pytest.param(4, marks=pytest.mark.slow)])
def test_gradient_matches_matrix_exponential(c):
    def exact(y0, a):
        return sum(
            jnp.sum((jax.scipy.linalg.expm(a * t) @ y0) ** 2) * (i + 1) for i, t in enumerate(TS)
        )

    controller = oc.PIDController(rtol=1e-11, atol=1e-12)
    grads = _loss(oc.CheckpointAdjoint(c), SAVEATS["ts"], controller=controller)(Y0, A)
    expected = jax.grad(exact, argnums=(0, 1))(Y0, A)
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-8)


# forwards in time: slow; test_gradients.py's test_gradient_with_respect_to_t1 and
# test_reversible_adjoint.py's test_equals_checkpoint_adjoint (t0 and t1) cover the path
@pytest.mark.parametrize(
    "direction, c",
    [
        pytest.param(1.0, None, marks=pytest.mark.slow),
        pytest.param(-1.0, None, marks=pytest.mark.slow),
        pytest.param(1.0, 3, marks=pytest.mark.slow),
        (-1.0, 3),
    ],
)
def test_time_gradients_match_finite_differences(direction, c):
    def loss(t0, t1, ts, k):
        sol = oc.diffeqsolve(
            lambda t, y, a: -a * y + jnp.sin(t),
            oc.Tsit5(),
            t0,
            t1,
            None,
            jnp.array(1.0),
            args=k,
            saveat=oc.SaveAt(ts=ts, t1=True),
            stepsize_controller=oc.PIDController(rtol=1e-11, atol=1e-12),
            adjoint=oc.CheckpointAdjoint(c),
        )
        return jnp.sum(sol.ys**2 * jnp.arange(1.0, 5.0))

    t0, t1 = (0.0, 2.0) if direction > 0 else (2.0, 0.0)
    ts = jnp.array([0.5, 1.0, 1.5])[:: int(direction)]
    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(t0, t1, ts, 0.7)
    eps = 1e-6
    fd_t0 = (loss(t0 + eps, t1, ts, 0.7) - loss(t0 - eps, t1, ts, 0.7)) / (2 * eps)
    fd_t1 = (loss(t0, t1 + eps, ts, 0.7) - loss(t0, t1 - eps, ts, 0.7)) / (2 * eps)
    fd_k = (loss(t0, t1, ts, 0.7 + eps) - loss(t0, t1, ts, 0.7 - eps)) / (2 * eps)
    basis = jnp.eye(3)
    fd_ts = [
        (loss(t0, t1, ts + eps * e, 0.7) - loss(t0, t1, ts - eps * e, 0.7)) / (2 * eps)
        for e in basis
    ]
    np.testing.assert_allclose(grads[0], fd_t0, rtol=1e-5)
    np.testing.assert_allclose(grads[1], fd_t1, rtol=1e-5)
    np.testing.assert_allclose(grads[2], jnp.stack(fd_ts), rtol=1e-5)
    np.testing.assert_allclose(grads[3], fd_k, rtol=1e-5)


@pytest.mark.parametrize("direction", [1.0, pytest.param(-1.0, marks=pytest.mark.slow)])
def test_replays_without_error_control_give_the_same_gradient(direction, monkeypatch):
    """Small states replay steps without the error norm (`_integrate._light_replay`);
    every derivative, the times' included, is the one of the full replay."""
    from odeckpt._integrator import integrator as _integrate

    def loss(y0, k, t0, t1, ts):
        sol = oc.diffeqsolve(
            lambda t, y, a: jnp.stack([y[1], -y[0] - a * y[1] + jnp.sin(t)]),
            oc.Tsit5(),
            t0,
            t1,
            0.05 * direction,
            y0,
            args=k,
            saveat=oc.SaveAt(ts=ts, t1=True),
            stepsize_controller=oc.PIDController(rtol=1e-7, atol=1e-9),
            adjoint=oc.CheckpointAdjoint(3),
            max_steps=500,
        )
        assert int(sol.stats["num_rejected_steps"]) > 0
        return jnp.sum(jnp.sin(sol.ys) * jnp.arange(1.0, 1.0 + sol.ys.size).reshape(sol.ys.shape))

    t0, t1 = (0.0, 3.0) if direction > 0 else (3.0, 0.0)
    ts = jnp.array([0.7, 1.4, 2.1])[:: int(direction)]
    args = (jnp.array([1.0, 0.0]), 30.0 * direction, t0, t1, ts)  # damped either way
    light = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)
    monkeypatch.setattr(_integrate, "_LIGHT_REPLAY_BYTES", -1)
    full = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)
    for a, b in zip(light, full, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize(
    "direction, c",
    [
        pytest.param(1.0, None, marks=pytest.mark.slow),
        pytest.param(-1.0, None, marks=pytest.mark.slow),
        pytest.param(1.0, 2, marks=pytest.mark.slow),
        (-1.0, 2),
    ],
)
def test_save_time_at_t0_has_the_one_sided_derivative(direction, c):
    """y(ts[i]) with ts[i] == t0 is y0, and moves like y0 + (ts[i] - t0) f(t0, y0)."""

    def loss(t0, ts, y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: -2.0 * y,
            oc.Tsit5(),
            t0,
            1.0 - t0,
            0.1 * direction,
            y0,
            saveat=oc.SaveAt(ts=ts),
            adjoint=oc.CheckpointAdjoint(c),
        )
        return jnp.sum(sol.ys * jnp.array([[1.0], [3.0], [5.0]]))

    t0 = 0.0 if direction > 0 else 1.0
    ts = jnp.array([t0, t0, t0 + 0.5 * direction])
    y0 = jnp.array([1.0])
    dts, dt0 = jax.grad(loss, argnums=(1, 0))(t0, ts, y0)
    # y(t) = y0 exp(-2 (t - t0)): dy/dts = -2 y(ts), dy/dt0 = 2 y(ts) (at ts = t0: +-2 y0)
    y = jnp.exp(-2 * (ts - t0))
    np.testing.assert_allclose(dts, -2 * y * jnp.array([1.0, 3.0, 5.0]), rtol=1e-6)
    np.testing.assert_allclose(dt0, jnp.sum(2 * y * jnp.array([1.0, 3.0, 5.0])), rtol=1e-6)
    # a one-sided finite difference, moving the second save time into the interval
    eps = 1e-7 * direction
    fd = (loss(t0, ts.at[1].add(eps), y0) - loss(t0, ts, y0)) / eps
    np.testing.assert_allclose(dts[1], fd, rtol=1e-5)
    value = oc.diffeqsolve(
        lambda t, y, a: -2.0 * y,
        oc.Tsit5(),
        t0,
        1.0 - t0,
        0.1 * direction,
        y0,
        saveat=oc.SaveAt(ts=ts),
    ).ys
    assert value[0, 0] == 1.0 and value[1, 0] == 1.0  # exactly y0


class _Field(eqx.Module):
    layer: eqx.nn.Linear

    def __call__(self, t, y, args):
        return jnp.tanh(self.layer(y)) - 0.1 * y


def test_equinox_module_parameters_get_gradients():
    field = _Field(eqx.nn.Linear(2, 2, key=jax.random.key(0)))

    def loss(field, c):
        controller = oc.PIDController(rtol=1e-8, atol=1e-8)
        sol = oc.diffeqsolve(
            field,
            oc.Tsit5(),
            0.0,
            2.0,
            0.1,
            Y0,
            adjoint=oc.CheckpointAdjoint(c),
            stepsize_controller=controller,
        )
        return jnp.sum(sol.ys)

    stored = eqx.filter_grad(lambda f: loss(f, None))(field)
    recomputed = eqx.filter_grad(lambda f: loss(f, 2))(field)
    np.testing.assert_allclose(recomputed.layer.weight, stored.layer.weight, rtol=1e-10)
    assert float(jnp.max(jnp.abs(stored.layer.weight))) > 0


# every step stored: slow; test_reversible_adjoint.py's test_vmap_and_float32 batches
# `CheckpointAdjoint()`'s gradient over solves of different step counts
@pytest.mark.parametrize(
    ("c", "schedule"),
    [
        pytest.param(3, "table", marks=pytest.mark.slow),
        (3, "traced"),
        pytest.param(None, "all", marks=pytest.mark.slow),
    ],
)
def test_vmapped_gradients_equal_unbatched(c, schedule, monkeypatch):
    """Batch elements take different numbers of steps: the loops run while any element
    goes on, and the finished ones must neither move nor gain gradient."""
    from odeckpt._checkpointing import checkpointed as _checkpointed

    if schedule == "traced":
        monkeypatch.setattr(_checkpointed, "_TABLE_LIMIT", 0)
    y0s = jnp.array([[1.0, 0.5], [2.0, 1.0], [0.5, 1.5], [3.0, 0.2]])
    args = jnp.array([1.5, 1.0, 3.0, 1.0])
    grad = _loss(oc.CheckpointAdjoint(c), SAVEATS["ts+t1"], _lotka_volterra, args)
    batched = jax.vmap(grad, in_axes=(0, None))(y0s, args)
    for i in range(y0s.shape[0]):
        single = grad(y0s[i], args)
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-10)
        np.testing.assert_allclose(batched[1][i], single[1], rtol=1e-10)


def test_rejected_steps_never_put_nan_in_gradients():
    # sqrt(1 - y) is NaN for y > 1: big rejected steps overshoot into NaN territory.
    def vf(t, y, a):
        return a * jnp.sqrt(1.0 - y)

    def loss(a):
        controller = oc.PIDController(rtol=1e-8, atol=1e-8)
        sol = oc.diffeqsolve(
            vf, oc.Tsit5(), 0.0, 1.9, 1.0, jnp.array(0.0), args=a, stepsize_controller=controller
        )
        return sol.ys[0]

    sol = oc.diffeqsolve(
        vf,
        oc.Tsit5(),
        0.0,
        1.9,
        1.0,
        jnp.array(0.0),
        args=1.0,
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
    )
    assert int(sol.stats["num_rejected_steps"]) > 0
    g = jax.grad(loss)(1.0)
    assert np.isfinite(g)
    exact = 1.9 * (1 - 1.9 / 2)  # y = a t - a^2 t^2 / 4; dy/da at a = 1
    np.testing.assert_allclose(g, exact, rtol=1e-4)


def test_float32_gradients():
    y0 = Y0.astype(jnp.float32)
    a = A.astype(jnp.float32)
    controller = oc.PIDController(rtol=1e-5, atol=1e-6)
    g32 = _loss(oc.CheckpointAdjoint(3), SAVEATS["t1"], controller=controller)(y0, a)
    g64 = _loss(oc.CheckpointAdjoint(3), SAVEATS["t1"], controller=controller)(Y0, A)
    assert g32[0].dtype == jnp.float32
    np.testing.assert_allclose(g32[1], g64[1], rtol=1e-4)


def test_max_steps_none_is_rejected_in_reverse_mode():
    def loss(y0):
        sol = oc.diffeqsolve(_linear, oc.Tsit5(), 0.0, 1.0, 0.1, y0, args=A, max_steps=None)
        return jnp.sum(sol.ys)

    with pytest.raises(ValueError, match="cannot run reverse mode through a solve with"):
        jax.grad(loss)(Y0)


def test_bad_checkpoint_count_is_rejected():
    with pytest.raises(ValueError, match="positive integer"):
        oc.CheckpointAdjoint(checkpoints=0)


def test_default_checkpoints_store_every_step_for_small_states():
    adjoint = oc.CheckpointAdjoint()
    small = jnp.zeros(2)
    large = jnp.zeros(2**20)  # 8 MiB per state: 4096 of them exceed the budget
    assert _checkpoints_used(adjoint, small) == 4096
    c = _checkpoints_used(adjoint, large)
    assert 2 <= c < 4096
    assert c * large.nbytes <= adjoint.memory_budget_bytes()


def test_default_checkpoints_stop_where_more_would_not_pay():
    """Past `useful_checkpoints(max_steps)` (90 for 4096) every solve is reversed with at
    most one extra evaluation per step: a 32 KiB state gets 90, not the 4089 that fit."""
    from odeckpt._adjoints import useful_checkpoints

    assert useful_checkpoints(4096) == 90
    assert schedules.beta(89, 2) < 4096 <= schedules.beta(90, 2)
    assert _checkpoints_used(oc.CheckpointAdjoint(), jnp.zeros(4096)) == 90
    assert _checkpoints_used(oc.CheckpointAdjoint(checkpoints=500), jnp.zeros(4096)) == 500


def _checkpoints_used(adjoint, y0):
    from odeckpt._integrator import Integrator

    state0 = eqx.filter_eval_shape(_state0, y0)
    integrator = Integrator(oc.Tsit5(), max_steps=4096, saves=(), save_dense=False)
    return adjoint.num_checkpoints(integrator, state0, 4096)


def _state0(y0):
    from odeckpt._controllers import UniformSteps
    from odeckpt._integrator import Integrator, Problem

    n = jnp.asarray(10, jnp.int32)  # dt0 = 0.1
    steps = UniformSteps(jnp.asarray(0.0), jnp.asarray(1.0), n)
    problem = Problem(
        oc.ODETerm(lambda t, y, a: -y), None, steps, jnp.asarray(1.0), jnp.asarray(1.0), ()
    )
    return Integrator(oc.Tsit5(), max_steps=4096, saves=(), save_dense=False).init(
        problem, jnp.asarray(0.0), y0, jnp.asarray(0.1)
    )


def test_schedules_module_is_public():
    assert schedules.optimal_total(10, 3) == 10 + schedules.revolve_extra_cost(10, 3)


def _counting_field():
    calls = []

    def vf(t, y, a):
        jax.debug.callback(lambda: calls.append(1))
        return -a * y

    return vf, calls


# Each schedule once by default; the other sizes: slow (the same plans, longer).
@pytest.mark.parametrize(
    "n_c, schedule",
    sampled_matrix(
        {("10_3", "table"), ("37_4", "traced"), ("37_4", "known")},
        n_c=["10_3", "37_4", "60_2", "7_1", "25_25", "200_90"],
        schedule=["table", "traced", "known"],
    ),
)
def test_evaluations_match_the_plan(n_c, schedule, monkeypatch):
    """The traced loop performs exactly the plan of `odeckpt.schedules`: 1 evaluation
    at the start, 6 per Tsit5 step evaluation (forward, advance or taped) and 1 per
    checkpoint restore (the first stage is recomputed). With a traced `t1` the number
    of steps is unknown (online placement, from a table or traced); with a concrete one
    and fixed steps it is known (`schedules.known_plan`)."""
    from odeckpt._checkpointing import checkpointed as _checkpointed

    n, c = (int(x) for x in n_c.split("_"))
    if schedule == "traced":
        monkeypatch.setattr(_checkpointed, "_TABLE_LIMIT", 0)
    vf, calls = _counting_field()

    def loss(a, t1):
        t1 = 1.0 if schedule == "known" else t1
        sol = oc.diffeqsolve(
            vf,
            oc.Tsit5(),
            0.0,
            t1,
            1.0 / n,
            jnp.ones(2),
            args=a,
            max_steps=n + 3,
            adjoint=oc.CheckpointAdjoint(c),
        )
        return sol.ys.sum()

    grad = jax.jit(jax.grad(loss))
    jax.block_until_ready(grad(0.5, 1.0))
    calls.clear()
    jax.block_until_ready(grad(0.5, 1.0))
    assert len(calls) == _planned_evaluations(n, c, schedule)


def _planned_evaluations(n, c, schedule):
    """Vector-field evaluations of a Tsit5 gradient that follows the plan exactly."""
    plan = schedules.known_plan(n, c) if schedule == "known" else schedules.online_plan(n, c)
    restores = sum(isinstance(a, schedules.Restore) for a in plan.actions)
    return 1 + 6 * plan.total + restores


# Tabled plans in small windows: slow; test_rejected_steps_cost_no_backward_evaluations
# and test_windows_where_every_step_pushes_keep_the_plan_and_the_gradient cover the path.
@pytest.mark.parametrize(
    "schedule, w",
    sampled_matrix(
        {("traced", "5")},
        schedule=["table", "traced", "known", "all"],
        w=["2", "5"],
    ),
)
def test_small_windows_keep_the_plan_and_the_gradient(schedule, w, monkeypatch):
    w = int(w)
    """Large states get windows of fewer steps (`window.window_size`); the evaluations
    and the gradient must not depend on the window."""
    from odeckpt._checkpointing import checkpointed as _checkpointed

    n, c = (37, 37 + 3) if schedule == "all" else (37, 4)
    if schedule == "traced":
        monkeypatch.setattr(_checkpointed, "_TABLE_LIMIT", 0)
    vf, calls = _counting_field()

    def loss(a, t1):
        t1 = 1.0 if schedule == "known" else t1
        sol = oc.diffeqsolve(
            vf,
            oc.Tsit5(),
            0.0,
            t1,
            1.0 / n,
            jnp.ones(2),
            args=a,
            saveat=oc.SaveAt(ts=jnp.linspace(0.05, 0.95, 9)),
            max_steps=n + 3,
            adjoint=oc.CheckpointAdjoint(c),
        )
        return jnp.sum(sol.ys**2)

    reference = jax.jit(jax.grad(loss, argnums=(0, 1)))(0.5, 1.0)
    monkeypatch.setattr(_checkpointed, "window_size", lambda *_: w)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    jax.block_until_ready(grad(0.5, 1.0))
    calls.clear()
    got = jax.block_until_ready(grad(0.5, 1.0))
    if schedule != "all":
        assert len(calls) == _planned_evaluations(n, c, schedule)
    np.testing.assert_allclose(got, reference, rtol=1e-12)


# the larger windows: slow; w = 2 covers the path
@pytest.mark.parametrize(
    "w",
    ["2", pytest.param("5", marks=pytest.mark.slow), pytest.param("32", marks=pytest.mark.slow)],
)
def test_windows_where_every_step_pushes_keep_the_plan_and_the_gradient(w, monkeypatch):
    """With checkpoints for more than half the steps, Revolve stores the state after
    every step of a window, the last one on arriving at its end: a window of w rows of
    checkpoints holds w - 1 steps."""
    from odeckpt._checkpointing import checkpointed as _checkpointed

    n, c = 70, 40
    vf, calls = _counting_field()

    def loss(a, t1, adjoint):
        sol = oc.diffeqsolve(
            vf,
            oc.Tsit5(),
            0.0,
            t1,
            1.0 / n,
            jnp.ones(2),
            args=a,
            saveat=oc.SaveAt(ts=jnp.linspace(0.05, 0.95, 9)),
            max_steps=n + 3,
            adjoint=adjoint,
        )
        return jnp.sum(sol.ys**2)

    stored = jax.jit(jax.grad(ft.partial(loss, adjoint=oc.CheckpointAdjoint()), argnums=(0, 1)))(
        0.5, 1.0
    )
    monkeypatch.setattr(_checkpointed, "window_size", lambda *_: int(w))
    grad = jax.jit(jax.grad(ft.partial(loss, adjoint=oc.CheckpointAdjoint(c)), argnums=(0, 1)))
    jax.block_until_ready(grad(0.5, 1.0))
    calls.clear()
    got = jax.block_until_ready(grad(0.5, 1.0))
    assert len(calls) == _planned_evaluations(n, c, "table")
    np.testing.assert_allclose(got, stored, rtol=1e-12)


def test_window_size_bounds_the_window_memory():
    from odeckpt._checkpointing import LoopBody, window as _window

    body = LoopBody(*(lambda *a: None,) * 4, compress=lambda s: s, restore=None, emitters=())
    assert _window.window_size(body, None, jnp.zeros(2)) == _window.WINDOW_STEPS
    assert _window.window_size(body, None, jnp.zeros(10_000)) == 2
    w = _window.window_size(body, None, jnp.zeros(1000, jnp.float32))
    assert 2 < w < _window.WINDOW_STEPS and w * 4000 <= _window.WINDOW_BYTES


def _attempts(times):
    """Whether each attempted Tsit5 step was accepted, from the times of a forward pass's
    vector-field calls: `t0`, then per attempt stages 2..7 at `t0 + c_i h` (c_2 = 0.161,
    c_7 = 1). An attempt was accepted if the next one starts at its end."""
    groups = np.asarray(times[1:]).reshape(-1, 6)
    starts = (groups[:, 0] - 0.161 * groups[:, 5]) / (1 - 0.161)
    ends = groups[:, 5]
    return [bool(abs(b - e) < 1e-9) for b, e in zip(starts[1:], ends[:-1], strict=True)] + [True]


@pytest.mark.parametrize(
    ("c", "w"),
    [
        (None, None),
        pytest.param(4, None, marks=pytest.mark.slow),
        pytest.param(9, None, marks=pytest.mark.slow),
        (4, 3),
        pytest.param(9, 5, marks=pytest.mark.slow),
    ],
)
def test_rejected_steps_cost_no_backward_evaluations(c, w, monkeypatch):
    """The backward pass re-evaluates accepted steps only: 6 evaluations for each
    accepted step the plan advances or reverses, none for a rejected one, 1 per restore;
    and the gradient is the one of storing every step. Advances skip rejected steps
    for large states (a window `w` shorter than `WINDOW_STEPS`), and evaluate them for small
    ones."""
    from odeckpt._checkpointing import checkpointed as _checkpointed

    if w is not None:
        monkeypatch.setattr(_checkpointed, "window_size", lambda *_: w)
    calls = []

    def vf(t, y, a):
        jax.debug.callback(lambda t: calls.append(float(t)), t)
        return jnp.stack([y[1], -y[0] - a * y[1]])

    def loss(a, c):
        sol = oc.diffeqsolve(
            vf,
            oc.Tsit5(),
            0.0,
            3.0,
            0.05,
            jnp.array([1.0, 0.0]),
            a,
            stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-8),
            max_steps=200,
            adjoint=oc.CheckpointAdjoint(c),
        )
        return sol.ys.sum()

    def run(fn):
        jax.block_until_ready(fn(30.0))  # compile
        calls.clear()
        out = jax.block_until_ready(fn(30.0))
        jax.effects_barrier()
        return out, list(calls)

    _, forward = run(jax.jit(ft.partial(loss, c=c)))
    grad, everything = run(jax.jit(jax.grad(ft.partial(loss, c=c))))
    accepted = _attempts(forward)
    n = len(accepted)
    assert 0 < accepted.count(False) and len(forward) == 1 + 6 * n
    if c is None:  # every step stored (200 fit the default budget): one reversal each
        expected = len(forward) + 6 * sum(accepted)
    else:
        plan = schedules.online_plan(n, c).actions
        ends = [isinstance(a, schedules.Advance) and a.stop == n for a in plan]
        end = ends.index(True)  # the forward pass's last step
        backward = plan[end + 1 :]
        advanced = [
            i for a in backward if isinstance(a, schedules.Advance) for i in range(a.start, a.stop)
        ]
        reversed_ = [a.step for a in backward if isinstance(a, schedules.Reverse)]
        restores = sum(isinstance(a, schedules.Restore) for a in backward)
        skipped = w is not None  # small states' advances evaluate rejected steps too
        advances = sum(accepted[i] or not skipped for i in advanced)
        expected = len(forward) + 6 * (advances + sum(accepted[i] for i in reversed_)) + restores
        stored = jax.jit(jax.grad(ft.partial(loss, c=None)))(30.0)
        np.testing.assert_allclose(grad, stored, rtol=1e-13)
    assert len(everything) == expected


def test_storing_every_step_costs_twice_the_forward_evaluations():
    vf, calls = _counting_field()

    def loss(a):
        sol = oc.diffeqsolve(vf, oc.Tsit5(), 0.0, 1.0, 0.01, jnp.ones(2), args=a, max_steps=128)
        return sol.ys.sum()

    jax.block_until_ready(jax.jit(loss)(0.5))
    calls.clear()
    jax.block_until_ready(jax.jit(loss)(0.5))
    forward = len(calls)
    grad = jax.jit(jax.grad(loss))
    jax.block_until_ready(grad(0.5))
    calls.clear()
    jax.block_until_ready(grad(0.5))
    assert len(calls) <= 2 * forward


def test_checkpoint_memory_is_one_state_per_checkpoint():
    """Compiled temporary memory grows by the checkpoint record (y and scalars) per c."""
    y0 = jnp.ones(4096)

    def temp_bytes(c):
        def loss(y0):
            sol = oc.diffeqsolve(
                lambda t, y, a: -y,
                oc.Tsit5(),
                0.0,
                1.0,
                0.01,
                y0,
                max_steps=512,
                adjoint=oc.CheckpointAdjoint(c),
            )
            return sol.ys.sum()

        compiled = jax.jit(jax.grad(loss)).lower(y0).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    per_checkpoint = (temp_bytes(24) - temp_bytes(8)) / 16
    state_bytes = y0.nbytes + 64  # y plus the record's scalars
    assert y0.nbytes <= per_checkpoint <= 1.1 * state_bytes
    # Besides the checkpoints: the step's stages and their VJP, and a window of two
    # checkpoints (a window of 32 would add 30 more states).
    assert temp_bytes(8) - 8 * per_checkpoint <= 48 * y0.nbytes


@pytest.mark.parametrize(
    ("t0", "t1", "dt0", "expected"),
    [
        (0.0, 1.0, 0.1, 10),
        (0.0, 1.0, 0.3, 4),
        (1.0, 0.0, -0.25, 4),
        (0.0, 1000.0, 1.0, 1000),
        (-2.0, 5.0, 1 / 3, 21),
        (0.0, 1.0, 1e-4, 10000),
        (1.0, 2.0, 1e-4, 10000),
    ],
)
def test_fixed_step_counts_are_known_before_the_solve(t0, t1, dt0, expected):
    """The step count predicted at trace time equals the count the solve takes."""
    from odeckpt._controllers import expected_step_count as _expected_steps

    controller = oc.ConstantStepSize()
    assert _expected_steps(controller, t0, t1, dt0, jnp.float64) == expected
    sol = oc.diffeqsolve(lambda t, y, a: -y, oc.Euler(), t0, t1, dt0, Y0, max_steps=20000)
    assert int(sol.stats["num_accepted_steps"]) == expected
    ts = jnp.linspace(t0, t1, 7)
    assert _expected_steps(oc.StepTo(ts), t0, t1, None, jnp.float64) == 6
    assert _expected_steps(oc.PIDController(1e-6, 1e-6), t0, t1, dt0, jnp.float64) is None
    traced = jax.jit(lambda t1: _expected_steps(controller, t0, t1, dt0, jnp.float64) or 0)
    assert traced(t1) == 0  # unknown when traced: the online placement is used


# backwards in time: slow; test_save_time_at_t0_has_the_one_sided_derivative covers
# backwards constant steps' time gradients, recomputed
@pytest.mark.parametrize(
    ("direction", "c"),
    [
        (1.0, None),
        pytest.param(-1.0, None, marks=pytest.mark.slow),
        pytest.param(1.0, 3, marks=pytest.mark.slow),
        pytest.param(-1.0, 3, marks=pytest.mark.slow),
    ],
)
def test_fixed_step_time_gradients_move_the_whole_grid(direction, c):
    """`ConstantStepSize` ends step k at t0 + (t1 - t0) k / n: every step time moves
    with t0 and t1, so do outputs at the steps, and the gradient is that of the solve
    finite differences see (t1 - t0 = 1.05 is not a multiple of dt0 = 0.1: n = 11)."""

    def loss(t0, t1):
        sol = oc.diffeqsolve(
            lambda t, y, a: jnp.stack([y[1], -4.0 * y[0] + jnp.sin(t)]),
            oc.Tsit5(),
            t0,
            t1,
            0.1 * direction,
            jnp.array([1.0, 0.0]),
            saveat=oc.SaveAt(steps=True),
            max_steps=16,
            adjoint=oc.CheckpointAdjoint(c),
        )
        rows = jnp.isfinite(sol.ts)
        weights = jnp.arange(1.0, 17.0)[:, None]
        return jnp.sum(jnp.where(rows[:, None], jnp.sin(sol.ys) * weights, 0.0)) + jnp.sum(
            jnp.where(rows, sol.ts**2, 0.0)
        )

    t0, t1 = (0.0, 1.05) if direction > 0 else (1.05, 0.0)
    grads = jax.grad(loss, argnums=(0, 1))(t0, t1)
    eps = 1e-6
    fd = [
        (loss(t0 + eps, t1) - loss(t0 - eps, t1)) / (2 * eps),
        (loss(t0, t1 + eps) - loss(t0, t1 - eps)) / (2 * eps),
    ]
    np.testing.assert_allclose(grads, fd, rtol=1e-6)


def test_fixed_steps_are_equal_and_do_not_merge_far_from_zero():
    """dt0 = 0.3 on [0, 1]: four steps of 0.25. In float32 near t = 1e6 (times resolved
    to 0.0625) the steps stay steps: none is stretched across the 100 ulp below t1."""
    sol = oc.diffeqsolve(
        lambda t, y, a: -y, oc.Tsit5(), 0.0, 1.0, 0.3, Y0, saveat=oc.SaveAt(steps=True), max_steps=6
    )
    np.testing.assert_array_equal(sol.ts[:4], [0.25, 0.5, 0.75, 1.0])
    y0 = jnp.asarray([1.0, 0.0], jnp.float32)
    t0 = jnp.asarray(1e6, jnp.float32)  # float32 times: t0, t1 and dt0 are float32 or weak
    sol = oc.diffeqsolve(
        lambda t, y, a: jnp.stack([y[1], -y[0]]), oc.Tsit5(), t0, t0 + 5.0, 0.1, y0, max_steps=100
    )
    assert sol.ts.dtype == jnp.float32 and int(sol.stats["num_steps"]) == 50
    np.testing.assert_allclose(sol.ys[-1], [np.cos(5.0), -np.sin(5.0)], atol=1e-5)


def test_checkpoint_scalars_pack_into_short_vectors_and_back():
    """A checkpoint's scalars travel as a few vectors of at most `VECTOR_BYTES` (a
    window of them stays under XLA's inline-loop limit); unpacking gives back every
    leaf exactly, with its dtype, shape and weak type."""
    from odeckpt._core.pack import VECTOR_BYTES, pack, unpack

    tree = {
        "t": jnp.asarray(1.25, jnp.float64),
        "t_next": jnp.asarray(-3e300, jnp.float64),
        "errors": (jnp.asarray(0.5, jnp.float32), jnp.asarray(np.nan, jnp.float32)),
        "flag": jnp.asarray(True),
        "counts": [jnp.asarray(k - 2, jnp.int32) for k in range(6)],
        "weak": jnp.asarray(2.0),  # weakly typed: kept as is
        "vector": jnp.arange(3.0),  # not a scalar: kept as is
        "more": jnp.asarray(7.0, jnp.float64),
    }
    packed = pack(tree)
    assert all(v.nbytes <= VECTOR_BYTES for v in packed.vectors)
    # float64: 3 scalars in 2 vectors; float32: 2 in 1; bool: 1; int32: 6 in 2
    assert sorted((str(v.dtype), v.size) for v in packed.vectors) == sorted(
        [("float64", 2), ("float64", 1), ("float32", 2), ("bool", 1), ("int32", 4), ("int32", 2)]
    )
    assert len(packed.loose) == 2
    back = unpack(packed)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.weak_type == want.weak_type
        np.testing.assert_array_equal(got, want)
    # and under jit, with traced leaves
    again = jax.jit(lambda tree: unpack(pack(tree)))(tree)
    for got, want in zip(jax.tree.leaves(again), jax.tree.leaves(tree), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
