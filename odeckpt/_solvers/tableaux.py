"""Butcher tableaux of explicit Runge-Kutta methods.

Every method is stored as a validated [`ButcherTableau`][] record: the stage
nodes `c`, the strictly lower triangular stage matrix `a`, the solution weights
`b`, the embedded error weights `b_err = b - b_hat`, and optional continuous
(dense output) weights.

The coefficients, the error weights (up to an irrelevant overall sign for the
two-stage methods) and the dense output polynomials agree with the tableaux of
the `diffrax` library, so that an adaptive integration with the same step size
controller accepts and rejects exactly the same steps and interpolates the
same values.

References:
    - J. C. Butcher, *Numerical Methods for Ordinary Differential Equations*,
      3rd ed., Wiley, 2016 (rooted trees, elementary weights, order
      conditions).
    - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential
      Equations I: Nonstiff Problems*, 2nd ed., Springer, 1993, Sections II.2,
      II.4-II.6 (order conditions, embedded pairs, dense output).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction

import numpy as np

__all__ = [
    "BOSH3",
    "DOPRI5",
    "DOPRI8",
    "EULER",
    "HEUN",
    "MIDPOINT",
    "RALSTON",
    "TSIT5",
    "ButcherTableau",
    "evaluate_dense_weights",
]

# Relative tolerance of every consistency check. A condition `lhs == rhs` is
# accepted when `|lhs - rhs| <= _RTOL * max(1, scale)`, where `scale` is the sum
# of the absolute values of the terms summed to form `lhs`. The coefficients
# below satisfy all checks with a margin of at least 20 (the tightest is the
# endpoint condition of the DOPRI8 dense output, whose published coefficients
# carry about 13 correct digits); a wrong digit beyond the 13th significant one
# goes undetected.
_RTOL = 1e-13

# Order conditions are checked at construction time for rooted trees with at
# most this many vertices (17 trees); higher orders are exercised by the tests.
_MAX_VALIDATED_ORDER = 5

Tree = tuple  # a rooted tree: the sorted tuple of its children's trees


# --------------------------------------------------------------------------
# Rooted trees and elementary weights
# --------------------------------------------------------------------------


def _canonical(children: tuple) -> Tree:
    """Return the canonical form of a tree with the given children."""
    return tuple(sorted(children))


def _grafts(tree: Tree):
    """Yield every tree obtained from `tree` by attaching one new leaf."""
    yield _canonical((*tree, ()))
    for i, child in enumerate(tree):
        for grown in _grafts(child):
            yield _canonical((*tree[:i], grown, *tree[i + 1 :]))


@functools.cache
def _rooted_trees(order: int) -> tuple[Tree, ...]:
    """All (unlabelled) rooted trees with `order` vertices.

    Trees are nested tuples: a tree is the sorted tuple of its subtrees, so the
    single vertex is `()`. The counts are 1, 1, 2, 4, 9, 20, 48, 115, ...
    (OEIS A000081).

    References:
        - J. C. Butcher, *Numerical Methods for Ordinary Differential
          Equations*, 3rd ed., Wiley, 2016, Section 30.
    """
    if order < 1:
        raise ValueError(f"tree order must be >= 1, got {order}")
    if order == 1:
        return ((),)
    grown = {g for tree in _rooted_trees(order - 1) for g in _grafts(tree)}
    return tuple(sorted(grown))


def _tree_order(tree: Tree) -> int:
    """Number of vertices of `tree`."""
    return 1 + sum(_tree_order(child) for child in tree)


def _tree_density(tree: Tree) -> int:
    """Density `gamma(tree)`: the product of all its subtree orders."""
    return _tree_order(tree) * math.prod(_tree_density(child) for child in tree)


def _stage_vector(tree: Tree, a: np.ndarray) -> np.ndarray:
    """Stage-wise factor `g` of the elementary weight, `Phi(tree) = b @ g`.

    `g = prod_children (a @ g(child))`, with `g = 1` for the single vertex.
    """
    g = np.ones(a.shape[0])
    for child in tree:
        g = g * (a @ _stage_vector(child, a))
    return g


def _order_condition_defects(
    a: np.ndarray, weights: np.ndarray, order: int
) -> list[tuple[Tree, float, float]]:
    """Defects `Phi(tree) - 1/gamma(tree)` for all trees of exactly `order`.

    Returns `(tree, defect, scale)` triples; `scale = sum_i |w_i g_i|` is the
    size of the terms of the final sum.
    """
    out = []
    for tree in _rooted_trees(order):
        g = _stage_vector(tree, a)
        scale = float(np.abs(weights) @ np.abs(g))
        out.append((tree, float(weights @ g) - 1.0 / _tree_density(tree), scale))
    return out


def _dense_condition_defects(
    a: np.ndarray, dense: np.ndarray, order: int
) -> list[tuple[Tree, float, float]]:
    """Defects of the continuous order conditions for trees of `order`.

    The condition `sum_i b_i(theta) g_i(tree) == theta**order / gamma(tree)` is
    a polynomial identity in `theta`, checked coefficient by coefficient.
    Returns `(tree, max |defect|, scale)` triples.
    """
    out = []
    target = np.zeros(dense.shape[1] + order)
    target[order - 1] = 1.0
    for tree in _rooted_trees(order):
        g = _stage_vector(tree, a)
        coeffs = dense.T @ g
        want = target[: dense.shape[1]] / _tree_density(tree)
        # Terms of degree > the polynomial degree cannot be matched at all.
        missing = target[dense.shape[1] :].sum() / _tree_density(tree)
        defect = max(float(np.max(np.abs(coeffs - want))), missing)
        scale = float(np.max(np.abs(dense).T @ np.abs(g)))
        out.append((tree, defect, scale))
    return out


def _close(defect: float, scale: float) -> bool:
    """Whether a defect is within rounding error of terms of size `scale`."""
    return abs(defect) <= _RTOL * max(1.0, abs(scale))


# --------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------


def _floats(values) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclasses.dataclass(frozen=True)
class ButcherTableau:
    """Explicit Runge-Kutta method with optional embedded pair and dense output.

    One step of size `h` from `(t0, y0)` computes the stages
    `k_i = f(t0 + c_i h, y0 + h sum_{j<i} a_ij k_j)` and
    `y1 = y0 + h sum_i b_i k_i`. The local error estimate is
    `h sum_i b_err_i k_i`, where `b_err = b - b_hat` and `b_hat` are the
    weights of the embedded method of order `error_order`.

    Dense output: `dense[i][j]` is the coefficient of `theta**(j + 1)` in the
    stage weight `b_i(theta)`, and
    `y(t0 + theta h) ≈ y0 + h sum_i b_i(theta) k_i` with local error
    `O(h**(dense_order + 1))`. `dense=None` means the method has no
    stage-based interpolant (cubic Hermite interpolation is used instead).

    Construction validates shapes, `c[0] == 0`, the row-sum condition
    `c_i == sum_j a_ij`, `sum(b) == 1`, `sum(b_err) == 0`,
    `b_i(1) == b_i`, and the order conditions `Phi(t) == 1/gamma(t)` for all
    rooted trees `t` with up to `min(order, 5)` vertices (likewise for
    `b_hat` up to `error_order` and for `b(theta)` up to `dense_order`).
    Violations raise `ValueError` naming the tableau and the condition.

    References:
        - J. C. Butcher, *Numerical Methods for Ordinary Differential
          Equations*, 3rd ed., Wiley, 2016.
        - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential
          Equations I*, 2nd ed., Springer, 1993, Sections II.2, II.4, II.6.
    """

    name: str
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None
    order: int
    error_order: int | None
    dense: tuple[tuple[float, ...], ...] | None
    dense_order: int | None

    def __post_init__(self) -> None:
        self._normalise()
        self._check_shapes()
        self._check_orders()
        self._check_nodes()
        self._check_weight_sums()
        self._check_dense_endpoint()
        self._check_order_conditions()

    # -- properties ---------------------------------------------------------

    @property
    def stages(self) -> int:
        """Number of stages `s`."""
        return len(self.c)

    @property
    def fsal(self) -> bool:
        """First same as last: the last stage is `f(t1, y1)`.

        True iff `c[-1] == 1` and the last row of `a` equals `b` exactly (with
        `b[-1] == 0`), so the last stage of a step can be reused as the first
        stage of the next one.
        """
        s = self.stages
        return s > 1 and self.c[-1] == 1.0 and self.b[-1] == 0.0 and self.a[-1] == self.b[: s - 1]

    @property
    def b_hat(self) -> tuple[float, ...] | None:
        """Weights of the embedded method, `b - b_err`."""
        if self.b_err is None:
            return None
        return tuple(bi - ei for bi, ei in zip(self.b, self.b_err, strict=True))

    @property
    def error_estimate_order(self) -> int | None:
        """Local order of the error estimate, `error_order + 1`.

        `h sum_i b_err_i k_i = O(h**(error_order + 1))`. This is the exponent
        denominator of the step size controller (`factor ∝ err**(-k /
        error_estimate_order)`); it equals `order` for all tableaux here, and
        it is the value `diffrax` uses for ODEs (its `solver.error_order()`
        returns `solver.order()`).
        """
        return None if self.error_order is None else self.error_order + 1

    def a_matrix(self) -> np.ndarray:
        """The stage matrix as a dense strictly lower triangular array."""
        s = self.stages
        out = np.zeros((s, s))
        for i, row in enumerate(self.a):
            out[i, :i] = row
        return out

    # -- validation -----------------------------------------------------------

    def _fail(self, condition: str) -> None:
        raise ValueError(f"Butcher tableau {self.name!r}: {condition}")

    def _normalise(self) -> None:
        """Coerce coefficient containers to tuples of floats."""
        try:
            object.__setattr__(self, "c", _floats(self.c))
            object.__setattr__(self, "a", tuple(_floats(r) for r in self.a))
            object.__setattr__(self, "b", _floats(self.b))
            if self.b_err is not None:
                object.__setattr__(self, "b_err", _floats(self.b_err))
            if self.dense is not None:
                dense = tuple(_floats(r) for r in self.dense)
                object.__setattr__(self, "dense", dense)
        except (TypeError, ValueError) as exc:
            self._fail(f"coefficients must be sequences of numbers ({exc})")

    def _check_shapes(self) -> None:
        s = len(self.c)
        if s < 1:
            self._fail("shape: at least one stage is required")
        if len(self.a) != s:
            self._fail(f"shape: len(a) == {len(self.a)}, expected {s}")
        for i, row in enumerate(self.a):
            if len(row) != i:
                self._fail(f"shape: len(a[{i}]) == {len(row)}, expected {i}")
        if len(self.b) != s:
            self._fail(f"shape: len(b) == {len(self.b)}, expected {s}")
        if self.b_err is not None and len(self.b_err) != s:
            self._fail(f"shape: len(b_err) == {len(self.b_err)}, expected {s}")
        if self.dense is not None:
            self._check_dense_shape()

    def _check_dense_shape(self) -> None:
        s, dense = len(self.c), self.dense
        assert dense is not None
        if len(dense) != s:
            self._fail(f"shape: len(dense) == {len(dense)}, expected {s}")
        degrees = {len(row) for row in dense}
        if len(degrees) != 1 or 0 in degrees:
            self._fail("shape: dense rows must be non-empty and of equal length")

    def _check_orders(self) -> None:
        if not isinstance(self.order, int) or self.order < 1:
            self._fail(f"order must be a positive integer, got {self.order!r}")
        self._check_optional_order(
            "error_order", "b_err", self.error_order, self.b_err, self.order - 1
        )
        self._check_optional_order("dense_order", "dense", self.dense_order, self.dense, self.order)

    def _check_optional_order(self, label, field, value, data, upper) -> None:
        if (value is None) != (data is None):
            self._fail(f"{label} must be given if and only if {field} is")
        if value is not None and not (isinstance(value, int) and 1 <= value <= upper):
            self._fail(f"{label} must be an integer in [1, {upper}], got {value!r}")

    def _check_nodes(self) -> None:
        if self.c[0] != 0.0:
            self._fail(f"first node c[0] == {self.c[0]!r}, expected 0")
        for i, row in enumerate(self.a):
            defect = self.c[i] - math.fsum(row)
            scale = abs(self.c[i]) + sum(abs(x) for x in row)
            if not _close(defect, scale):
                self._fail(
                    f"row-sum condition c[{i}] == sum(a[{i}]) violated (defect {defect:.3e})"
                )

    def _check_weight_sums(self) -> None:
        defect = math.fsum(self.b) - 1.0
        if not _close(defect, sum(abs(x) for x in self.b)):
            self._fail(f"weight condition sum(b) == 1 violated (defect {defect:.3e})")
        if self.b_err is not None:
            defect = math.fsum(self.b_err)
            if not _close(defect, sum(abs(x) for x in self.b_err)):
                self._fail(f"error weight condition sum(b_err) == 0 violated (defect {defect:.3e})")

    def _check_dense_endpoint(self) -> None:
        if self.dense is None:
            return
        for i, (row, bi) in enumerate(zip(self.dense, self.b, strict=True)):
            defect = math.fsum(row) - bi
            if not _close(defect, abs(bi) + sum(abs(x) for x in row)):
                self._fail(
                    f"dense output condition b_{i}(1) == b[{i}] violated (defect {defect:.3e})"
                )

    def _check_order_conditions(self) -> None:
        a = self.a_matrix()
        checks = [("b", np.array(self.b), self.order)]
        if self.b_err is not None and self.error_order is not None:
            checks.append(("b_hat", np.array(self.b_hat), self.error_order))
        for label, weights, order in checks:
            for k in range(1, min(order, _MAX_VALIDATED_ORDER) + 1):
                for tree, defect, scale in _order_condition_defects(a, weights, k):
                    if not _close(defect, scale):
                        self._fail(
                            f"order condition for {label} (order {k}) violated "
                            f"for tree {tree} (defect {defect:.3e})"
                        )
        if self.dense is not None and self.dense_order is not None:
            dense = np.array(self.dense)
            for k in range(1, min(self.dense_order, _MAX_VALIDATED_ORDER) + 1):
                for tree, defect, scale in _dense_condition_defects(a, dense, k):
                    if not _close(defect, scale):
                        self._fail(
                            f"dense order condition (order {k}) violated "
                            f"for tree {tree} (defect {defect:.3e})"
                        )


def evaluate_dense_weights(tableau: ButcherTableau, theta) -> np.ndarray:
    """Continuous stage weights `b_i(theta)` of a tableau's dense output.

    Returns an array of shape `(*np.shape(theta), s)` such that
    `y(t0 + theta h) ≈ y0 + h sum_i b_i(theta) k_i`. Raises `ValueError` if
    the tableau has no stage-based dense output.

    References:
        - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential
          Equations I*, 2nd ed., Springer, 1993, Section II.6.
    """
    if tableau.dense is None:
        raise ValueError(f"Butcher tableau {tableau.name!r} has no dense output")
    dense = np.asarray(tableau.dense)
    powers = np.arange(1, dense.shape[1] + 1)
    th = np.asarray(theta, dtype=float)
    return (th[..., None] ** powers) @ dense.T


# --------------------------------------------------------------------------
# Construction helpers
# --------------------------------------------------------------------------


def _error_weights(b, b_hat) -> tuple[float, ...]:
    """`b - b_hat`, elementwise in floating point."""
    return tuple(float(x) - float(y) for x, y in zip(b, b_hat, strict=True))


def _hermite_dense(b, first: int, last: int) -> tuple[tuple[float, ...], ...]:
    """Cubic Hermite interpolant written as continuous stage weights.

    Interpolates `y0`, `y1 = y0 + h sum b_i k_i` and the slopes `k[first]` at
    `theta = 0` and `k[last]` at `theta = 1`:
    `b_i(theta) = d_i theta + (3 b_i - 2 d_i - e_i) theta**2
    + (d_i + e_i - 2 b_i) theta**3`, where `d` and `e` are the indicator
    vectors of the stages `first` and `last`. When stage `last` is
    `f(t1, y1)` this is the classical (third order) Hermite interpolant.
    """
    rows = []
    for i, bi in enumerate(b):
        d = 1.0 if i == first else 0.0
        e = 1.0 if i == last else 0.0
        rows.append((d, 3 * bi - 2 * d - e, d + e - 2 * bi))
    return tuple(rows)


def _poly_mul(p: list[Fraction], q: list[Fraction]) -> list[Fraction]:
    """Product of two ascending coefficient lists."""
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, x in enumerate(p):
        for j, y in enumerate(q):
            out[i + j] += x * y
    return out


def _factored_weight(scale: str, *factors: tuple[str, ...]) -> tuple[float, ...]:
    """Expand `scale * prod(factor)` exactly; drop the constant coefficient.

    Each factor is an ascending coefficient tuple of decimal strings, e.g.
    `("-1.2", "1")` for `theta - 1.2`. The expansion is done in exact
    rational arithmetic and rounded to floats once.
    """
    poly = [Fraction(scale)]
    for factor in factors:
        poly = _poly_mul(poly, [Fraction(x) for x in factor])
    if poly[0] != 0:
        raise ValueError("a continuous weight must vanish at theta = 0")
    return tuple(float(x) for x in poly[1:])


# --------------------------------------------------------------------------
# Low order methods
# --------------------------------------------------------------------------

# Adaptive controllers use the local order of the error estimate,
# `error_order + 1`, as the exponent denominator. With `error_order = order - 1`
# throughout, this equals `order`: exactly what diffrax's PIDController uses
# for ODEs (`AbstractSolver.error_order(terms)` returns `self.order(terms)`).
#
# For the two-stage methods diffrax stores `b_hat - b` as error weights; only
# the sign differs and error norms are sign invariant. Their diffrax dense
# output is a cubic Hermite interpolant that takes the *last stage* (not
# `f(t1, y1)`) as the end slope; it is reproduced here as stage weights.

EULER = ButcherTableau(
    name="EULER",
    c=(0.0,),
    a=((),),
    b=(1.0,),
    b_err=None,
    order=1,
    error_order=None,
    dense=((1.0,),),  # linear interpolation between y0 and y1
    dense_order=1,
)
"""Explicit Euler method (order 1, no error estimate, linear interpolation).

References:
    - L. Euler, *Institutionum calculi integralis*, vol. 1, 1768.
"""

HEUN = ButcherTableau(
    name="HEUN",
    c=(0.0, 1.0),
    a=((), (1.0,)),
    b=(1 / 2, 1 / 2),
    b_err=_error_weights((1 / 2, 1 / 2), (1.0, 0.0)),
    order=2,
    error_order=1,
    dense=_hermite_dense((1 / 2, 1 / 2), first=0, last=1),
    dense_order=2,
)
"""Heun's method (explicit trapezoidal rule), order 2, embedded Euler.

Dense output: cubic Hermite with the last stage as end slope, which reduces to
the quadratic `b(theta) = (theta - theta**2/2, theta**2/2)` (order 2).

References:
    - K. Heun, "Neue Methoden zur approximativen Integration der
      Differentialgleichungen einer unabhängigen Veränderlichen",
      *Z. Math. Phys.* 45 (1900), 23-38.
"""

MIDPOINT = ButcherTableau(
    name="MIDPOINT",
    c=(0.0, 1 / 2),
    a=((), (1 / 2,)),
    b=(0.0, 1.0),
    b_err=_error_weights((0.0, 1.0), (1.0, 0.0)),
    order=2,
    error_order=1,
    dense=_hermite_dense((0.0, 1.0), first=0, last=1),
    dense_order=1,
)
"""Explicit midpoint method, order 2, embedded Euler.

Dense output: cubic Hermite with the midpoint stage as end slope (only first
order in between the step ends).

References:
    - C. Runge, "Über die numerische Auflösung von Differentialgleichungen",
      *Math. Ann.* 46 (1895), 167-178.
"""

RALSTON = ButcherTableau(
    name="RALSTON",
    c=(0.0, 2 / 3),
    a=((), (2 / 3,)),
    b=(1 / 4, 3 / 4),
    b_err=_error_weights((1 / 4, 3 / 4), (1.0, 0.0)),
    order=2,
    error_order=1,
    dense=_hermite_dense((1 / 4, 3 / 4), first=0, last=1),
    dense_order=1,
)
"""Ralston's second order method (`c2 = 2/3`), embedded Euler.

Dense output: cubic Hermite with the second stage as end slope (only first
order in between the step ends).

References:
    - A. Ralston, "Runge-Kutta methods with minimum error bounds",
      *Math. Comp.* 16 (1962), 431-437.
"""

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
    b_err=_error_weights(_BOSH3_B, (7 / 24, 1 / 4, 1 / 3, 1 / 8)),
    order=3,
    error_order=2,
    dense=_hermite_dense(_BOSH3_B, first=0, last=3),
    dense_order=3,
)
"""Bogacki-Shampine 3(2) pair, 4 stages, FSAL.

Dense output: cubic Hermite on `(y0, y1, f0, f1)` (the last stage is
`f(t1, y1)`), written as stage weights.

References:
    - P. Bogacki, L. F. Shampine, "A 3(2) pair of Runge-Kutta formulas",
      *Appl. Math. Lett.* 2 (1989), 321-325.
"""

# --------------------------------------------------------------------------
# Tsitouras 5(4)
# --------------------------------------------------------------------------

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
    _factored_weight(
        "-1.0530884977290216",
        ("0", "1"),
        ("-1.3299890189751412", "1"),
        ("0.7139816917074209", "-1.4364028541716351", "1"),
    ),
    _factored_weight("0.1017", ("0", "0", "1"), ("1.2949852507374631", "-2.1966568338249754", "1")),
    _factored_weight(
        "2.490627285651252793",
        ("0", "0", "1"),
        ("1.57803468208092486", "-2.38535645472061657", "1"),
    ),
    _factored_weight(
        "-16.54810288924490272",
        ("-1.21712927295533244", "1"),
        ("-0.61620406037800089", "1"),
        ("0", "0", "1"),
    ),
    _factored_weight(
        "47.37952196281928122",
        ("-1.203071208372362603", "1"),
        ("-0.658047292653547382", "1"),
        ("0", "0", "1"),
    ),
    _factored_weight(
        "-34.87065786149660974",
        ("-1.2", "1"),
        ("-0.666666666666666667", "1"),
        ("0", "0", "1"),
    ),
    _factored_weight("2.5", ("-1", "1"), ("-0.6", "1"), ("0", "0", "1")),
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
    b_err=_error_weights(_TSIT5_B, _TSIT5_B_HAT),
    order=5,
    error_order=4,
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

# --------------------------------------------------------------------------
# Dormand-Prince 5(4)
# --------------------------------------------------------------------------

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
    b_err=_error_weights(
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
    error_order=4,
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

# --------------------------------------------------------------------------
# Prince-Dormand 8(7)
# --------------------------------------------------------------------------

_DOPRI8_B = (
    14005451 / 335480064,
    0.0,
    0.0,
    0.0,
    0.0,
    -59238493 / 1068277825,
    181606767 / 758867731,
    561292985 / 797845732,
    -1041891430 / 1371343529,
    760417239 / 1151165299,
    118820643 / 751138087,
    -528747749 / 2220607170,
    1 / 4,
    0.0,
)

_DOPRI8_B_HAT = (
    13451932 / 455176623,
    0.0,
    0.0,
    0.0,
    0.0,
    -808719846 / 976000145,
    1757004468 / 5645159321,
    656045339 / 265891186,
    -3867574721 / 1518517206,
    465885868 / 322736535,
    53011238 / 667516719,
    2 / 45,
    0.0,
    0.0,
)

_DOPRI8_DENSE = (
    (
        1.0,
        -6.6910181737837595697,
        19.9990069333683970610,
        -30.0610568289666450593,
        22.1396504998094068976,
        -6.3448349392860401388,
    ),
    (0.0,) * 6,
    (0.0,) * 6,
    (0.0,) * 6,
    (0.0,) * 6,
    (
        0.0,
        -7.6142658045872677172,
        52.2273532792945524050,
        -121.4999627731334642623,
        116.4422149550342161651,
        -39.6107919852202505218,
    ),
    (
        0.0,
        10.7281392630428866124,
        -46.8919164181093621583,
        83.1721004639847717481,
        -67.1451318825957197185,
        20.3761213808791436958,
    ),
    (
        0.0,
        0.5526637063753648783,
        -0.1890893225010595467,
        9.5724507555993664382,
        -16.5672243527496524646,
        7.3347098826795362023,
    ),
    (
        0.0,
        4.2186562625665153803,
        -35.7075975946222072821,
        87.8406057677205645007,
        -89.9916014847245016028,
        32.8801774352459155182,
    ),
    (
        0.0,
        -0.6627209125361597559,
        6.2736448083240352160,
        -17.4152107770762969005,
        22.6237489648532849093,
        -10.1588990526426760954,
    ),
    (
        0.0,
        -1.2636789001135462218,
        10.3160881272450748458,
        -28.5903289514790976966,
        32.2362340167355370113,
        -12.5401268098782561200,
    ),
    (
        0.0,
        5.4106037898590422230,
        -34.7650769866611817349,
        81.6630950584341412934,
        -82.1020315488359848644,
        29.5553001484516038033,
    ),
    (
        0.0,
        -7.0321379067945741781,
        47.7457971078225540396,
        -114.9375291377009418170,
        116.2662185791119533462,
        -41.7923486424390588923,
    ),
    (
        0.0,
        2.3537586759714983486,
        -19.0082099341608028453,
        50.2558364226176017553,
        -53.9020777466385396792,
        20.3006925822100825485,
    ),
)

DOPRI8 = ButcherTableau(
    name="DOPRI8",
    c=(
        0.0,
        1 / 18,
        1 / 12,
        1 / 8,
        5 / 16,
        3 / 8,
        59 / 400,
        93 / 200,
        5490023248 / 9719169821,
        13 / 20,
        1201146811 / 1299019798,
        1.0,
        1.0,
        1.0,
    ),
    a=(
        (),
        (1 / 18,),
        (1 / 48, 1 / 16),
        (1 / 32, 0.0, 3 / 32),
        (5 / 16, 0.0, -75 / 64, 75 / 64),
        (3 / 80, 0.0, 0.0, 3 / 16, 3 / 20),
        (
            29443841 / 614563906,
            0.0,
            0.0,
            77736538 / 692538347,
            -28693883 / 1125000000,
            23124283 / 1800000000,
        ),
        (
            16016141 / 946692911,
            0.0,
            0.0,
            61564180 / 158732637,
            22789713 / 633445777,
            545815736 / 2771057229,
            -180193667 / 1043307555,
        ),
        (
            39632708 / 573591083,
            0.0,
            0.0,
            -433636366 / 683701615,
            -421739975 / 2616292301,
            100302831 / 723423059,
            790204164 / 839813087,
            800635310 / 3783071287,
        ),
        (
            246121993 / 1340847787,
            0.0,
            0.0,
            -37695042795 / 15268766246,
            -309121744 / 1061227803,
            -12992083 / 490766935,
            6005943493 / 2108947869,
            393006217 / 1396673457,
            123872331 / 1001029789,
        ),
        (
            -1028468189 / 846180014,
            0.0,
            0.0,
            8478235783 / 508512852,
            1311729495 / 1432422823,
            -10304129995 / 1701304382,
            -48777925059 / 3047939560,
            15336726248 / 1032824649,
            -45442868181 / 3398467696,
            3065993473 / 597172653,
        ),
        (
            185892177 / 718116043,
            0.0,
            0.0,
            -3185094517 / 667107341,
            -477755414 / 1098053517,
            -703635378 / 230739211,
            5731566787 / 1027545527,
            5232866602 / 850066563,
            -4093664535 / 808688257,
            3962137247 / 1805957418,
            65686358 / 487910083,
        ),
        (
            403863854 / 491063109,
            0.0,
            0.0,
            -5068492393 / 434740067,
            -411421997 / 543043805,
            652783627 / 914296604,
            11173962825 / 925320556,
            -13158990841 / 6184727034,
            3936647629 / 1978049680,
            -160528059 / 685178525,
            248638103 / 1413531060,
            0.0,
        ),
        _DOPRI8_B[:13],
    ),
    b=_DOPRI8_B,
    b_err=_error_weights(_DOPRI8_B, _DOPRI8_B_HAT),
    order=8,
    error_order=7,
    dense=_DOPRI8_DENSE,
    dense_order=5,
)
"""Prince-Dormand 8(7) pair (RK8(7)13M), 13 stages plus a FSAL stage.

The 13-stage method is stored with a 14th stage `f(t1, y1)` (`a[13] == b`,
weight zero), which makes it FSAL: a step still costs 13 evaluations of `f`,
and the extra stage is the end slope used by the interpolant.

Dense output: degree-6 stage weights using only these 14 stages (no extra
evaluations of `f`). It is *not* a seventh order interpolant: it satisfies the
continuous order conditions up to order 5 only (the order 6 defects are of
size 1e-5 to 1e-3), and its published coefficients reproduce `b` at
`theta = 1` to about 1e-12. Seventh order interpolants of this accuracy class
need additional stages (as Hairer's DOP853 does for its own 8(5,3) pair), so
none is provided here; a cubic Hermite interpolant would only be third
order.

References:
    - P. J. Prince, J. R. Dormand, "High order embedded Runge-Kutta formulae",
      *J. Comput. Appl. Math.* 7 (1981), 67-75.
    - P. Bogacki, L. F. Shampine, "Interpolating high-order Runge-Kutta
      formulas", *Comput. Math. Appl.* 20 (1990), 15-24.
"""
