"""`GradReport` and `LeafReport`: what `odeckpt.testing.check_grads` found, as a table.

Host-side records of NumPy arrays (frozen dataclasses, not PyTrees): nothing here is
traced.
"""

import dataclasses

import numpy as np

_SEVERITY = {"ok": 0, "inconclusive": 1, "mismatch": 2, "non-finite": 3}
_EXPLAIN = {
    "mismatch": "the {quantity} is wrong: analytic and FD differ by more than the "
    "tolerance plus 3x the FD error estimate",
    "inconclusive": "FD too noisy to decide: the difference exceeds the tolerance but "
    "not 3x the FD error estimate; loosen rtol/atol, check in float64, or pass `scale`",
    "non-finite": "NaN or inf in the function value, its FD or the analytic gradient",
}


@dataclasses.dataclass(frozen=True)
class LeafReport:
    """The comparison for one differentiated leaf (or, in directional mode, all directions).

    Arrays are float64 and flat (C order over `shape`).

    Attributes:
        path: where the leaf sits, e.g. `args[0].layers[1].weight`
            (`jax.tree_util.keystr` of its path), or `directions` in directional mode.
        shape: the leaf's shape (`(num_directions,)` in directional mode).
        dtype: the leaf's dtype name.
        analytic: the analytic gradient (directional derivatives `vᵀ∇f`).
        fd: the finite-difference estimate, Richardson-extrapolated.
        fd_error: the estimated error of `fd` (extrapolation gap plus rounding).
        tol: the tolerance each entry was held to: `max(atol, rtol · |fd|)`.
        verdict: per entry, one of `ok`, `mismatch`, `inconclusive`, `non-finite`.
        rtol, atol: the tolerances used (defaults resolved).

    Derived: `abs_error`, `rel_error` (per entry), `max_abs_error`, `max_rel_error`,
    `worst_index`, `status` (the worst verdict) and `passed`.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    analytic: np.ndarray
    fd: np.ndarray
    fd_error: np.ndarray
    tol: np.ndarray
    verdict: np.ndarray
    rtol: float
    atol: float

    @property
    def abs_error(self) -> np.ndarray:
        """`|analytic − fd|` per entry."""
        return np.abs(self.analytic - self.fd)

    @property
    def rel_error(self) -> np.ndarray:
        """`|analytic − fd| / |fd|` per entry (`inf` where `fd` is zero and they differ)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = self.abs_error / np.abs(self.fd)
        return np.where(self.abs_error == 0, 0.0, rel)

    @property
    def max_abs_error(self) -> float:
        return float(np.max(self.abs_error, initial=0.0))

    @property
    def max_rel_error(self) -> float:
        return float(np.max(self.rel_error, initial=0.0))

    @property
    def status(self) -> str:
        """The worst verdict over the entries."""
        return max(self.verdict, key=_SEVERITY.__getitem__, default="ok")

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def worst(self, k: int = 1) -> list[int]:
        """Flat indices of the `k` worst entries: by verdict, then `abs_error / tol`."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.nan_to_num(self.abs_error / self.tol, nan=np.inf, posinf=np.inf)
        severity = np.array([_SEVERITY[v] for v in self.verdict])
        return [int(i) for i in np.lexsort((-ratio, -severity))[:k]]

    @property
    def worst_index(self) -> tuple[int, ...] | None:
        """The multi-index of the worst entry (`None` for an empty leaf)."""
        return self.index(self.worst()[0]) if self.analytic.size else None

    def index(self, flat: int) -> tuple[int, ...]:
        """The multi-index of flat entry `flat` in `shape`."""
        return tuple(int(i) for i in np.unravel_index(flat, self.shape)) if self.shape else ()

    def describe(self, flat: int) -> str:
        """One line: where, analytic vs FD, the FD error bar, tolerance and verdict."""
        index = self.index(flat)
        where = f"{self.path}[{', '.join(map(str, index))}]" if index else self.path
        return (
            f"{where}: analytic={self.analytic[flat]:.9g} FD={self.fd[flat]:.9g} "
            f"(FD error est. {self.fd_error[flat]:.2g}, |diff|={self.abs_error[flat]:.2g}, "
            f"tol={self.tol[flat]:.2g}): {self.verdict[flat]}"
        )


@dataclasses.dataclass(frozen=True)
class GradReport:
    """The result of `check_grads`: one `LeafReport` per leaf, and whether all passed.

    `str(report)` is a table with one row per leaf and, for each failing leaf, its
    worst entries and what the verdict means.

    Attributes:
        leaves: the per-leaf reports.
        value: `f(x)` (the scalarised function, see `check_grads`).
        mode: `"full"` or `"directional"`.
        ad: `"reverse"` or `"forward"` (in a `HessianReport`, `"forward-over-reverse"`
            or `"forward-over-forward"`).
        order: Richardson levels used.
        num_evaluations: function evaluations spent on finite differences.
    """

    leaves: tuple[LeafReport, ...]
    value: float
    mode: str
    ad: str
    order: int
    num_evaluations: int

    quantity = "gradient"
    """What the analytic side is, as the failure explanations name it."""

    @property
    def passed(self) -> bool:
        """Every entry `ok` and `f(x)` finite."""
        return bool(np.isfinite(self.value)) and all(leaf.passed for leaf in self.leaves)

    @property
    def failures(self) -> tuple[LeafReport, ...]:
        return tuple(leaf for leaf in self.leaves if not leaf.passed)

    def __str__(self) -> str:
        head = (
            f"{type(self).__name__} ({self.mode}, {self.ad}-mode analytic, "
            f"Richardson order {self.order}, "
            f"{self.num_evaluations} evaluations): f(x) = {self.value:.9g}: "
            + ("PASSED" if self.passed else "FAILED")
        )
        lines = [head, *_table(self.leaves)]
        if not np.isfinite(self.value):
            lines.append(f"f(x) is {self.value}: {_EXPLAIN['non-finite']}.")
        for leaf in self.failures:
            failing = [i for i in leaf.worst(3) if leaf.verdict[i] != "ok"]
            explain = _EXPLAIN[leaf.status].format(quantity=self.quantity)
            lines.append(f"{leaf.path}: {leaf.status}: {explain}. Worst entries:")
            lines += [f"  {leaf.describe(i)}" for i in failing]
        return "\n".join(lines)


_COLUMNS = (
    "path",
    "shape",
    "max |diff|",
    "max rel",
    "worst",
    "analytic",
    "FD",
    "FD err est",
    "tol",
    "status",
)


def _row(leaf: LeafReport) -> tuple[str, ...]:
    i = leaf.worst(1)[0] if leaf.analytic.size else None
    at = (lambda a: f"{a[i]:.6g}") if i is not None else (lambda a: "-")
    return (
        leaf.path,
        str(leaf.shape),
        f"{leaf.max_abs_error:.2e}",
        f"{leaf.max_rel_error:.2e}",
        "-" if i is None else str(leaf.index(i)),
        at(leaf.analytic),
        at(leaf.fd),
        "-" if i is None else f"{leaf.fd_error[i]:.1e}",
        "-" if i is None else f"{leaf.tol[i]:.1e}",
        leaf.status,
    )


def _table(leaves: tuple[LeafReport, ...]) -> list[str]:
    rows = [_COLUMNS, *(_row(leaf) for leaf in leaves)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_COLUMNS))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


@dataclasses.dataclass(frozen=True)
class HessianReport(GradReport):
    """The result of `check_hessian`: a `GradReport` whose leaves are Hessian blocks.

    In full mode there is one `LeafReport` per pair of differentiated leaves `(l, k)`,
    with path `H[path_l, path_k]` and shape `(*shape_l, *shape_k)` (the layout of
    `jax.hessian`); in directional mode one per leaf `l`, with path `Hv[path_l]` and
    shape `(num_directions, *shape_l)`: row `d` is leaf `l`'s part of `H v_d`.
    `num_evaluations` counts gradient evaluations.
    """

    quantity = "Hessian"
