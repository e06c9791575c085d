"""Coefficients of Kværnø's ESDIRK methods (`Kvaerno3`, `Kvaerno4`, `Kvaerno5`), checked
when defined against the order conditions of their solution, embedded method and
dense output. Kvaerno4's: `docs/solver-internals.md`, "Kvaerno4's coefficients".

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
    Springer, 1996: IV.6 (DIRK methods).
    A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an explicit
    first stage", BIT 44(3), 489–502.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from odeckpt._solvers.runge_kutta.order_conditions import (
    TABLE_RTOL,
    THETAS,
    Rows,
    check_close,
    check_order,
    lower_matrix,
    rooted_trees,
    stage_weights,
    tree_density,
)


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
        check_close(self.name, "c != row sums of a", self.c, full.sum(axis=1))
        check_close(self.name, "the last stage must end the step", self.c[-1], 1.0)
        check_close(self.name, "predictor rows must sum to 1",
                     [sum(r) for r in self.predictor[1:]], [1.0] * (s - 1))  # fmt: skip
        zero = np.zeros((s, s))
        check_order(self.name, "the solution", full, zero, full[-1], self.order)
        check_order(self.name, "the embedded method", full, zero, full[-2], self.embedded_order)
        if self.dense_order is not None:
            rows = continuous_extension(self.name, full, self.dense_order)
            object.__setattr__(self, "dense", rows)
            for theta in THETAS:
                weights = sum(theta ** (r + 1) * np.asarray(row) for r, row in enumerate(rows))
                check_order(self.name, "the dense output", full, zero, weights,
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

    Returns rows `beta_1..beta_order` of the stage weights `b_i(theta) = sum_r theta^r
    beta_ri`: the least-norm solution of the order conditions that also stays bounded on
    stiff components; raises `ValueError` for a method with too few stages. See
    `docs/solver-internals.md`, "ESDIRK methods" (dense output).
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
    if np.abs(system @ beta - values).max() > TABLE_RTOL:
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
