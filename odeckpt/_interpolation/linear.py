"""`LinearInterpolation`: data joined by straight lines."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import RealScalarLike, promoted

from .checks import knot_times, leading_length
from .knots import AbstractGlobalInterpolation, locate, ratio
from .path import increment


class LinearInterpolation(AbstractGlobalInterpolation):
    """Piecewise linear interpolation of data `ys` measured at times `ts`.

    Between `ts[i]` and `ts[i + 1]` the path is
    `ys[i] + (ys[i + 1] - ys[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])`.

    As a forcing term in a vector field it is continuous but has a kink at every knot,
    so an adaptive solver rejects steps that straddle a knot until they land near it
    (and a fixed step loses an order of accuracy there). Stepping onto the knots, e.g.
    `StepTo(ts)`, or smooth interpolation (`CubicInterpolation`) avoids both.

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
    def ts_size(self) -> int:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The number of knots."""
        return self.ts.shape[0]

    @eqx.filter_jit
    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The interpolated data at `t0`, or its increment from `t0` to `t1`.

        Args:
            t0: the time.
            t1: if given, `evaluate(t1) - evaluate(t0)` is returned.
            left: at a repeated knot, the value from the left (the default) or right.

        Returns:
            A PyTree like one row of `ys`, in the dtype standard promotion gives `ys`
            and the times.
        """
        if t1 is not None:
            return increment(self, t0, t1, left)
        piece = locate(self.ts, self.ts_size, t0, left)

        def interpolate(y):
            start, end, fraction = promoted(y[piece.index], y[piece.index + 1], piece.fraction)
            return start + (end - start) * fraction

        return jax.tree.map(interpolate, self.ys)

    @eqx.filter_jit
    def derivative(self, t: RealScalarLike, left: bool = True) -> PyTree[jax.Array]:
        """The slope of the piece `t` falls in (at a knot, of the piece before it when
        `left`, else after it); 0 on a piece of zero width.

        Args:
            t: the time.
            left: at a knot, the left derivative (the default) or the right one.

        Returns:
            A PyTree like one row of `ys`.
        """
        piece = locate(self.ts, self.ts_size, t, left)

        def slope(y):
            start, end, width = promoted(y[piece.index], y[piece.index + 1], piece.width)
            return ratio(end - start, width)

        return jax.tree.map(slope, self.ys)
