"""ESDIRK solvers for stiff problems: `Kvaerno3`, `Kvaerno4`, `Kvaerno5`.

An explicit first stage, then one implicit stage at a time with the same diagonal,
solved by simplified Newton with one factorisation per step. See
`docs/solver-internals.md`, "ESDIRK methods"; the references are on each class.
"""

from typing import TYPE_CHECKING, ClassVar, final

import jax
import jax.numpy as jnp

from odeckpt._solvers.base import StepOutput
from odeckpt._solvers.dense import hermite_coeffs
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.root_finder.newton import Stage, solve_stage, stage_failure
from odeckpt._solvers.root_finder.newton_solver import AbstractNewtonRK
from odeckpt._solvers.runge_kutta.base import AbstractDIRK, CalculateJacobian

from . import esdirk_tableaux as tab

if TYPE_CHECKING:  # a class variable each subclass sets (as diffrax declares it)
    from typing import ClassVar as AbstractClassVar
else:
    from equinox import AbstractClassVar


class AbstractESDIRK(AbstractNewtonRK, AbstractDIRK):
    """A stiffly accurate ESDIRK method defined by its `tableau`.

    Constructed either the odeckpt way, `Kvaerno5(rtol=1e-10, atol=1e-12,
    max_iters=10)`, or diffrax's, `Kvaerno5(root_finder=VeryChord(rtol=1e-8,
    atol=1e-10), root_find_max_steps=10)`; not both. The settings (`root_finder`,
    `root_find_max_steps`, `scan_kind`, and the effective `rtol`, `atol`, `max_iters`)
    are `AbstractNewtonRK`'s.

    Dense output: the tableau's stage-based polynomial where it has one (`Kvaerno5`:
    fourth order, `Kvaerno4`: third order, so `SaveAt(ts)` between steps keeps close
    to the step accuracy);
    otherwise cubic Hermite (`Kvaerno3`, third order like the method). Both take the
    slopes `f(t0, y0)` and the last stage's (which is `f(t1, y1)` up to the Newton
    tolerance) at the ends.

    Raises:
        ValueError: for non-positive tolerances or iteration counts, for both
            spellings at once, or a `root_finder` that is not a `VeryChord`.
    """

    tableau: AbstractClassVar[tab.EsdirkTableau]
    calculate_jacobian: ClassVar[CalculateJacobian] = (  # pyright: ignore[reportIncompatibleVariableOverride]
        CalculateJacobian.second_stage
    )

    def order(self, terms) -> int:
        return self.tableau.order

    @property
    def evals_per_step(self) -> int:
        """A lower bound: one evaluation of `f` per stage (each Newton iteration costs
        one more, the Jacobian `n` forward-mode products)."""
        return self.tableau.stages

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        flat = la.flatten(term, y0, args)
        jacobian = self.step_jacobian((term, y0, args), t0)
        ks, converged, unsolved = _esdirk_stages(
            self.tableau, flat, jacobian, t0, dt, self.newton_options
        )
        h = dt.astype(flat.y.dtype)
        y1 = la.combine(flat.y, [h * b for b in self.tableau.b], ks)
        error = la.combine(jnp.zeros_like(flat.y), [h * e for e in self.tableau.b_err], ks)
        y1 = jnp.where(converged, y1, jnp.nan)
        error = jnp.where(converged, error, jnp.inf)
        coeffs = None
        if dense:
            coeffs = la.unravel_rows(flat, self._dense(flat.y, y1, ks, h))
        failure = stage_failure(converged, unsolved)
        return StepOutput(flat.unravel(y1), flat.unravel(error), (), coeffs, failure)

    def _dense(self, y0, y1, ks, h) -> jax.Array:
        """Rows `c_j` of `y(t0 + theta h) = y0 + sum_j c_j theta^(j+1)`."""
        rows = self.tableau.dense
        if rows is None:
            return hermite_coeffs(y0, y1, ks[0], ks[-1], h)
        zero = jnp.zeros_like(y0)
        return jnp.stack([la.combine(zero, [h * x for x in row], ks) for row in rows])


def _esdirk_stages(tableau: tab.EsdirkTableau, flat: la.Flat, jacobian, t0, dt, options):
    """The slopes `k_1..k_s`, whether every implicit stage converged, and whether one
    failed in its linear solve.

    The Newton matrix `I - h gamma J` comes from `jacobian` (the step's, at `t0`).
    """
    h = dt.astype(flat.y.dtype)
    hg = h * tableau.gamma
    k0 = flat.f(t0, flat.y)
    matrix = jacobian.matrix(hg)
    ks, converged, eta = [k0], jnp.asarray(True), jnp.ones((), flat.y.dtype)
    unsolved = jnp.asarray(False)
    for i in range(1, tableau.stages):
        base = la.combine(flat.y, [h * a for a in tableau.a[i]], ks)
        guess = la.combine(jnp.zeros_like(k0), tableau.predictor[i], ks)
        stage = Stage(t0 + tableau.c[i] * dt, base, hg)
        result = solve_stage(flat.f, stage, guess, matrix, eta, options)
        ks.append(result.k)
        converged = converged & result.converged
        unsolved = unsolved | result.unsolved
        eta = jnp.maximum(result.eta, jnp.finfo(flat.y.dtype).eps) ** 0.8
        matrix = result.matrix
    return ks, converged, unsolved


@final
class Kvaerno3(AbstractESDIRK):
    """Kværnø's ESDIRK 3(2): 4 stages, L-stable, stiffly accurate embedded pair.

    For stiff problems at loose tolerances (`rtol >= 1e-5`). Each step: one Jacobian,
    one LU, 3 implicit stages.

    References:
        A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an
        explicit first stage", BIT 44(3), 489–502.
    """

    tableau = tab.KVAERNO3


@final
class Kvaerno4(AbstractESDIRK):
    """Kværnø's ESDIRK 4(3): 5 stages, L-stable, stiffly accurate embedded pair.

    Between `Kvaerno3` and `Kvaerno5`: for stiff problems at moderate tolerances
    (`rtol` about `1e-4` to `1e-7`); the same method as diffrax's `Kvaerno4`. Each step:
    one Jacobian, one LU, 4 implicit stages. Dense output is a third-order stage-based
    polynomial that stays bounded on stiff components (diffrax's is cubic Hermite).
    Stage 2 evaluates `f` at `t0 + 1.15 h`, past the step's end.

    References:
        A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an
        explicit first stage", BIT 44(3), 489–502.
    """

    tableau = tab.KVAERNO4


@final
class Kvaerno5(AbstractESDIRK):
    """Kværnø's ESDIRK 5(4): 7 stages, L-stable, stiffly accurate embedded pair.

    For stiff problems at moderate-to-tight tolerances; the same method as diffrax's
    `Kvaerno5`. Stage 3 evaluates `f` at `t0 + 1.23 h`, past the step's end. For small
    dense systems `Rodas5P` is usually cheaper (no Newton iterations).

    References:
        A. Kværnø (2004), "Singly diagonally implicit Runge–Kutta methods with an
        explicit first stage", BIT 44(3), 489–502.
    """

    tableau = tab.KVAERNO5
