"""`LinearInterpolation`: data joined by straight lines."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import promoted

from .checks import knot_times, leading_length
from .knots import AbstractPiecewise, locate, ratio


class LinearInterpolation(AbstractPiecewise):
    """Piecewise linear interpolation of data `ys` measured at times `ts`.

    Between `ts[i]` and `ts[i + 1]` the path is
    `ys[i] + (ys[i + 1] - ys[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])`: continuous, with a
    kink at every knot that adaptive steps stumble on; step onto the knots (`StepTo(ts)`)
    or use `CubicInterpolation` (`docs/interpolation.md`, "Kinks and adaptive steps").

    Args:
        ts: the measurement times, increasing (a repeated time is a jump), at least 2;
            integer times are converted to floating point.
        ys: the data, a PyTree whose leaves have `len(ts)` entries along their first
            axis (any further axes are channels). `NaN` marks missing data; fill it
            in first with `linear_interpolation` or `rectilinear_interpolation`.

    Raises:
        ValueError: `ts` not 1-D, shorter than 2, not finite or decreasing (when
            known at trace time), or a leaf of `ys` of another length.
        TypeError: complex `ts`.
    """

    ts: jax.Array
    ys: PyTree[jax.Array]

    def __init__(self, ts, ys):
        self.ts = knot_times(ts, "LinearInterpolation", strict=False)
        self.ys = jax.tree.map(jnp.asarray, ys)
        leading_length(self.ys, self.ts.shape[0], "LinearInterpolation(ts, ys)", "ys")

    @property
    def piecewise_linear(self) -> bool:
        return True

    @eqx.filter_jit
    def _value(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The path at `t` (see `evaluate`)."""
        piece = locate(self.ts, self.ts_size, t, left)

        def interpolate(y):
            start, end, fraction = promoted(y[piece.index], y[piece.index + 1], piece.fraction)
            return start + (end - start) * fraction

        return jax.tree.map(interpolate, self.ys)

    @eqx.filter_jit
    def _slope(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The derivative at `t` (see `derivative`)."""
        piece = locate(self.ts, self.ts_size, t, left)

        def slope(y):
            start, end, width = promoted(y[piece.index], y[piece.index + 1], piece.width)
            return ratio(end - start, width)

        return jax.tree.map(slope, self.ys)
