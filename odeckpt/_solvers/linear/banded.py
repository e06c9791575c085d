"""Banded LU with partial pivoting, for Newton matrices `I - hg J` with a banded `J`
(method-of-lines PDEs), in `O(n (kl + ku) kl)` work and `O(n (kl + ku))` memory.

JAX has no banded solver (`jax.scipy.linalg` has no `solve_banded`; lineax only a
tridiagonal one), so it is written here as LAPACK's `gbtrf`/`gbtrs` are: the
elimination is one `lax.scan` over the columns, carrying the `(kl + 1, kl + ku + 1)`
block that the next column's pivoting and update touch, and every triangular solve is
one `lax.scan` carrying `O(kl + ku)` entries. No `(n, n)` array is formed.

**Band storage** is by rows: an `n x n` matrix `A` with `kl` sub- and `ku`
super-diagonals is held as `band` of shape `(n, kl + ku + 1)` with

    band[i, kl + j - i] = A[i, j]    for -kl <= j - i <= ku,

so row `i` of `band` is row `i` of `A` from column `i - kl` to `i + ku`, and column
`kl` is the diagonal. The slots that fall outside the matrix (the top-left and
bottom-right corners) are ignored. This is the row-wise counterpart of LAPACK's (and
`scipy.linalg.solve_banded`'s) storage by columns, `ab[ku + i - j, j] = A[i, j]`: each
elimination step reads one new row of the matrix.

See `docs/solver-internals.md`, "Linear solvers".
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class BandedFactorisation(eqx.Module):
    """LU factors of a banded matrix in band storage, with the row interchanges.

    As LAPACK's `gbtrf` keeps them: elimination step `k` swaps rows `k` and
    `k + pivots[k]`, then subtracts `lower[k, i]` times row `k` from row `k + 1 + i`;
    what is left is `U`.

    Attributes:
        upper: `U` by rows, shape `(n, kl + ku + 1)`: `upper[k, d] = U[k, k + d]`
            (pivoting widens `U`'s upper bandwidth from `ku` to `kl + ku`).
        lower: the multipliers of each step, shape `(n, kl)`.
        pivots: each step's row interchange as an offset in `[0, kl]`, as floats of
            the matrix's real dtype (exact), so that the record can pass where only
            floating outputs are allowed, like `dense.Factorisation`'s permutation.
        kl: the lower bandwidth.
        ku: the upper bandwidth of the matrix factorised.
    """

    upper: jax.Array
    lower: jax.Array
    pivots: jax.Array
    kl: int = eqx.field(static=True)
    ku: int = eqx.field(static=True)


def _check_bandwidths(call: str, kl, ku) -> None:
    for name, value in (("kl", kl), ("ku", ku)):
        if not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(
                f"`{call}(..., kl, ku)` takes non-negative integer bandwidths; got "
                f"{name}={value!r}."
            )


def band_storage(matrix: jax.Array, kl: int, ku: int) -> jax.Array:
    """The band storage (module docstring) of the dense `(n, n)` `matrix`, keeping
    its `kl` sub- and `ku` super-diagonals (entries outside them are dropped)."""
    _check_bandwidths("band_storage", kl, ku)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"`band_storage(matrix, kl, ku)` takes a square matrix; got shape {matrix.shape}."
        )
    n = matrix.shape[0]
    rows = np.arange(n)[:, None]
    cols = rows + np.arange(kl + ku + 1)[None, :] - kl
    inside = (cols >= 0) & (cols < n)
    return jnp.where(inside, matrix[rows, np.clip(cols, 0, n - 1)], 0)


def band_from_entries(
    rows: np.ndarray, cols: np.ndarray, values: jax.Array, n: int, kl: int, ku: int
) -> jax.Array:
    """Band storage of the `n x n` matrix with `values` at `(rows, cols)`, zeros
    elsewhere; repeated positions are summed (as a COO matrix's).

    Args:
        rows, cols: host (NumPy) integer index arrays, shape `(nnz,)`.
        values: the entries, shape `(nnz,)` (batch with `jax.vmap`).
        n, kl, ku: the matrix's size and bandwidths.

    Raises:
        ValueError: for indices outside the matrix or its band.
    """
    _check_bandwidths("band_from_entries", kl, ku)
    rows, cols = np.asarray(rows), np.asarray(cols)
    if rows.shape != cols.shape or rows.shape != values.shape:
        raise ValueError(
            "`band_from_entries(rows, cols, values, ...)` takes three arrays of one shape "
            f"`(nnz,)`; got {rows.shape}, {cols.shape}, {values.shape}."
        )
    offsets = cols - rows
    outside = (rows < 0) | (rows >= n) | (cols < 0) | (cols >= n)
    outside |= (offsets < -kl) | (offsets > ku)
    if outside.any():
        k = int(np.argmax(outside))
        raise ValueError(
            f"`band_from_entries(..., n={n}, kl={kl}, ku={ku})`: entry {k} at "
            f"({rows[k]}, {cols[k]}) is outside the matrix's band; widen `kl`/`ku`."
        )
    width = kl + ku + 1
    flat = rows * width + offsets + kl
    unique = np.unique(flat).size == flat.size
    band = jnp.zeros(n * width, values.dtype).at[flat].add(values, unique_indices=unique)
    return band.reshape(n, width)


def _swap_first(x: jax.Array, p: jax.Array) -> jax.Array:
    """`x` with rows `0` and `p` swapped (selects, so linear in `x` and cheap)."""
    index = jnp.arange(x.shape[0], dtype=p.dtype)[:, None]
    first, chosen = x[:1], jax.lax.dynamic_slice_in_dim(x, p, 1)
    return jnp.where(index == 0, chosen, jnp.where(index == p, first, x))


def _first_block(padded: jax.Array, kl: int, width: int) -> jax.Array:
    """Rows `0..kl` of the matrix in columns `0..kl+ku`, as a dense block."""
    i, j = np.arange(kl + 1)[:, None], np.arange(width)[None, :]
    source = j + kl - i  # the band column holding A[i, j]
    return jnp.where(source < width, padded[i, np.minimum(source, width - 1)], 0)


def factor_banded(band: jax.Array, kl: int, ku: int) -> BandedFactorisation:
    """LU with partial pivoting of the matrix in band storage `band` (shape
    `(n, kl + ku + 1)`), as LAPACK's `gbtrf`: `U`'s upper bandwidth grows to `kl + ku`.

    One `lax.scan` over the `n` columns, `O((kl + ku) kl)` work on a `(kl + 1, kl +
    ku + 1)` block per step: cheaper than a dense LU from a few bandwidths' worth of
    unknowns, and sequential (no parallelism across columns). Not differentiable:
    factorise values with gradients stopped and differentiate through the solve (as
    `dense.inverse` does). A singular matrix is not detected: its solves come out
    non-finite (a zero pivot divides), for the caller's finiteness check.

    References:
        Anderson et al., *LAPACK Users' Guide*, 3rd ed., SIAM 1999 (`xGBTRF`, `xGBTRS`);
        Golub and Van Loan, *Matrix Computations*, 4th ed., section 4.3.
    """
    _check_bandwidths("factor_banded", kl, ku)
    width = kl + ku + 1
    if band.ndim != 2 or band.shape[1] != width:
        raise ValueError(
            f"`factor_banded(band, kl={kl}, ku={ku})` takes band storage of shape "
            f"(n, kl + ku + 1) = (n, {width}); got {band.shape}."
        )
    n = band.shape[0]
    cols = jnp.arange(n)[:, None] + jnp.arange(width)[None, :] - kl
    band = jnp.where((cols >= 0) & (cols < n), band, 0)  # the corners outside the matrix
    padded = jnp.concatenate([band, jnp.zeros((kl + 1, width), band.dtype)])

    def eliminate(block, next_row):
        # block: rows k..k+kl, columns k..k+kl+ku; next_row: row k+kl+1 from column k+1.
        p = jnp.argmax(jnp.abs(block[:, 0]))
        block = _swap_first(block, p)
        pivot_row = block[0]
        multipliers = block[1:, 0] / pivot_row[0]
        rest = block[1:, 1:] - multipliers[:, None] * pivot_row[None, 1:]
        # Rows k+1..k+kl are zero in column k+kl+ku+1 (beyond their band, untouched).
        rest = jnp.concatenate([rest, jnp.zeros((kl, 1), rest.dtype)], axis=1)
        factors = jnp.concatenate([pivot_row, multipliers, p.astype(block.dtype)[None]])
        return jnp.concatenate([rest, next_row[None]]), factors

    first = _first_block(padded, kl, width)
    _, factors = jax.lax.scan(eliminate, first, padded[kl + 1 :])
    pivots = jnp.real(factors[:, -1])
    return BandedFactorisation(factors[:, :width], factors[:, width:-1], pivots, kl, ku)


def _sweep_down(b, coeffs, diagonal=None, pivots=None):
    """For `k = 0..n-1`: swap `b[k]` and `b[k + pivots[k]]`, divide `b[k]` by
    `diagonal[k]`, subtract `coeffs[k, i] b[k]` from `b[k + 1 + i]`; returns `b`."""
    reach = coeffs.shape[1]
    padded = jnp.concatenate([b, jnp.zeros((reach, b.shape[1]), b.dtype)])

    def step(pending, inputs):
        incoming, coeff, diag, p = inputs
        window = jnp.concatenate([pending, incoming[None]])  # b[k..k+reach]
        if pivots is not None:
            window = _swap_first(window, p)
        head = window[0] if diag is None else window[0] / diag
        return window[1:] - coeff[:, None] * head[None], head

    _, out = jax.lax.scan(step, padded[:reach], (padded[reach:], coeffs, diagonal, pivots))
    return out


def _sweep_up(b, coeffs, diagonal=None, pivots=None):
    """For `k = n-1..0`: `b[k] = (b[k] - sum_i coeffs[k, i] b[k + 1 + i]) /
    diagonal[k]`, then swap `b[k]` and `b[k + pivots[k]]`; returns `b`."""
    n, reach = coeffs.shape

    def step(solved, inputs):
        value, coeff, diag, p = inputs  # solved: b[k+1..k+reach]
        value = value - jnp.sum(coeff[:, None] * solved, axis=0)
        value = value if diag is None else value / diag
        window = jnp.concatenate([value[None], solved])
        if pivots is not None:
            window = _swap_first(window, p)
        return window[:-1], window[-1]  # b[k+reach] is final: no earlier step reaches it

    init = jnp.zeros((reach, b.shape[1]), b.dtype)
    first, rest = jax.lax.scan(step, init, (b, coeffs, diagonal, pivots), reverse=True)
    return jnp.concatenate([first, rest])[:n]


def solve_banded(fact: BandedFactorisation, rhs: jax.Array, transpose: bool = False) -> jax.Array:
    """Solve `matrix x = rhs` (or `matrix^T x = rhs`) with `fact = factor_banded(band,
    kl, ku)`; `rhs` is a vector `(n,)` or a matrix `(n, k)` of right-hand sides.

    Linear in `rhs` (transposable by `jax.linear_transpose`), in `O(n (kl + ku))` per
    right-hand side. The transpose is `U^T`, then `L^T` with the interchanges reversed.
    """
    n = fact.upper.shape[0]
    if rhs.ndim not in (1, 2) or rhs.shape[0] != n:
        raise ValueError(
            f"`solve_banded(fact, rhs)` takes `rhs` of shape ({n},) or ({n}, k) for a "
            f"factorisation of {n} unknowns; got {rhs.shape}."
        )
    b = rhs[:, None] if rhs.ndim == 1 else rhs
    pivots = fact.pivots.astype(jnp.int32)
    diagonal, above = fact.upper[:, 0, None], fact.upper[:, 1:]
    if transpose:  # matrix^T = U^T L^T (interchanges)
        x = _sweep_up(_sweep_down(b, above, diagonal), fact.lower, pivots=pivots)
    else:
        x = _sweep_up(_sweep_down(b, fact.lower, pivots=pivots), above, diagonal)
    return x[:, 0] if rhs.ndim == 1 else x
