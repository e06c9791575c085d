"""Interpolation (`odeckpt._interpolation`): paths through data and the local
interpolation classes, against independent references (NumPy's `np.interp`, SciPy's
`CubicHermiteSpline` with the backward differences computed here, closed forms), and
as the forcing of an ODE solved and differentiated under every adjoint, against
SciPy's `solve_ivp` and finite differences."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.interpolate

import odeckpt as oc
from odeckpt.testing import assert_grads_close

RNG = np.random.default_rng(1234)
TS = np.sort(np.concatenate([[0.0, 3.0], RNG.uniform(0.1, 2.9, 6)]))
YS = RNG.normal(size=(8, 3))
POINTS = np.concatenate([np.linspace(0.0, 3.0, 37), TS])


def backward_slopes(ts, ys, deriv0=None):
    """The spline's slope at each knot: the backward difference, and at `ts[0]` the
    forward one (or `deriv0`)."""
    slopes = np.empty_like(ys)
    slopes[1:] = np.diff(ys, axis=0) / np.diff(ts).reshape((-1,) + (1,) * (ys.ndim - 1))
    slopes[0] = slopes[1] if deriv0 is None else deriv0
    return slopes


def cubic(ts, ys, **kwargs):
    return oc.CubicInterpolation(ts, oc.backward_hermite_coefficients(ts, ys, **kwargs))


def at(path, points, left=True):
    return np.asarray(jax.vmap(functools.partial(path.evaluate, left=left))(jnp.asarray(points)))


def slope_at(path, points, left=True):
    return np.asarray(jax.vmap(functools.partial(path.derivative, left=left))(jnp.asarray(points)))


# ----------------------------------------------------------------------------------
# Global interpolation against NumPy and SciPy


@pytest.mark.parametrize("shape", [(8,), (8, 3)], ids=["scalar", "channels"])
def test_linear_interpolation_matches_numpy(shape):
    ys = YS[:, 0] if shape == (8,) else YS
    expected = np.stack([np.interp(POINTS, TS, y) for y in ys.reshape(8, -1).T], axis=-1)
    for left in (True, False):
        got = at(oc.LinearInterpolation(TS, ys), POINTS, left)
        np.testing.assert_allclose(got.reshape(len(POINTS), -1), expected, rtol=1e-14, atol=1e-14)


def test_linear_derivative_is_the_slope_of_the_piece_either_side_of_a_knot():
    path = oc.LinearInterpolation(TS, YS)
    slopes = np.diff(YS, axis=0) / np.diff(TS)[:, None]
    np.testing.assert_allclose(slope_at(path, TS[1:], left=True), slopes, rtol=1e-13)
    np.testing.assert_allclose(slope_at(path, TS[:-1], left=False), slopes, rtol=1e-13)
    middles = (TS[1:] + TS[:-1]) / 2
    np.testing.assert_allclose(slope_at(path, middles), slopes, rtol=1e-13)


def test_outside_the_knots_the_end_pieces_extend():
    path = oc.LinearInterpolation(TS, YS)
    slopes = np.diff(YS, axis=0) / np.diff(TS)[:, None]
    np.testing.assert_allclose(at(path, [-0.5]), YS[:1] - 0.5 * slopes[:1], rtol=1e-13)
    np.testing.assert_allclose(at(path, [3.5]), YS[-1:] + 0.5 * slopes[-1:], rtol=1e-13)


def test_a_repeated_knot_is_a_jump_taken_from_either_side():
    ts, ys = np.array([0.0, 1.0, 1.0, 2.0]), np.array([0.0, 1.0, 5.0, 7.0])
    path = oc.LinearInterpolation(ts, ys)
    np.testing.assert_allclose(at(path, [1.0, 0.5, 1.5]), [1.0, 0.5, 6.0])
    np.testing.assert_allclose(at(path, [1.0], left=False), [5.0])
    np.testing.assert_allclose(slope_at(path, [1.0, 1.0]), [1.0, 1.0])
    np.testing.assert_allclose(slope_at(path, [1.0], left=False), [2.0])


# channels with the forward difference: slow; `scalar-forward_difference` and
# `channels-deriv0` cover the path
@pytest.mark.parametrize(
    "deriv0, shape",
    [
        pytest.param(None, (8,), id="scalar-forward_difference"),
        pytest.param(None, (8, 3), id="channels-forward_difference", marks=pytest.mark.slow),
        pytest.param(0.4, (8,), id="scalar-deriv0"),
        pytest.param(0.4, (8, 3), id="channels-deriv0"),
    ],
)
def test_backward_hermite_matches_scipy(deriv0, shape):
    ys = YS[:, 0] if shape == (8,) else YS
    kwargs = {} if deriv0 is None else {"deriv0": jnp.full(shape[1:], deriv0)}
    spline = scipy.interpolate.CubicHermiteSpline(TS, ys, backward_slopes(TS, ys, deriv0))
    path = cubic(TS, ys, **kwargs)
    for left in (True, False):
        np.testing.assert_allclose(at(path, POINTS, left), spline(POINTS), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            slope_at(path, POINTS, left), spline.derivative()(POINTS), rtol=1e-11, atol=1e-11
        )


def test_backward_hermite_first_piece_is_a_line_by_default():
    coeffs = oc.backward_hermite_coefficients(TS, YS)
    d, c, _, _ = (np.asarray(x) for x in coeffs)
    np.testing.assert_array_equal(d[0], 0.0)
    np.testing.assert_array_equal(c[0], 0.0)


@pytest.mark.parametrize("changed", [3, 5])
def test_backward_hermite_is_local_and_uses_only_the_data_so_far(changed):
    """Changing `ys[j]` changes only the pieces from `ts[j - 1]` to `ts[j + 2]`: the
    piece ending there, the one starting there and (through its backward difference)
    the next; the path up to `ts[j - 1]` does not see it (the online property)."""
    before = oc.backward_hermite_coefficients(TS, YS)
    after = oc.backward_hermite_coefficients(TS, YS + 10.0 * (np.arange(8) == changed)[:, None])
    touched = slice(changed - 1, changed + 2)
    for x, y in zip(before, after, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        np.testing.assert_array_equal(x[: changed - 1], y[: changed - 1])
        np.testing.assert_array_equal(x[changed + 2 :], y[changed + 2 :])
    assert np.all(np.asarray(before[0])[touched] != np.asarray(after[0])[touched])


# ----------------------------------------------------------------------------------
# Missing data

NANS = np.array([0, 3, 4, 6, 9])  # rows missing in the first channel; the second is full
LONG_TS = np.cumsum(RNG.uniform(0.2, 1.0, 10))


def _gappy():
    ys = RNG.normal(size=(10, 2))
    ys[NANS, 0] = np.nan
    return ys


GAPPY = _gappy()


def test_linear_interpolation_fills_gaps_like_numpy():
    filled = np.asarray(oc.linear_interpolation(LONG_TS, GAPPY))
    seen = ~np.isnan(GAPPY[:, 0])
    inner = np.arange(1, 9)
    expected = np.interp(LONG_TS[inner], LONG_TS[seen], GAPPY[seen, 0])
    np.testing.assert_allclose(filled[inner, 0], expected, rtol=1e-14)
    np.testing.assert_array_equal(filled[:, 1], GAPPY[:, 1])
    assert np.isnan(filled[0, 0]) and np.isnan(filled[9, 0])


def test_linear_interpolation_fills_the_ends_on_request():
    filled = np.asarray(
        oc.linear_interpolation(
            LONG_TS, GAPPY, fill_forward_nans_at_end=True, replace_nans_at_start=2.5
        )
    )
    seen = ~np.isnan(GAPPY[:, 0])
    known_t = np.concatenate([LONG_TS[:1], LONG_TS[seen]])
    known_y = np.concatenate([[2.5], GAPPY[seen, 0]])
    np.testing.assert_allclose(filled[:, 0], np.interp(LONG_TS, known_t, known_y), rtol=1e-14)
    np.testing.assert_array_equal(filled[:, 1], GAPPY[:, 1])


@pytest.mark.parametrize("fill", [False, True], ids=["nan_ends", "filled_ends"])
def test_backward_hermite_with_gaps_is_the_spline_of_the_observed_data(fill):
    """Channel by channel, the spline through the observations alone (SciPy's, with the
    backward differences), and `NaN` outside them; `fill_forward_nans_at_end` holds
    the last observation up to `ts[-1]`, `replace_nans_at_start` observes at `ts[0]`."""
    start = 0.7 if fill else None
    path = cubic(LONG_TS, GAPPY, fill_forward_nans_at_end=fill, replace_nans_at_start=start)
    points = np.linspace(LONG_TS[0], LONG_TS[-1], 101)
    for channel, left in [(0, True), (0, False), (1, True)]:
        seen = ~np.isnan(GAPPY[:, channel])
        ts, ys = LONG_TS[seen], GAPPY[seen, channel]
        if fill and not seen[0]:
            ts, ys = np.r_[LONG_TS[0], ts], np.r_[start, ys]
        if fill and not seen[-1]:
            ts, ys = np.r_[ts, LONG_TS[-1]], np.r_[ys, ys[-1]]
        spline = scipy.interpolate.CubicHermiteSpline(ts, ys, backward_slopes(ts, ys))
        inside = (points >= ts[0]) & (points <= ts[-1])
        got = at(path, points, left)[:, channel]
        np.testing.assert_allclose(got[inside], spline(points[inside]), rtol=1e-11, atol=1e-12)
        slopes = slope_at(path, points, left)[:, channel]
        np.testing.assert_allclose(
            slopes[inside], spline.derivative()(points[inside]), rtol=1e-10, atol=1e-11
        )
        assert np.isnan(got[~inside]).all()


def test_gaps_in_linear_data_are_filled_linearly_by_both_methods():
    ys = 0.5 + 2.0 * LONG_TS
    gappy = np.where(np.isin(np.arange(10), [2, 3, 5, 6, 7]), np.nan, ys)
    points = np.linspace(LONG_TS[0], LONG_TS[-1], 41)
    for path in (
        cubic(LONG_TS, gappy),
        oc.LinearInterpolation(LONG_TS, oc.linear_interpolation(LONG_TS, gappy)),
    ):
        np.testing.assert_allclose(at(path, points), 0.5 + 2.0 * points, rtol=1e-12)


def test_missing_data_as_diffrax():
    """diffrax's treatment of gaps in `linear_interpolation` and
    `rectilinear_interpolation`, on random gap patterns (diffrax as the reference of
    behaviour; the values come from different code)."""
    dfx = pytest.importorskip("diffrax")
    ys = RNG.normal(size=(4, 10, 3))
    ys[RNG.uniform(size=ys.shape) < 0.4] = np.nan
    for kwargs in ({}, {"fill_forward_nans_at_end": True, "replace_nans_at_start": -1.0}):
        for y in ys:
            got = oc.linear_interpolation(LONG_TS, y, **kwargs)
            expected = dfx.linear_interpolation(jnp.asarray(LONG_TS), y, **kwargs)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
            start = kwargs.get("replace_nans_at_start")
            got = oc.rectilinear_interpolation(LONG_TS, y, start)
            expected = dfx.rectilinear_interpolation(jnp.asarray(LONG_TS), y, start)
            np.testing.assert_array_equal(got[1], expected[1])


def test_rectilinear_interpolation():
    ts = np.array([0.0, 1.0, 2.5, 4.0])
    ys = np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, 3.0], [4.0, 5.0]])
    new_ts, new_ys = oc.rectilinear_interpolation(ts, ys, replace_nans_at_start=-1.0)
    np.testing.assert_array_equal(new_ts, [0.0, 1.0, 1.0, 2.5, 2.5, 4.0, 4.0])
    filled = np.array([[-1.0, 1.0], [2.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_array_equal(new_ys, np.repeat(filled, 2, axis=0)[:-1])
    _, (plain,) = oc.rectilinear_interpolation(ts, (ys,))
    assert np.isnan(plain[:2, 0]).all() and plain[2, 0] == 2.0


# ----------------------------------------------------------------------------------
# PyTrees, increments, derivatives, local interpolation


def test_pytree_data_interpolates_leaf_by_leaf():
    tree = {"a": YS, "b": (YS[:, 0], jnp.asarray(YS[:, :2], jnp.float32))}
    for make in (oc.LinearInterpolation, cubic):
        path = make(TS, tree)
        got = path.evaluate(1.3)
        np.testing.assert_allclose(got["a"], make(TS, YS).evaluate(1.3), rtol=1e-14)
        np.testing.assert_allclose(got["b"][0], make(TS, YS[:, 0]).evaluate(1.3), rtol=1e-14)
        assert got["b"][1].dtype == jnp.float64  # standard promotion with float64 times
    assert oc.backward_hermite_coefficients(TS, {}) == ({}, {}, {}, {})


class _Quartic(oc.FourthOrderPolynomialInterpolation):
    """Stages `(f(t0) dt, y(mid) - y0, f(t1) dt)`: the midpoint is the middle stage."""

    c_mid = np.array([0.0, 1.0, 0.0])


def _poly(t):
    return 0.3 - 0.5 * t + 0.7 * t**2 - 0.2 * t**3 + 0.05 * t**4


def _local_paths():
    t0, t1 = 0.4, 1.9
    dt, mid = t1 - t0, (t0 + t1) / 2
    y0, y1 = jnp.asarray(_poly(t0)), jnp.asarray(_poly(t1))
    f0, f1 = jax.grad(_poly)(t0), jax.grad(_poly)(t1)
    k = jnp.stack([f0 * dt, _poly(mid) - y0, f1 * dt])
    cubic_k = jnp.stack([f0 * dt, f1 * dt])
    return {
        "local_linear": oc.LocalLinearInterpolation(t0=t0, t1=t1, y0=y0, y1=y1),
        "hermite": oc.ThirdOrderHermitePolynomialInterpolation.from_k(
            t0=t0, t1=t1, y0=y0, y1=y1, k=cubic_k
        ),
        "quartic": _Quartic(t0=t0, t1=t1, y0=y0, y1=y1, k=k),
    }


PATHS = {
    "linear": lambda: oc.LinearInterpolation(TS, YS),
    "cubic": lambda: cubic(TS, YS),
    **{name: functools.partial(lambda n: _local_paths()[n], name) for name in _local_paths()},
}


@pytest.mark.parametrize("name", PATHS)
def test_increment_and_derivative(name):
    path = PATHS[name]()
    t0, t1 = 0.5 * path.t0 + 0.5 * path.t1, 0.2 * path.t0 + 0.8 * path.t1
    later, earlier = path.evaluate(t1), path.evaluate(t0)
    np.testing.assert_allclose(path.evaluate(t0, t1), later - earlier, rtol=1e-14)
    _, tangent = jax.jvp(path.evaluate, (t0,), (jnp.ones_like(t0),))
    np.testing.assert_allclose(path.derivative(t0), tangent, rtol=1e-12)
    np.testing.assert_allclose(path.evaluate(path.t0), path.evaluate(path.t0, left=False))


def test_local_polynomials_reproduce_polynomials_of_their_degree():
    paths = _local_paths()
    points = np.linspace(0.4, 1.9, 11)
    np.testing.assert_allclose(at(paths["quartic"], points), _poly(points), rtol=1e-12)
    cubic_part = lambda t: _poly(t) - 0.05 * t**4
    t0, t1 = 0.4, 1.9
    k = jnp.stack([jax.grad(cubic_part)(t) * (t1 - t0) for t in (t0, t1)])
    path = oc.ThirdOrderHermitePolynomialInterpolation.from_k(
        t0=t0, t1=t1, y0=cubic_part(t0), y1=cubic_part(t1), k=k
    )
    np.testing.assert_allclose(at(path, points), cubic_part(points), rtol=1e-12)
    line = paths["local_linear"]
    expected = _poly(t0) + (_poly(t1) - _poly(t0)) * (points - t0) / (t1 - t0)
    np.testing.assert_allclose(at(line, points), expected, rtol=1e-13)


def test_local_linear_over_a_step_of_zero_length():
    path = oc.LocalLinearInterpolation(t0=2.0, t1=2.0, y0=jnp.array([1.0, 2.0]), y1=3.0)
    np.testing.assert_array_equal(path.evaluate(2.0), [1.0, 2.0])
    np.testing.assert_array_equal(jax.jvp(path.evaluate, (2.0,), (1.0,))[1], [0.0, 0.0])


def test_a_users_path():
    class Parabola(oc.AbstractPath):
        t0 = 0.0
        t1 = 3.0

        def evaluate(self, t0, t1=None, left=True):
            if t1 is not None:
                return self.evaluate(t1) - self.evaluate(t0)
            return jnp.asarray(t0) ** 2

    np.testing.assert_allclose(Parabola().derivative(1.5), 3.0)


# ----------------------------------------------------------------------------------
# Transformations and dtypes


def test_vmap_over_data_and_times():
    batch = jnp.stack([YS, 2 * YS, -YS])
    got = jax.vmap(lambda ys: cubic(TS, ys).evaluate(1.1))(batch)
    base = np.asarray(cubic(TS, YS).evaluate(1.1))
    np.testing.assert_allclose(got, [base, 2 * base, -base], rtol=1e-13)
    batch_ts = jnp.stack([jnp.asarray(TS), 2 * jnp.asarray(TS)])
    got = jax.vmap(lambda ts: oc.LinearInterpolation(ts, YS).evaluate(1.1))(batch_ts)
    np.testing.assert_allclose(got[1], oc.LinearInterpolation(2 * TS, YS).evaluate(1.1), rtol=1e-13)


@pytest.mark.parametrize(
    "data, times, expected",
    [
        (jnp.float32, jnp.float32, jnp.float32),
        (jnp.float32, jnp.float64, jnp.float64),
        (jnp.float64, jnp.float32, jnp.float64),
        (jnp.complex128, jnp.float64, jnp.complex128),
        (jnp.int32, jnp.int32, jnp.float64),
    ],
)
def test_dtypes_follow_standard_promotion(data, times, expected):
    ts, ys = jnp.arange(8).astype(times), jnp.asarray(YS * 3, data)
    t = jnp.asarray(4.5, times if times != jnp.int32 else jnp.float64)
    with jax.numpy_dtype_promotion("strict"):
        paths = [oc.LinearInterpolation(ts, ys), cubic(ts, ys)]
        values = [p.evaluate(t) for p in paths] + [p.derivative(t) for p in paths]
    assert [v.dtype for v in values] == [expected] * 4
    reference = np.stack([np.interp(4.5, np.arange(8), np.asarray(y)) for y in ys.T])
    np.testing.assert_allclose(values[0], reference, rtol=1e-6)


def _evaluations():
    ys32 = jnp.asarray(YS, jnp.float32)
    gappy = jnp.asarray(GAPPY, jnp.float32)
    return [
        oc.LinearInterpolation(TS, ys32).evaluate(jnp.float32(1.3)),
        cubic(jnp.asarray(TS, jnp.float32), ys32).derivative(1.3),
        cubic(TS, YS, deriv0=jnp.ones(3)).evaluate(0.2, 2.2),
        oc.linear_interpolation(LONG_TS, gappy, fill_forward_nans_at_end=True),
        oc.rectilinear_interpolation(LONG_TS, gappy, replace_nans_at_start=0.0)[1],
        *[p.evaluate(1.0) for p in _local_paths().values()],
        *[p.derivative(1.0) for p in _local_paths().values()],
    ]


def test_strict_promotion_gives_standard_results_bit_for_bit():
    with jax.numpy_dtype_promotion("standard"):
        expected = _evaluations()
    with jax.numpy_dtype_promotion("strict"):
        got = _evaluations()
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("kind", ["linear", "cubic"])
def test_gradients_in_the_data_and_the_times(kind):
    make = oc.LinearInterpolation if kind == "linear" else cubic
    points = jnp.linspace(0.05, 2.95, 7)  # between the knots

    def values(ts, ys):
        return jax.vmap(make(ts, ys).evaluate)(points)

    assert_grads_close(values, jnp.asarray(TS), jnp.asarray(YS), argnums=(0, 1))


def test_gradients_through_filled_gaps():
    """In the times and the observed values (the missing ones are not inputs)."""
    seen = ~np.isnan(GAPPY)

    def values(ts, observed):
        ys = jnp.full(GAPPY.shape, jnp.nan).at[seen].set(observed)
        filled = oc.linear_interpolation(ts, ys, fill_forward_nans_at_end=True)
        spline = cubic(ts, ys, replace_nans_at_start=jnp.zeros(2), fill_forward_nans_at_end=True)
        return jnp.sum(filled[1:]) + jnp.sum(
            jax.vmap(spline.evaluate)(jnp.asarray(LONG_TS[1:] - 0.1))
        )

    assert_grads_close(values, jnp.asarray(LONG_TS), jnp.asarray(GAPPY[seen]), argnums=(0, 1))


# ----------------------------------------------------------------------------------
# Driving an ODE: dy/dt = -y + u(t), u interpolating data


FORCING_TS = np.sort(np.concatenate([[0.0, 3.0], RNG.uniform(0.1, 2.9, 6)]))
FORCING_YS = RNG.normal(size=8)
WEIGHTS = np.array([0.3, -0.7, 1.1, 0.5])
GRID = np.unique(np.concatenate([FORCING_TS, np.linspace(0.0, 3.0, 61)]))
"""Steps that land on every knot, where the linear forcing has its kinks."""


def _forcing(ys, kind, dtype=jnp.float64):
    ts = jnp.asarray(FORCING_TS, dtype)
    if kind == "linear":
        return oc.LinearInterpolation(ts, ys)
    return oc.CubicInterpolation(ts, oc.backward_hermite_coefficients(ts, ys))


def _field(t, y, forcing):
    return -y + forcing.evaluate(t)


def _solve(ys, kind, adjoint, direction, controller=None, dtype=jnp.float64):
    t0, t1 = (0.0, 3.0) if direction > 0 else (3.0, 0.0)
    grid = GRID if direction > 0 else GRID[::-1]
    dt0 = None if controller is None else 0.1 * direction
    controller = oc.StepTo(jnp.asarray(grid, dtype)) if controller is None else controller
    sol = oc.diffeqsolve(
        oc.ODETerm(_field),
        oc.Tsit5(),
        jnp.asarray(t0, dtype),
        jnp.asarray(t1, dtype),
        dt0,
        jnp.asarray(1.0, dtype),
        _forcing(ys, kind, dtype),
        saveat=oc.SaveAt(ts=jnp.linspace(t0, t1, 5, dtype=dtype)[1:]),
        stepsize_controller=controller,
        adjoint=adjoint,
        max_steps=1024,
    )
    return sol.ys


def _loss(ys, kind, adjoint, direction, **kwargs):
    return jnp.dot(jnp.asarray(WEIGHTS, ys.dtype), _solve(ys, kind, adjoint, direction, **kwargs))


def _reference_forcing(ys, kind):
    if kind == "linear":
        return lambda t: np.interp(t, FORCING_TS, ys)
    return scipy.interpolate.CubicHermiteSpline(FORCING_TS, ys, backward_slopes(FORCING_TS, ys))


def _reference(ys, kind, direction, y0=1.0):
    """`solve_ivp` knot to knot (so that its steps never straddle a kink), at the
    save times."""
    forcing = _reference_forcing(ys, kind)
    knots = FORCING_TS if direction > 0 else FORCING_TS[::-1]
    save = np.linspace(knots[0], knots[-1], 5)[1:]
    out, y = [], y0
    for a, b in zip(knots[:-1], knots[1:], strict=True):
        sol = scipy.integrate.solve_ivp(
            lambda t, y: -y + forcing(t),
            (a, b),
            [y],
            method="DOP853",
            dense_output=True,
            rtol=1e-13,
            atol=1e-13,
        )
        out += [sol.sol(t)[0] for t in save if (a < t <= b if b > a else b <= t < a)]
        y = sol.y[0, -1]
    return np.array(out)


@functools.cache
def _reference_gradient(kind, direction):
    """The solve is linear in the data: the gradient's entry `j` is the response to
    the interpolant of the `j`-th unit vector, from `y0 = 0`."""
    unit = np.eye(len(FORCING_YS))
    return np.array([WEIGHTS @ _reference(unit[j], kind, direction, 0.0) for j in range(len(unit))])


ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint_3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
}
DIRECTIONS = {"forward": 1, "backward": -1}


@pytest.mark.parametrize(
    "kind, direction",
    [
        ("cubic", "forward"),
        ("linear", "backward"),
        pytest.param("linear", "forward", marks=pytest.mark.slow),
        pytest.param("cubic", "backward", marks=pytest.mark.slow),
    ],
)
def test_forced_ode_matches_scipy(kind, direction):
    got = _solve(jnp.asarray(FORCING_YS), kind, oc.CheckpointAdjoint(), DIRECTIONS[direction])
    expected = _reference(FORCING_YS, kind, DIRECTIONS[direction])
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-8)


_QUICK = {
    ("checkpoint", "cubic", "forward"),
    ("backsolve", "linear", "forward"),
    ("interpolating", "cubic", "backward"),
}
"""The default run keeps these (each adjoint, kind and direction once; `checkpoint_3`, a
second checkpoint count, in `-m slow`, `checkpoint` covering its path); the rest are
marked slow."""

GRADIENT_CASES = [
    pytest.param(*case, marks=() if case in _QUICK else pytest.mark.slow)
    for case in itertools.product(ADJOINTS, ["linear", "cubic"], DIRECTIONS)
]


@pytest.mark.parametrize("adjoint, kind, direction", GRADIENT_CASES)
def test_forced_ode_gradient_in_the_data(adjoint, kind, direction):
    """Against the gradient SciPy's solutions give."""
    loss = functools.partial(
        _loss, kind=kind, adjoint=ADJOINTS[adjoint], direction=DIRECTIONS[direction]
    )
    grad = jax.grad(loss)(jnp.asarray(FORCING_YS))
    expected = _reference_gradient(kind, DIRECTIONS[direction])
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "adjoint",
    [a if a == "checkpoint" else pytest.param(a, marks=pytest.mark.slow) for a in ADJOINTS],
)
def test_forced_ode_gradient_matches_finite_differences(adjoint):
    loss = functools.partial(_loss, kind="linear", adjoint=ADJOINTS[adjoint], direction=1)
    assert_grads_close(loss, jnp.asarray(FORCING_YS), mode="directional", num_directions=4)


@pytest.mark.parametrize("kind", ["cubic", pytest.param("linear", marks=pytest.mark.slow)])
def test_forced_ode_forward_mode(kind):
    loss = functools.partial(_loss, kind=kind, adjoint=oc.ForwardMode(), direction=1)
    grad = jax.jacfwd(loss)(jnp.asarray(FORCING_YS))
    np.testing.assert_allclose(grad, _reference_gradient(kind, 1), rtol=1e-6, atol=1e-7)


def test_forced_ode_under_vmap_in_float32():
    batch = jnp.stack([FORCING_YS, -2 * FORCING_YS]).astype(jnp.float32)
    loss = functools.partial(
        _loss, kind="cubic", adjoint=oc.CheckpointAdjoint(), direction=1, dtype=jnp.float32
    )
    values = jax.vmap(loss)(batch)
    assert values.dtype == jnp.float32
    expected = [WEIGHTS @ _reference(np.asarray(ys, np.float64), "cubic", 1) for ys in batch]
    np.testing.assert_allclose(values, expected, rtol=1e-5)


@pytest.mark.slow
def test_forced_ode_gradient_under_vmap_in_float32():
    batch = jnp.stack([FORCING_YS, -2 * FORCING_YS]).astype(jnp.float32)
    loss = functools.partial(
        _loss,
        kind="cubic",
        adjoint=oc.CheckpointAdjoint(checkpoints=3),
        direction=1,
        dtype=jnp.float32,
    )
    grads = jax.vmap(jax.grad(loss))(batch)
    assert grads.dtype == jnp.float32
    expected = np.tile(_reference_gradient("cubic", 1), (2, 1))
    np.testing.assert_allclose(grads, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "adjoint", ["checkpoint", pytest.param("interpolating", marks=pytest.mark.slow)]
)
def test_adaptive_steps_across_the_knots(adjoint):
    """With an adaptive controller the kinks of linear forcing cost rejected steps and
    accuracy (about 100 times the tolerance here, see docs/interpolation.md); the gradient
    agrees with the reference to that accuracy."""
    controller = oc.PIDController(rtol=1e-8, atol=1e-8)
    kwargs = dict(kind="linear", direction=1, controller=controller)
    got = _solve(jnp.asarray(FORCING_YS), adjoint=ADJOINTS[adjoint], **kwargs)
    np.testing.assert_allclose(got, _reference(FORCING_YS, "linear", 1), atol=1e-5)
    grad = jax.grad(_loss)(jnp.asarray(FORCING_YS), adjoint=ADJOINTS[adjoint], **kwargs)
    np.testing.assert_allclose(grad, _reference_gradient("linear", 1), atol=1e-4)
