"""Property-based tests: random PyTree states, dtypes, time spans and tolerances.

On `dy/dt = -k y` (leafwise, exact solution `y0 exp(-k (t - t0))`) every solve either
succeeds and matches the closed form within a bound derived from its tolerances, or
fails with a documented `RESULTS` code, its outputs before the failure matching the
closed form and those after it `inf`. It never raises and never returns NaN.

Runs are deterministic (`derandomize=True`, no example database).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import odeckpt as oc
from odeckpt._core.results import _FailureMessages, failure_index

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FAILURES = {oc.RESULTS.max_steps_reached, oc.RESULTS.nonfinite_state, oc.RESULTS.dt_min_reached}


@dataclasses.dataclass(frozen=True)
class Shape:
    """A leaf of a drawn structure (not a tuple, so that tuples can be containers)."""

    dims: tuple[int, ...]


def _containers(children):
    lists = st.lists(children, min_size=1, max_size=3)
    keys = st.sampled_from(["a", "b", "c"])
    dicts = st.dictionaries(keys, children, min_size=1, max_size=3)
    return st.one_of(lists, lists.map(tuple), dicts)


SHAPES = st.sampled_from([(), (1,), (3,), (2, 2)]).map(Shape)
STRUCTURES = st.recursive(SHAPES, _containers, max_leaves=4)


def _is_shape(x):
    return isinstance(x, Shape)


@dataclasses.dataclass(frozen=True)
class Problem:
    y0: object
    k: object
    t0: float
    t1: float
    dt0: float | None
    rtol: float
    atol: float
    solver: oc.AbstractSolver
    max_steps: int


@st.composite
def problems(draw):
    structure = draw(STRUCTURES)
    dtype = draw(st.sampled_from([jnp.float32, jnp.float64]))
    num_leaves = len(jax.tree.leaves(structure, is_leaf=_is_shape))
    scales = iter(draw(st.lists(st.floats(-10, 10), min_size=num_leaves, max_size=num_leaves)))
    rates = iter(draw(st.lists(st.floats(0, 2), min_size=num_leaves, max_size=num_leaves)))

    def leaf(shape):
        values = next(scales) * (1 + np.arange(np.prod(shape.dims))).reshape(shape.dims)
        return jnp.asarray(values, dtype)

    y0 = jax.tree.map(leaf, structure, is_leaf=_is_shape)
    k = jax.tree.map(lambda y: jnp.asarray(next(rates), y.dtype), y0)
    t0 = draw(st.sampled_from([0.0, -3.0, 100.0, 1e4]))
    span = draw(st.sampled_from([0.0, 1e-6, 1e-2, 1.0, 10.0, 1e3]))
    t1 = t0 + draw(st.sampled_from([1.0, -1.0])) * span
    dt0 = None if draw(st.booleans()) or span == 0 else (t1 - t0) / 10
    rtol = 10.0 ** draw(st.integers(-10, -3))
    solver = draw(st.sampled_from([oc.Tsit5(), oc.Dopri5(), oc.Bosh3()]))
    max_steps = draw(st.sampled_from([8, 64, 4096]))
    return Problem(y0, k, t0, t1, dt0, rtol, rtol * 1e-2, solver, max_steps)


def _field(t, y, k):
    return jax.tree.map(lambda y, k: -k * y, y, k)


def _exact(p: Problem, t):
    """`y(t)` for each leaf, in float64 NumPy, with a leading axis over `t`."""
    dt = np.asarray(t, np.float64) - p.t0

    def leaf(y0, k):
        y0, k = np.asarray(y0, np.float64), float(k)
        with np.errstate(over="ignore", invalid="ignore"):  # 0 * inf where y0 = 0
            y = y0[None] * np.exp(-k * dt.reshape((-1,) + (1,) * y0.ndim))
        return np.where(y0[None] == 0, 0.0, y)

    return jax.tree.map(leaf, p.y0, p.k)


def _bound(p: Problem, exact, y0, dtype, steps: int):
    """A tolerance-derived bound: `steps + 1` local errors of at most
    `atol + rtol |y|` (plus rounding), none amplified (relative errors of `-k y` are
    carried, not grown), with a safety factor of 10."""
    scale = np.maximum(np.abs(exact), np.abs(np.asarray(y0, np.float64))[None])
    eps = float(jnp.finfo(dtype).eps)
    return 10 * (steps + 1) * (p.atol + (p.rtol + 10 * eps) * scale)


@SETTINGS
@given(problems())
def test_solve_matches_closed_form_or_fails_with_a_documented_result(p: Problem):
    ts = p.t0 + (p.t1 - p.t0) * np.asarray([0.25, 0.5, 1.0])
    sol = oc.diffeqsolve(
        _field,
        p.solver,
        p.t0,
        p.t1,
        p.dt0,
        p.y0,
        args=p.k,
        saveat=oc.SaveAt(ts=ts, t1=True),
        max_steps=p.max_steps,
        throw=False,
        stepsize_controller=oc.PIDController(rtol=p.rtol, atol=p.atol),
    )
    result = oc.RESULTS(int(sol.result))
    steps = int(sol.stats["num_accepted_steps"])
    assert int(sol.stats["num_steps"]) <= p.max_steps
    assert result == oc.RESULTS.successful or result in FAILURES, result
    assert sol.ts is not None and sol.ys is not None
    saved_ts = np.asarray(sol.ts)
    if result == oc.RESULTS.successful:
        np.testing.assert_array_equal(saved_ts, [*ts, p.t1])
    else:
        assert np.isinf(saved_ts[-1])  # the t1 row is marked, never a stale value
    exact = _exact(p, [*ts, p.t1])
    for y, e, y0 in zip(
        jax.tree.leaves(sol.ys), jax.tree.leaves(exact), jax.tree.leaves(p.y0), strict=True
    ):
        assert y.dtype == y0.dtype
        y = np.asarray(y, np.float64)
        assert not np.any(np.isnan(y))
        computed = np.isfinite(y)
        if result == oc.RESULTS.successful:
            assert np.all(computed)
        else:  # rows are filled in time order: computed rows first, then inf ones
            rows = computed.reshape(len(saved_ts), -1).all(axis=1)
            assert not rows[-1] and np.all(rows[:-1][: rows.sum()])
        assert np.all(np.isfinite(e[computed]))  # no finite value where y(t) overflows
        bound = _bound(p, e, y0, y0.dtype, steps)[computed]
        error = np.abs(y[computed] - e[computed])
        assert np.all(error <= bound), (np.max(error / bound), result, steps)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    t=st.floats(width=32, allow_nan=False, allow_infinity=False),
    code=st.sampled_from(sorted(FAILURES)),
)
def test_failure_message_round_trips_the_time(t, code):
    index = int(failure_index(jnp.asarray(code), jnp.asarray(t, jnp.float32)))
    message = _FailureMessages(0.0, 1.0, 8)[index]
    assert message.endswith(code.message)
    reported = float(message.split("t = ")[1].split(" of")[0])
    # 6 significant digits (5e-6 relative) of t less 4 of float32's mantissa bits (which,
    # for subnormal t, is up to 8 of the smallest subnormal, 1.4e-45)
    assert abs(reported - t) <= 6e-6 * abs(t) + 8 * 1.5e-45
