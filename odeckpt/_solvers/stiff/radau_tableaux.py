"""Coefficients of `RadauIIA5`, derived from the nodes and checked at import
(`docs/solver-internals.md`, "Radau IIA's coefficients").

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
    Springer, 1996: IV.5 (Radau IIA methods, Table 5.6), IV.8 (implementation of
    implicit Runge–Kutta methods: the transformed Newton iteration, the error
    estimate (8.19)-(8.20), the code RADAU5).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from odeckpt._solvers.runge_kutta.order_conditions import order_defects, tree_order

_TOL = 1e-12  # the coefficients below pass with a margin of at least 100
_SQ6 = math.sqrt(6.0)


def _check(name: str, what: str, residual) -> None:
    worst = float(np.max(np.abs(np.asarray(residual, dtype=float))))
    if worst > _TOL:
        raise ValueError(f"{name}: {what} (residual {worst:.3e}).")


def _check_orders(name: str, what: str, alpha, weights, order: int, theta=1.0) -> None:
    zero = np.zeros_like(alpha)
    for tree, defect, scale in order_defects(alpha, zero, weights, order, theta):
        if abs(defect) > _TOL * max(1.0, scale):
            raise ValueError(
                f"{name}: {what} violates the order-{tree_order(tree)} condition for tree "
                f"{tree} (theta={theta}): defect {defect:.3e}."
            )


@dataclasses.dataclass(frozen=True)
class RadauTableau:
    """A 3-stage collocation method with its Newton transformation, error estimator
    and dense output (`docs/solver-internals.md`, "Radau IIA's coefficients");
    validated when constructed.

    Attributes:
        name: for messages.
        c, a: the nodes and the stage matrix (rows of `A`).
        error_weights: `d`, with `e = gamma0 d` (RADAU5's `DD1..DD3`).
        order, stage_order, embedded_order, dense_order: the orders checked.
    """

    name: str
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    error_weights: tuple[float, ...]
    order: int = 5
    stage_order: int = 3
    embedded_order: int = 3
    dense_order: int = 3

    def __post_init__(self) -> None:
        a, c = self.matrix, np.asarray(self.c)
        _check(self.name, "c != row sums of a", a.sum(axis=1) - c)
        _check_orders(self.name, "the solution", a, a[-1], self.order)
        powers = range(1, self.stage_order + 1)
        _check(self.name, f"C({self.stage_order}) fails",
               [a @ c ** (k - 1) - c**k / k for k in powers])  # fmt: skip
        t, lam = self.transform, self.eigenvalues
        block = np.array([[lam[0], 0, 0], [0, lam[1], -lam[2]], [0, lam[2], lam[1]]])
        _check(self.name, "T^-1 A^-1 T is not block diagonal",
               np.linalg.solve(t, np.linalg.inv(a) @ t) - block)  # fmt: skip
        embedded = np.zeros((4, 4))
        embedded[1:, 1:] = a
        _check_orders(self.name, "the embedded method", embedded, self.embedded_weights,
                      self.embedded_order)  # fmt: skip
        for theta in (0.25, 0.5, 0.75):
            weights = theta ** np.arange(1, 4) @ self.dense @ a
            _check_orders(self.name, "the dense output", a, weights, self.dense_order, theta)

    @property
    def matrix(self) -> np.ndarray:
        return np.asarray(self.a, dtype=float)

    @property
    def eigenvalues(self) -> tuple[float, float, float]:
        """`(lam, alpha, beta)`: the eigenvalues of `A^-1` are `lam` and `alpha +- i beta`."""
        values = np.linalg.eigvals(np.linalg.inv(self.matrix))
        real = np.real(values[np.argmin(np.abs(np.imag(values)))])
        pair = values[np.argmax(np.imag(values))]
        return float(real), float(np.real(pair)), float(np.imag(pair))

    @property
    def transform(self) -> np.ndarray:
        """`T`: columns the real eigenvector of `A^-1` (for `lam`), then `Re v`, `-Im v`
        for the eigenvector `v` of `alpha + i beta`."""
        values, vectors = np.linalg.eig(np.linalg.inv(self.matrix))
        real = np.real(vectors[:, np.argmin(np.abs(np.imag(values)))])
        pair = vectors[:, np.argmax(np.imag(values))]
        return np.stack([real, np.real(pair), -np.imag(pair)], axis=1)

    @property
    def transform_inverse(self) -> np.ndarray:
        return np.linalg.inv(self.transform)

    @property
    def gamma0(self) -> float:
        """The real eigenvalue of `A`: `I - h gamma0 J` filters the error estimate."""
        return 1.0 / self.eigenvalues[0]

    @property
    def error_coeffs(self) -> np.ndarray:
        """`e`: the estimate is `gamma0 h f(x0, y0) + sum_i e_i z_i`."""
        return self.gamma0 * np.asarray(self.error_weights)

    @property
    def embedded_weights(self) -> np.ndarray:
        """`(gamma0, b_hat)` of the embedded method on the stages `(f(x0, y0), f(Y_i))`:
        `b_hat = b + e A` (since `h f(Y) = A^-1 z`)."""
        a = self.matrix
        return np.concatenate([[self.gamma0], a[-1] + self.error_coeffs @ a])

    @property
    def dense(self) -> np.ndarray:
        """`D` (3 x 3): `u(theta) = y0 + sum_j theta^(j+1) (D z)_j` interpolates the
        stages, `u(c_i) = y0 + z_i`."""
        c = np.asarray(self.c)
        return np.linalg.inv(c[:, None] ** np.arange(1, 4)[None, :])


RADAU_IIA5 = RadauTableau(
    name="RADAU_IIA5",
    c=((4 - _SQ6) / 10, (4 + _SQ6) / 10, 1.0),
    a=(
        ((88 - 7 * _SQ6) / 360, (296 - 169 * _SQ6) / 1800, (-2 + 3 * _SQ6) / 225),
        ((296 + 169 * _SQ6) / 1800, (88 + 7 * _SQ6) / 360, (-2 - 3 * _SQ6) / 225),
        ((16 - _SQ6) / 36, (16 + _SQ6) / 36, 1 / 9),
    ),
    error_weights=(-(13 + 7 * _SQ6) / 3, (-13 + 7 * _SQ6) / 3, -1 / 3),
)
"""Radau IIA of order 5 (Hairer & Wanner II, Table IV.5.6)."""
