"""`CubicInterpolation`: a piecewise cubic path from its coefficients."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import RealScalarLike, promoted

from .checks import cubic_coefficients, knot_times
from .knots import AbstractGlobalInterpolation, locate
from .path import increment


class CubicInterpolation(AbstractGlobalInterpolation):
    """A piecewise cubic path over the knots `ts`, given its coefficients.

    With `d, c, b, a = coeffs`, between `ts[i]` and `ts[i + 1]` the path is
    `a[i] + b[i] s + c[i] s**2 + d[i] s**3` with `s = t - ts[i]`. Any cubic spline
    fits this form; `backward_hermite_coefficients(ts, ys)` gives one that is
    continuously differentiable, passes through the data and, at each knot, uses only
    the data up to that knot (so it suits data arriving in real time).

    Args:
        ts: the knots, increasing, at least 2; integer times are converted to floating
            point.
        coeffs: `(d, c, b, a)`, four PyTrees of one structure whose leaves have
            `len(ts) - 1` rows (one per piece) along their first axis.

    Raises:
        ValueError: `ts` not 1-D, shorter than 2, not finite or decreasing (when
            known at trace time), or `coeffs` not four PyTrees of that length.
        TypeError: complex `ts`.
    """

    ts: jax.Array
    coeffs: tuple[PyTree[jax.Array], PyTree[jax.Array], PyTree[jax.Array], PyTree[jax.Array]]

    def __init__(self, ts, coeffs):
        self.ts = knot_times(ts, "CubicInterpolation", strict=False)
        cubic_coefficients(coeffs, self.ts.shape[0])
        d, c, b, a = (jax.tree.map(jnp.asarray, x) for x in coeffs)
        self.coeffs = (d, c, b, a)

    @property
    def ts_size(self) -> int:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The number of knots."""
        return self.ts.shape[0]

    @eqx.filter_jit
    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The path at `t0`, or its increment from `t0` to `t1`.

        Args:
            t0: the time.
            t1: if given, `evaluate(t1) - evaluate(t0)` is returned.
            left: at a knot, the piece before it (the default) or after it.

        Returns:
            A PyTree like one row of the coefficients, in the dtype standard promotion
            gives them and the times.
        """
        if t1 is not None:
            return increment(self, t0, t1, left)
        piece = locate(self.ts, self.ts_size, t0, left)

        def horner(d, c, b, a):
            d, c, b, a, s = promoted(*(x[piece.index] for x in (d, c, b, a)), piece.offset)
            return a + s * (b + s * (c + s * d))

        return jax.tree.map(horner, *self.coeffs)

    @eqx.filter_jit
    def derivative(self, t: RealScalarLike, left: bool = True) -> PyTree[jax.Array]:
        """The derivative `b[i] + 2 c[i] s + 3 d[i] s**2` of the piece `t` falls in.

        Args:
            t: the time.
            left: at a knot, the piece before it (the default) or after it.

        Returns:
            A PyTree like one row of the coefficients.
        """
        piece = locate(self.ts, self.ts_size, t, left)

        def slope(d, c, b, a):
            d, c, b, s = promoted(*(x[piece.index] for x in (d, c, b)), piece.offset)
            return b + s * (2 * c + s * (3 * d))

        return jax.tree.map(slope, *self.coeffs)
