"""Tsitouras 5(4): 7 stages, FSAL, with Tsitouras' own fourth-order interpolant."""

from typing import final

from odeckpt._solvers.runge_kutta.base import AbstractERK
from odeckpt._solvers.runge_kutta.coefficients import error_weights, factored_weight
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau

_TSIT5_B = (
    0.09646076681806523,
    0.01,
    0.4798896504144996,
    1.379008574103742,
    -3.290069515436081,
    2.324710524099774,
    0.0,
)

_TSIT5_B_HAT = (
    0.09468075576583945,
    0.009183565540343254,
    0.4877705284247616,
    1.234297566930479,
    -2.7077123499835256,
    1.866628418170587,
    1 / 66,
)

# Tsitouras' continuous extension, in the factored form of the paper.
_TSIT5_DENSE = (
    factored_weight(
        "-1.0530884977290216",
        ("0", "1"),
        ("-1.3299890189751412", "1"),
        ("0.7139816917074209", "-1.4364028541716351", "1"),
    ),
    factored_weight("0.1017", ("0", "0", "1"), ("1.2949852507374631", "-2.1966568338249754", "1")),
    factored_weight(
        "2.490627285651252793",
        ("0", "0", "1"),
        ("1.57803468208092486", "-2.38535645472061657", "1"),
    ),
    factored_weight(
        "-16.54810288924490272",
        ("-1.21712927295533244", "1"),
        ("-0.61620406037800089", "1"),
        ("0", "0", "1"),
    ),
    factored_weight(
        "47.37952196281928122",
        ("-1.203071208372362603", "1"),
        ("-0.658047292653547382", "1"),
        ("0", "0", "1"),
    ),
    factored_weight(
        "-34.87065786149660974",
        ("-1.2", "1"),
        ("-0.666666666666666667", "1"),
        ("0", "0", "1"),
    ),
    factored_weight("2.5", ("-1", "1"), ("-0.6", "1"), ("0", "0", "1")),
)

TSIT5 = ButcherTableau(
    name="TSIT5",
    c=(0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0),
    a=(
        (),
        (0.161,),
        (-0.008480655492356989, 0.335480655492357),
        (2.8971530571054935, -6.359448489975075, 4.3622954328695815),
        (
            5.325864828439257,
            -11.748883564062828,
            7.4955393428898365,
            -0.09249506636175525,
        ),
        (
            5.86145544294642,
            -12.92096931784711,
            8.159367898576159,
            -0.071584973281401,
            -0.028269050394068383,
        ),
        _TSIT5_B[:6],
    ),
    b=_TSIT5_B,
    b_err=error_weights(_TSIT5_B, _TSIT5_B_HAT),
    order=5,
    embedded_order=4,
    dense=_TSIT5_DENSE,
    dense_order=4,
)
"""Tsitouras 5(4) pair, 7 stages, FSAL.

Dense output: Tsitouras' own fourth order continuous extension (quartic stage
weights, no extra stages).

References:
    - Ch. Tsitouras, "Runge-Kutta pairs of order 5(4) satisfying only the first
      column simplifying assumption", *Comput. Math. Appl.* 62 (2011),
      770-775.
"""


@final
class Tsit5(AbstractERK):
    """Tsitouras 5(4), FSAL, with its own 4th-order interpolant. The usual first choice.

    References:
        Tsitouras (2011), "Runge–Kutta pairs of order 5(4) satisfying only the first
        column simplifying assumption", Comput. Math. Appl. 62(2).
    """

    tableau = TSIT5
