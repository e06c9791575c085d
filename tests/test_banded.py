"""The banded LU (`_solvers/linear/banded.py`) against SciPy's LAPACK banded solve and
NumPy's dense one, on random banded matrices that need row interchanges: shapes from
`n = 1` to bandwidths wider than the matrix, transposed solves, matrix right-hand sides,
complex and float32, `jax.vmap`, linearity in the right-hand side, band storage built
from sparse entries, no `n x n` buffer, and a singular matrix giving non-finite output.
"""

import functools as ft
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from odeckpt._solvers.linear.banded import (
    band_from_entries,
    band_storage,
    factor_banded,
    solve_banded,
)

SHAPES = [  # (n, kl, ku); slow: a second n = 1 and two more general bands (as 40-2-3)
    pytest.param(1, 0, 0, marks=pytest.mark.slow),
    (1, 2, 3),
    (3, 4, 5),
    (6, 0, 0),
    (9, 0, 2),
    (9, 3, 0),
    pytest.param(30, 1, 1, marks=pytest.mark.slow),
    (40, 2, 3),
    pytest.param(40, 4, 1, marks=pytest.mark.slow),
]


def random_banded(rng, n, kl, ku, dtype=np.float64):
    """A random `n x n` matrix with bandwidths `kl`, `ku` whose diagonal is small
    (where `kl > 0`), so that partial pivoting swaps rows."""
    a = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((n, n))
    i, j = np.indices((n, n))
    a[(j - i > ku) | (i - j > kl)] = 0
    a[i == j] *= 0.05 if kl > 0 else 1.0
    return a.astype(dtype)


def scipy_band(a, kl, ku):
    """`a` in `scipy.linalg.solve_banded`'s layout: `ab[ku + i - j, j] = a[i, j]`."""
    n = a.shape[0]
    ab = np.zeros((kl + ku + 1, n), a.dtype)
    for i in range(n):
        for j in range(max(0, i - kl), min(n, i + ku + 1)):
            ab[ku + i - j, j] = a[i, j]
    return ab


@ft.partial(jax.jit, static_argnames=("kl", "ku"))
def factor_and_solve(band, rhs, kl, ku):
    """`(matrix^-1 rhs, matrix^-T rhs)` from one factorisation, compiled."""
    fact = factor_banded(band, kl, ku)
    return solve_banded(fact, rhs), solve_banded(fact, rhs, transpose=True)


def banded_solves(a, rhs, kl, ku):
    """`factor_and_solve` with `a` dense on the host."""
    band = band_storage(jnp.asarray(a), kl, ku)
    return tuple(np.asarray(x) for x in factor_and_solve(band, jnp.asarray(rhs), kl=kl, ku=ku))


def assert_solves(matrix, x, b, eps, ref=None):
    """`x` solves `matrix x = b` with a small residual (backward error), and agrees
    with `ref` (by default NumPy's dense solve) to within the conditioning."""
    x, matrix, b = np.asarray(x), matrix.astype(np.complex128), b.astype(np.complex128)
    residual = np.max(np.abs(matrix @ x - b))
    scale = np.max(np.abs(matrix).sum(axis=1)) * np.max(np.abs(x)) + np.max(np.abs(b))
    assert residual <= 10 * matrix.shape[0] * eps * scale
    ref = np.linalg.solve(matrix, b) if ref is None else ref
    tol = 50 * eps * np.linalg.cond(matrix) * np.max(np.abs(ref))
    np.testing.assert_allclose(x, ref, rtol=0, atol=tol)


@pytest.mark.parametrize("n, kl, ku", SHAPES)
def test_solve_and_transposed_solve_match_scipy_and_numpy(n, kl, ku):
    rng = np.random.default_rng(n + 10 * kl + 100 * ku)
    a = random_banded(rng, n, kl, ku)
    b = rng.standard_normal(n)
    x, xt = banded_solves(a, b, kl, ku)
    assert x.shape == xt.shape == (n,)
    eps = np.finfo(np.float64).eps
    for matrix, lower, upper, solution in ((a, kl, ku, x), (a.T, ku, kl, xt)):
        ref = scipy.linalg.solve_banded((lower, upper), scipy_band(matrix, lower, upper), b)
        assert_solves(matrix, solution, b, eps)
        assert_solves(matrix, solution, b, eps, ref=ref)


def test_random_matrices_need_row_interchanges():
    rng = np.random.default_rng(0)
    a = random_banded(rng, 40, 2, 3)
    fact = jax.jit(factor_banded, static_argnums=(1, 2))(band_storage(jnp.asarray(a), 2, 3), 2, 3)
    assert np.count_nonzero(np.asarray(fact.pivots)) > 10
    assert fact.upper.shape == (40, 6) and fact.lower.shape == (40, 2)


def test_zero_diagonal_needs_pivoting():
    """Tridiagonal with a zero diagonal (nonsingular for even `n`): no LU without
    interchanges exists."""
    n = 8
    a = np.diag(np.arange(1.0, n), 1) + np.diag(np.arange(2.0, n + 1), -1)
    b = np.arange(n, dtype=np.float64)
    x, xt = banded_solves(a, b, 1, 1)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-13)
    np.testing.assert_allclose(xt, np.linalg.solve(a.T, b), rtol=1e-13)


# 3-4-5 and 9-3-0: slow; their bands run in the vector solves above
@pytest.mark.parametrize(
    "n, kl, ku",
    [
        (1, 0, 0),
        pytest.param(3, 4, 5, marks=pytest.mark.slow),
        pytest.param(9, 3, 0, marks=pytest.mark.slow),
        (40, 2, 3),
    ],
)
def test_matrix_rhs_solves_each_column(n, kl, ku):
    rng = np.random.default_rng(1)
    a = random_banded(rng, n, kl, ku)
    b = rng.standard_normal((n, 4))
    x, xt = banded_solves(a, b, kl, ku)
    assert x.shape == xt.shape == (n, 4)
    assert_solves(a, x, b, np.finfo(np.float64).eps)
    assert_solves(a.T, xt, b, np.finfo(np.float64).eps)


# complex64: slow; complex128 and float32 cover complex and single precision
@pytest.mark.parametrize(
    "dtype", [np.complex128, pytest.param(np.complex64, marks=pytest.mark.slow), np.float32]
)
def test_complex_and_single_precision(dtype):
    """Complex solves do not conjugate (`matrix^T`, not `matrix^H`)."""
    n, kl, ku = 30, 2, 3
    rng = np.random.default_rng(2)
    a = random_banded(rng, n, kl, ku, dtype)
    b = rng.standard_normal((n, 2)).astype(dtype)
    x, xt = banded_solves(a, b, kl, ku)
    assert x.dtype == xt.dtype == dtype
    assert_solves(a, x, b, np.finfo(dtype).eps)
    assert_solves(a.T, xt, b, np.finfo(dtype).eps)


def test_vmap_over_band_and_rhs():
    n, kl, ku, batch = 20, 2, 1, 3
    rng = np.random.default_rng(3)
    mats = np.stack([random_banded(rng, n, kl, ku) for _ in range(batch)])
    rhs = rng.standard_normal((batch, n))
    bands = jax.vmap(lambda m: band_storage(m, kl, ku))(jnp.asarray(mats))
    solves = jax.jit(jax.vmap(ft.partial(factor_and_solve, kl=kl, ku=ku)))
    xs, xts = solves(bands, jnp.asarray(rhs))
    eps = np.finfo(np.float64).eps
    for m, b, x, xt in zip(mats, rhs, xs, xts, strict=True):
        assert_solves(m, x, b, eps)
        assert_solves(m.T, xt, b, eps)


@jax.jit
def _transposes(band, rhs):
    fact = factor_banded(band, 3, 2)
    (transposed,) = jax.linear_transpose(lambda r: solve_banded(fact, r), rhs)(rhs)
    return transposed, solve_banded(fact, rhs, transpose=True)


def test_solve_is_linear_and_its_transpose_is_the_transposed_solve():
    rng = np.random.default_rng(4)
    band = band_storage(jnp.asarray(random_banded(rng, 25, 3, 2)), 3, 2)
    transposed, ref = _transposes(band, jnp.asarray(rng.standard_normal(25)))
    np.testing.assert_allclose(transposed, ref, rtol=1e-12)


def test_custom_linear_solve_gradient_matches_dense():
    """As `dense.inverse` uses it: derivatives through the matrix by the implicit rule."""
    n, kl, ku = 15, 1, 2
    rng = np.random.default_rng(5)
    a = jnp.asarray(random_banded(rng, n, kl, ku))
    b = jnp.asarray(rng.standard_normal(n))

    def loss(a, b):
        fact = factor_banded(jax.lax.stop_gradient(band_storage(a, kl, ku)), kl, ku)
        x = jax.lax.custom_linear_solve(
            lambda v: a @ v,
            b,
            solve=lambda _, r: solve_banded(fact, r),
            transpose_solve=lambda _, r: solve_banded(fact, r, transpose=True),
        )
        return jnp.sum(jnp.sin(x))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
    refs = jax.grad(lambda a, b: jnp.sum(jnp.sin(jnp.linalg.solve(a, b))), argnums=(0, 1))(a, b)
    for grad, ref in zip(grads, refs, strict=True):
        np.testing.assert_allclose(grad, ref, rtol=1e-9, atol=1e-9 * np.max(np.abs(ref)))


def test_band_storage_layout_and_ignored_corners():
    a = np.arange(1.0, 26.0).reshape(5, 5)
    band = np.asarray(band_storage(jnp.asarray(a), 1, 2))
    for i in range(5):
        for d in range(4):
            j = i + d - 1
            assert band[i, d] == (a[i, j] if 0 <= j < 5 else 0)
    junk = band.copy()
    junk[0, 0] = junk[4, 3] = junk[3, 3] = np.nan  # the corners outside the matrix
    rhs = jnp.ones(5)
    solves, clean = (factor_and_solve(jnp.asarray(x), rhs, kl=1, ku=2) for x in (junk, band))
    np.testing.assert_array_equal(solves, clean)
    assert np.all(np.isfinite(clean))


def test_band_from_entries_matches_band_storage():
    n, kl, ku = 12, 2, 1
    rng = np.random.default_rng(6)
    dense = random_banded(rng, n, kl, ku)
    rows, cols = np.nonzero(dense)
    order = rng.permutation(rows.size)
    rows, cols = rows[order], cols[order]
    build = jax.jit(lambda v: band_from_entries(rows, cols, v, n, kl, ku))
    band = build(jnp.asarray(dense[rows, cols]))
    np.testing.assert_array_equal(band, band_storage(jnp.asarray(dense), kl, ku))


def test_band_from_entries_sums_repeats_and_batches():
    rows, cols = np.array([0, 1, 1, 2]), np.array([1, 0, 0, 2])
    values = jnp.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    bands = jax.vmap(lambda v: band_from_entries(rows, cols, v, 3, 1, 1))(values)
    expected = np.zeros((2, 3, 3), np.float64)
    expected[:, 0, 2] = [1.0, 5.0]  # (0, 1): superdiagonal of row 0
    expected[:, 1, 0] = [5.0, 13.0]  # (1, 0) twice
    expected[:, 2, 1] = [4.0, 8.0]  # (2, 2): diagonal
    np.testing.assert_array_equal(bands, expected)


@pytest.mark.parametrize(
    "rows, cols, match",
    [
        ([0, 3], [0, 0], r"entry 1 at \(3, 0\) is outside the matrix's band"),
        ([0, 0], [0, 4], r"entry 1 at \(0, 4\) is outside"),
        ([0, 0], [0, 6], r"entry 1 at \(0, 6\) is outside"),
        ([0], [0, 1], "three arrays of one shape"),
    ],
)
def test_band_from_entries_rejects_entries_outside_the_band(rows, cols, match):
    with pytest.raises(ValueError, match=match):
        band_from_entries(np.array(rows), np.array(cols), jnp.ones(2), 6, 2, 3)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"band storage of shape \(n, kl \+ ku \+ 1\)"):
        factor_banded(jnp.zeros((5, 4)), 1, 1)
    with pytest.raises(ValueError, match="non-negative integer bandwidths; got kl=-1"):
        factor_banded(jnp.zeros((5, 3)), -1, 3)
    with pytest.raises(ValueError, match="takes a square matrix"):
        band_storage(jnp.zeros((3, 4)), 1, 1)
    fact = jax.eval_shape(lambda: factor_banded(jnp.ones((5, 1)), 0, 0))
    with pytest.raises(ValueError, match=r"`rhs` of shape \(5,\) or \(5, k\).*got \(4,\)"):
        jax.eval_shape(solve_banded, fact, jnp.ones(4))


def test_singular_matrix_gives_non_finite_output():
    rng = np.random.default_rng(7)
    a = random_banded(rng, 10, 2, 2)
    a[:, 4] = 0  # a zero column
    x, xt = banded_solves(a, np.ones(10), 2, 2)
    assert not np.all(np.isfinite(x))
    assert not np.all(np.isfinite(xt))


def test_no_n_by_n_buffer():
    n, kl, ku = 512, 2, 2
    band, rhs = jnp.zeros((n, kl + ku + 1)), jnp.zeros(n)
    text = factor_and_solve.lower(band, rhs, kl=kl, ku=ku).compile().as_text()
    shapes = re.findall(r"\b[a-z]+\d*\[([\d,]*)\]", text)
    assert f"{n},{kl + ku + 1}" in shapes  # the pattern finds shapes
    big = [s for s in shapes if sum(int(d) >= n for d in s.split(",") if d) >= 2]
    assert not big, big
