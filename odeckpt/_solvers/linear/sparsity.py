"""A Jacobian's sparsity pattern (`jac_sparsity=`), coloured so that the Jacobian costs
one forward-mode product per colour rather than one per unknown.

Two columns of `J` may share a colour when no row has a nonzero in both (they are
structurally orthogonal, Curtis, Powell and Reid 1974): one product of `f`'s
linearisation with the sum of a colour's unit vectors then gives every entry of those
columns, `J[i, j] = (J s_colour(j))[i]`. The colouring is greedy, largest degree first,
on the host, once per pattern; for a stencil of `s` points per row it uses about `s`
to `2 s` colours whatever the grid size.

The pattern is given over the state's elements in `jax.flatten_util.ravel_pytree(y0)`
order and is expanded here to the real view the solvers work on (a complex element
becomes two real ones, coupled both ways). The diagonal is always included: the Newton
matrix `I - gamma h J` has it.

No colouring package is used: `sparsejac` (the one on PyPI for JAX) needs networkx,
colours the same greedy way, and returns a `BCOO` matrix whose products the solvers
do not need; the colouring here is 40 lines of NumPy over the pattern's rows.

See `docs/solver-internals.md`, "Linear solvers".
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax.experimental import sparse as jsparse


class _ByValue:
    """Equal and hashed by `_key` (a tuple of the defining arrays' bytes): a pattern is a
    static field of a solver, so equal patterns must give one compiled program."""

    _key: tuple

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


class Sparsity(_ByValue):
    """A square pattern on the flat real state with a column colouring; hashable (by
    its entries), so it can be a static field of a solver.

    Attributes:
        n: the number of unknowns.
        rows, cols: the nonzeros' positions, diagonal included, sorted by row.
        colours: each column's colour, `0 <= colours < ncolours`.
        lower, upper: the lower and upper bandwidths.
        elements: `(first, last)`: each state element's real positions (equal for a
            real element; the real and imaginary parts of a complex one).
    """

    def __init__(self, rows: np.ndarray, cols: np.ndarray, n: int, elements=None):
        diagonal = np.arange(n)
        keys = np.unique(np.concatenate([rows * n + cols, diagonal * n + diagonal]))
        self.n = int(n)
        self.rows = (keys // n).astype(np.int64)
        self.cols = (keys % n).astype(np.int64)
        self.colours = _greedy_colouring(self.rows, self.cols, self.n)
        self.ncolours = int(self.colours.max()) + 1 if n else 0
        offsets = self.rows - self.cols
        self.lower = int(max(offsets.max(), 0))
        self.upper = int(max(-offsets.min(), 0))
        if elements is None:
            elements = (np.arange(n), np.arange(n))
        self.elements = elements
        self._key = (self.n, keys.tobytes(), elements[0].tobytes(), elements[1].tobytes())

    def __repr__(self) -> str:
        return (
            f"Sparsity(n={self.n}, nonzeros={self.rows.size}, colours={self.ncolours}, "
            f"bandwidths=({self.lower}, {self.upper}))"
        )

    def seeds(self, dtype, unit=None) -> jax.Array:
        """The `(ncolours, n)` sums of each colour's unit vectors (scaled by `unit`, a
        traced 1 that keeps XLA from hoisting products out of a loop)."""
        seeds = jnp.asarray(np.arange(self.ncolours)[:, None] == self.colours[None, :], dtype)
        return seeds if unit is None else seeds * jnp.asarray(unit, dtype)

    def values(self, products: jax.Array) -> jax.Array:
        """The nonzeros' values (at `rows`, `cols`) from the `(ncolours, n)` products of
        the matrix with `seeds`."""
        return products[self.colours[self.cols], self.rows]

    def dense(self, values: jax.Array) -> jax.Array:
        """The `(n, n)` matrix with `values` at the pattern's nonzeros."""
        out = jnp.zeros((self.n, self.n), values.dtype)
        return out.at[self.rows, self.cols].set(values, unique_indices=True)

    def diagonal(self, values: jax.Array) -> jax.Array:
        """The matrix's diagonal from its nonzeros' `values`."""
        return values[np.flatnonzero(self.rows == self.cols)]

    def blocks(self, values: jax.Array, index: np.ndarray) -> jax.Array:
        """The `(b, s, s)` diagonal blocks `matrix[index[k]][:, index[k]]` for an
        `(b, s)` array of row indices, zero where the pattern has no entry."""
        position = _positions(self, index)
        return jnp.where(position >= 0, values[np.maximum(position, 0)], 0)

    def products(self, linear, dtype, unit=None) -> jax.Array:
        """`linear` (a linear map of flat vectors) at each colour's seed: `(ncolours, n)`."""
        return jax.vmap(linear)(self.seeds(dtype, unit))


def _positions(sparsity: Sparsity, index: np.ndarray) -> np.ndarray:
    """Where each pair `(index[k, a], index[k, b])` is among the nonzeros, or -1."""
    n = sparsity.n
    keys = sparsity.rows * n + sparsity.cols
    wanted = index[:, :, None] * n + index[:, None, :]
    found = np.searchsorted(keys, wanted)
    found = np.minimum(found, keys.size - 1)
    return np.where(keys[found] == wanted, found, -1)


def _greedy_colouring(rows: np.ndarray, cols: np.ndarray, n: int) -> np.ndarray:
    """A colouring of the columns in which no two columns of a colour share a row:
    greedy, in order of decreasing column count (Welsh–Powell)."""
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(rows, kind="stable")
    row_start = np.searchsorted(rows[order], np.arange(n + 1))
    cols_of_row = cols[order]
    by_col = np.argsort(cols, kind="stable")
    col_start = np.searchsorted(cols[by_col], np.arange(n + 1))
    rows_of_col = rows[by_col]
    colours = np.full(n, -1, np.int64)
    counts = np.diff(col_start)
    for j in np.argsort(-counts, kind="stable"):
        taken = set()
        for i in rows_of_col[col_start[j] : col_start[j + 1]]:
            neighbours = cols_of_row[row_start[i] : row_start[i + 1]]
            taken.update(colours[neighbours].tolist())
        colour = 0
        while colour in taken:
            colour += 1
        colours[j] = colour
    return colours


class Pattern(_ByValue):
    """A `jac_sparsity=` setting as given, on the state's elements (checked square when
    the solver is written; hashable, a static field)."""

    def __init__(self, name: str, pattern):
        rows, cols, shape = pattern_entries(name, pattern)
        self.n, self.rows, self.cols = shape[0], rows, cols
        self._key = (self.n, rows.tobytes(), cols.tobytes())

    def __repr__(self) -> str:
        return f"Pattern(n={self.n}, nonzeros={self.rows.size})"


def sparsity_for(name: str, pattern: Pattern, y0) -> Sparsity:
    """`pattern` as a coloured `Sparsity` on the flat real view of `y0` (coloured once
    per pattern and state layout).

    Raises:
        ValueError: if the pattern does not have one row per element of `y0`.
    """
    leaves = jax.tree.leaves(y0)
    layout = tuple((tuple(np.shape(leaf)), bool(jnp.iscomplexobj(leaf))) for leaf in leaves)
    total = sum(int(np.prod(shape)) for shape, _ in layout)
    if pattern.n != total:
        raise ValueError(
            f"`{name}(jac_sparsity=...)` must be ({total}, {total}) for a state of {total} "
            f"elements (in `jax.flatten_util.ravel_pytree(y0)` order); got shape "
            f"({pattern.n}, {pattern.n})."
        )
    return _coloured(pattern, layout)


@functools.lru_cache(maxsize=64)
def _coloured(pattern: Pattern, layout) -> Sparsity:
    # Each real-view position's element: a complex element appears twice, (Re, Im).
    element, start = [], 0
    for shape, is_complex in layout:
        size = int(np.prod(shape))
        index = np.arange(start, start + size).reshape(shape)
        if is_complex:
            index = np.stack([index, index], axis=-1)
        element.append(index.ravel())
        start += size
    element = np.concatenate(element) if element else np.zeros(0, np.int64)
    if element.size == pattern.n:
        return Sparsity(pattern.rows, pattern.cols, pattern.n)
    # Expand each entry (i, j) to the pairs of the real positions of i and j (one for a
    # real element, two for a complex one; repeated pairs are merged by `Sparsity`).
    order = np.argsort(element, kind="stable")
    first = order[np.searchsorted(element[order], np.arange(pattern.n), side="left")]
    last = order[np.searchsorted(element[order], np.arange(pattern.n), side="right") - 1]
    ends = (first, last)
    rows = np.concatenate([a[pattern.rows] for a in ends for _ in ends])
    cols = np.concatenate([b[pattern.cols] for _ in ends for b in ends])
    return Sparsity(rows, cols, element.size, ends)


def pattern_entries(name: str, pattern) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """`(rows, cols, shape)` of the nonzeros of a pattern given as a NumPy or JAX array
    (nonzero or `True` entries), a SciPy sparse matrix or a JAX `BCOO`.

    Raises:
        ValueError: for anything else, or a pattern that is not 2-D.
    """
    if scipy.sparse.issparse(pattern):
        coo = pattern.tocoo()
        keep = coo.data != 0
        rows, cols, shape = coo.row[keep], coo.col[keep], tuple(coo.shape)
    elif isinstance(pattern, jsparse.BCOO):
        indices = np.asarray(pattern.indices)
        if indices.ndim != 2 or indices.shape[1] != 2:
            raise ValueError(f"`{name}(jac_sparsity=BCOO)` must be a 2-D BCOO matrix.")
        keep = np.asarray(pattern.data) != 0
        rows, cols, shape = indices[keep, 0], indices[keep, 1], tuple(pattern.shape)
    else:
        try:
            dense = np.asarray(pattern)
        except Exception as error:
            raise ValueError(
                f"`{name}(jac_sparsity=...)` takes a boolean array, a SciPy sparse "
                f"matrix or a JAX BCOO matrix; got {type(pattern).__name__}."
            ) from error
        if dense.dtype == object:
            raise ValueError(
                f"`{name}(jac_sparsity=...)` takes a boolean array, a SciPy sparse "
                f"matrix or a JAX BCOO matrix; got {type(pattern).__name__}."
            )
        rows, cols = np.nonzero(dense) if dense.ndim == 2 else (None, None)
        shape = dense.shape
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(
            f"`{name}(jac_sparsity=...)` must be a square 2-D pattern, one row and one "
            f"column per element of the state; got shape {shape}."
        )
    return np.asarray(rows, np.int64), np.asarray(cols, np.int64), shape
