"""Dormand–Prince 5(4): 7 stages, FSAL, with Shampine's dense output."""

from typing import final

from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

_DOPRI5_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)

DOPRI5 = ButcherTableau(
    name="DOPRI5",
    c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
    a=(
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
        _DOPRI5_B[:6],
    ),
    b=_DOPRI5_B,
    b_err=error_weights(
        _DOPRI5_B,
        (
            1951 / 21600,
            0.0,
            22642 / 50085,
            451 / 720,
            -12231 / 42400,
            649 / 6300,
            1 / 60,
        ),
    ),
    order=5,
    embedded_order=4,
    dense=(
        (
            1.0,
            -8048581381 / 2820520608,
            8663915743 / 2820520608,
            -12715105075 / 11282082432,
        ),
        (0.0, 0.0, 0.0, 0.0),
        (
            0.0,
            131558114200 / 32700410799,
            -68118460800 / 10900136933,
            87487479700 / 32700410799,
        ),
        (
            0.0,
            -1754552775 / 470086768,
            14199869525 / 1410260304,
            -10690763975 / 1880347072,
        ),
        (
            0.0,
            127303824393 / 49829197408,
            -318862633887 / 49829197408,
            701980252875 / 199316789632,
        ),
        (
            0.0,
            -282668133 / 205662961,
            2019193451 / 616988883,
            -1453857185 / 822651844,
        ),
        (0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423),
    ),
    dense_order=4,
)
"""Dormand-Prince 5(4) pair, 7 stages, FSAL.

Dense output: Shampine's fourth order continuous extension (the quartic used
by Hairer's DOPRI5 code; no extra stages).

References:
    - J. R. Dormand, P. J. Prince, "A family of embedded Runge-Kutta
      formulae", *J. Comput. Appl. Math.* 6 (1980), 19-26.
    - L. F. Shampine, "Some practical Runge-Kutta formulas", *Math. Comp.* 46
      (1986), 135-150.
    - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential
      Equations I*, 2nd ed., Springer, 1993, Section II.6.
"""


@final
class Dopri5(AbstractERK):
    """Dormand–Prince 5(4), FSAL, with Shampine's dense output.

    References:
        Dormand & Prince (1980), "A family of embedded Runge–Kutta formulae",
        J. Comput. Appl. Math. 6(1).
    """

    tableau = DOPRI5
