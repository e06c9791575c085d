"""Bogacki–Shampine 3(2): 4 stages, FSAL, cubic Hermite dense output."""

from typing import final

from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights, hermite_dense
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

_BOSH3_B = (2 / 9, 1 / 3, 4 / 9, 0.0)

BOSH3 = ButcherTableau(
    name="BOSH3",
    c=(0.0, 1 / 2, 3 / 4, 1.0),
    a=(
        (),
        (1 / 2,),
        (0.0, 3 / 4),
        (2 / 9, 1 / 3, 4 / 9),
    ),
    b=_BOSH3_B,
    b_err=error_weights(_BOSH3_B, (7 / 24, 1 / 4, 1 / 3, 1 / 8)),
    order=3,
    embedded_order=2,
    dense=hermite_dense(_BOSH3_B, first=0, last=3),
    dense_order=3,
)
"""Bogacki-Shampine 3(2) pair, 4 stages, FSAL.

Dense output: cubic Hermite on `(y0, y1, f0, f1)` (the last stage is
`f(t1, y1)`), written as stage weights.

References:
    - P. Bogacki, L. F. Shampine, "A 3(2) pair of Runge-Kutta formulas",
      *Appl. Math. Lett.* 2 (1989), 321-325.
"""


@final
class Bosh3(AbstractERK):
    """Bogacki–Shampine 3(2), FSAL.

    References:
        Bogacki & Shampine (1989), "A 3(2) pair of Runge–Kutta formulas",
        Appl. Math. Lett. 2(4).
    """

    tableau = BOSH3
