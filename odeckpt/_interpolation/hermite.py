"""`backward_hermite_coefficients`: a C¹ cubic spline through data that, at each knot,
uses only the data up to that knot."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import promoted_dtype

from .checks import knot_times, leading_length, like_data
from .knots import ratio
from .missing import broadcast_rows, map_leaves, neighbours, rows_at, with_start


def backward_hermite_coefficients(
    ts,
    ys: PyTree[jax.Array],
    *,
    deriv0: PyTree | None = None,
    replace_nans_at_start: PyTree | None = None,
    fill_forward_nans_at_end: bool = False,
) -> tuple[PyTree[jax.Array], PyTree[jax.Array], PyTree[jax.Array], PyTree[jax.Array]]:
    """The coefficients `(d, c, b, a)` of the cubic Hermite spline with backward
    differences through the data, for `CubicInterpolation(ts, coeffs)`.

    Each piece `[ts[i], ts[i + 1]]` is the cubic with the data's values at both ends,
    the backward difference `(ys[i] - ys[i - 1]) / (ts[i] - ts[i - 1])` as its slope at
    the start (`deriv0` at `ts[0]`; by default the first piece is a straight line) and its
    own secant slope at the end: continuously differentiable, and the path up to `ts[i]`
    depends only on the data up to `ts[i]`. With missing data (`NaN`) it is the spline of
    the observed data alone, channel by channel (`docs/interpolation.md`, "Differences
    from diffrax").

    Args:
        ts: the observation times, strictly increasing, at least 2.
        ys: the observations, a PyTree whose leaves have `len(ts)` rows (times along
            axis 0, channels after); `NaN` marks a missing value.
        deriv0: the slope at `ts[0]` (per leaf of `ys`, broadcast across channels);
            by default the secant to the first observation after `ts[0]`.
        replace_nans_at_start: a value (per leaf of `ys`) observed at `ts[0]` where
            `ys[0]` is `NaN` (by default the pieces before the first observation are
            `NaN`).
        fill_forward_nans_at_end: after the last observation, hold its value up to
            `ts[-1]` (by default those pieces are `NaN`).

    Returns:
        `(d, c, b, a)`: four PyTrees like `ys` with `len(ts) - 1` rows, in the dtype
        standard promotion gives `ys` and `ts`; on piece `i` the spline is
        `a[i] + b[i] s + c[i] s**2 + d[i] s**3` with `s = t - ts[i]`.

    Raises:
        ValueError: bad `ts` (not 1-D, shorter than 2, or not strictly increasing:
            at trace time when known, else at run time), leaves of `ys` of another
            length, or `deriv0` or `replace_nans_at_start` not structured like `ys`.

    References:
        Morrill, Kidger, Yang and Lyons, "Neural Controlled Differential Equations for
        Online Prediction Tasks", arXiv:2106.11028 (2021), section 3.
    """
    caller = "backward_hermite_coefficients"
    ts = knot_times(ts, caller, strict=True)
    leading_length(ys, ts.shape[0], f"{caller}(ts, ys)", "ys")
    like_data(deriv0, ys, caller, "deriv0")
    like_data(replace_nans_at_start, ys, caller, "replace_nans_at_start")
    if not jax.tree.leaves(ys):
        return ys, ys, ys, ys
    return _fit_all(ts, ys, deriv0, replace_nans_at_start, fill_forward_nans_at_end)


@eqx.filter_jit
def _fit_all(ts, ys, slopes0, starts, fill_end: bool):
    fit = lambda y, slope0, start: _fit(ts, y, slope0, start, fill_end)
    pieces = map_leaves(fit, ys, slopes0, starts)
    return tuple(jax.tree.transpose(jax.tree.structure(ys), jax.tree.structure((0,) * 4), pieces))


def _fit(ts, y, slope0, start, fill_end: bool):
    """`(d, c, b, a)` for one leaf of data `y` (times along axis 0)."""
    y = jnp.asarray(y)
    dtype = promoted_dtype(y, ts)
    y, ts = with_start(y.astype(dtype), start), ts.astype(dtype)
    near = neighbours(y)
    starts, ends = jax.tree.map(lambda x: x[:-1], near), jax.tree.map(lambda x: x[1:], near)
    # Piece i, from knot i, is the cubic from the last observation at or before i (P)
    # to the first after i (N, or the last observation held at ts[-1]), about knot i.
    y_p, y_n = rows_at(y, starts.before), rows_at(y, ends.after)
    last = rows_at(y, near.before[-1:])
    y_n = jnp.where(ends.has_after, y_n, last if fill_end else y_p)
    y_p = jnp.where(starts.has_before, y_p, y_n)  # finite wherever any data is
    t_p = rows_at(ts, starts.before)
    t_n = jnp.where(ends.has_after, rows_at(ts, ends.after), ts[-1])
    forward = ratio(y_n - y_p, t_n - t_p)
    earlier = rows_at(near.before, starts.before - 1)  # the observation before P
    has_prior = (starts.before >= 1) & (earlier >= 0)
    y_prior = jnp.where(has_prior, rows_at(y, earlier), y_p)
    backward = ratio(y_p - y_prior, t_p - rows_at(ts, earlier))
    slope = jnp.where(has_prior, backward, forward)
    if slope0 is not None:
        slope0 = jnp.broadcast_to(jnp.asarray(slope0, dtype), y.shape[1:])
        slope = jnp.where(starts.before == 0, slope0, slope)
    cubic = _secant_hermite(y_p, slope, t_n - t_p, y_n)
    pieces = _shifted(cubic, broadcast_rows(ts[:-1], y_p) - t_p)
    valid = starts.has_before & (ends.has_after | fill_end)
    return tuple(jnp.where(valid, x, jnp.nan) for x in pieces)


def _secant_hermite(y0, slope0, width, y1):
    """`(d, c, b, a)` of the cubic from `(0, y0)` with slope `slope0` to `(width, y1)`
    with the secant slope `(y1 - y0) / width` there."""
    excess = ratio(y1 - y0, width) - slope0
    return -ratio(ratio(excess, width), width), 2 * ratio(excess, width), slope0, y0


def _shifted(coeffs, s):
    """`(d, c, b, a)` of the same cubic about the point `s` (its Taylor coefficients
    there)."""
    d, c, b, a = coeffs
    return d, c + 3 * d * s, b + s * (2 * c + 3 * d * s), a + s * (b + s * (c + s * d))
