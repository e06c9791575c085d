"""Coefficients of the Rosenbrock methods (`Ros3P`, `Rodas5P`), checked when defined
against the order conditions of their solution, embedded method and dense output
(Jacobian weights `G = Gamma`), so a transcription error fails at import time.

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
    Springer, 1996: IV.7 (Rosenbrock methods, order conditions, the transformed
    form (7.25) used below).
    J. Lang & J. Verwer (2001), "ROS3P: an accurate third-order Rosenbrock solver
    designed for parabolic problems", BIT 41(4), 731–738.
    G. Steinebach (2023), "Construction of Rosenbrock–Wanner method Rodas5P and
    numerical benchmarks within the Julia Differential Equations package", BIT 63(2):27.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from odeckpt._solvers.runge_kutta.order_conditions import (
    THETAS,
    check_close,
    check_order,
    lower_matrix,
)


@dataclasses.dataclass(frozen=True)
class RosenbrockTableau:
    """A Rosenbrock method in the transformed form of Hairer & Wanner (IV.7.25).

    With `W = I / (h gamma) - J`, `J = df/dy(t0, y0)`, one step solves, for
    `i = 1..s`, the linear systems (one LU factorisation of `W` serves all stages)

        W k_i = f(t0 + c_i h, y0 + sum_j a_ij k_j) + sum_j (C_ij / h) k_j + h d_i df/dt,

    and returns `y1 = y0 + sum_i m_i k_i`, error estimate `sum_i (m_i - m_hat_i) k_i`.
    Dense output (when `dense` is given, rows `H_r`):
    `y(t0 + theta h) = (1 - theta) y0 + theta (y1 + (1 - theta) sum_r theta^r H_r k)`.

    The untransformed method (stage matrix `Gamma = (diag(1/gamma) - C)^-1`, `alpha =
    a Gamma`, `b = m Gamma`) is what the order conditions are checked on, together
    with `c_i = sum_j alpha_ij` and `d_i = sum_j Gamma_ij`.
    """

    name: str
    gamma: float
    a: tuple[tuple[float, ...], ...]  # ragged strictly lower rows, row i has i entries
    C: tuple[tuple[float, ...], ...]
    c: tuple[float, ...]
    d: tuple[float, ...]
    m: tuple[float, ...]
    m_hat: tuple[float, ...]
    order: int
    embedded_order: int
    dense: tuple[tuple[float, ...], ...] | None = None
    dense_order: int | None = None

    def __post_init__(self) -> None:
        s = self.stages
        if not (len(self.a) == len(self.C) == len(self.d) == len(self.m) == len(self.m_hat) == s):
            raise ValueError(f"{self.name}: every coefficient array needs {s} stages.")
        if any(len(row) != i for rows in (self.a, self.C) for i, row in enumerate(rows)):
            raise ValueError(f"{self.name}: `a` and `C` must be strictly lower triangular.")
        if not any(self.m_err):
            raise ValueError(f"{self.name}: `m_hat == m` gives no error estimate.")
        gamma_matrix = np.linalg.inv(np.diag(np.full(s, 1 / self.gamma)) - lower_matrix(self.C, s))
        alpha = lower_matrix(self.a, s) @ gamma_matrix
        check_close(self.name, "c != row sums of alpha", self.c, alpha.sum(axis=1))
        check_close(self.name, "d != row sums of Gamma", self.d, gamma_matrix.sum(axis=1))
        _check_rosenbrock(self, alpha, gamma_matrix)

    @property
    def stages(self) -> int:
        return len(self.c)

    @property
    def m_err(self) -> tuple[float, ...]:
        return tuple(x - y for x, y in zip(self.m, self.m_hat, strict=True))


def _check_rosenbrock(tableau: RosenbrockTableau, alpha, gamma_matrix) -> None:
    """Order conditions of the solution, the embedded method and the dense output.

    The Jacobian term of stage `i` is `h J sum_{j<=i} Gamma_ij k_j`: `G = Gamma`,
    diagonal included.
    """
    name, b = tableau.name, np.asarray(tableau.m) @ gamma_matrix
    check_order(name, "the solution", alpha, gamma_matrix, b, tableau.order)
    b_hat = np.asarray(tableau.m_hat) @ gamma_matrix
    check_order(name, "the embedded method", alpha, gamma_matrix, b_hat, tableau.embedded_order)
    if tableau.dense is None or tableau.dense_order is None:
        return
    rows = np.asarray(tableau.dense)
    for theta in THETAS:
        poly = sum(theta**r * rows[r] for r in range(rows.shape[0]))
        weights = (theta * np.asarray(tableau.m) + theta * (1 - theta) * poly) @ gamma_matrix
        check_order(name, "the dense output", alpha, gamma_matrix, weights,
                     tableau.dense_order, theta)  # fmt: skip


def _ros3p() -> RosenbrockTableau:
    g = 0.5 + math.sqrt(3) / 6
    ig = 1 / g
    c32 = -ig * (2 - 0.5 * ig)
    m2 = ig * (2 / 3 - ig / 6)
    return RosenbrockTableau(
        name="ROS3P",
        gamma=g,
        a=((), (ig,), (ig, 0.0)),
        C=((), (-(ig**2),), (-ig * (1 - c32), c32)),
        c=(0.0, 1.0, 1.0),
        d=(g, -0.2113248654051871, -1.077350269189626),
        m=(ig * (1 + m2), m2, ig / 3),
        m_hat=(2.113248654051871, 1.0, 0.4226497308103742),
        order=3,
        embedded_order=2,
    )


ROS3P = _ros3p()
"""Lang & Verwer's ROS3P: 3 stages, order 3 (embedded 2), A-stable (`R(inf) = 1 -
sqrt(3)`), no order reduction on linear parabolic problems. No stage-based dense output:
cubic Hermite instead. Coefficients as in Lang & Verwer (2001), transformed form as in
OrdinaryDiffEq.jl. On a linear autonomous problem its first two stages coincide and its
error estimate vanishes (true of any 2nd-order embedding of this method)."""


# fmt: off
_RODAS5P_A = (
    (),
    (3.0,),
    (2.849394379747939, 0.45842242204463923),
    (-6.954028509809101, 2.489845061869568, -10.358996098473584),
    (2.8029986275628964, 0.5072464736228206, -0.3988312541770524, -0.04721187230404641),
    (-7.502846399306121, 2.561846144803919, -11.627539656261098, -0.18268767659942256,
     0.030198172008377946),
)
# Stages 7 and 8 continue from stage 6's point: u7 = u6 + k6, u8 = u7 + k7, y1 = u8 + k8.
_RODAS5P_A6 = _RODAS5P_A[5]

RODAS5P = RosenbrockTableau(
    name="RODAS5P",
    gamma=0.21193756319429014,
    a=(*_RODAS5P_A, (*_RODAS5P_A6, 1.0), (*_RODAS5P_A6, 1.0, 1.0)),
    C=(
        (),
        (-14.155112264123755,),
        (-17.97296035885952, -2.859693295451294),
        (147.12150275711716, -1.41221402718213, 71.68940251302358),
        (165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306),
        (24.854864614690072, -3.0009227002832186, 47.4931110020768, 5.5814197821558125,
         -0.6610691825249471),
        (30.91273214028599, -3.1208243349937974, 77.79954646070892, 34.28646028294783,
         -19.097331116725623, -28.087943162872662),
        (37.80277123390563, -3.2571969029072276, 112.26918849496327, 66.9347231244047,
         -40.06618937091002, -54.66780262877968, -9.48861652309627),
    ),
    c=(0.0, 0.6358126895828704, 0.4095798393397535, 0.9769306725060716,
       0.4288403609558664, 1.0, 1.0, 1.0),
    d=(0.21193756319429014, -0.42387512638858027, -0.3384627126235924,
       1.8046452872882734, 2.325825639765069, 0.0, 0.0, 0.0),
    m=(*_RODAS5P_A6, 1.0, 1.0, 1.0),
    m_hat=(*_RODAS5P_A6, 1.0, 1.0, 0.0),
    order=5,
    embedded_order=4,
    dense=(
        (25.948786856663858, -2.5579724845846235, 10.433815404888879, -2.3679251022685204,
         0.524948541321073, 1.1241088310450404, 0.4272876194431874, -0.17202221070155493),
        (-9.91568850695171, -0.9689944594115154, 3.0438037242978453, -24.495224566215796,
         20.176138334709044, 15.98066361424651, -6.789040303419874, -6.710236069923372),
        (11.419903575922262, 2.8879645146136994, 72.92137995996029, 80.12511834622643,
         -52.072871366152654, -59.78993625266729, -0.15582684282751913, 4.883087185713722),
    ),
    dense_order=4,
)
# fmt: on
"""Steinebach's RODAS5P: 8 stages, order 5 (embedded 4, error estimate `k8`), stiffly
accurate, with a 4th-order stage-based dense output. Coefficients as published in
Steinebach (2023) and in OrdinaryDiffEq.jl's `Rodas5PTableau`."""
