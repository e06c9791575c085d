"""Missing data (`NaN`): finding the observed neighbours of each row, and filling the
gaps by `linear_interpolation` or `rectilinear_interpolation`."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import promoted

from .checks import knot_times, leading_length, like_data
from .knots import ratio


class Neighbours(eqx.Module):
    """For each entry of a data leaf (times along axis 0, channels after), the last
    observed (non-`NaN`) row at or before it (`before`, -1 if none) and the first at or
    after it (`after`, `rows` if none)."""

    before: jax.Array
    after: jax.Array
    rows: int = eqx.field(static=True)

    @property
    def has_before(self) -> jax.Array:
        return self.before >= 0

    @property
    def has_after(self) -> jax.Array:
        return self.after < self.rows


def neighbours(y: jax.Array) -> Neighbours:
    """The observed neighbours of each entry of `y` along its first axis."""
    rows = jax.lax.broadcasted_iota(jnp.int32, y.shape, 0)
    observed = ~jnp.isnan(y)
    before = jax.lax.cummax(jnp.where(observed, rows, -1), axis=0)
    after = jax.lax.cummin(jnp.where(observed, rows, y.shape[0]), axis=0, reverse=True)
    return Neighbours(before, after, y.shape[0])


def rows_at(x: jax.Array, index: jax.Array) -> jax.Array:
    """`x[index]` entry by entry (`x` of shape `(T, ...)`, or times `(T,)` broadcast
    across the channels of `index`), with `index` clipped into `[0, T)`."""
    index = jnp.clip(index, 0, x.shape[0] - 1)
    if x.ndim == 1:
        return x[index]
    return jnp.take_along_axis(x, index, axis=0)


def broadcast_rows(ts: jax.Array, like: jax.Array) -> jax.Array:
    """Times `(T,)` broadcast along the first axis of `like` `(T, ...)`."""
    return jnp.broadcast_to(jnp.expand_dims(ts, tuple(range(1, like.ndim))), like.shape)


def with_start(y: jax.Array, start) -> jax.Array:
    """`y` with the `NaN` entries of its first row replaced by `start` (if given)."""
    if start is None:
        return y
    start = jnp.broadcast_to(jnp.asarray(start, y.dtype), y.shape[1:])
    return y.at[0].set(jnp.where(jnp.isnan(y[0]), start, y[0]))


def linear_interpolation(
    ts,
    ys: PyTree[jax.Array],
    *,
    fill_forward_nans_at_end: bool = False,
    replace_nans_at_start: PyTree | None = None,
) -> PyTree[jax.Array]:
    """Fill in missing data (`NaN`) by linear interpolation between the nearest
    observations either side, channel by channel; e.g. before `LinearInterpolation`.

    Args:
        ts: the observation times, strictly increasing, at least 2.
        ys: the observations, a PyTree whose leaves have `len(ts)` rows (times along
            axis 0, channels after); `NaN` marks a missing value.
        fill_forward_nans_at_end: fill the `NaN`s after the last observation with the
            last observed value (by default they stay `NaN`).
        replace_nans_at_start: a value (per leaf of `ys`, broadcast across channels)
            observed at `ts[0]` where `ys[0]` is `NaN`; the `NaN`s after it are then
            interpolated up to the first observation (by default they stay `NaN`).

    Returns:
        `ys` with the missing values filled in, in the dtypes of `ys`.

    Raises:
        ValueError: bad `ts` (not 1-D, shorter than 2, or not strictly increasing:
            at trace time when known, else at run time), leaves of `ys` of another
            length, or `replace_nans_at_start` not structured like `ys`.
    """
    ts = knot_times(ts, "linear_interpolation", strict=True)
    leading_length(ys, ts.shape[0], "linear_interpolation(ts, ys)", "ys")
    like_data(replace_nans_at_start, ys, "linear_interpolation", "replace_nans_at_start")
    return _fill_all_linear(ts, ys, replace_nans_at_start, fill_forward_nans_at_end)


@eqx.filter_jit
def _fill_all_linear(ts, ys, starts, fill_end: bool):
    fill = lambda y, start: _fill_linear(ts, y, start, fill_end)
    return map_leaves(fill, ys, starts)


def map_leaves(fn, ys, *extras):
    """`fn(y, *extra)` for each leaf `y` of `ys`, with the matching leaf of each of
    `extras` (PyTrees structured like `ys`, or None: then None for every leaf)."""
    leaves, treedef = jax.tree.flatten(ys)
    columns = [[None] * len(leaves) if e is None else treedef.flatten_up_to(e) for e in extras]
    return treedef.unflatten([fn(*row) for row in zip(leaves, *columns, strict=True)])


def _fill_linear(ts, y, start, fill_end: bool) -> jax.Array:
    y = jnp.asarray(y)
    if not jnp.issubdtype(y.dtype, jnp.inexact):  # integers: nothing can be missing
        return y
    y = with_start(y, start)
    near = neighbours(y)
    before, after = rows_at(y, near.before), rows_at(y, near.after)
    before = jnp.where(near.has_before, before, after)  # finite wherever any data is
    after = jnp.where(near.has_after, after, before)
    t_before, t_after = rows_at(ts, near.before), rows_at(ts, near.after)
    fraction = ratio(broadcast_rows(ts, y) - t_before, t_after - t_before)
    before_, after_, fraction = promoted(before, after, fraction)
    filled = (before_ + (after_ - before_) * fraction).astype(y.dtype)
    valid = near.has_before & (near.has_after | fill_end)
    return jnp.where(valid, filled, jnp.nan)


def rectilinear_interpolation(
    ts, ys: PyTree[jax.Array], replace_nans_at_start: PyTree | None = None
) -> tuple[jax.Array, PyTree[jax.Array]]:
    """Rectilinear interpolation: time advances with the data held, then the data
    advances with time held, so that the path at any time uses only the data observed
    up to then (for models that predict online). Missing values (`NaN`) are first
    filled forward.

    With `ts = [t0, t1, t2]` and `ys = [y0, y1, y2]` it returns
    `[t0, t1, t1, t2, t2]` and `[y0, y0, y1, y1, y2]`. Typically the two are stacked
    as the channels of a `LinearInterpolation` over new, evenly spaced knots.

    Args:
        ts: the observation times, strictly increasing, at least 2.
        ys: the observations, a PyTree whose leaves have `len(ts)` rows; `NaN` marks
            a missing value, replaced by the last observed one.
        replace_nans_at_start: a value (per leaf of `ys`) for the `NaN`s before the
            first observation (by default they stay `NaN`).

    Returns:
        `(new_ts, new_ys)`, with `2 len(ts) - 1` rows each.

    Raises:
        ValueError: bad `ts` (as in `linear_interpolation`), leaves of `ys` of another
            length, or `replace_nans_at_start` not structured like `ys`.

    References:
        Morrill, Kidger, Yang and Lyons, "Neural Controlled Differential Equations for
        Online Prediction Tasks", arXiv:2106.11028 (2021).
    """
    ts = knot_times(ts, "rectilinear_interpolation", strict=True)
    leading_length(ys, ts.shape[0], "rectilinear_interpolation(ts, ys)", "ys")
    like_data(replace_nans_at_start, ys, "rectilinear_interpolation", "replace_nans_at_start")
    return _rectilinear(ts, ys, replace_nans_at_start)


@eqx.filter_jit
def _rectilinear(ts, ys, starts):
    step = lambda y, start: jnp.repeat(_fill_forward(y, start), 2, axis=0)[:-1]
    return jnp.repeat(ts, 2)[1:], map_leaves(step, ys, starts)


def _fill_forward(y, start) -> jax.Array:
    y = jnp.asarray(y)
    if not jnp.issubdtype(y.dtype, jnp.inexact):
        return y
    y = with_start(y, start)
    near = neighbours(y)
    return jnp.where(near.has_before, rows_at(y, near.before), jnp.nan).astype(y.dtype)
