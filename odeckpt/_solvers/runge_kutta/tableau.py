"""`ButcherTableau`: an explicit Runge–Kutta method as validated data.

The methods themselves live in `explicit/`, one file per method, each built with the
helpers of `coefficients.py`; the checks: `docs/solver-internals.md`, "Explicit
Runge–Kutta methods".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .order_conditions import condition_defects, dense_condition_defects, lower_matrix

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

# The highest order looked for in a tableau given in diffrax's spelling (200 trees).
_MAX_DETECTED_ORDER = 8


def _close(defect: float, scale: float) -> bool:
    """Whether a defect is within rounding error of terms of size `scale`."""
    return abs(defect) <= _RTOL * max(1.0, abs(scale))


# --------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------


def _floats(values) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclasses.dataclass(frozen=True, init=False)
class ButcherTableau:
    """Explicit Runge-Kutta method with optional embedded pair and dense output.

    One step of size `h` computes the stages `k_i = f(t0 + c_i h, y0 + h sum_{j<i} a_ij
    k_j)` and `y1 = y0 + h sum_i b_i k_i`, with error estimate `h sum_i b_err_i k_i`
    (`b_err = b - b_hat`, `b_hat` the embedded method of order `embedded_order`). Dense
    output: `dense[i][j]` is the coefficient of `theta**(j + 1)` in the stage weight
    `b_i(theta)`; `dense=None` means cubic Hermite. Construction checks the shapes, the
    row sums and the order conditions, raising `ValueError` naming the tableau and the
    condition; diffrax's spelling `ButcherTableau(c, b_sol, b_error, a_lower)` is accepted
    too. See `docs/solver-internals.md`, "Explicit Runge–Kutta methods".

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
    embedded_order: int | None
    dense: tuple[tuple[float, ...], ...] | None
    dense_order: int | None

    def __init__(
        self,
        c=None,
        b_sol=None,
        b_error=None,
        a_lower=None,
        a_diagonal=None,
        a_predictor=None,
        c1: float = 0.0,
        *,
        name: str = "ButcherTableau",
        a=None,
        b=None,
        b_err=None,
        order: int | None = None,
        embedded_order: int | None = None,
        dense=None,
        dense_order: int | None = None,
    ) -> None:
        fields = dict(name=name, c=c, a=a, b=b, b_err=b_err, order=order, dense=dense,
                      embedded_order=embedded_order, dense_order=dense_order)  # fmt: skip
        diffrax_form = (b_sol, b_error, a_lower, a_diagonal, a_predictor)
        if any(x is not None for x in diffrax_form) or c1 != 0.0:
            fields = _from_diffrax(name, c, b_sol, b_error, a_lower, a_diagonal, c1, fields)
        for key, value in fields.items():
            object.__setattr__(self, key, value)
        self.__post_init__()

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
    def implicit(self) -> bool:
        """False: an explicit method (`MultiButcherTableau` asks its tableaux)."""
        return False

    @property
    def tableaus(self) -> tuple[ButcherTableau, ...]:
        """`(self,)`: one tableau is a `MultiButcherTableau` of one term."""
        return (self,)

    @property
    def b_hat(self) -> tuple[float, ...] | None:
        """Weights of the embedded method, `b - b_err`."""
        if self.b_err is None:
            return None
        return tuple(bi - ei for bi, ei in zip(self.b, self.b_err, strict=True))

    @property
    def error_estimate_order(self) -> int | None:
        """Local order of the error estimate, `embedded_order + 1`.

        `h sum_i b_err_i k_i = O(h**(embedded_order + 1))`. This is the exponent
        denominator of the step size controller (`factor ∝ err**(-k /
        error_estimate_order)`); it equals `order` for all tableaux here, and
        it is the value `diffrax` uses for ODEs (its `solver.error_order()`
        returns `solver.order()`).
        """
        return None if self.embedded_order is None else self.embedded_order + 1

    @property
    def num_stages(self) -> int:
        """Number of stages (diffrax's name for `stages`)."""
        return self.stages

    @property
    def b_sol(self) -> np.ndarray:
        """The weights `b`, as diffrax's field."""
        return np.asarray(self.b)

    @property
    def b_error(self) -> np.ndarray | None:
        """The error weights `b_err`, as diffrax's field."""
        return None if self.b_err is None else np.asarray(self.b_err)

    @property
    def a_lower(self) -> tuple[np.ndarray, ...]:
        """The rows of `a` below the first, as diffrax's field."""
        return tuple(np.asarray(row) for row in self.a[1:])

    def a_matrix(self) -> np.ndarray:
        """The stage matrix as a dense strictly lower triangular array."""
        return lower_matrix(self.a, self.stages)

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
            "embedded_order", "b_err", self.embedded_order, self.b_err, self.order - 1
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
        if self.b_err is not None and self.embedded_order is not None:
            checks.append(("b_hat", np.array(self.b_hat), self.embedded_order))
        for label, weights, order in checks:
            for k in range(1, min(order, _MAX_VALIDATED_ORDER) + 1):
                for tree, defect, scale in condition_defects(a, weights, k):
                    if not _close(defect, scale):
                        self._fail(
                            f"order condition for {label} (order {k}) violated "
                            f"for tree {tree} (defect {defect:.3e})"
                        )
        if self.dense is not None and self.dense_order is not None:
            dense = np.array(self.dense)
            for k in range(1, min(self.dense_order, _MAX_VALIDATED_ORDER) + 1):
                for tree, defect, scale in dense_condition_defects(a, dense, k):
                    if not _close(defect, scale):
                        self._fail(
                            f"dense order condition (order {k}) violated "
                            f"for tree {tree} (defect {defect:.3e})"
                        )


def _from_diffrax(name, c, b_sol, b_error, a_lower, a_diagonal, c1, fields) -> dict:
    """odeckpt's fields from diffrax's spelling of an explicit tableau."""
    odeckpt_only = [k for k in ("a", "b", "b_err", "order", "dense") if fields[k] is not None]
    if odeckpt_only:
        raise ValueError(
            f"Butcher tableau {name!r}: give either diffrax's fields (c, b_sol, b_error, "
            f"a_lower) or odeckpt's (c, a, b, b_err, order, ...), not both; got "
            f"{', '.join(odeckpt_only)} with diffrax's."
        )
    if a_diagonal is not None or c1 != 0.0:
        raise ValueError(
            f"Butcher tableau {name!r}: implicit tableaux (`a_diagonal`, `c1`) are not "
            "supported; a user-defined method must be explicit (`AbstractERK`). For a "
            "diagonally implicit method use `Kvaerno3()` or `Kvaerno5()`."
        )
    if c is None or b_sol is None or a_lower is None:
        raise ValueError(f"Butcher tableau {name!r}: c, b_sol and a_lower are all needed.")
    a = ((),) + tuple(_floats(row) for row in a_lower)
    b, b_err = _floats(b_sol), None if b_error is None else _floats(b_error)
    order = _satisfied_order(a, b)
    embedded = None
    if b_err is not None and order > 1:
        b_hat = tuple(x - e for x, e in zip(b, b_err, strict=False))
        embedded = min(_satisfied_order(a, b_hat), order - 1)
    else:
        b_err = None
    return dict(fields, c=(0.0, *_floats(c)), a=a, b=b, b_err=b_err, order=order,
                embedded_order=embedded)  # fmt: skip


def _satisfied_order(a_rows, weights) -> int:
    """The highest order, up to `_MAX_DETECTED_ORDER`, whose conditions `weights` meet."""
    a = lower_matrix(a_rows, len(weights))
    order = 0
    for k in range(1, _MAX_DETECTED_ORDER + 1):
        if not all(_close(d, scale) for _, d, scale in condition_defects(a, np.array(weights), k)):
            break
        order = k
    return order


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
