"""The Newton matrix `I - hg J` of an implicit stage, as the stage iteration uses it:
factorised densely (`DenseStageMatrix`), or applied matrix-free through Jacobian-vector
products and solved by a lineax solver (`MatrixFreeStageMatrix`). Which one a solver
builds is its `LinearSolve` setting's choice (`choice.py`).

See `docs/solver-internals.md`, "Linear solvers".
"""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx

from odeckpt._core import zero_tangent

from . import banded as bd, dense as la
from .sparsity import Sparsity

Solve = Callable[[jax.Array], tuple[jax.Array, jax.Array]]
"""`rhs -> (x, ok)`: a solve with the stage matrix, and whether it succeeded."""


class AbstractStageMatrix(eqx.Module):
    """`I - hg J` for a Jacobian `J = df/dy(t, y)` taken at a point of the step, with
    gradients stopped: it steers the stage iterations, and is not part of the result.
    The flat field `f` is given to each use, so the record holds arrays only (it passes
    through the stage's custom derivative and its loops)."""

    @abc.abstractmethod
    def prepared(self, f) -> Solve:
        """A solve for the iterations of one stage (what every solve shares is built
        once, here, outside their loop)."""

    @abc.abstractmethod
    def refreshed(self, f, t, z, unit) -> "AbstractStageMatrix":
        """The same matrix with `J` taken afresh at `(t, z)` (a failing stage's restart;
        `unit`, a traced 1, keeps XLA from hoisting it out of the restart's loop)."""

    @abc.abstractmethod
    def tangent_solve(self, linear, inputs, k, rhs) -> jax.Array:
        """Solve `L x = rhs`, where `L` is the part in `k` of `linear`, the stage
        residual linearised at its solution in `(*inputs, k)` (so `L` is the exact
        `I - hg df/dy(t, z)`): the implicit derivative of the stage, which JAX
        transposes in reverse mode."""


class DirectFormat(eqx.Module):
    """How a direct solver forms and factorises the Newton matrix: densely from `n`
    products (no `sparsity`), densely from one product per colour of a sparsity
    pattern, or in band storage when the pattern is banded (`banded.py`)."""

    sparsity: Sparsity | None = eqx.field(static=True, default=None)
    banded: bool = eqx.field(static=True, default=False)

    def jacobian(self, f, t, y, unit=None) -> jax.Array:
        """`df/dy(t, y)`: an `(n, n)` matrix, or the pattern's nonzero values."""
        if self.sparsity is None:
            return la.jacobian(f, t, y, unit)
        linear = lambda v: jax.jvp(lambda z: f(t, z), (y,), (v,))[1]
        return self.sparsity.values(self.sparsity.products(linear, y.dtype, unit))

    def newton(self, jac: jax.Array, hg) -> "la.Factorisation | bd.BandedFactorisation":
        """`I - hg J` factorised, from `jac` as `jacobian` gives it."""
        if self.sparsity is None:
            return la.factor(la.shifted(jac, hg))
        eye = jnp.asarray(self.sparsity.rows == self.sparsity.cols, jac.dtype)
        return self.factor(eye - jnp.asarray(hg, jac.dtype) * jac)

    def factor(self, values: jax.Array) -> "la.Factorisation | bd.BandedFactorisation":
        """The matrix with the pattern's nonzero `values`, factorised."""
        sp = self.sparsity
        assert sp is not None
        if self.banded:
            band = bd.band_from_entries(sp.rows, sp.cols, values, sp.n, sp.lower, sp.upper)
            return bd.factor_banded(band, sp.lower, sp.upper)
        return la.factor(sp.dense(values))

    def inverse(self, values: jax.Array):
        """`rhs -> matrix^-1 rhs` for the matrix with the pattern's nonzero `values`,
        differentiable in `values` (the implicit rule, as `dense.inverse`)."""
        sp = self.sparsity
        assert sp is not None
        if not self.banded:
            return la.inverse(sp.dense(values))
        fact = self.factor(jax.lax.stop_gradient(values))

        def matvec(x):
            return jax.ops.segment_sum(values * x[sp.cols], sp.rows, num_segments=sp.n)

        def apply(rhs):
            return jax.lax.custom_linear_solve(
                matvec,
                rhs,
                solve=lambda _, b: self.solve(fact, b),
                transpose_solve=lambda _, b: self.solve(fact, b, transpose=True),
            )

        return apply

    def solve(self, fact, rhs, transpose: bool = False) -> jax.Array:
        if self.banded:
            return bd.solve_banded(fact, rhs, transpose)
        return la.solve(fact, rhs, transpose)

    def tangent_solve(self, linear, inputs, k, rhs) -> jax.Array:
        if self.sparsity is None:
            # The matrix's rows from the transpose (`docs/solver-internals.md`, "The
            # stage iteration").
            transposed = jax.linear_transpose(linear, *inputs, k)
            basis = jnp.eye(k.shape[0], dtype=k.dtype)
            matrix = jax.vmap(lambda e: transposed(e)[-1])(basis)
            return la.solve(la.factor(matrix), rhs)
        zeros = jax.tree.map(zero_tangent, inputs)
        products = self.sparsity.products(lambda v: linear(*zeros, v), k.dtype)
        return self.solve(self.factor(self.sparsity.values(products)), rhs)


def direct_format(sparsity: Sparsity | None) -> DirectFormat:
    """Dense, coloured or banded: banded where the band holds under a quarter of the
    rows (`docs/solver-internals.md`, "Linear solvers")."""
    if sparsity is None:
        return DirectFormat()
    width = 2 * sparsity.lower + sparsity.upper + 1  # pivoting widens the upper band
    return DirectFormat(sparsity, banded=sparsity.n >= BANDED_MIN and 4 * width <= sparsity.n)


BANDED_MIN = 64
"""Below this many unknowns a banded matrix is factorised densely (`direct_format`)."""


class DenseStageMatrix(AbstractStageMatrix):
    """The matrix formed from Jacobian-vector products (`n`, or one per colour of a
    sparsity pattern) and LU-factorised once: dense, or banded (`DirectFormat`)."""

    lu: "la.Factorisation | bd.BandedFactorisation"
    hg: jax.Array
    form: DirectFormat = DirectFormat()

    def prepared(self, f) -> Solve:
        return lambda rhs: (self.form.solve(self.lu, rhs), jnp.asarray(True))

    def refreshed(self, f, t, z, unit) -> "DenseStageMatrix":
        jac = self.form.jacobian(f, t, z, unit)
        return DenseStageMatrix(self.form.newton(jac, self.hg), self.hg, self.form)

    def tangent_solve(self, linear, inputs, k, rhs) -> jax.Array:
        return self.form.tangent_solve(linear, inputs, k, rhs)


class MatrixFreeStageMatrix(AbstractStageMatrix):
    """`v -> v - hg J v` from a linearisation of `f` at `(t, y)`, solved by a lineax
    solver (`GMRES`, `BiCGStab`, or any solver that follows lineax's interface), with an
    optional preconditioner: no `n x n` array exists unless the solver materialises
    the operator itself (lineax's direct solvers do).

    Attributes:
        t, y: where `J` is taken (the flat state).
        hg: `h * gamma`.
        preconditioner: a lineax operator on flat vectors approximating the inverse of
            the matrix, or `None`.
        jacobian: the user's `jac` at the step's start, on flat vectors, whose
            products replace the linearisation's; `None` to linearise `f`.
        solver: the lineax solver.
    """

    t: jax.Array
    y: jax.Array
    hg: jax.Array
    preconditioner: lx.AbstractLinearOperator | None
    jacobian: lx.AbstractLinearOperator | None
    solver: lx.AbstractLinearSolver = eqx.field(static=True)

    @property
    def _options(self) -> dict:
        return {} if self.preconditioner is None else {"preconditioner": self.preconditioner}

    def _operator(self, jvp) -> lx.FunctionLinearOperator:
        structure = jax.ShapeDtypeStruct(self.y.shape, self.y.dtype)
        hg = self.hg.astype(self.y.dtype)
        return lx.FunctionLinearOperator(lambda v: v - hg * jvp(v), structure)

    def prepared(self, f) -> Solve:
        # Linearised once per stage: every Krylov iteration of every Newton iteration
        # then costs one Jacobian-vector product, with no evaluation of `f` itself.
        if self.jacobian is None:
            _, jvp = jax.linearize(lambda z: f(self.t, z), self.y)
        else:
            jvp = self.jacobian.mv
        operator = self._operator(jvp)
        state = self.solver.init(operator, self._options)

        def solve(rhs):
            out = lx.linear_solve(
                operator, rhs, self.solver, options=self._options, state=state, throw=False
            )
            return out.value, out.result == lx.RESULTS.successful

        return solve

    def refreshed(self, f, t, z, unit) -> "MatrixFreeStageMatrix":
        t = jnp.asarray(t, self.t.dtype)
        z = z * jnp.asarray(unit, z.dtype)
        if self.jacobian is not None:
            # The user's `jac` is taken at the step's start only: a restart keeps it
            # (a step that fails again is retried smaller, where `I - hg J` is closer
            # to `I`).
            return self
        return MatrixFreeStageMatrix(t, z, self.hg, self.preconditioner, self.jacobian, self.solver)

    def tangent_solve(self, linear, inputs, k, rhs) -> jax.Array:
        zeros = jax.tree.map(zero_tangent, inputs)
        structure = jax.ShapeDtypeStruct(k.shape, k.dtype)
        operator = lx.FunctionLinearOperator(lambda v: linear(*zeros, v), structure)
        # `throw=True`: a Krylov solve that misses its tolerance here would give a wrong
        # derivative, so it raises (in either autodiff mode) instead.
        out = lx.linear_solve(operator, rhs, self.solver, options=self._options, throw=True)
        return out.value
