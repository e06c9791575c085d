"""Paths through data and the interpolating polynomials of a step, with diffrax's
names: global interpolation of measured data (`LinearInterpolation`,
`CubicInterpolation` with `backward_hermite_coefficients`, and filling in missing
data), to drive an ODE with it, and the local interpolations solvers declare as their
dense output.

- `path`: `AbstractPath`, a function of time with `evaluate` and `derivative`.
- `knots`: `AbstractGlobalInterpolation`; `AbstractPiecewise`, whose `evaluate` and
  `derivative` run one compiled program each; finding the piece a time falls in.
- `linear`, `cubic`: the two global interpolations.
- `missing`: missing data (`NaN`): `linear_interpolation`, `rectilinear_interpolation`.
- `hermite`: `backward_hermite_coefficients`.
- `local`: `AbstractLocalInterpolation` and diffrax's local interpolation classes.
- `checks`: the input checks and their messages.
"""

from .cubic import CubicInterpolation as CubicInterpolation
from .hermite import backward_hermite_coefficients as backward_hermite_coefficients
from .knots import AbstractGlobalInterpolation as AbstractGlobalInterpolation
from .linear import LinearInterpolation as LinearInterpolation
from .local import (
    AbstractLocalInterpolation as AbstractLocalInterpolation,
    FourthOrderPolynomialInterpolation as FourthOrderPolynomialInterpolation,
    LocalLinearInterpolation as LocalLinearInterpolation,
    ThirdOrderHermitePolynomialInterpolation as ThirdOrderHermitePolynomialInterpolation,
)
from .missing import (
    linear_interpolation as linear_interpolation,
    rectilinear_interpolation as rectilinear_interpolation,
)
from .path import AbstractPath as AbstractPath
