"""IMEX additive Runge–Kutta solvers: `KenCarp3`, `KenCarp4`, `KenCarp5`, `Sil3`.

For `MultiTerm(ODETerm(f_E), ODETerm(f_I))`: the first term explicit, the second
implicit (simplified Newton with the implicit term's Jacobian, formed afresh every
step). See `docs/solver-internals.md`, "IMEX additive methods"; the references are on
each class.
"""

from typing import TYPE_CHECKING, Any, ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._solvers.base import StepOutput
from odeckpt._solvers.dense import hermite_coeffs
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.root_finder.newton import (
    NewtonOptions,
    Stage,
    solve_stage,
    stage_failure,
)
from odeckpt._solvers.root_finder.newton_solver import AbstractNewtonRK
from odeckpt._solvers.runge_kutta.base import CalculateJacobian
from odeckpt._solvers.runge_kutta.multi_tableau import broadcast_parts
from odeckpt._terms import AbstractTerm, MultiTerm

from . import ark_tableaux as tab

if TYPE_CHECKING:  # a class variable each subclass sets (as diffrax declares it)
    from typing import ClassVar as AbstractClassVar
else:
    from equinox import AbstractClassVar


class _Slopes(eqx.Module):
    """The stage slopes of both parts (flat vectors), whether every implicit stage
    converged, and whether one failed in its linear solve."""

    explicit: list
    implicit: list
    converged: jax.Array
    unsolved: jax.Array


class AbstractIMEX(AbstractNewtonRK):
    """An IMEX additive Runge–Kutta method defined by its `tableau`; takes
    `MultiTerm(explicit_term, implicit_term)`.

    Constructed like the ESDIRKs (`AbstractNewtonRK`): `KenCarp4(rtol, atol,
    max_iters)`, or diffrax's `KenCarp4(root_finder=VeryChord(rtol, atol),
    root_find_max_steps=10, scan_kind=None)`.

    Raises:
        ValueError: for bad Newton settings (see `AbstractNewtonRK`); `diffeqsolve`
            refuses a term that is not a two-term `MultiTerm`.
    """

    tableau: AbstractClassVar[tab.ImexTableau]
    term_structure: ClassVar[Any] = MultiTerm[tuple[AbstractTerm, AbstractTerm]]
    calculate_jacobian: ClassVar[CalculateJacobian] = CalculateJacobian.second_stage

    def order(self, terms) -> int:
        return self.tableau.order

    @property
    def term_parts(self) -> int:
        """Two: the explicit term, then the implicit one."""
        return 2

    @property
    def evals_per_step(self) -> int:
        """A lower bound: each stage evaluates both terms once (each Newton iteration
        costs one more evaluation of the implicit term, the Jacobian `n` products)."""
        return self.tableau.stages

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        explicit, implicit = broadcast_parts(term.parts())
        flat_i = la.flatten(implicit, y0, args)
        flat_e = la.flatten(explicit, y0, args)
        jac = self.step_jacobian((implicit, y0, args), t0)
        options = NewtonOptions(self.rtol, self.atol, self.max_iters)
        slopes = _imex_stages(self.tableau, (flat_e.f, flat_i.f), flat_i.y, jac, t0, dt, options)
        table, y = self.tableau, flat_i.y
        h = dt.astype(y.dtype)
        y1 = _combine2(y, h, (table.b_explicit, table.b_implicit), slopes)
        error = _combine2(
            jnp.zeros_like(y), h, (table.b_err_explicit, table.b_err_implicit), slopes
        )
        y1 = jnp.where(slopes.converged, y1, jnp.nan)
        error = jnp.where(slopes.converged, error, jnp.inf)
        coeffs = None
        if dense:
            coeffs = la.unravel_rows(flat_i, self._dense(y, y1, slopes, h))
        failure = stage_failure(slopes.converged, slopes.unsolved)
        return StepOutput(flat_i.unravel(y1), flat_i.unravel(error), (), coeffs, failure)

    def _dense(self, y0, y1, slopes: _Slopes, h) -> jax.Array:
        """Rows `c_j` of `y(t0 + theta h) = y0 + sum_j c_j theta^(j+1)`."""
        ks = [e + i for e, i in zip(slopes.explicit, slopes.implicit, strict=True)]
        rows = self.tableau.dense_rows
        if rows is None:
            return hermite_coeffs(y0, y1, ks[0], ks[-1], h)
        zero = jnp.zeros_like(y0)
        return jnp.stack([la.combine(zero, [h * x for x in row], ks) for row in rows])


def _combine2(base, h, weights, slopes: _Slopes) -> jax.Array:
    """`base + h sum_j (w_E,j kE_j + w_I,j kI_j)` for `weights = (w_E, w_I)`."""
    out = la.combine(base, [h * w for w in weights[0]], slopes.explicit)
    return la.combine(out, [h * w for w in weights[1]], slopes.implicit)


def _imex_stages(tableau: tab.ImexTableau, fields, y, jac, t0, dt, options) -> _Slopes:
    """Every stage's slopes: explicit in the first field, implicit in the second.

    `jac` (the step's Jacobian, gradients stopped) steers the Newton iterations: its
    Newton matrix is built once per distinct diagonal entry, and one refreshed by a
    failing stage is kept for the later stages with the same entry.
    """
    f_explicit, f_implicit = fields
    h = dt.astype(y.dtype)
    ke, ki = [f_explicit(t0, y)], [f_implicit(t0, y)]
    converged, eta = jnp.asarray(True), jnp.ones((), y.dtype)
    unsolved = jnp.asarray(False)
    matrix, matrix_gamma = None, None
    for i in range(1, tableau.stages):
        row, gamma, t = tableau.implicit[i], tableau.diagonal[i], t0 + tableau.c[i] * dt
        base = la.combine(y, [h * a for a in tableau.explicit[i]], ke)
        base = la.combine(base, [h * a for a in row[:-1]], ki)
        if gamma == 0:
            z = base
            ki.append(f_implicit(t, z))
        else:
            hg = h * gamma
            if matrix is None or gamma != matrix_gamma:
                matrix, matrix_gamma = jac.matrix(hg), gamma
            stage = Stage(t, base, hg)
            guess = ki[tableau.predictor[i]]
            result = solve_stage(f_implicit, stage, guess, matrix, eta, options)
            converged = converged & result.converged
            unsolved = unsolved | result.unsolved
            eta = jnp.maximum(result.eta, jnp.finfo(y.dtype).eps) ** 0.8
            matrix = result.matrix
            z = stage.base + stage.hg * result.k
            ki.append(result.k)
        ke.append(f_explicit(t, z))
    return _Slopes(ke, ki, converged, unsolved)


@final
class KenCarp3(AbstractIMEX):
    """Kennedy & Carpenter's ARK3(2)4L[2]SA: an IMEX pair of order 3 (embedded 2), 4
    stages; its implicit part is an L-stable, stiffly accurate ESDIRK. Second-order
    dense output (the method's own). For loose tolerances (`rtol >= 1e-4`).

    Call with `terms=MultiTerm(explicit_term, implicit_term)`.

    References:
        C. A. Kennedy & M. H. Carpenter (2003), "Additive Runge–Kutta schemes for
        convection–diffusion–reaction equations", Appl. Numer. Math. 44, 139–181.
    """

    tableau = tab.KENCARP3


@final
class KenCarp4(AbstractIMEX):
    """Kennedy & Carpenter's ARK4(3)6L[2]SA: an IMEX pair of order 4 (embedded 3), 6
    stages; its implicit part is an L-stable, stiffly accurate ESDIRK. Third-order dense
    output (the method's own). The usual choice for stiff reaction–diffusion problems.

    Call with `terms=MultiTerm(explicit_term, implicit_term)`.

    References:
        C. A. Kennedy & M. H. Carpenter (2003), "Additive Runge–Kutta schemes for
        convection–diffusion–reaction equations", Appl. Numer. Math. 44, 139–181.
    """

    tableau = tab.KENCARP4


@final
class KenCarp5(AbstractIMEX):
    """Kennedy & Carpenter's ARK5(4)8L[2]SA: an IMEX pair of order 5 (embedded 4), 8
    stages; its implicit part is an L-stable, stiffly accurate ESDIRK. Third-order dense
    output (the method's own). For tight tolerances.

    Call with `terms=MultiTerm(explicit_term, implicit_term)`.

    References:
        C. A. Kennedy & M. H. Carpenter (2003), "Additive Runge–Kutta schemes for
        convection–diffusion–reaction equations", Appl. Numer. Math. 44, 139–181.
    """

    tableau = tab.KENCARP5


@final
class Sil3(AbstractIMEX):
    """Whitaker & Kar's IMEX method, as diffrax's `Sil3`: 4 stages, order 2 as a pair
    (its explicit part, too, is of order 2 only), an order-2 embedded pair for the error
    estimate; the implicit part is a DIRK with diagonal `(0, 1/6, 1/3, 1/4)` (three
    factorisations per step). Cubic Hermite dense output.

    Call with `terms=MultiTerm(explicit_term, implicit_term)`.

    References:
        J. S. Whitaker & S. K. Kar (2013), "Implicit–explicit Runge–Kutta methods for
        fast–slow wave problems", Mon. Weather Rev. 141(10), 3426–3434.
    """

    tableau = tab.SIL3
