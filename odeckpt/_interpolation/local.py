"""The interpolating polynomials of one step, `t0` to `t1`: a solver's dense output,
in diffrax's classes (`interpolation_cls`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from odeckpt._core import RealScalarLike, Y, promoted

from .knots import ratio
from .path import AbstractPath, increment


class AbstractLocalInterpolation(AbstractPath):
    """A path over one step `[t0, t1]`, typically a solver's dense output built from
    the step's stages. A subclass provides `t0`, `t1` and `evaluate`."""


def _polynomial(coeffs, fraction):
    """`sum(coeffs[k] * fraction ** (n - k))`: Horner's scheme along the first axis
    of `coeffs` (highest degree first), at a scalar `fraction`."""
    coeffs, fraction = promoted(coeffs, fraction)
    total = coeffs[0]
    for row in coeffs[1:]:
        total = total * fraction + row
    return total


def _step_fraction(path, t) -> jax.Array:
    """`(t - t0) / (t1 - t0)` on the step's interval; 0 on a step of zero length."""
    t, start, end = promoted(t, path.t0, path.t1)
    return ratio(t - start, end - start)


class LocalLinearInterpolation(AbstractLocalInterpolation):
    """The straight line from `(t0, y0)` to `(t1, y1)`; its value is `y0` on a step of
    zero length.

    Args:
        t0, t1: the step's start and end.
        y0, y1: the values there, PyTrees of one structure.
    """

    t0: RealScalarLike
    t1: RealScalarLike
    y0: Y
    y1: Y

    @property
    def piecewise_linear(self) -> bool:
        return True

    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The line at `t0`, or its increment from `t0` to `t1` (`left` is unused).

        Returns:
            A PyTree like `y0`, as arrays.
        """
        del left
        if t1 is None:
            fraction = _step_fraction(self, t0)
        else:
            start, end, t0, t1 = promoted(self.t0, self.t1, t0, t1)
            fraction = ratio(t1 - t0, end - start)

        def line(y0, y1):
            y0, y1, fraction_ = promoted(y0, y1, fraction)
            change = (y1 - y0) * fraction_
            return change if t1 is not None else y0 + change

        return jax.tree.map(line, self.y0, self.y1)


class _AbstractPolynomial(AbstractLocalInterpolation):
    """A polynomial in the step fraction `s = (t - t0) / (t1 - t0)`: per leaf of the
    state, `coeffs` with the powers along axis 0, highest first."""

    coeffs: eqx.AbstractVar[PyTree[jax.Array]]

    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The polynomial at `t0`, or its increment from `t0` to `t1` (`left` is unused).

        Returns:
            A PyTree like the state `y0`.
        """
        if t1 is not None:
            return increment(self, t0, t1, left)
        fraction = _step_fraction(self, t0)
        return jax.tree.map(lambda c: _polynomial(c, fraction), self.coeffs)


class ThirdOrderHermitePolynomialInterpolation(_AbstractPolynomial):
    """The cubic with values `y0`, `y1` and increments `k0`, `k1` at the two ends of the
    step: `k = (t1 - t0) dy/dt`, the slopes scaled by the step, as Runge–Kutta stages
    are.

    Args:
        t0, t1: the step's start and end (keyword-only).
        y0, y1: the values there.
        k0, k1: the scaled slopes there, PyTrees like `y0`.
    """

    t0: RealScalarLike
    t1: RealScalarLike
    coeffs: PyTree[jax.Array]
    """Per leaf, the cubic in `s = (t - t0) / (t1 - t0)`, highest degree first."""

    def __init__(self, *, t0: RealScalarLike, t1: RealScalarLike, y0: Y, y1: Y, k0: Y, k1: Y):
        def cubic(y0, y1, k0, k1):
            y0, y1, k0, k1 = promoted(y0, y1, k0, k1)
            rise = y1 - y0
            return jnp.stack([k0 + k1 - 2 * rise, 3 * rise - 2 * k0 - k1, k0, y0])

        self.t0, self.t1 = t0, t1
        self.coeffs = jax.tree.map(cubic, y0, y1, k0, k1)

    @classmethod
    def from_k(
        cls, *, t0: RealScalarLike, t1: RealScalarLike, y0: Y, y1: Y, k: PyTree[jax.Array]
    ) -> "ThirdOrderHermitePolynomialInterpolation":
        """The cubic from a step's stages `k` (leaves with the stages along axis 0):
        the first and last are the scaled slopes at `t0` and `t1`, as in a method with
        the first-same-as-last property.

        Returns:
            The interpolation.
        """
        first, last = jax.tree.map(lambda x: x[0], k), jax.tree.map(lambda x: x[-1], k)
        return cls(t0=t0, t1=t1, y0=y0, y1=y1, k0=first, k1=last)


class FourthOrderPolynomialInterpolation(_AbstractPolynomial):
    """The quartic with values `y0`, `y1` and the scaled slopes `k[0]`, `k[-1]` at the
    ends of the step, and the value `y0 + c_mid · k` at its midpoint: the dense output
    of Runge–Kutta methods such as Dormand–Prince 5(4) and Tsitouras 5(4).

    Abstract: a subclass gives `c_mid`, the weights of the stages `k` (one per stage)
    that give the midpoint.

    Args:
        t0, t1: the step's start and end (keyword-only).
        y0, y1: the values there.
        k: the step's stages, scaled by the step (leaves with the stages along axis 0).

    References:
        Shampine, "Some Practical Runge-Kutta Formulas", Mathematics of Computation
        46 (1986), 135-150.
    """

    t0: RealScalarLike
    t1: RealScalarLike
    coeffs: PyTree[jax.Array]
    """Per leaf, the quartic in `s = (t - t0) / (t1 - t0)`, highest degree first."""

    c_mid: eqx.AbstractVar[np.ndarray]

    def __init__(self, *, t0: RealScalarLike, t1: RealScalarLike, y0: Y, y1: Y, k: PyTree):
        weights = np.asarray(self.c_mid)

        def quartic(y0, y1, k):
            y0, y1, k = promoted(y0, y1, k)
            mid = jnp.tensordot(jnp.asarray(weights, k.dtype), k, axes=1)
            slope0, slope1 = k[0], k[-1]
            # p(s) = a s^4 + b s^3 + c s^2 + slope0 s + y0 with p(1) = y1,
            # p'(1) = slope1, p(1/2) = y0 + mid:
            rise, turn, bulge = y1 - y0 - slope0, slope1 - slope0, 16 * mid - 8 * slope0
            a = bulge - 8 * rise + 2 * turn
            b = 14 * rise - 3 * turn - 2 * bulge
            c = bulge - 5 * rise + turn
            return jnp.stack([a, b, c, slope0, y0])

        self.t0, self.t1 = t0, t1
        self.coeffs = jax.tree.map(quartic, y0, y1, k)
