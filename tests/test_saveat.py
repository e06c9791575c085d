"""`SaveAt(subs=..., fn=...)`, `SubSaveAt`, `SaveAt(steps=n)`, `Solution.derivative`,
`Solution.evaluate(t0, t1)` and the Solution's other fields.

References: the closed form `y(t) = y0 exp(-a (t - t0))` of `y' = -a y` (values,
slopes and gradients, the latter by `jax.grad` of the closed form), SciPy's `solve_ivp`
for a nonlinear problem, and finite differences of `Solution.evaluate`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import LOTKA_VOLTERRA, reference

import odeckpt as oc

_Y0 = np.array([1.0, 2.0])
_A = 0.7
_W = np.array([0.5, 3.0])


def _decay(t, y, a):
    return -a * y


def _exact(t, y0, a, t0=0.0):
    """`y(t)` of `y' = -a y`, rows for a vector of `t`."""
    t, y0 = jnp.asarray(t), jnp.asarray(y0)
    if t.ndim == 0:
        return y0 * jnp.exp(-a * (t - t0))
    return y0[None, :] * jnp.exp(-a * (t - t0))[:, None]


def _energy(t, y, args):
    return jnp.sum(y**2)


def _solve(y0=_Y0, a=_A, saveat=None, t0=0.0, t1=1.0, dt0=0.05, **kwargs):
    kwargs.setdefault("solver", oc.Tsit5())
    return oc.diffeqsolve(_decay, kwargs.pop("solver"), t0, t1, dt0, y0, a, saveat=saveat, **kwargs)


# ----------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize(
    "dtype, direction",
    [
        (jnp.float64, 1),
        (jnp.float32, -1),
        pytest.param(jnp.float32, 1, marks=pytest.mark.slow),
        pytest.param(jnp.float64, -1, marks=pytest.mark.slow),
    ],
)
def test_subs_save_functions_of_the_state(dtype, direction):
    t0, t1 = (0.0, 1.0) if direction > 0 else (1.0, 0.0)
    ts = np.array([0.2, 0.5, 0.9])[::direction]
    subs = [
        oc.SubSaveAt(t0=True, ts=ts, t1=True, fn=_energy),
        oc.SubSaveAt(steps=4, fn=lambda t, y, args: (t, y[1])),
        oc.SubSaveAt(t1=True),
    ]
    y0 = jnp.asarray(_Y0, dtype)
    sol = _solve(y0, saveat=oc.SaveAt(subs=subs), t0=t0, t1=t1, dt0=0.05 * direction)
    (ts_a, ts_b, ts_c), (energy, (times, second), y1) = sol.ts, sol.ys
    rtol = 1e-5 if dtype == jnp.float32 else 1e-9
    at = np.concatenate([[t0], ts, [t1]])
    np.testing.assert_array_equal(ts_a, at)
    exact = _exact(at, _Y0, _A, t0)
    np.testing.assert_allclose(energy, np.sum(exact**2, axis=1), rtol=rtol)
    # 20 steps of 0.05: every 4th is saved, 4096 // 4 rows in all
    assert ts_b.shape == (1024,) and np.all(np.isinf(ts_b[5:]))
    np.testing.assert_allclose(ts_b[:5], t0 + direction * 0.2 * np.arange(1, 6), rtol=1e-6)
    np.testing.assert_array_equal(times[:5], ts_b[:5])
    np.testing.assert_allclose(second[:5], _exact(ts_b[:5], _Y0, _A, t0)[:, 1], rtol=rtol)
    np.testing.assert_array_equal(ts_c, [t1])
    np.testing.assert_allclose(y1[0], _exact(t1, _Y0, _A, t0), rtol=rtol)
    assert {x.dtype for x in (energy, second, y1)} == {jnp.dtype(dtype)}


def test_subs_take_any_pytree_structure():
    subs = {"final": oc.SubSaveAt(t1=True), "path": (oc.SubSaveAt(ts=[0.5]),)}
    sol = _solve(saveat=oc.SaveAt(subs=subs))
    assert set(sol.ys) == {"final", "path"} and isinstance(sol.ys["path"], tuple)
    np.testing.assert_allclose(sol.ys["path"][0][0], _exact(0.5, _Y0, _A), rtol=1e-9)
    np.testing.assert_array_equal(sol.ts["final"], [1.0])


def test_plain_saveat_is_one_subsaveat():
    saveat = oc.SaveAt(t0=True, ts=[0.5], fn=_energy)
    assert saveat.subs.t0 and saveat.subs.fn is _energy and saveat.subs.steps == 0
    assert oc.SaveAt(dense=True).subs is None
    assert oc.SaveAt(t1=True).subs.fn is oc.save_y


@pytest.mark.parametrize(
    "saveat, with_7, expected",
    [
        pytest.param(dict(steps=2), True, [2, 4, 6], marks=pytest.mark.slow),
        pytest.param(dict(steps=2, t1=True), True, [2, 4, 6, 7], marks=pytest.mark.slow),
        pytest.param(dict(steps=2, t1=True), False, [2, 4, 6], marks=pytest.mark.slow),
        (dict(steps=3, t1=True, t0=True), True, [0, 3, 6, 7]),
        pytest.param(dict(steps=3, t1=True, t0=True), False, [0, 3, 6], marks=pytest.mark.slow),
        (dict(steps=2, ts=[1.5, 4.0], t1=True), True, [1.5, 2, 4, 4, 6, 7]),
    ],
)
def test_every_nth_step_rows_as_diffrax_lays_them_out(saveat, with_7, expected):
    """The rows, in order, of diffrax's own test of `SaveAt(steps=n)` (Euler on unit
    steps, `max_steps=10`): `t1` is saved after the last step row unless that step
    was saved; save times and steps interleave by time, save times first."""
    ts = np.arange(8.0 if with_7 else 7.0)
    sol = _solve(
        saveat=oc.SaveAt(**saveat),
        t0=0.0,
        t1=ts[-1],
        dt0=None,
        solver=oc.Euler(),
        stepsize_controller=oc.StepTo(ts),
        max_steps=10,
    )
    n = saveat["steps"]
    rows = int(saveat.get("t0", False)) + len(saveat.get("ts", [])) + 10 // n
    rows += int(saveat.get("t1", False) and 10 % n != 0)
    assert sol.ts.shape == (rows,)
    np.testing.assert_array_equal(sol.ts[np.isfinite(sol.ts)], expected)
    assert np.all(np.isinf(sol.ts[len(expected) :]))
    finite = np.isfinite(sol.ts)
    euler = _Y0 * (1 - _A) ** np.floor(np.asarray(sol.ts)[finite])[:, None]
    at_steps = np.asarray(sol.ts)[finite] == np.round(np.asarray(sol.ts)[finite])
    np.testing.assert_allclose(np.asarray(sol.ys)[finite][at_steps], euler[at_steps], rtol=1e-12)


def test_every_nth_step_is_every_step_sliced():
    pid = oc.PIDController(rtol=1e-6, atol=1e-8)
    every = _solve(saveat=oc.SaveAt(steps=True), dt0=None, stepsize_controller=pid)
    third = _solve(saveat=oc.SaveAt(steps=3), dt0=None, stepsize_controller=pid)
    assert third.ts.shape == (4096 // 3,)
    np.testing.assert_array_equal(third.ts, every.ts[2::3][: 4096 // 3])
    np.testing.assert_array_equal(third.ys, every.ys[2::3][: 4096 // 3])


def test_zero_length_solve_fills_every_sub_from_y0():
    ts = jnp.full((3,), 1.0)
    subs = (
        oc.SubSaveAt(ts=ts, t1=True),
        oc.SubSaveAt(t0=True, ts=ts, fn=_energy),
        oc.SubSaveAt(t0=True, ts=ts, steps=1),
    )
    sol = _solve(saveat=oc.SaveAt(subs=subs), t0=1.0, t1=1.0, max_steps=8)
    ya, yb, yc = sol.ys
    np.testing.assert_array_equal(ya, np.tile(_Y0, (4, 1)))
    np.testing.assert_array_equal(yb, np.full(4, np.sum(_Y0**2)))
    np.testing.assert_array_equal(yc[:4], np.tile(_Y0, (4, 1)))
    assert yc.shape == (4 + 8, 2) and np.all(np.isinf(yc[4:]))


def test_fn_of_a_nonlinear_solution_matches_scipy():
    problem = LOTKA_VOLTERRA
    ts = np.linspace(0.0, 10.0, 11)[1:]
    fn = lambda t, y, args: jnp.log(y[0]) - y[0] + 2 * jnp.log(y[1]) - y[1]
    y0, args = jnp.asarray(problem.y0), jax.tree.map(jnp.asarray, problem.args)
    sol = oc.diffeqsolve(
        problem.vector_field,
        oc.Dopri8(),
        0.0,
        10.0,
        None,
        y0,
        args,
        saveat=oc.SaveAt(ts=ts, fn=fn),
        stepsize_controller=oc.PIDController(rtol=1e-10, atol=1e-10),
    )
    want = reference(problem, ts)
    want = np.log(want[:, 0]) - want[:, 0] + 2 * np.log(want[:, 1]) - want[:, 1]
    np.testing.assert_allclose(sol.ys, want, rtol=1e-8)


def test_fn_saves_only_its_output():
    """The rows hold `fn`'s output: a scalar per save time for a 2000-element state."""
    y0 = jnp.ones(2000)
    ts = jnp.linspace(0.0, 1.0, 200)

    def run(fn):
        return _solve(y0, saveat=oc.SaveAt(ts=ts, fn=fn))

    whole, mean = (
        jax.jit(run, static_argnums=0).lower(fn).compile()
        for fn in (oc.save_y, lambda t, y, a: jnp.mean(y))
    )
    assert run(lambda t, y, a: jnp.mean(y)).ys.shape == (200,)
    used = [c.memory_analysis().output_size_in_bytes for c in (whole, mean)]
    assert used[1] * 100 < used[0]


def test_vmap_over_y0():
    subs = [oc.SubSaveAt(ts=[0.3, 0.8], fn=_energy), oc.SubSaveAt(t1=True)]
    y0s = jnp.stack([jnp.asarray(_Y0), 2 * jnp.asarray(_Y0)])
    sol = jax.vmap(lambda y0: _solve(y0, saveat=oc.SaveAt(subs=subs)))(y0s)
    energy, y1 = sol.ys
    assert energy.shape == (2, 2) and y1.shape == (2, 1, 2)
    np.testing.assert_allclose(energy[1], 4 * energy[0], rtol=1e-12)
    want = np.sum(_exact([0.3, 0.8], _Y0, _A) ** 2, axis=1)
    np.testing.assert_allclose(energy[0], want, rtol=1e-9)


# ----------------------------------------------------------------------------------
# Gradients: into y0, args, and fn's own arrays (a closure and an equinox module)


class _Weighted(eqx.Module):
    w: jax.Array

    def __call__(self, t, y, args):
        return jnp.sum(self.w * y**2) * args


_TS = np.array([0.2, 0.5, 0.7])
ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint_3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
}


def _loss(y0, a, w, c, adjoint, direction=1):
    t0, t1 = (0.0, 1.0) if direction > 0 else (1.0, 0.0)
    subs = [
        oc.SubSaveAt(ts=_TS[::direction], fn=_Weighted(w)),
        oc.SubSaveAt(t1=True, fn=lambda t, y, args: c * y[0] ** 3),
        oc.SubSaveAt(steps=5, fn=lambda t, y, args: jnp.sin(c * y)),
    ]
    sol = _solve(y0, a, oc.SaveAt(subs=subs), t0=t0, t1=t1, dt0=0.05 * direction, adjoint=adjoint)
    weighted, cubed, waves = sol.ys
    return jnp.sum(weighted) + jnp.sum(cubed) + jnp.sum(jnp.where(jnp.isfinite(waves), waves, 0))


def _exact_loss(y0, a, w, c, direction=1):
    t0 = 0.0 if direction > 0 else 1.0
    steps = t0 + direction * 0.25 * np.arange(1, 5)  # 20 steps of 0.05: every 5th
    weighted = jnp.sum(w[None] * _exact(_TS, y0, a, t0) ** 2) * a
    cubed = c * _exact(1.0 - t0, y0, a, t0)[0] ** 3
    return weighted + cubed + jnp.sum(jnp.sin(c * _exact(steps, y0, a, t0)))


_ARGS = (jnp.asarray(_Y0), jnp.asarray(_A), jnp.asarray(_W), jnp.asarray(1.3))


_QUICK = {("checkpoint_3", 1), ("backsolve", -1)}
_GRADIENT_CASES = [
    pytest.param(
        adjoint,
        direction,
        id=f"{name}-{'forward' if direction > 0 else 'backward'}",
        marks=() if (name, direction) in _QUICK else pytest.mark.slow,
    )
    for name, adjoint in ADJOINTS.items()
    for direction in (1, -1)
]


@pytest.mark.parametrize("adjoint, direction", _GRADIENT_CASES)
def test_gradients_through_fn_under_every_adjoint(adjoint, direction):
    got = jax.grad(_loss, argnums=(0, 1, 2, 3))(*_ARGS, adjoint, direction)
    want = jax.grad(_exact_loss, argnums=(0, 1, 2, 3))(*_ARGS, direction)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_forward_mode_through_fn():
    def loss(args):
        return _loss(*args, oc.ForwardMode())

    got = jax.jacfwd(loss)(_ARGS)
    want = jax.grad(lambda args: _exact_loss(*args))(_ARGS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "adjoint", [oc.CheckpointAdjoint(), oc.BacksolveAdjoint()], ids=["checkpoint", "backsolve"]
)
def test_gradients_through_fn_under_vmap(adjoint):
    y0s = jnp.stack([_ARGS[0], 0.5 * _ARGS[0]])
    got = jax.vmap(jax.grad(_loss, argnums=(0, 2)), in_axes=(0, None, None, None, None))(
        y0s, *_ARGS[1:], adjoint
    )
    exact = jax.grad(_exact_loss, argnums=(0, 2))
    want = jax.vmap(exact, in_axes=(0, None, None, None))(y0s, *_ARGS[1:])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


@pytest.mark.slow
def test_gradients_through_fn_in_float32():
    args = jax.tree.map(lambda x: x.astype(jnp.float32), _ARGS)
    got = jax.grad(_loss, argnums=(0, 2))(*args, oc.InterpolatingAdjoint())
    want = jax.grad(_exact_loss, argnums=(0, 2))(*_ARGS)
    assert got[0].dtype == jnp.float32
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4)


# ----------------------------------------------------------------------------------
# Dense output: derivative, increments, and the interpolation's own interval

_PID = oc.PIDController(rtol=1e-10, atol=1e-12)


def _dense(direction=1, y0=_Y0, **kwargs):
    t0, t1 = (0.0, 1.0) if direction > 0 else (1.0, 0.0)
    return _solve(
        y0,
        saveat=oc.SaveAt(dense=True, t1=True),
        t0=t0,
        t1=t1,
        dt0=None,
        stepsize_controller=_PID,
        **kwargs,
    )


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize(
    "direction", [pytest.param(1, marks=pytest.mark.slow), -1], ids=["forward", "backward"]
)
def test_derivative_matches_the_closed_form_and_evaluate(direction):
    sol = _dense(direction)
    t0 = 0.0 if direction > 0 else 1.0
    ts = jnp.linspace(0.05, 0.95, 7)
    slope = sol.derivative(ts)  # a vector of times
    np.testing.assert_allclose(slope, -_A * _exact(ts, _Y0, _A, t0), rtol=1e-7)
    h = 1e-6  # central differences of `evaluate`
    fd = (sol.evaluate(ts + h) - sol.evaluate(ts - h)) / (2 * h)
    np.testing.assert_allclose(slope, fd, rtol=1e-7)
    np.testing.assert_allclose(sol.derivative(ts[2]), slope[2], rtol=1e-14)


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize(
    "direction", [pytest.param(1, marks=pytest.mark.slow), -1], ids=["forward", "backward"]
)
def test_derivative_at_a_step_boundary_takes_the_side_asked_for(direction):
    """Euler's steps of 0.25: the polynomials of the steps on either side of t = 0.5
    have different slopes there; `left` is the one below 0.5 in `t` (the earlier step
    forwards, the later one backwards)."""
    t0, t1 = (0.0, 1.0) if direction > 0 else (1.0, 0.0)
    sol = _solve(
        saveat=oc.SaveAt(dense=True), t0=t0, t1=t1, dt0=0.25 * direction, solver=oc.Euler()
    )
    left, right = sol.derivative(0.5), sol.derivative(0.5, left=False)
    assert np.all(np.abs(left - right) > 1e-3)
    np.testing.assert_allclose(left, sol.derivative(0.5 - 1e-9), rtol=1e-7)
    np.testing.assert_allclose(right, sol.derivative(0.5 + 1e-9), rtol=1e-7)
    np.testing.assert_allclose(sol.evaluate(0.5, left=False), sol.evaluate(0.5), rtol=1e-15)


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize(
    "direction", [pytest.param(1, marks=pytest.mark.slow), -1], ids=["forward", "backward"]
)
def test_evaluate_with_t1_is_the_increment(direction):
    sol = _dense(direction)
    t0 = 0.0 if direction > 0 else 1.0
    got = sol.evaluate(0.2, 0.8)
    np.testing.assert_allclose(got, sol.evaluate(0.8) - sol.evaluate(0.2), rtol=1e-14)
    want = _exact(0.8, _Y0, _A, t0) - _exact(0.2, _Y0, _A, t0)
    np.testing.assert_allclose(got, want, rtol=1e-8)
    many = sol.evaluate(jnp.asarray([0.1, 0.2]), jnp.asarray([0.3, 0.9]))
    np.testing.assert_allclose(many[1], sol.evaluate(0.2, 0.9), rtol=1e-14)


def test_derivative_is_differentiable():
    def slope(y0, a):
        sol = _solve(y0, a, saveat=oc.SaveAt(dense=True), dt0=None, stepsize_controller=_PID)
        return jnp.sum(sol.derivative(0.3))

    got = jax.grad(slope, argnums=(0, 1))(jnp.asarray(_Y0), jnp.asarray(_A))
    want = jax.grad(lambda y0, a: jnp.sum(-a * _exact(0.3, y0, a)), argnums=(0, 1))(
        jnp.asarray(_Y0), jnp.asarray(_A)
    )
    np.testing.assert_allclose(got[0], want[0], rtol=1e-7)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-7)


def test_derivative_under_vmap():
    y0s = jnp.stack([jnp.asarray(_Y0), 3 * jnp.asarray(_Y0)])
    sols = jax.vmap(lambda y0: _solve(y0, saveat=oc.SaveAt(dense=True)))(y0s)
    slopes = jax.vmap(lambda sol: sol.derivative(0.5))(sols)
    want = -_A * _exact(0.5, np.stack([_Y0, 3 * _Y0]), _A)
    np.testing.assert_allclose(slopes, want, rtol=1e-5)


def test_interpolation_covers_the_interval_as_diffrax_does():
    sol = _dense(-1)
    interp = sol.interpolation
    assert float(interp.t0) == 1.0 and float(interp.t1) == 0.0
    np.testing.assert_allclose(interp.evaluate(interp.t1), sol.ys[0], rtol=1e-14)
    np.testing.assert_allclose(interp.derivative(0.5), sol.derivative(0.5), rtol=1e-15)
    trivial = _solve(saveat=oc.SaveAt(dense=True), t0=0.0, t1=0.0)
    np.testing.assert_array_equal(trivial.evaluate(0.0), _Y0)
    np.testing.assert_array_equal(trivial.derivative(0.0), np.zeros(2))
    assert float(trivial.interpolation.t1) == 0.0


# ----------------------------------------------------------------------------------
# The Solution's other fields


def test_solution_fields_as_diffrax_names_them():
    plain = _solve(saveat=oc.SaveAt(t1=True))
    assert plain.solver_state is None and plain.controller_state is None
    assert plain.made_jump is None and plain.event_mask is None
    assert {"num_steps", "num_accepted_steps", "num_rejected_steps", "max_steps"} <= set(
        plain.stats
    )
    saveat = oc.SaveAt(t1=True, solver_state=True, controller_state=True, made_jump=True)
    sol = _solve(saveat=saveat)
    # Runge–Kutta's state is f(t1, y1) (the first stage of a next step)
    np.testing.assert_allclose(sol.solver_state, -_A * sol.ys[0], rtol=1e-14)
    assert isinstance(sol.controller_state, oc.ControllerState)
    assert sol.made_jump is not None and not bool(sol.made_jump)
    only_state = _solve(saveat=oc.SaveAt(solver_state=True))
    assert only_state.ts is None and only_state.ys is None


# ----------------------------------------------------------------------------------
# Strict dtype promotion: float32 states with float64 times


_F32 = jax.tree.map(lambda x: x.astype(jnp.float32), _ARGS)


def _float32_outputs():
    subs = [oc.SubSaveAt(ts=_TS[::-1], steps=5, fn=_Weighted(_F32[2])), oc.SubSaveAt(t1=True)]
    sol = _solve(_F32[0], _F32[1], oc.SaveAt(subs=subs, dense=True), t0=1.0, t1=0.0, dt0=-0.05)
    return sol.ys, sol.derivative(jnp.asarray([0.3, 0.6])), sol.evaluate(0.2, 0.7)


def _float32_gradients(adjoint):
    return lambda: jax.grad(_loss, argnums=(0, 2))(*_F32, adjoint, -1)


@pytest.mark.parametrize(
    "run",
    [
        _float32_outputs,
        pytest.param(_float32_gradients(oc.CheckpointAdjoint()), marks=pytest.mark.slow),
        pytest.param(_float32_gradients(oc.InterpolatingAdjoint()), marks=pytest.mark.slow),
    ],
    ids=["outputs", "checkpoint", "interpolating"],
)
def test_strict_promotion_gives_what_standard_promotion_gives(run):
    with jax.numpy_dtype_promotion("strict"):
        strict = run()
    with jax.numpy_dtype_promotion("standard"):
        standard = run()
    for s, w in zip(jax.tree.leaves(strict), jax.tree.leaves(standard), strict=True):
        assert s.dtype == jnp.float32
        np.testing.assert_array_equal(s, w)
