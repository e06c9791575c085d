"""Dense linear algebra for the implicit solvers, on the flattened state.

See `docs/solver-internals.md`, "Dense linear algebra"; a Krylov method for larger or
sparse systems belongs beside this module in `linear/`.
"""

import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from odeckpt._core import Args, Y, from_real_view, real_view
from odeckpt._terms import AbstractTerm

FlatField = Callable[[jax.Array, jax.Array], jax.Array]
"""`f(t, y_flat) -> dy/dt` flattened like `y_flat`."""


class Flat(eqx.Module):
    """A state flattened to one vector, with the vector field on that vector.

    Attributes:
        y: the flat state (the common dtype of the leaves).
        unravel: maps a flat vector back to the state's PyTree (and leaf dtypes).
        f: the vector field on flat vectors, `f(t, y) -> dy/dt`, in `y.dtype`.
    """

    y: jax.Array
    unravel: Callable = eqx.field(static=True)
    f: FlatField = eqx.field(static=True)


def flatten(term: AbstractTerm, y0: Y, args: Args) -> Flat:
    """Flatten `y0` (its real view, see `real_view`) and wrap `term.vf` to act on flat
    vectors."""
    y, unravel_real = ravel_pytree(real_view(y0))
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), y0)

    def unravel(y_flat):
        return from_real_view(unravel_real(y_flat), like)

    def f(t, y_flat):
        out, _ = ravel_pytree(real_view(term.vf(t, unravel(y_flat), args)))
        return out.astype(y.dtype)

    return Flat(y, unravel, f)


def unravel_rows(flat: Flat, rows: jax.Array) -> Y:
    """Unflatten each row of `rows` (shape `(d, n)`) into a PyTree with a leading axis."""
    return jax.vmap(flat.unravel)(rows)


def jacobian(f: FlatField, t, y, unit=None) -> jax.Array:
    """`df/dy(t, y)` as an `(n, n)` matrix: `n` batched forward-mode products.

    `unit` (a traced 1, default 1) scales the basis the products are taken along:
    inside a loop, a `unit` that depends on the loop's state keeps XLA from hoisting
    the products out of the loop when `f` is linear.
    """
    basis = jnp.eye(y.shape[0], dtype=y.dtype)
    if unit is not None:
        basis = basis * jnp.asarray(unit, y.dtype)
    columns = jax.vmap(lambda v: jax.jvp(lambda z: f(t, z), (y,), (v,))[1])(basis)
    return columns.T


def linearise(f: FlatField, t, y):
    """`(f(t, y), df/dy, df/dt)` from one batch of `n + 1` forward-mode products.

    The primal `f(t, y)` is not batched, so it is evaluated once.
    """
    n = y.shape[0]
    dys = jnp.concatenate([jnp.eye(n, dtype=y.dtype), jnp.zeros((1, n), y.dtype)])
    dts = jnp.zeros((n + 1,), jnp.result_type(t)).at[n].set(1)
    f0, columns = jax.vmap(lambda dy, dt: jax.jvp(f, (t, y), (dt, dy)), out_axes=(None, 0))(
        dys, dts
    )
    return f0, columns[:n].T, columns[n]


def stop_gradients(tree):
    """`lax.stop_gradient` on every floating array leaf; other leaves unchanged."""
    return jax.tree.map(lambda x: jax.lax.stop_gradient(x) if eqx.is_inexact_array(x) else x, tree)


SMALL = 16
"""Up to this many unknowns, solves apply an explicit inverse (`docs/solver-internals.md`,
"Dense linear algebra")."""


class Factorisation(eqx.Module):
    """A matrix prepared for repeated solves (not differentiated).

    Attributes:
        matrix: the inverse (`n <= SMALL`) or the packed LU factors.
        permutation: the LU's row permutation (`matrix[permutation] = L U`), as floats
            of the matrix's real dtype (so that the record can pass where only floating
            outputs are allowed); `None` with an inverse. A complex matrix
            (`RadauIIA5`'s) is factorised the same way. The permutation, not LAPACK's
            pivots, is kept: turning pivots into a permutation is a loop over the rows,
            which `jax.scipy.linalg.lu_solve` would run again for every solve (half
            the cost of a solve on 256 unknowns).
    """

    matrix: jax.Array
    permutation: jax.Array | None


def factor(matrix: jax.Array) -> Factorisation:
    """Prepare `matrix` for `solve` (LU with partial pivoting, or its inverse)."""
    if matrix.shape[0] <= SMALL:
        return Factorisation(jnp.linalg.inv(matrix), None)
    lu, _, permutation = jax.lax.linalg.lu(matrix)
    return Factorisation(lu, permutation.astype(jnp.finfo(lu.dtype).dtype))


def solve(fact: Factorisation, rhs: jax.Array, transpose: bool = False) -> jax.Array:
    """Solve `matrix x = rhs` (or `matrix^T x = rhs`) with `fact = factor(matrix)`;
    `rhs` is a vector or a matrix of right-hand sides (columns)."""
    if fact.permutation is None:
        return (fact.matrix.T if transpose else fact.matrix) @ rhs
    lu, permutation = fact.matrix, fact.permutation.astype(jnp.int32)
    b = rhs[:, None] if rhs.ndim == 1 else rhs
    triangular = ft.partial(jax.lax.linalg.triangular_solve, lu, left_side=True)
    if transpose:  # matrix^T = U^T L^T P: x[permutation] = L^-T U^-T rhs
        x = triangular(b, lower=False, transpose_a=True)
        x = triangular(x, lower=True, unit_diagonal=True, transpose_a=True)
        x = jnp.zeros_like(x).at[permutation].set(x, unique_indices=True)
    else:  # P matrix = L U
        x = triangular(b[permutation], lower=True, unit_diagonal=True)
        x = triangular(x, lower=False)
    return x[:, 0] if rhs.ndim == 1 else x


def inverse(matrix: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """`rhs -> matrix^-1 rhs`, differentiable in `matrix`; one factorisation for all calls.

    Derivatives go through `matrix` by the implicit rule `d(A^-1 b) = A^-1 (db - dA
    A^-1 b)` (`lax.custom_linear_solve`), reusing the factorisation (transposed in
    reverse mode), not through the factorisation itself.
    """
    fact = factor(jax.lax.stop_gradient(matrix))

    def apply(rhs):
        return jax.lax.custom_linear_solve(
            lambda x: matrix @ x,
            rhs,
            solve=lambda _, b: solve(fact, b),
            transpose_solve=lambda _, b: solve(fact, b, transpose=True),
        )

    return apply


def shifted(jac: jax.Array, scale) -> jax.Array:
    """`I - scale * jac` (the Newton matrix of an implicit stage)."""
    return jnp.eye(jac.shape[0], dtype=jac.dtype) - scale * jac


def rms(x: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.mean(jnp.square(x)))


def combine(base: jax.Array, weights, vectors) -> jax.Array:
    """`base + sum_j weights[j] * vectors[j]`, skipping weights that are exactly 0.

    `weights` may mix Python floats and traced scalars.
    """
    out = base
    for w, v in zip(weights, vectors, strict=False):
        if isinstance(w, float | int) and w == 0:
            continue
        out = out + jnp.asarray(w, v.dtype) * v
    return out
