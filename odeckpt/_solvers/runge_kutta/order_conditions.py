"""Rooted trees and the B-series order conditions of one-step methods (pure NumPy).

Every tableau of the package (explicit, stiff, IMEX) is checked with these routines
when it is defined, and nothing else computes trees or elementary weights. See
`docs/solver-internals.md`, "Order conditions".

References:
    J. C. Butcher, *Numerical Methods for Ordinary Differential Equations*, 3rd ed.,
    Wiley, 2016, Section 30 (rooted trees, elementary weights, order conditions).
    E. Hairer, S. P. Nørsett & G. Wanner, *Solving Ordinary Differential Equations I*,
    2nd ed., Springer, 1993, II.2, II.6; E. Hairer & G. Wanner, *Solving Ordinary
    Differential Equations II*, 2nd ed., Springer, 1996, IV.6-IV.7.
"""

from __future__ import annotations

import functools
import math

import numpy as np

Tree = tuple
"""A rooted tree: the sorted tuple of its children's trees; `()` is one vertex."""

Defect = tuple[Tree, float, float]
"""`(tree, defect, scale)`: a condition's residual and the size of the terms summed."""


def _grafts(tree: Tree):
    """Yield every tree obtained from `tree` by attaching one new leaf."""
    yield tuple(sorted((*tree, ())))
    for i, child in enumerate(tree):
        for grown in _grafts(child):
            yield tuple(sorted((*tree[:i], grown, *tree[i + 1 :])))


@functools.cache
def rooted_trees(order: int) -> tuple[Tree, ...]:
    """All (unlabelled) rooted trees with `order` vertices, sorted.

    The counts are 1, 1, 2, 4, 9, 20, 48, 115, ... (OEIS A000081).

    Raises:
        ValueError: if `order < 1`.
    """
    if order < 1:
        raise ValueError(f"tree order must be >= 1, got {order}")
    if order == 1:
        return ((),)
    grown = {g for tree in rooted_trees(order - 1) for g in _grafts(tree)}
    return tuple(sorted(grown))


def tree_order(tree: Tree) -> int:
    """Number of vertices `|t|` of `tree`."""
    return 1 + sum(tree_order(child) for child in tree)


def tree_density(tree: Tree) -> int:
    """Density `gamma(t)`: the product of all its subtree orders."""
    return tree_order(tree) * math.prod(tree_density(child) for child in tree)


def stage_weights(tree: Tree, alpha: np.ndarray, jac_weights: np.ndarray | None = None):
    """`K(t)` of `docs/solver-internals.md` ("Order conditions"), one entry per stage.

    `jac_weights` is `G` (Rosenbrock methods); `None` means `G = 0` and skips its term.
    """
    out = np.ones(alpha.shape[0])
    for child in tree:
        out = out * (alpha @ stage_weights(child, alpha, jac_weights))
    if jac_weights is not None and len(tree) == 1:
        out = out + jac_weights @ stage_weights(tree[0], alpha, jac_weights)
    return out


def condition_defects(
    alpha: np.ndarray,
    weights: np.ndarray,
    order: int,
    jac_weights: np.ndarray | None = None,
    theta: float = 1.0,
) -> list[Defect]:
    """Defects `weights @ K(t) - theta**order / gamma(t)` for the trees of exactly `order`.

    Returns `(tree, defect, scale)` triples; `scale = sum_i |w_i K_i(t)|` is the size
    of the terms of the final sum.
    """
    out = []
    for tree in rooted_trees(order):
        k = stage_weights(tree, alpha, jac_weights)
        defect = float(weights @ k) - theta**order / tree_density(tree)
        out.append((tree, defect, float(np.abs(weights) @ np.abs(k))))
    return out


def order_defects(alpha, jac_weights, weights, order: int, theta: float = 1.0) -> list[Defect]:
    """`condition_defects` for every tree with at most `order` vertices.

    The arguments are converted to float arrays; `jac_weights` is `G` (zeros for
    Runge–Kutta and DIRK methods).
    """
    alpha, jac_weights, weights = (
        np.asarray(x, dtype=float) for x in (alpha, jac_weights, weights)
    )
    return [
        defect
        for p in range(1, order + 1)
        for defect in condition_defects(alpha, weights, p, jac_weights, theta)
    ]


def dense_condition_defects(a: np.ndarray, dense: np.ndarray, order: int) -> list[Defect]:
    """Defects of the continuous order conditions of an explicit method, trees of `order`.

    `dense[i][j]` is the coefficient of `theta**(j + 1)` in the stage weight
    `b_i(theta)`. The condition `sum_i b_i(theta) K_i(t) == theta**order / gamma(t)` is
    a polynomial identity in `theta`, checked coefficient by coefficient. Returns
    `(tree, max |defect|, scale)` triples.
    """
    out = []
    target = np.zeros(dense.shape[1] + order)
    target[order - 1] = 1.0
    for tree in rooted_trees(order):
        g = stage_weights(tree, a)
        coeffs = dense.T @ g
        want = target[: dense.shape[1]] / tree_density(tree)
        # Terms of degree > the polynomial degree cannot be matched at all.
        missing = target[dense.shape[1] :].sum() / tree_density(tree)
        defect = max(float(np.max(np.abs(coeffs - want))), missing)
        scale = float(np.max(np.abs(dense).T @ np.abs(g)))
        out.append((tree, defect, scale))
    return out


def lower_matrix(rows, s: int) -> np.ndarray:
    """Pad ragged lower-triangular coefficient rows into an `s x s` float matrix."""
    out = np.zeros((s, s))
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


ColouredTree = tuple
"""A rooted tree whose vertices are coloured by the part of an additive method that
evaluates them: `(colour, children)`, `children` a sorted tuple of coloured trees."""


def _colourings(tree: Tree, colours: int) -> set:
    """Every colouring of `tree`'s vertices with `range(colours)`."""
    children = [_colourings(child, colours) for child in tree]
    combos: set = {()}
    for options in children:
        combos = {tuple(sorted((*combo, option))) for combo in combos for option in options}
    return {(colour, combo) for colour in range(colours) for combo in combos}


@functools.cache
def coloured_trees(order: int, colours: int) -> tuple[ColouredTree, ...]:
    """All rooted trees with `order` vertices, each vertex coloured by one of `colours`
    parts (2 for an implicit-explicit method: 4 trees of order 2, 32 of order 4)."""
    found = set().union(*(_colourings(tree, colours) for tree in rooted_trees(order)))
    return tuple(sorted(found))


def _uncoloured(tree: ColouredTree) -> Tree:
    return tuple(sorted(_uncoloured(child) for child in tree[1]))


def additive_defects(alphas, weights, order: int, theta: float = 1.0) -> list[Defect]:
    """Order conditions of an additive Runge–Kutta method, every coloured tree up to `order`.

    One stage matrix `alphas[m]` (diagonal included) and one weight vector `weights[m]`
    per part `m`; the conditions are each part's own and the coupling ones
    (`docs/solver-internals.md`, "Order conditions").

    References:
        C. A. Kennedy & M. H. Carpenter (2003), "Additive Runge–Kutta schemes for
        convection–diffusion–reaction equations", Appl. Numer. Math. 44, 139–181,
        Section 3.
    """
    alphas = [np.asarray(a, dtype=float) for a in alphas]
    weights = [np.asarray(w, dtype=float) for w in weights]

    def stage(tree):
        out = np.ones(alphas[0].shape[0])
        for child in tree[1]:
            out = out * (alphas[child[0]] @ stage(child))
        return out

    out = []
    for p in range(1, order + 1):
        for tree in coloured_trees(p, len(alphas)):
            k = stage(tree)
            w = weights[tree[0]]
            defect = float(w @ k) - theta**p / tree_density(_uncoloured(tree))
            out.append((tree, defect, float(np.abs(w) @ np.abs(k))))
    return out


# The checks of the stiff and IMEX tableaux. A defect is accepted when |defect| <=
# TABLE_RTOL * max(1, sum of |terms|); their coefficients pass with a margin of at least 100.
TABLE_RTOL = 1e-12
THETAS = (0.25, 0.5, 0.75)  # where continuous order conditions are checked

Rows = tuple[tuple[float, ...], ...]  # coefficient rows, e.g. of a dense output


def check_order(name: str, what: str, alpha, gamma, weights, order: int, theta=1.0):
    """Raise `ValueError` naming the first tree whose condition (`order_defects`) the
    weights of tableau `name` miss by more than `TABLE_RTOL`."""
    for tree, defect, scale in order_defects(alpha, gamma, weights, order, theta):
        if abs(defect) > TABLE_RTOL * max(1.0, scale):
            raise ValueError(
                f"{name}: {what} violates the order-{tree_order(tree)} condition for tree "
                f"{tree} (theta={theta}): defect {defect:.3e}."
            )


def check_close(name: str, what: str, got, want):
    """Raise `ValueError` unless `got` equals `want` to `TABLE_RTOL` (`what` says which
    relation of tableau `name` failed)."""
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if not np.allclose(got, want, rtol=TABLE_RTOL, atol=TABLE_RTOL):
        raise ValueError(f"{name}: {what}: got {got.tolist()}, expected {want.tolist()}.")
