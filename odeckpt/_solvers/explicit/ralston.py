"""Ralston's second-order method: embedded Euler."""

from typing import final

from odeckpt._solvers.base import AbstractStratonovichSolver
from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights, hermite_dense
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

RALSTON = ButcherTableau(
    name="RALSTON",
    c=(0.0, 2 / 3),
    a=((), (2 / 3,)),
    b=(1 / 4, 3 / 4),
    b_err=error_weights((1 / 4, 3 / 4), (1.0, 0.0)),
    order=2,
    embedded_order=1,
    dense=hermite_dense((1 / 4, 3 / 4), first=0, last=1),
    dense_order=1,
)
"""Ralston's second order method (`c2 = 2/3`), embedded Euler.

Dense output: cubic Hermite with the second stage as end slope (only first
order in between the step ends).

References:
    - A. Ralston, "Runge-Kutta methods with minimum error bounds",
      *Math. Comp.* 16 (1962), 431-437.
"""


@final
class Ralston(AbstractERK, AbstractStratonovichSolver):
    """Ralston's second-order method (minimal truncation error), embedded Euler."""

    tableau = RALSTON
