"""`CubicInterpolation`: a piecewise cubic path from its coefficients."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import promoted

from .checks import cubic_coefficients, knot_times
from .knots import AbstractPiecewise, locate


class CubicInterpolation(AbstractPiecewise):
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

    @eqx.filter_jit
    def _value(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The path at `t` (see `evaluate`)."""
        piece = locate(self.ts, self.ts_size, t, left)

        def horner(d, c, b, a):
            d, c, b, a, s = promoted(*(x[piece.index] for x in (d, c, b, a)), piece.offset)
            return a + s * (b + s * (c + s * d))

        return jax.tree.map(horner, *self.coeffs)

    @eqx.filter_jit
    def _slope(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The derivative at `t` (see `derivative`)."""
        piece = locate(self.ts, self.ts_size, t, left)

        def slope(d, c, b, a):
            d, c, b, s = promoted(*(x[piece.index] for x in (d, c, b)), piece.offset)
            return b + s * (2 * c + s * (3 * d))

        return jax.tree.map(slope, *self.coeffs)
