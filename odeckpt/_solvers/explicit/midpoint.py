"""The explicit midpoint method: order 2, embedded Euler."""

from typing import final

from odeckpt._solvers.base import AbstractStratonovichSolver
from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights, hermite_dense
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

MIDPOINT = ButcherTableau(
    name="MIDPOINT",
    c=(0.0, 1 / 2),
    a=((), (1 / 2,)),
    b=(0.0, 1.0),
    b_err=error_weights((0.0, 1.0), (1.0, 0.0)),
    order=2,
    embedded_order=1,
    dense=hermite_dense((0.0, 1.0), first=0, last=1),
    dense_order=1,
)
"""Explicit midpoint method, order 2, embedded Euler.

Dense output: cubic Hermite with the midpoint stage as end slope (only first
order in between the step ends).

References:
    - C. Runge, "Über die numerische Auflösung von Differentialgleichungen",
      *Math. Ann.* 46 (1895), 167-178.
"""


@final
class Midpoint(AbstractERK, AbstractStratonovichSolver):
    """Explicit midpoint method, order 2, embedded Euler error estimate."""

    tableau = MIDPOINT
