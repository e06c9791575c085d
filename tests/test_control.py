"""Controlled differential equations (`odeckpt._control`): `ControlTerm` stepped by its
increments and as `to_ode()`, against closed forms (the scalar linear CDE `dy = a y dX`
has `y(T) = y0 exp(a (X(T) - X(0)))` for any path), SciPy solving the equivalent ODE,
and central differences; every adjoint, `jax.vmap` over paths, float32, both time
directions, `MultiTerm` with an ODE term, events, and diffrax's term interface."""

import warnings

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
import scipy.integrate
import scipy.interpolate

import odeckpt as oc
from odeckpt.testing import assert_grads_close

T1 = 2.0
KNOTS = np.linspace(0.0, T1, 9)
DATA = np.sin(3 * KNOTS) + 0.5 * KNOTS
ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint-3": oc.CheckpointAdjoint(checkpoints=3),
    "direct": oc.DirectAdjoint(),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
}
TOL = dict(rtol=1e-10, atol=1e-12)


def path_of(kind: str, data):
    """A scalar-channel path through `data` at `KNOTS` (shape (9, 1)), or for `hermite`
    one cubic over `[0, T1]` whose values and scaled slopes are `data[:4]`."""
    ts = jnp.asarray(KNOTS)
    if kind == "linear":
        return oc.LinearInterpolation(ts, data)
    if kind == "cubic":
        return oc.CubicInterpolation(ts, oc.backward_hermite_coefficients(ts, data))
    y0, y1, k0, k1 = data[0], data[1], data[2], data[3]
    return oc.ThirdOrderHermitePolynomialInterpolation(t0=0.0, t1=T1, y0=y0, y1=y1, k0=k0, k1=k1)


def _field(t, y, a):
    return (a * y)[..., None]


def solve_scalar(a, y0, data, kind, *, form="increments", adjoint=None, t0=0.0, t1=T1):
    """`y(t1)` of `dy = a y dX` from `y(t0) = y0`, on the path's knots as jumps."""
    term = oc.ControlTerm(_field, path_of(kind, data))
    term = term.to_ode() if form == "ode" else term
    controller = oc.PIDController(**TOL, jump_ts=jnp.asarray(KNOTS))
    sol = oc.diffeqsolve(
        term,
        oc.Tsit5(),
        t0,
        t1,
        None,
        y0,
        args=a,
        adjoint=adjoint or oc.CheckpointAdjoint(),
        stepsize_controller=controller,
        max_steps=4096,
    )
    return sol.ys[-1, 0]


def closed_form(a, y0, data, kind, t0=0.0, t1=T1):
    path = path_of(kind, data)
    rise = path.evaluate(t1)[0] - path.evaluate(t0)[0]
    return y0[0] * jnp.exp(a * rise)


def _inputs():
    return jnp.asarray(0.7), jnp.asarray([1.3]), jnp.asarray(DATA[:, None])


# Each kind and each form by default; the other cases are slow: linear and cubic
# paths by increments are checked against the closed form by
# test_vmap_over_paths_and_per_path_gradients and test_backwards_in_time_and_under_jit,
# the Hermite path as an ODE by test_scalar_gradients[hermite-forward-ode].
SLOW_CLOSED_FORMS = {("linear", "increments"), ("cubic", "increments"), ("hermite", "ode")}


@pytest.mark.parametrize(
    "kind, form",
    [
        pytest.param(
            kind, form, marks=pytest.mark.slow if (kind, form) in SLOW_CLOSED_FORMS else ()
        )
        for form in ("increments", "ode")
        for kind in ("linear", "cubic", "hermite")
    ],
)
def test_scalar_closed_form(kind, form):
    a, y0, data = _inputs()
    got = solve_scalar(a, y0, data, kind, form=form)
    np.testing.assert_allclose(got, closed_form(a, y0, data, kind), rtol=1e-8)


def test_backwards_in_time_and_under_jit():
    a, y0, data = _inputs()
    forward = closed_form(a, y0, data, "cubic")
    back = jax.jit(lambda y: solve_scalar(a, y, data, "cubic", t0=T1, t1=0.0))(forward[None])
    np.testing.assert_allclose(back, y0[0], rtol=1e-8)


def _gradients(kind, adjoint_name, form):
    a, y0, data = _inputs()
    adjoint = ADJOINTS.get(adjoint_name)
    if adjoint_name == "forward":
        fn = lambda *x: solve_scalar(*x, kind, form=form, adjoint=oc.ForwardMode())
        return jax.jacfwd(fn, argnums=(0, 1, 2))(a, y0, data)
    fn = lambda *x: solve_scalar(*x, kind, form=form, adjoint=adjoint)
    return jax.grad(fn, argnums=(0, 1, 2))(a, y0, data)


def _check_gradients(kind, adjoint_name, form):
    a, y0, data = _inputs()
    want = jax.grad(closed_form, argnums=(0, 1, 2))(a, y0, data, kind)
    got = _gradients(kind, adjoint_name, form)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)


DEFAULT_GRADIENTS = [
    ("cubic", "checkpoint", "increments"),
    ("linear", "direct", "increments"),
    ("hermite", "forward", "ode"),
    ("cubic", "backsolve", "ode"),
    ("linear", "interpolating", "increments"),
]


# CheckpointAdjoint's case: slow; test_gradients_match_central_differences takes the same
# gradient (cubic path, by increments) and test_vmap_over_paths_and_per_path_gradients
# checks it against the closed form on a linear path.
SLOW_GRADIENTS = {("cubic", "checkpoint", "increments")}


@pytest.mark.parametrize(
    "kind,adjoint,form",
    [
        pytest.param(*c, marks=pytest.mark.slow if c in SLOW_GRADIENTS else ())
        for c in DEFAULT_GRADIENTS
    ],
)
def test_scalar_gradients(kind, adjoint, form):
    _check_gradients(kind, adjoint, form)


CONTINUOUS = ("backsolve", "interpolating")  # by increments: linear paths only
ALL_GRADIENTS = [
    (kind, adjoint, form)
    for kind in ("linear", "cubic", "hermite")
    for adjoint in (*ADJOINTS, "forward")
    for form in ("increments", "ode")
    if (kind, adjoint, form) not in DEFAULT_GRADIENTS
    and not (adjoint in CONTINUOUS and form == "increments" and kind != "linear")
]


@pytest.mark.slow
@pytest.mark.parametrize("kind,adjoint,form", ALL_GRADIENTS)
def test_scalar_gradients_every_adjoint(kind, adjoint, form):
    _check_gradients(kind, adjoint, form)


def test_gradients_match_central_differences():
    a, y0, data = _inputs()
    fn = lambda a, y0, data: solve_scalar(a, y0, data, "cubic")
    assert_grads_close(fn, a, y0, data, rtol=1e-5)


# ----------------------------------------------------------------------------------
# A 2-D linear CDE against SciPy


MATRICES = np.array([[[-0.4, 0.3], [-0.2, 0.1]], [[0.2, -0.5], [0.6, -0.3]]])


def _linear2(t, y, matrices):
    return jnp.einsum("kij,j->ik", matrices, y)  # (y, control) = sum_k A_k y dX^k


def _two_channel_data():
    return np.stack([np.sin(2 * KNOTS), KNOTS**2 / 2], -1)


def _scipy_linear2(y0, slope):
    """SciPy's DOP853 on the ODE dy/dt = sum_k A_k y dX^k/dt."""
    rhs = lambda t, y: np.einsum("kij,j,k->i", MATRICES, y, slope(t))
    out = scipy.integrate.solve_ivp(rhs, (0.0, T1), y0, "DOP853", rtol=1e-12, atol=1e-14)
    return out.y[:, -1]


def test_two_channel_cubic_to_ode_against_scipy():
    data, y0 = _two_channel_data(), np.array([1.0, -0.5])
    slopes = np.empty_like(data)
    slopes[1:] = np.diff(data, axis=0) / np.diff(KNOTS)[:, None]
    slopes[0] = slopes[1]
    spline = scipy.interpolate.CubicHermiteSpline(KNOTS, data, slopes).derivative()
    path = oc.CubicInterpolation(
        jnp.asarray(KNOTS), oc.backward_hermite_coefficients(jnp.asarray(KNOTS), data)
    )
    term = oc.ControlTerm(_linear2, path).to_ode()
    controller = oc.PIDController(**TOL, jump_ts=jnp.asarray(KNOTS))
    sol = oc.diffeqsolve(
        term, oc.Tsit5(), 0.0, T1, None, y0, args=MATRICES, stepsize_controller=controller
    )
    np.testing.assert_allclose(sol.ys[-1], _scipy_linear2(y0, spline), rtol=1e-8)


def test_two_channel_linear_path_by_increments_against_scipy():
    """On a piecewise-linear path with its knots as jumps every step sees a linear
    control: stepping by increments is the Runge–Kutta method on the ODE, to tolerance."""
    data, y0 = _two_channel_data(), np.array([1.0, -0.5])
    knot_slopes = np.diff(data, axis=0) / np.diff(KNOTS)[:, None]
    slope = lambda t: knot_slopes[min(np.searchsorted(KNOTS, t, "right") - 1, len(KNOTS) - 2)]
    path = oc.LinearInterpolation(jnp.asarray(KNOTS), data)
    controller = oc.PIDController(**TOL, jump_ts=jnp.asarray(KNOTS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the steps see a linear path
        sol = oc.diffeqsolve(
            oc.ControlTerm(_linear2, path),
            oc.Dopri5(),
            0.0,
            T1,
            None,
            y0,
            args=MATRICES,
            stepsize_controller=controller,
        )
    step = lambda t, y: np.einsum("kij,j,k->i", MATRICES, y, slope(t))
    want = y0
    for lo, hi in zip(KNOTS[:-1], KNOTS[1:], strict=True):
        mid = lambda t, y, lo=lo: step(lo + 1e-12, y)
        want = scipy.integrate.solve_ivp(mid, (lo, hi), want, "DOP853", rtol=1e-12, atol=1e-14)
        want = want.y[:, -1]
    np.testing.assert_allclose(sol.ys[-1], want, rtol=1e-8)


def test_increments_on_a_smooth_multichannel_path_warn():
    """On a smooth path of two channels, a step by increments misses the path's Levy
    area, which the error estimate cannot see: the error stalls whatever the tolerance
    (here above 1e-4 at rtol 1e-6 and 1e-10), and the solve says so."""
    data = _two_channel_data()
    path = oc.CubicInterpolation(
        jnp.asarray(KNOTS), oc.backward_hermite_coefficients(jnp.asarray(KNOTS), data)
    )
    y0, matrices = jnp.asarray([1.0, -0.5]), jnp.asarray(MATRICES)

    def solve(term, rtol):
        controller = oc.PIDController(rtol=rtol, atol=rtol * 1e-2)
        return oc.diffeqsolve(
            term, oc.Tsit5(), 0.0, T1, None, y0, args=matrices, stepsize_controller=controller
        ).ys[-1]

    exact = solve(oc.ControlTerm(_linear2, path).to_ode(), 1e-12)
    for rtol in (1e-6, 1e-10):
        with pytest.warns(UserWarning, match="stepped by its increments"):
            stalled = solve(oc.ControlTerm(_linear2, path), rtol)
        assert np.max(np.abs(stalled - exact)) > 1e-4


# ----------------------------------------------------------------------------------
# Batches, precision, other terms and solvers


def test_vmap_over_paths_and_per_path_gradients():
    a, y0, data = _inputs()
    batch = jnp.stack([data, 2 * data, data**2])
    values = jax.vmap(lambda d: solve_scalar(a, y0, d, "linear"))(batch)
    grads = jax.vmap(jax.grad(lambda d: solve_scalar(a, y0, d, "linear")))(batch)
    for i in range(3):
        np.testing.assert_allclose(values[i], closed_form(a, y0, batch[i], "linear"), rtol=1e-8)
        want = jax.grad(lambda d: closed_form(a, y0, d, "linear"))(batch[i])
        np.testing.assert_allclose(grads[i], want, rtol=1e-6, atol=1e-8)


def test_float32():
    a, y0, data = _inputs()
    a32, y32, d32 = (x.astype(jnp.float32) for x in (a, y0, data))
    term = oc.ControlTerm(_field, path_of("cubic", d32))
    sol = oc.diffeqsolve(
        term,
        oc.Tsit5(),
        0.0,
        T1,
        None,
        y32,
        args=a32,
        stepsize_controller=oc.PIDController(rtol=1e-5, atol=1e-7, jump_ts=jnp.asarray(KNOTS)),
    )
    assert sol.ys.dtype == jnp.float32
    np.testing.assert_allclose(sol.ys[-1, 0], closed_form(a, y0, data, "cubic"), rtol=1e-4)


@pytest.mark.parametrize("solver", [oc.Kvaerno5(), oc.KenCarp4(), oc.Rodas5P()], ids=str)
def test_multiterm_with_implicit_and_imex_solvers(solver):
    """dy = -y dt + y dX: y(t) = y0 exp(-t + X(t) - X(0)), with dense output."""
    path = oc.LinearInterpolation(jnp.asarray(KNOTS), jnp.asarray(DATA[:, None]))
    term = oc.MultiTerm(oc.ODETerm(lambda t, y, a: -y), oc.ControlTerm(_field, path))
    sol = oc.diffeqsolve(
        term,
        solver,
        0.0,
        T1,
        None,
        jnp.asarray([1.0]),
        args=1.0,
        saveat=oc.SaveAt(ts=jnp.asarray([0.5, 1.1]), dense=True),
        stepsize_controller=oc.PIDController(rtol=1e-9, atol=1e-11, jump_ts=jnp.asarray(KNOTS)),
    )
    exact = lambda t: np.exp(-t + path.evaluate(t)[0] - DATA[0])
    np.testing.assert_allclose(sol.ys[:, 0], [exact(0.5), exact(1.1)], rtol=1e-6)
    np.testing.assert_allclose(sol.evaluate(1.7)[0], exact(1.7), rtol=1e-5)


def test_event_on_a_controlled_solve():
    """dy = -y dX with X(t) = t: y crosses 1/2 at t = log 2."""
    path = oc.LinearInterpolation(jnp.asarray([0.0, 5.0]), jnp.asarray([[0.0], [5.0]]))
    sol = oc.diffeqsolve(
        oc.ControlTerm(lambda t, y, a: -y[:, None], path),
        oc.Tsit5(),
        0.0,
        5.0,
        None,
        jnp.asarray([1.0]),
        event=oc.Event(lambda t, y, args, **kwargs: y[0] - 0.5),
        stepsize_controller=oc.PIDController(**TOL),
    )
    np.testing.assert_allclose(sol.ts[-1], np.log(2.0), rtol=1e-9)


def test_callable_control_and_operator_field():
    """A control given as `(t0, t1) -> increment`, and a field returning a lineax
    operator (as diffrax allows): dy_i = -y_i d(t), on constant steps (a control of two
    channels known only by its increments would warn under adaptive steps)."""
    term = oc.ControlTerm(
        lambda t, y, a: lx.DiagonalLinearOperator(-y),
        lambda t0, t1: jnp.stack([t1 - t0, t1 - t0]),
    )
    y0 = jnp.asarray([1.0, 2.0])
    for t in (term, term.to_ode()):
        sol = oc.diffeqsolve(t, oc.Tsit5(), 0.0, 1.0, 0.01, y0)
        np.testing.assert_allclose(sol.ys[-1], np.exp(-1.0) * y0, rtol=1e-9)


def test_weakly_diagonal_control_term_warns_and_works():
    with pytest.warns(DeprecationWarning, match="`WeaklyDiagonalControlTerm` is now deprecated"):
        term = oc.WeaklyDiagonalControlTerm(lambda t, y, a: -y, lambda t0, t1: t1 - t0)
    sol = oc.diffeqsolve(term, oc.Tsit5(), 0.0, 1.0, 0.05, jnp.asarray([1.0, 2.0]))
    np.testing.assert_allclose(sol.ys[-1], np.exp(-1.0) * np.array([1.0, 2.0]), rtol=1e-6)


def test_term_interface_as_diffrax():
    """`vf`, `contr`, `prod`, `vf_prod` and `to_ode` with the shapes diffrax's have."""
    path = oc.LinearInterpolation(jnp.asarray([0.0, 1.0]), jnp.asarray([[0.0, 1.0], [2.0, -1.0]]))
    term = oc.ControlTerm(lambda t, y, a: jnp.outer(y, jnp.asarray([1.0, 2.0])), path)
    y = jnp.asarray([1.0, 2.0, 3.0])
    dx = term.contr(0.0, 0.5)
    vf = term.vf(0.0, y, None)
    assert dx.shape == (2,) and vf.shape == (3, 2)
    np.testing.assert_allclose(term.vf_prod(0.0, y, None, dx), term.prod(vf, dx))
    np.testing.assert_allclose(term.prod(vf, dx), np.asarray(vf) @ np.asarray(dx))
    ode = term.to_ode()
    np.testing.assert_allclose(ode.vf(0.25, y, None), np.asarray(vf) @ np.array([2.0, -2.0]))


def test_solver_tolerances_from_the_controller():
    """`with_stepsize_controller_tols(VeryChord)()`: the stage iterations follow the
    controller's tolerances, so tightening them tightens the solve."""
    finder = oc.with_stepsize_controller_tols(oc.VeryChord)()
    f = lambda t, y, args: -50.0 * (y - jnp.cos(t))
    errors = []
    for tol in (1e-4, 1e-8):
        sol = oc.diffeqsolve(
            f,
            oc.Kvaerno5(root_finder=finder),
            0.0,
            1.0,
            None,
            jnp.asarray([0.0]),
            stepsize_controller=oc.PIDController(rtol=tol, atol=tol),
        )
        exact = scipy.integrate.solve_ivp(
            lambda t, y: -50.0 * (y - np.cos(t)), (0, 1), [0.0], "Radau", rtol=1e-12, atol=1e-14
        ).y[0, -1]
        errors.append(abs(float(sol.ys[-1, 0]) - exact))
    assert errors[1] < 1e-6 < errors[0] * 1e3
