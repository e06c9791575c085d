"""Paths through data and the interpolating polynomials of a step, with diffrax's names.

Modules (`path`, `knots`, `linear`, `cubic`, `missing`, `hermite`, `local`, `checks`):
`docs/architecture.md`, layer 2; usage: `docs/interpolation.md`.
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
from .path import AbstractPath as AbstractPath, float_time as float_time
