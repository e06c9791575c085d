"""Forward Euler: order 1, no error estimate, linear interpolation."""

from typing import final

from odeckpt._solvers.base import AbstractItoSolver
from odeckpt._solvers.runge_kutta.base import AbstractExplicitSolver
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

EULER = ButcherTableau(
    name="EULER",
    c=(0.0,),
    a=((),),
    b=(1.0,),
    b_err=None,
    order=1,
    embedded_order=None,
    dense=((1.0,),),  # linear interpolation between y0 and y1
    dense_order=1,
)
"""Explicit Euler method (order 1, no error estimate, linear interpolation).

References:
    - L. Euler, *Institutionum calculi integralis*, vol. 1, 1768.
"""


@final
class Euler(AbstractExplicitSolver, AbstractItoSolver):
    """Forward Euler, order 1, no error estimate (use a constant step size)."""

    tableau = EULER
