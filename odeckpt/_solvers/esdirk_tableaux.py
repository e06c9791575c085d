"""Coefficients of Kværnø's 4(3) ESDIRK method (`Kvaerno4`).

The method is written, as in Kværnø's paper, in terms of its diagonal coefficient
`gamma`: every `a_ij` is a rational function of it (Kværnø, section 4, the 4/3 method
that advances with the fourth-order last stage), so the order conditions hold for any
`gamma` and `gamma` itself is fixed by L-stability. Kværnø prints `gamma =
0.5728160625`; the value below is that root to double precision (the stability
function's limit `R(-inf)`, `stiff_stage_limit`, vanishes to rounding), found by
Newton's method on `R(-inf)` as a function of `gamma` in 40-digit arithmetic.

`EsdirkTableau` checks the order conditions of the solution (order 4), of the embedded
method (the penultimate stage, order 3) and of the stage-based dense output (order 3,
built by `continuous_extension`) when the module is imported.

Note that two 4/3 methods appear in the paper with the same `a_ij(gamma)`: the one here
advances with the last (fourth-order) stage and has the `gamma` above; the other
advances with the third-order penultimate stage and needs a different `gamma`. Using
the formulas of one with the `gamma` of the other loses L-stability.

References:
    A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an explicit
    first stage", BIT 44(3), 489–502.
"""

import numpy as np

from .stiff_tableaux import EsdirkTableau

_GAMMA = 0.57281606248213485541
"""The L-stable root near Kværnø's printed `0.5728160625`."""


def _poly(*coefficients: float) -> float:
    """The polynomial with these coefficients (highest power first) at `_GAMMA`."""
    return float(np.polyval(coefficients, _GAMMA))


def _kvaerno4() -> EsdirkTableau:
    g = _GAMMA
    p1, p2, p3, p4 = _poly(12, -6, 1), _poly(3, -1), _poly(12, -9, 2), _poly(6, -6, 1)
    a3 = (_poly(144, -180, 81, -15, 1) * g / p1**2, _poly(-36, 39, -15, 2) * g / p1**2)
    a4 = (
        _poly(-144, 396, -330, 117, -18, 1) / (12 * g**2 * p3),
        _poly(72, -126, 69, -15, 1) / (12 * g**2 * p2),
        _poly(-6, 6, -1) * p1**2 / (12 * g**2 * p3 * p2),
    )
    a5 = (
        _poly(288, -312, 120, -18, 1) / (48 * g**2 * p3),
        _poly(24, -12, 1) / (48 * g**2 * p2),
        -(p1**3) / (48 * g**2 * p2 * p3 * p4),
        _poly(-24, 36, -12, 1) / _poly(24, -24, 4),
    )
    c = (0.0, 2 * g, g + sum(a3), 1.0, 1.0)
    # Newton starting guesses: stage 3 extrapolates stages 1-2 linearly in c, stage 4
    # stages 2-3, stage 5 takes the stage-4 combination (as diffrax's predictor).
    theta3 = c[2] / c[1]
    theta4 = (c[3] - c[1]) / (c[2] - c[1])
    predictor = ((), (1.0,), (1 - theta3, theta3), (0.0, 1 - theta4, theta4), (*a4, g))
    return EsdirkTableau(
        name="KVAERNO4",
        gamma=g,
        a=((), (g,), a3, a4, a5),
        c=c,
        predictor=predictor,
        order=4,
        embedded_order=3,
        dense_order=3,
    )


KVAERNO4 = _kvaerno4()
"""Kværnø's 4(3) ESDIRK: 5 stages, L-stable, stiffly accurate embedded pair, with a
third-order stage-based dense output (`continuous_extension`; Kværnø gives none)."""
