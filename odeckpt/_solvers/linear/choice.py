"""Which linear solver an implicit solver's Newton matrices use: the checks on its
`linear_solver=` and `preconditioner=` settings, and the step's linearisation that
builds each stage's matrix from them (`StepJacobian`).

See `docs/solver-internals.md`, "Linear solvers".
"""

import abc
import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import scipy.sparse
from jax.flatten_util import ravel_pytree

from odeckpt._core import from_real_view, real_view

from . import dense as la
from .preconditioners import AbstractPreconditioner
from .sparsity import Pattern, Sparsity, sparsity_for
from .stage_matrix import (
    AbstractStageMatrix,
    DenseStageMatrix,
    DirectFormat,
    MatrixFreeStageMatrix,
    direct_format,
)

Preconditioner = Callable[..., Any]
"""`preconditioner(t, y, args, gamma_h)`: a lineax operator (or a linear function of a
state-shaped PyTree) approximating the inverse of `I - gamma_h df/dy(t, y)`."""

DEFAULT_LINEAR_SOLVER = lx.AutoLinearSolver(well_posed=None)
"""diffrax's default: a dense LU for a square matrix (odeckpt's own, `is_dense`)."""

# lineax solvers that need the operator tagged (symmetric, positive definite, diagonal,
# triangular, tridiagonal): `I - hg J` carries no such tag, and in general has none of
# those properties.
_NEED_TAGS = (lx.CG, lx.Cholesky, lx.Diagonal, lx.Triangular, lx.Tridiagonal)


def is_dense(linear_solver) -> bool:
    """Whether `linear_solver` asks for a dense LU: odeckpt's own (`dense.py`: explicit
    inverse for tiny systems, the factorisation reused across a step's stages), not
    lineax's, which solves the same way at more cost per solve."""
    return isinstance(linear_solver, lx.LU | lx.AutoLinearSolver)


def check_linear_solver(name: str, linear_solver, preconditioner, jac_sparsity=None) -> None:
    """Refuse a `linear_solver` or `preconditioner` that `name(...)` cannot use.

    Raises:
        ValueError: for a `linear_solver` that is not a lineax solver or needs a
            tagged operator (`CG`, `Cholesky`, `Diagonal`, `Triangular`,
            `Tridiagonal`), or a `preconditioner` that is not callable, is given
            with a dense LU, or is a built-in one without `jac_sparsity`.
    """
    if not isinstance(linear_solver, lx.AbstractLinearSolver):
        raise ValueError(
            f"`{name}(linear_solver=...)` takes a lineax solver, e.g. `lineax.LU()` "
            f"(dense, the default) or `lineax.GMRES(rtol=1e-6, atol=1e-9)` (matrix-free); "
            f"got {type(linear_solver).__name__}."
        )
    if isinstance(linear_solver, _NEED_TAGS):
        raise ValueError(
            f"`{name}(linear_solver=lineax.{type(linear_solver).__name__}(...))` needs an "
            "operator lineax can treat as symmetric positive definite (or diagonal, "
            "triangular, tridiagonal), and the Newton matrix `I - gamma h df/dy` is not "
            "known to be one. Use `lineax.GMRES(rtol, atol)` or "
            "`lineax.BiCGStab(rtol, atol)` (matrix-free), or `lineax.LU()` (dense)."
        )
    if preconditioner is None:
        return
    if isinstance(preconditioner, AbstractPreconditioner) and jac_sparsity is None:
        raise ValueError(
            f"`{name}(preconditioner={type(preconditioner).__name__}(...))` is built "
            "from the Jacobian's entries, which odeckpt finds from its sparsity pattern: "
            f"pass `{name}(jac_sparsity=...)` too (a boolean array, a SciPy sparse "
            "matrix or a JAX BCOO), or a preconditioner function of your own."
        )
    if not callable(preconditioner) and not isinstance(preconditioner, AbstractPreconditioner):
        raise ValueError(
            f"`{name}(preconditioner=...)` takes a function `(t, y, args, gamma_h) -> "
            f"operator`; got {type(preconditioner).__name__}."
        )
    if is_dense(linear_solver):
        raise ValueError(
            f"`{name}(preconditioner=...)` serves an iterative linear solver, and "
            f"`linear_solver={type(linear_solver).__name__}()` factorises the matrix "
            "directly. Pass `linear_solver=lineax.GMRES(rtol, atol)` (or BiCGStab) "
            "with it, or drop the preconditioner."
        )


def check_jac(name: str, jac, jac_sparsity) -> None:
    """Refuse a `jac` that is not a function, or one given with `jac_sparsity`.

    Raises:
        ValueError: as above.
    """
    if jac is not None and not callable(jac):
        raise ValueError(
            f"`{name}(jac=...)` takes a function `jac(t, y, args)` returning a lineax "
            f"operator (or an (n, n) array); got {type(jac).__name__}."
        )
    if jac is not None and jac_sparsity is not None:
        raise ValueError(
            f"`{name}(jac=..., jac_sparsity=...)`: a given Jacobian is used as it is, "
            "so its sparsity pattern has nothing to do; pass one of them."
        )


class AbstractLinearSettings(eqx.Module):
    """What the implicit solvers' linear algebra shares: a user's `jac`, the
    `jac_sparsity` pattern and the `preconditioner`; and so the copy of such a solver
    that steps a continuous adjoint's adjoint ODE. A solver lists it before its
    `AbstractSolver` base, whose `for_adjoint_ode` says no."""

    jac: eqx.AbstractVar[Callable | None]
    jac_sparsity: eqx.AbstractVar[Pattern | None]
    preconditioner: eqx.AbstractVar[Callable | AbstractPreconditioner | None]

    def for_adjoint_ode(self, integrates_y: bool) -> Any:
        """A copy on the adjoint ODE: the Jacobian from the vector field's products
        (`jac` describes the forward problem), the pattern and a built-in
        preconditioner transposed (`adjoint_settings`)."""
        pattern, preconditioner = adjoint_settings(
            type(self).__name__, self.jac_sparsity, self.preconditioner, integrates_y
        )
        return dataclasses.replace(
            self, jac=None, jac_sparsity=pattern, preconditioner=preconditioner
        )


def adjoint_settings(name: str, pattern: Pattern | None, preconditioner, integrates_y: bool):
    """`(jac_sparsity, preconditioner)` of `name`'s copy that integrates a continuous
    adjoint's adjoint ODE: on `a` its Jacobian is `J^T`, so the pattern is transposed;
    on `(y, a)` it is `[[-J, 0], [d(J^T a)/dy, J^T]]`, whose lower-left block has the
    pattern of `P^T P` (row `i`, column `j` where some `f_k` depends on both `y_i` and
    `y_j`). `None` without a pattern.

    Raises:
        ValueError: for a preconditioner function, which approximates the inverse of
            `I - hg J` and not of the adjoint's `I - hg J^T`.
    """
    if preconditioner is not None and not isinstance(preconditioner, AbstractPreconditioner):
        raise ValueError(
            f"`{name}(preconditioner=...)` approximates the inverse of `I - gamma h "
            "df/dy`, and the adjoint ODE of a continuous adjoint needs that of `I - gamma "
            "h (df/dy)^T`: pass the adjoint a solver without it, e.g. "
            f"`InterpolatingAdjoint(solver={name}(linear_solver=lineax.GMRES(rtol, atol)))`, "
            "or a built-in preconditioner (`JacobiPreconditioner()`, "
            "`BlockJacobiPreconditioner(blocks)`) with `jac_sparsity`, or use "
            "`CheckpointAdjoint()`."
        )
    if pattern is None:
        return None, preconditioner
    n = pattern.n
    ones = np.ones(pattern.rows.size)
    p = scipy.sparse.csr_matrix((ones, (pattern.rows, pattern.cols)), shape=(n, n))
    adjoint = p.T if not integrates_y else scipy.sparse.bmat([[p, None], [p.T @ p, p.T]])
    if preconditioner is not None:
        preconditioner = preconditioner.for_adjoint_ode(n, integrates_y)
    return scipy.sparse.csr_matrix(adjoint != 0), preconditioner


class AbstractStepJacobian(eqx.Module):
    """The step's Jacobian `J = df/dy(t0, y0)` (gradients stopped), ready to give the
    Newton matrix `I - hg J` of each diagonal entry `hg`."""

    @abc.abstractmethod
    def matrix(self, hg) -> AbstractStageMatrix:
        """`I - hg J`, prepared for the stage iterations."""


class DenseStepJacobian(AbstractStepJacobian):
    """`J` from `n` forward-mode products (or one per colour of a sparsity pattern),
    factorised densely or in band storage (`form`)."""

    jac: jax.Array  # (n, n), or the pattern's nonzero values
    form: DirectFormat = DirectFormat()

    def matrix(self, hg) -> DenseStageMatrix:
        hg = la.stop_gradients(hg)
        return DenseStageMatrix(self.form.newton(self.jac, hg), hg, self.form)


class MatrixFreeStepJacobian(AbstractStepJacobian):
    """Where `J` is taken, for products by linearisation; and what the preconditioner
    reads (the hook's arguments, or the Jacobian's entries on a sparsity pattern for a
    built-in preconditioner)."""

    t: jax.Array
    y: jax.Array  # flat
    problem: Any  # (term, y0, args), gradients stopped
    values: jax.Array | None  # J's entries on `sparsity`, for a built-in preconditioner
    jacobian: lx.AbstractLinearOperator | None  # the user's `jac`, on the flat state
    solver: lx.AbstractLinearSolver = eqx.field(static=True)
    preconditioner: Any = eqx.field(static=True)
    sparsity: Sparsity | None = eqx.field(static=True)

    def matrix(self, hg) -> MatrixFreeStageMatrix:
        hg = la.stop_gradients(hg)
        if isinstance(self.preconditioner, AbstractPreconditioner):
            assert self.sparsity is not None and self.values is not None
            inverse = self.preconditioner.inverse(self.sparsity, self.values, hg)
        else:
            inverse = preconditioner_at(self.preconditioner, self.problem, self.t, hg)
        return MatrixFreeStageMatrix(self.t, self.y, hg, inverse, self.jacobian, self.solver)


def preconditioner_at(
    preconditioner, problem, t0, hg, sparsity: Sparsity | None = None
) -> lx.AbstractLinearOperator | None:
    """The preconditioner's approximate inverse of `I - hg J` at `problem = (term, y0,
    args)` and `t0`, as an operator on the flat state (gradients stopped); `None`
    without one. A built-in one needs `sparsity`."""
    if preconditioner is None:
        return None
    problem, t0, hg = la.stop_gradients((problem, t0, hg))
    if isinstance(preconditioner, AbstractPreconditioner):
        assert sparsity is not None
        flat = la.flatten(*problem)
        values = DirectFormat(sparsity).jacobian(flat.f, t0, flat.y)
        return preconditioner.inverse(sparsity, values, hg)
    _, y0, args = problem
    given = preconditioner(t0, y0, args, hg)
    return flat_operator(given, y0, la.flatten(*problem).y)


def sparsity_of(name: str, pattern: Pattern | None, preconditioner, y0) -> Sparsity | None:
    """`name(jac_sparsity=pattern)` coloured for the state `y0` (`None` without one),
    checked against it and against a built-in `preconditioner`.

    Raises:
        ValueError: for a pattern or a preconditioner's blocks that do not fit `y0`.
    """
    if pattern is None:
        return None
    sparsity = sparsity_for(name, pattern, y0)
    if isinstance(preconditioner, AbstractPreconditioner):
        preconditioner.check(name, sparsity)
    return sparsity


def user_jacobian(jac, problem, t0) -> lx.AbstractLinearOperator:
    """The user's `jac(t, y, args)` at `t0` of `problem = (term, y0, args)`: a lineax
    operator on the state's structure (or a linear function of it), or an `(n, n)`
    array on the flat state, as an operator on the flat state.

    Raises:
        ValueError: for an array or operator of the wrong shape.
    """
    term, y0, args = problem
    flat_y = la.flatten(*problem).y
    given = jac(t0, y0, args)
    if isinstance(given, lx.AbstractLinearOperator) or callable(given):
        return flat_operator(given, y0, flat_y, "jac(t, y, args)")
    n = flat_y.shape[0]
    matrix = jnp.asarray(given)
    if matrix.shape != (n, n):
        raise ValueError(
            f"`jac(t, y, args)` must return a lineax operator on the state's structure or "
            f"an ({n}, {n}) array for a state of {n} elements (`ravel_pytree(y)`); got "
            f"shape {matrix.shape}."
        )
    return lx.MatrixLinearOperator(matrix.astype(flat_y.dtype))


def step_jacobian(
    linear_solver,
    preconditioner,
    problem,
    t0,
    sparsity: Sparsity | None = None,
    jac=None,
) -> AbstractStepJacobian:
    """The Jacobian of `problem = (term, y0, args)` at `t0`, as `linear_solver` uses it:
    formed (densely, or on `sparsity`, or from the user's `jac`), or where to
    linearise (or the user's operator)."""
    problem = la.stop_gradients(problem)
    t0 = la.stop_gradients(t0)
    frozen = la.flatten(*problem)
    given = None if jac is None else la.stop_gradients(user_jacobian(jac, problem, t0))
    if is_dense(linear_solver) and given is not None:
        return DenseStepJacobian(given.as_matrix(), DirectFormat())
    if is_dense(linear_solver):
        form = direct_format(sparsity)
        return DenseStepJacobian(form.jacobian(frozen.f, t0, frozen.y), form)
    values = None
    if isinstance(preconditioner, AbstractPreconditioner):
        values = DirectFormat(sparsity).jacobian(frozen.f, t0, frozen.y)
    return MatrixFreeStepJacobian(
        t0, frozen.y, problem, values, given, linear_solver, preconditioner, sparsity
    )


def flat_operator(
    given, y0, y_flat, what: str = "preconditioner(t, y, args, gamma_h)"
) -> lx.AbstractLinearOperator:
    """`given` (a lineax operator or a linear function on PyTrees shaped like `y0`, from
    the user's `what`) as an operator on the flat state `y_flat`.

    Raises:
        ValueError: if it does not map `y0`'s structure to itself.
    """
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), y0)
    if not isinstance(given, lx.AbstractLinearOperator):
        given = lx.FunctionLinearOperator(given, like)
    spaces = (given.in_structure(), given.out_structure())
    if any(_shapes(space) != _shapes(like) for space in spaces):
        raise ValueError(
            f"`{what}` must return an operator from the "
            f"state's structure to itself, {_shapes(like)}; got one from "
            f"{_shapes(spaces[0])} to {_shapes(spaces[1])}."
        )
    _, unravel_real = ravel_pytree(real_view(y0))

    def apply(v):
        out, _ = ravel_pytree(real_view(given.mv(from_real_view(unravel_real(v), like))))
        return out.astype(y_flat.dtype)

    return lx.FunctionLinearOperator(apply, jax.ShapeDtypeStruct(y_flat.shape, y_flat.dtype))


def _shapes(structure) -> str:
    """A PyTree of arrays or `ShapeDtypeStruct`s as its structure, shapes and dtypes."""
    return str(jax.tree.map(lambda x: f"{jnp.result_type(x)}{list(jnp.shape(x))}", structure))
