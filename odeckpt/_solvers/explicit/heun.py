"""Heun's method (explicit trapezoidal rule): order 2, embedded Euler."""

from typing import final

from odeckpt._solvers.base import AbstractStratonovichSolver
from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights, hermite_dense
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

HEUN = ButcherTableau(
    name="HEUN",
    c=(0.0, 1.0),
    a=((), (1.0,)),
    b=(1 / 2, 1 / 2),
    b_err=error_weights((1 / 2, 1 / 2), (1.0, 0.0)),
    order=2,
    embedded_order=1,
    dense=hermite_dense((1 / 2, 1 / 2), first=0, last=1),
    dense_order=2,
)
"""Heun's method (explicit trapezoidal rule), order 2, embedded Euler.

Dense output: cubic Hermite with the last stage as end slope, which reduces to
the quadratic `b(theta) = (theta - theta**2/2, theta**2/2)` (order 2).

References:
    - K. Heun, "Neue Methoden zur approximativen Integration der
      Differentialgleichungen einer unabhängigen Veränderlichen",
      *Z. Math. Phys.* 45 (1900), 23-38.
"""


@final
class Heun(AbstractERK, AbstractStratonovichSolver):
    """Heun's method, order 2, embedded Euler error estimate."""

    tableau = HEUN
