"""Rosenbrock (linearly implicit) solvers for stiff problems: `Ros3P`, `Rodas5P`.

One factorisation of `W = I / (h gamma) - J` per step and one linear solve per stage
(or, with an iterative `linear_solver`, one Krylov solve per stage on Jacobian-vector
products); no Newton iteration. See `docs/solver-internals.md`, "Rosenbrock methods";
the references are on each class.
"""

from collections.abc import Callable
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx

from odeckpt._core import RESULTS
from odeckpt._solvers.base import AbstractAdaptiveSolver, StepOutput
from odeckpt._solvers.dense import hermite_coeffs
from odeckpt._solvers.linear import choice, dense as la
from odeckpt._solvers.linear.preconditioners import AbstractPreconditioner
from odeckpt._solvers.linear.sparsity import Pattern
from odeckpt._solvers.linear.stage_matrix import direct_format

from . import rosenbrock_tableaux as tab

_JAC_MISMATCH = (
    "The Jacobian given to the solver's `jac=...` disagrees with the derivative of "
    "the vector field (checked along one direction at every step). Check `jac(t, y, "
    "args)`: it must return df/dy as an (n, n) array over `ravel_pytree(y)`. Note that "
    "a solve backwards in time (t1 < t0) runs in reversed time, where the Jacobian "
    "changes sign: pass `jac=None` there."
)


class AbstractRosenbrock(choice.AbstractLinearSettings, AbstractAdaptiveSolver):
    """A Rosenbrock method defined by its `tableau`.

    Attributes:
        jac: optional `jac(t, y, args) -> (n, n) array`, the Jacobian df/dy on the
            flattened state (`jax.flatten_util.ravel_pytree(y)`; for a 1-D array `y`
            the usual Jacobian; complex leaves enter as their real view `[Re, Im]` on
            a last axis of 2, so for a complex `y` of `n` elements it is `(2n, 2n)`).
            `None` (default): computed with `n + 1` batched forward-mode products
            (`jax.jacfwd`), `df/dt` included. A given `jac` is checked against one
            Jacobian-vector product per step and the solve raises if they disagree;
            it must be valid for forward-in-time solves. It may also return a lineax
            operator on the state's structure (or a linear function of it): a dense
            `linear_solver` materialises it, an iterative one applies it.
        linear_solver: the lineax solver of the stage systems. The default,
            `lineax.AutoLinearSolver(well_posed=None)` (as diffrax's implicit
            solvers'), and `lineax.LU()` factorise `W` densely once per step; any
            other (`lineax.GMRES(rtol, atol)`, `lineax.BiCGStab(rtol, atol)`) solves
            each stage matrix-free, on Jacobian-vector products of one linearisation
            of `f` per step. A stage solve that misses its tolerance rejects the step
            (`RESULTS.breakdown` with constant steps).
        preconditioner: with an iterative `linear_solver`, `(t, y, args, gamma_h) ->`
            a lineax operator (or a linear function of a PyTree shaped like `y`)
            approximating the inverse of `I - gamma_h df/dy(t, y)`; called once per
            step, gradients stopped. See `docs/stiff.md`.

    A Rosenbrock method is linearly implicit: it solves linear systems, with no root
    finder, so it is not an `AbstractImplicitSolver` (which has a `root_finder`).
    diffrax 0.7.2 has no Rosenbrock methods.
    """

    tableau: eqx.AbstractClassVar[tab.RosenbrockTableau]
    jac: Callable | None = None
    linear_solver: lx.AbstractLinearSolver = choice.DEFAULT_LINEAR_SOLVER
    preconditioner: Callable | AbstractPreconditioner | None = None
    jac_sparsity: Pattern | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        jac: Callable | None = None,
        linear_solver: lx.AbstractLinearSolver = choice.DEFAULT_LINEAR_SOLVER,
        preconditioner: Callable | AbstractPreconditioner | None = None,
        jac_sparsity=None,
    ):
        self.jac = jac
        self.linear_solver = linear_solver
        self.preconditioner = preconditioner
        name = type(self).__name__
        self.jac_sparsity = None if jac_sparsity is None else Pattern(name, jac_sparsity)

    def __check_init__(self):
        name = type(self).__name__
        choice.check_linear_solver(name, self.linear_solver, self.preconditioner, self.jac_sparsity)
        choice.check_jac(name, self.jac, self.jac_sparsity)

    def order(self, terms) -> int:
        return self.tableau.order

    @property
    def evals_per_step(self) -> int:
        """Evaluations of `f` per step (the Jacobian's products not counted), one more
        for the Hermite dense output of methods without their own, when it is asked for."""
        hermite = self.tableau.dense is None
        return self.tableau.stages + hermite

    def init_state(self, term, t0, y0, args):
        """No state is carried between steps (`()`): a step needs `(t, y)` alone."""
        return ()

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        flat = la.flatten(term, y0, args)
        h = dt.astype(flat.y.dtype)
        sparsity = choice.sparsity_of(
            type(self).__name__, self.jac_sparsity, self.preconditioner, y0
        )
        if choice.is_dense(self.linear_solver) and sparsity is not None:
            f0, dfdt = _field_and_time_derivative(flat, t0)
            form = direct_format(sparsity)
            jac = form.jacobian(flat.f, t0, flat.y)
            eye = jnp.asarray(sparsity.rows == sparsity.cols, jac.dtype)
            w = form.inverse(eye / (h * self.tableau.gamma) - jac)
            solve = lambda rhs: (w(rhs), jnp.asarray(True))
        elif choice.is_dense(self.linear_solver):
            f0, jac, dfdt = self._linearise(flat, t0, y0, args)
            w = la.inverse(jnp.eye(jac.shape[0], dtype=jac.dtype) / (h * self.tableau.gamma) - jac)
            solve = lambda rhs: (w(rhs), jnp.asarray(True))
        else:
            f0, solve, dfdt = self._matrix_free(flat, t0, h, (term, y0, args), sparsity)
        ks, y1, solved = _rosenbrock_stages(self.tableau, flat, t0, dt, f0, solve, dfdt)
        error = la.combine(jnp.zeros_like(flat.y), self.tableau.m_err, ks)
        y1 = jnp.where(solved, y1, jnp.nan)
        error = jnp.where(solved, error, jnp.inf)
        coeffs = self._dense(flat, t0, dt, f0, ks, y1) if dense else None
        failure = jnp.where(solved, RESULTS.successful, RESULTS.breakdown)
        return StepOutput(flat.unravel(y1), flat.unravel(error), (), coeffs, failure)

    def _matrix_free(self, flat: la.Flat, t0, h, problem, sparsity):
        """`(f0, solve, df/dt)`: `solve(rhs) -> (W^-1 rhs, ok)` by the iterative linear
        solver on `W v = v / (h gamma) - J v`, differentiable in everything `W` and
        `rhs` depend on (lineax's derivative rules)."""
        scale = 1 / (h * self.tableau.gamma)
        structure = jax.ShapeDtypeStruct(flat.y.shape, flat.y.dtype)
        if self.jac is None:
            f0, linear = jax.linearize(flat.f, t0, flat.y)
            dfdt = linear(jnp.ones_like(t0), jnp.zeros_like(flat.y))
            zero_t = jnp.zeros_like(t0)
            jv = lambda v: linear(zero_t, v)
        else:
            _, y0, args = problem
            operator = choice.user_jacobian(self.jac, (None, y0, args), t0)
            f0, operator, dfdt = _checked_jacobian(flat, t0, operator)
            jv = operator.mv
        w = lx.FunctionLinearOperator(lambda v: scale * v - jv(v), structure)
        options = {}
        hg = la.stop_gradients(h * self.tableau.gamma)
        inverse = choice.preconditioner_at(self.preconditioner, problem, t0, hg, sparsity)
        if inverse is not None:  # it approximates (I - hg J)^-1, and W = (I - hg J) / hg
            options["preconditioner"] = inverse * hg

        def solve(rhs):
            out = lx.linear_solve(w, rhs, self.linear_solver, options=options, throw=False)
            return out.value, out.result == lx.RESULTS.successful

        return f0, solve, dfdt

    def _linearise(self, flat: la.Flat, t0, y0, args):
        if self.jac is None:
            return la.linearise(flat.f, t0, flat.y)
        operator = choice.user_jacobian(self.jac, (None, y0, args), t0)
        f0, checked, dfdt = _checked_jacobian(flat, t0, operator)
        return f0, checked.as_matrix(), dfdt

    def _dense(self, flat: la.Flat, t0, dt, f0, ks, y1):
        """Dense-output coefficients `c_j` of `y0 + sum_j c_j theta^(j+1)`."""
        if self.tableau.dense is None:
            f1 = flat.f(t0 + dt, y1)
            h = dt.astype(flat.y.dtype)
            return la.unravel_rows(flat, hermite_coeffs(flat.y, y1, f0, f1, h))
        zero = jnp.zeros_like(flat.y)
        ds = [la.combine(zero, row, ks) for row in self.tableau.dense]
        rows = [y1 - flat.y + ds[0]]
        rows += [ds[r] - ds[r - 1] for r in range(1, len(ds))]
        rows.append(-ds[-1])
        return la.unravel_rows(flat, jnp.stack(rows))


def _checked_jacobian(flat: la.Flat, t0, operator: lx.AbstractLinearOperator):
    """`(f0, operator, df/dt)`, with `operator` (the user's `jac` on the flat state)
    checked against one Jacobian-vector product: the solve raises if they disagree."""
    n = flat.y.shape[0]
    probe = 1 + 0.5 * jnp.sin(jnp.arange(1, n + 1, dtype=flat.y.dtype))
    dys = jnp.stack([jnp.zeros_like(probe), probe])
    dts = jnp.asarray([1, 0], jnp.result_type(t0))
    f0, (dfdt, jv) = jax.vmap(
        lambda dy, dt: jax.jvp(flat.f, (t0, flat.y), (dt, dy)), out_axes=(None, 0)
    )(dys, dts)
    given = operator.mv(probe)
    gap = la.rms(given - jv) > 1e-3 * (la.rms(given) + la.rms(jv)) + 1e-30
    return f0, eqx.error_if(operator, gap, _JAC_MISMATCH), dfdt


def _field_and_time_derivative(flat: la.Flat, t0):
    """`(f(t0, y0), df/dt(t0, y0))` from one forward-mode product."""
    return jax.jvp(lambda t: flat.f(t, flat.y), (t0,), (jnp.ones_like(t0),))


def _rosenbrock_stages(tableau: tab.RosenbrockTableau, flat: la.Flat, t0, dt, f0, solve, dfdt):
    """The stage increments `k_1..k_s`, `y1` (see `RosenbrockTableau`), and whether
    every stage's linear solve (`solve(rhs) -> (W^-1 rhs, ok)`) succeeded."""
    h = dt.astype(flat.y.dtype)
    # One reciprocal, then products: XLA fuses a product by a scalar into each
    # combination, but keeps every quotient `C_ij / h` a separate kernel.
    inv_h = 1 / h
    ks, solved = [], jnp.asarray(True)
    for i in range(tableau.stages):
        if i == 0:
            value = f0
        else:
            u = la.combine(flat.y, tableau.a[i], ks)
            value = flat.f(t0 + tableau.c[i] * dt, u)
        rhs = la.combine(value, [cij * inv_h for cij in tableau.C[i]], ks)
        if tableau.d[i] != 0:
            rhs = rhs + (h * tableau.d[i]) * dfdt
        k, ok = solve(rhs)
        ks.append(k)
        solved = solved & ok
    return ks, la.combine(flat.y, tableau.m, ks), solved


@final
class Ros3P(AbstractRosenbrock):
    """Lang & Verwer's ROS3P: Rosenbrock 3(2), 3 stages, A-stable.

    Designed for parabolic PDEs (method of lines): it keeps order 3 on linear
    parabolic problems where many Rosenbrock methods drop an order. Not for very
    stiff ODEs: it is not L-stable (`R(inf) = 1 - sqrt(3)`), so stiff transients are
    damped slowly, and on linear autonomous problems its error estimate is
    identically zero (its first two stages coincide there), so on a stiff, nearly
    linear problem the controller lets steps grow while the stiff components ring
    (e.g. 7 steps but a 5% error in x' on x'' + 1000 x' + x = 0 at rtol 1e-6).
    Prefer `Rodas5P`. Dense output: cubic Hermite (one extra evaluation of `f` per
    step).

    References:
        J. Lang & J. Verwer (2001), "ROS3P: an accurate third-order Rosenbrock solver
        designed for parabolic problems", BIT 41(4), 731–738.
    """

    tableau = tab.ROS3P


@final
class Rodas5P(AbstractRosenbrock):
    """Steinebach's Rodas5P: Rosenbrock 5(4), 8 stages, stiffly accurate, L-stable.

    The usual first choice for small-to-medium stiff systems at moderate-to-tight
    tolerances (OrdinaryDiffEq.jl's default stiff method). Dense output of order 4
    from the stages (no extra evaluations). Cost per step: one Jacobian (`n + 1`
    forward-mode products), one LU factorisation, 8 evaluations of `f`.

    References:
        G. Steinebach (2023), "Construction of Rosenbrock–Wanner method Rodas5P and
        numerical benchmarks within the Julia Differential Equations package",
        BIT Numer. Math. 63(2):27.
    """

    tableau = tab.RODAS5P
