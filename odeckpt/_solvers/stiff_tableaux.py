"""Coefficients of the stiff solvers: Rosenbrock (ROS3P, RODAS5P) and ESDIRK (Kvaerno).

Every method is a validated frozen record. Construction checks the B-series order
conditions `sum_i b_i Phi_i(t) == 1/gamma(t)` for every rooted tree `t` up to the
claimed order (and likewise for the embedded method and the dense output), with the
generic recursion of `order_conditions.py`, which covers Runge–Kutta, diagonally
implicit and Rosenbrock methods (`K(t)` below is its `stage_weights`; `G` is the
Rosenbrock methods' Jacobian weights, zero for ESDIRK methods).

A transcription error in any coefficient breaks a condition of low order, so the
checks catch it at import time. (The module runs past 300 lines: most of it is
coefficients.)

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
    Springer, 1996: IV.7 (Rosenbrock methods, order conditions, the transformed
    form (7.25) used below), IV.6 (DIRK methods).
    J. Lang & J. Verwer (2001), "ROS3P: an accurate third-order Rosenbrock solver
    designed for parabolic problems", BIT 41(4), 731–738.
    G. Steinebach (2023), "Construction of Rosenbrock–Wanner method Rodas5P and
    numerical benchmarks within the Julia Differential Equations package", BIT 63(2):27.
    A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an explicit
    first stage", BIT 44(3), 489–502.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .order_conditions import (
    lower_matrix,
    order_defects,
    rooted_trees,
    stage_weights,
    tree_density,
    tree_order,
)

# A defect is accepted when |defect| <= _RTOL * max(1, sum of |terms|). The
# coefficients below pass with a margin of at least 100.
_RTOL = 1e-12
_THETAS = (0.25, 0.5, 0.75)  # where continuous order conditions are checked

Rows = tuple[tuple[float, ...], ...]  # coefficient rows, e.g. of a dense output


def _check_order(name: str, what: str, alpha, gamma, weights, order: int, theta=1.0):
    for tree, defect, scale in order_defects(alpha, gamma, weights, order, theta):
        if abs(defect) > _RTOL * max(1.0, scale):
            raise ValueError(
                f"{name}: {what} violates the order-{tree_order(tree)} condition for tree "
                f"{tree} (theta={theta}): defect {defect:.3e}."
            )


def _check_close(name: str, what: str, got, want):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if not np.allclose(got, want, rtol=_RTOL, atol=_RTOL):
        raise ValueError(f"{name}: {what}: got {got.tolist()}, expected {want.tolist()}.")


# --------------------------------------------------------------------------
# Rosenbrock methods
# --------------------------------------------------------------------------


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
        _check_close(self.name, "c != row sums of alpha", self.c, alpha.sum(axis=1))
        _check_close(self.name, "d != row sums of Gamma", self.d, gamma_matrix.sum(axis=1))
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
    _check_order(name, "the solution", alpha, gamma_matrix, b, tableau.order)
    b_hat = np.asarray(tableau.m_hat) @ gamma_matrix
    _check_order(name, "the embedded method", alpha, gamma_matrix, b_hat, tableau.embedded_order)
    if tableau.dense is None or tableau.dense_order is None:
        return
    rows = np.asarray(tableau.dense)
    for theta in _THETAS:
        poly = sum(theta**r * rows[r] for r in range(rows.shape[0]))
        weights = (theta * np.asarray(tableau.m) + theta * (1 - theta) * poly) @ gamma_matrix
        _check_order(name, "the dense output", alpha, gamma_matrix, weights,
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


# --------------------------------------------------------------------------
# ESDIRK methods
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EsdirkTableau:
    """A stiffly accurate ESDIRK method with an explicit first stage.

    Stage `i` solves `k_i = f(t0 + c_i h, y0 + h sum_{j<i} a_ij k_j + h gamma k_i)`
    (`k_1 = f(t0, y0)`); `y1` is the last stage's value (`b` = the last row of `a`)
    and the embedded solution is stage `s - 1`'s (`b_hat` = row `s - 2`), so the error
    estimate is `h sum_i (b_i - b_hat_i) k_i`. `predictor[i]` gives the Newton
    starting guess `k_i ~ sum_j predictor_ij k_j` (rows sum to 1).

    With `dense_order` given, `dense` holds stage-based dense output of that order
    (`continuous_extension`): `y(t0 + theta h) = y0 + h sum_r theta^(r+1) dense[r] k`.
    Without it the solver uses cubic Hermite interpolation (third order).
    """

    name: str
    gamma: float
    a: tuple[tuple[float, ...], ...]  # row i: a_i0 .. a_i(i-1), strictly lower part
    c: tuple[float, ...]
    predictor: tuple[tuple[float, ...], ...]
    order: int
    embedded_order: int
    dense_order: int | None = None
    dense: tuple[tuple[float, ...], ...] | None = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.stages
        if len(self.a) != s or any(len(row) != i for i, row in enumerate(self.a)):
            raise ValueError(f"{self.name}: `a` must have {s} strictly lower rows.")
        if len(self.predictor) != s or any(len(r) != i for i, r in enumerate(self.predictor)):
            raise ValueError(f"{self.name}: `predictor` must have {s} strictly lower rows.")
        full = self.matrix
        _check_close(self.name, "c != row sums of a", self.c, full.sum(axis=1))
        _check_close(self.name, "the last stage must end the step", self.c[-1], 1.0)
        _check_close(self.name, "predictor rows must sum to 1",
                     [sum(r) for r in self.predictor[1:]], [1.0] * (s - 1))  # fmt: skip
        zero = np.zeros((s, s))
        _check_order(self.name, "the solution", full, zero, full[-1], self.order)
        _check_order(self.name, "the embedded method", full, zero, full[-2], self.embedded_order)
        if self.dense_order is not None:
            rows = continuous_extension(self.name, full, self.dense_order)
            object.__setattr__(self, "dense", rows)
            for theta in _THETAS:
                weights = sum(theta ** (r + 1) * np.asarray(row) for r, row in enumerate(rows))
                _check_order(self.name, "the dense output", full, zero, weights,
                             self.dense_order, theta)  # fmt: skip

    @property
    def implicit(self) -> bool:
        """True: its stages are implicit (`MultiButcherTableau` asks its tableaux)."""
        return True

    @property
    def stages(self) -> int:
        return len(self.c)

    @property
    def matrix(self) -> np.ndarray:
        """The full `s x s` stage matrix, diagonal `(0, gamma, ..., gamma)` included."""
        full = lower_matrix(self.a, self.stages)
        full[1:, 1:] += np.diag(np.full(self.stages - 1, self.gamma))
        return full

    @property
    def b(self) -> tuple[float, ...]:
        return tuple(float(x) for x in self.matrix[-1])

    @property
    def b_err(self) -> tuple[float, ...]:
        full = self.matrix
        return tuple(float(x) for x in full[-1] - full[-2])


def stiff_stage_limit(matrix: np.ndarray) -> np.ndarray:
    """`Y(z) = (I - z A)^-1 1` as `z -> -inf`, for `A` with an explicit first stage and a
    nonzero diagonal after it: `Y_1 = 1`, `Y_i = -sum_{j<i} a_ij Y_j / a_ii`."""
    limit = np.ones(matrix.shape[0])
    for i in range(1, matrix.shape[0]):
        limit[i] = -(matrix[i, :i] @ limit[:i]) / matrix[i, i]
    return limit


def continuous_extension(name: str, matrix: np.ndarray, order: int) -> Rows:
    """Stage-based dense output of `order` for a stiffly accurate method (`matrix` with
    its diagonal; the last row is `b` and the last stage ends the step at `y1`).

    Returns rows `beta_1..beta_order` of the stage weights
    `b_i(theta) = sum_r theta^r beta_ri`, so that `y0 + h sum_i b_i(theta) k_i` has local
    error `O(h^(order+1))` at every `theta` in `[0, 1]`, equals `y1` at `theta = 1`, has
    slope `k_s = f(t1, y1)` there, and stays bounded on stiff components: on
    `y' = lambda y` it gives `y(t0 + theta h) = R(theta, z) y0`, `z = h lambda`, with
    `R(theta, z) = 1 + z b(theta) . Y(z)`, `Y(z) = (I - z A)^-1 1`, and requiring
    `b(theta) . Y(-inf) = 0` keeps `R` finite as `z -> -inf`. (Cubic Hermite takes
    `f(t0, y0)` as its start slope and grows like `theta z` there; so would any
    interpolant with that slope, so this one does not take it.) The conditions are
    linear in `beta`: for each rooted tree `t` with `|t| <= order` and each power `r`,
    `beta_r . Phi(t) = [r == |t|] / gamma(t)`. Of the solutions, the one with the least
    Euclidean norm is taken; a method with too few stages for `order` raises
    `ValueError`.
    """
    s = matrix.shape[0]
    zero = np.zeros((s, s))
    rows, rhs = [], []

    def condition(entries: dict[tuple[int, int], float], value: float) -> None:
        row = np.zeros(order * s)  # unknown (r, i) at index (r - 1) * s + i
        for (r, i), x in entries.items():
            row[(r - 1) * s + i] = x
        rows.append(row)
        rhs.append(value)

    for size in range(1, order + 1):
        for tree in rooted_trees(size):
            phi = stage_weights(tree, matrix, zero)
            for r in range(1, order + 1):
                condition({(r, i): phi[i] for i in range(s)}, (r == size) / tree_density(tree))
    for i in range(s):
        condition({(r, i): 1.0 for r in range(1, order + 1)}, matrix[-1, i])  # y(1) = y1
        condition({(r, i): float(r) for r in range(1, order + 1)}, float(i == s - 1))
    stiff_limit = stiff_stage_limit(matrix)
    for r in range(1, order + 1):
        condition({(r, i): stiff_limit[i] for i in range(s)}, 0.0)
    system, values = np.asarray(rows), np.asarray(rhs)
    beta = np.linalg.lstsq(system, values, rcond=None)[0]
    if np.abs(system @ beta - values).max() > _RTOL:
        raise ValueError(f"{name}: no stage-based dense output of order {order} exists.")
    return tuple(tuple(float(x) for x in beta[r * s : (r + 1) * s]) for r in range(order))


def _kvaerno3() -> EsdirkTableau:
    # gamma: the root in (0, 1) of 6 g^3 - 18 g^2 + 9 g - 1 (L-stability); Kværnø
    # prints 0.4358665215.
    g = 0.43586652150845899942
    a3 = ((-4 * g**2 + 6 * g - 1) / (4 * g), (1 - 2 * g) / (4 * g))
    a4 = ((6 * g - 1) / (12 * g), -1 / ((24 * g - 12) * g), (-6 * g**2 + 6 * g - 1) / (6 * g - 3))
    theta = 1 / (2 * g)
    return EsdirkTableau(
        name="KVAERNO3",
        gamma=g,
        a=((), (g,), a3, a4),
        c=(0.0, 2 * g, 1.0, 1.0),
        predictor=((), (1.0,), (1 - theta, theta), (*a3, g)),
        order=3,
        embedded_order=2,
    )


KVAERNO3 = _kvaerno3()
"""Kværnø's 3(2) ESDIRK: 4 stages, L-stable, stiffly accurate embedded pair."""

# fmt: off
_KV5_A6 = (0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141,
           0.61943039072480676)

KVAERNO5 = EsdirkTableau(
    name="KVAERNO5",
    gamma=0.26,
    a=(
        (),
        (0.26,),
        (0.13, 0.84033320996790809),
        (0.22371961478320505, 0.47675532319799699, -0.06470895363112615),
        (0.16648564323248321, 0.10450018841591720, 0.03631482272098715,
         -0.13090704451073998),
        _KV5_A6,
        (0.13659751177640291, 0.0, -0.05496908796538376, -0.04118626728321046,
         0.62993304899016403, 0.06962479448202728),
    ),
    c=(0.0, 0.52, 1.230333209967908, 0.8957659843500759, 0.43639360985864756, 1.0, 1.0),
    # Predictors as in OrdinaryDiffEq.jl (diffrax uses the same, with alpha_21 = 1).
    predictor=(
        (),
        (1.0,),
        (-1.366025403784441, 2.3660254037844357),
        (-0.19650552613122207, 0.8113579546496623, 0.38514757148155954),
        (0.10375304369958693, 0.937994698066431, -0.04174774176601781, 0.0),
        (-0.17281112873898072, 0.6235784481025847, 0.5492326806363959, 0.0, 0.0),
        (*_KV5_A6, 0.26),
    ),
    order=5,
    embedded_order=4,
    dense_order=4,
)
# fmt: on
"""Kværnø's 5(4) ESDIRK: 7 stages, L-stable, stiffly accurate embedded pair, with a
fourth-order stage-based dense output (`continuous_extension`; Kværnø gives none).
Stage 3 is evaluated at `t0 + 1.23 h`, past the step's end."""
