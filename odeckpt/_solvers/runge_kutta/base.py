"""Runge–Kutta solvers: the abstract classes (diffrax's), and for the explicit
methods a tableau (data) plus one generic step.

An explicit method is a `ButcherTableau` and a three-line final subclass of
`AbstractERK` (see `explicit/`); `rk_step` is the only step code. `Euler`, which has no
error estimate, is an `AbstractExplicitSolver` but not an `AbstractRungeKutta`
(diffrax's Runge–Kutta methods are adaptive).
"""

import enum
from typing import TYPE_CHECKING, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import Args, Y

if TYPE_CHECKING:  # a class variable each subclass sets (as diffrax declares it)
    from typing import ClassVar as AbstractClassVar
else:
    from equinox import AbstractClassVar
from odeckpt._solvers.base import (
    AbstractAdaptiveSolver,
    AbstractImplicitSolver,
    AbstractSolver,
    StepOutput,
    combine_stages,
)
from odeckpt._solvers.dense import hermite_coeffs
from odeckpt._terms import AbstractTerm

from .multi_tableau import MultiButcherTableau, multi_init, multi_step
from .tableau import ButcherTableau


def weighted_stages(dt, weights, ks, like: Y) -> Y:
    """`dt * sum_j weights[j] ks[j]` (zero weights skipped), as a PyTree like `like`.

    Computed as `combine_stages` from zeros, so it rounds exactly as that does.
    """
    zero = jax.tree.map(jnp.zeros_like, like)
    return combine_stages(zero, dt, weights, ks)


def carries_first_stage(tableau: ButcherTableau) -> bool:
    """Whether an explicit method's steps carry `k = f(t, y)` to the next step: FSAL
    methods (their last stage is it), and those whose dense output is cubic Hermite
    (which needs the slope at the end of the step). Any other method evaluates its
    first stage in its step, so that a step needs `(t, y)` alone."""
    return tableau.fsal or tableau.dense is None


def rk_step(tableau: ButcherTableau, term: AbstractTerm, t0, dt, y0, k0, args, dense=True):
    """One explicit Runge–Kutta step with FSAL reuse of `k0 = f(t0, y0)`.

    `k0` is the carried first stage where `carries_first_stage(tableau)`, else `()`
    (evaluated here). `dense=False` skips the dense-output coefficients (`coeffs=None`)."""
    carries = carries_first_stage(tableau)
    ks = [k0 if carries else term.vf(t0, y0, args)]
    y_stage = y0
    for i in range(1, tableau.stages):
        y_stage = combine_stages(y0, dt, tableau.a[i], ks)
        ks.append(term.vf(t0 + tableau.c[i] * dt, y_stage, args))
    t1 = t0 + dt
    if tableau.fsal:
        y1, k1 = y_stage, ks[-1]
    else:
        y1 = combine_stages(y0, dt, tableau.b, ks)
        k1 = term.vf(t1, y1, args) if carries else ()
    y_error = None if tableau.b_err is None else weighted_stages(dt, tableau.b_err, ks, y0)
    if not dense:
        coeffs = None
    elif tableau.dense is None:
        coeffs = hermite_coeffs(y0, y1, ks[0], k1, dt)
    else:
        degree = len(tableau.dense[0])
        rows = [[poly[j] for poly in tableau.dense] for j in range(degree)]
        parts = [weighted_stages(dt, row, ks, y0) for row in rows]
        coeffs = jax.tree.map(lambda *xs: jnp.stack(xs), *parts)
    return StepOutput(y1=y1, y_error=y_error, state=k1, coeffs=coeffs)


class CalculateJacobian(enum.IntEnum):
    """When a Runge–Kutta method forms the Jacobian, as diffrax's enumeration says it
    (`calculate_jacobian` on its classes): `never` for explicit methods, `every_stage`
    (DIRK), `first_stage` (SDIRK), `second_stage` (ESDIRK). Informative in odeckpt: each
    solver's own docstring says when it forms its Jacobian."""

    never = 0
    every_stage = 1
    first_stage = 2
    second_stage = 3


class AbstractRungeKutta(AbstractAdaptiveSolver):
    """A Runge–Kutta method with an error estimate, defined by its `tableau`: the
    explicit ones (`AbstractERK`) and the diagonally implicit ones (`AbstractDIRK`).

    A direct subclass is a method the diffrax way, with a `MultiButcherTableau` (one
    explicit tableau per term of a `MultiTerm`; see `multi_tableau`) or a `ButcherTableau`
    (a `MultiButcherTableau` of one), `calculate_jacobian` and `order(terms)`:

    ```python
    class DoubleDopri5(odeckpt.AbstractRungeKutta):
        tableau = odeckpt.MultiButcherTableau(odeckpt.Dopri5.tableau, odeckpt.Dopri5.tableau)
        calculate_jacobian = odeckpt.CalculateJacobian.never

        def order(self, terms):
            return 5
    ```

    Attributes:
        scan_kind: accepted for compatibility with diffrax, where it chooses how the
            stages are looped over; odeckpt unrolls the stages, so it changes nothing.
    """

    scan_kind: str | None = None
    calculate_jacobian: AbstractClassVar[CalculateJacobian]

    @property
    def evals_per_step(self) -> int:
        stages = self.tableau.stages  # pyright: ignore[reportAttributeAccessIssue]
        return stages - 1 if self.tableau.fsal else stages  # pyright: ignore[reportAttributeAccessIssue]

    def init_state(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """Each term's slope at `(t0, y0)` (see `multi_tableau.multi_init`)."""
        return multi_init(self._multi(), term, t0, y0, args)

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        return multi_step(self._multi(), term, t0, dt, y0, solver_state, args, dense)

    def _multi(self) -> MultiButcherTableau:
        return MultiButcherTableau(*self.tableau.tableaus)  # pyright: ignore[reportAttributeAccessIssue]


class AbstractExplicitSolver(AbstractSolver):
    """An explicit method given by an explicit `ButcherTableau`: the one generic step.

    An FSAL method's step carries `k = f(t, y)` forward (its last stage); so does one
    with Hermite dense output, which evaluates it at the end of the step. Any other
    method evaluates its first stage in its step and carries nothing (`()`), so that
    restoring a checkpoint costs no evaluation (`carries_first_stage`); a step costs
    `evals_per_step` evaluations either way. Dense output uses the method's
    own interpolant where the tableau has one, cubic Hermite otherwise (whatever
    `interpolation_cls` a subclass names, see `AbstractERK`). The continuous adjoints
    solve their adjoint ODE with such a method.
    """

    tableau: eqx.AbstractClassVar[ButcherTableau]

    def order(self, terms: AbstractTerm) -> int | None:
        """The tableau's order (`ButcherTableau.order`)."""
        return self.tableau.order

    @property
    def evals_per_step(self) -> int:
        return self.tableau.stages - 1 if self.tableau.fsal else self.tableau.stages

    @property
    def carries_first_stage(self) -> bool:
        return carries_first_stage(self.tableau)

    def init_state(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """The first stage `f(t0, y0)` where the steps carry it, else `()`."""
        return self.func(term, t0, y0, args) if self.carries_first_stage else ()

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        return rk_step(self.tableau, term, t0, dt, y0, solver_state, args, dense)


class AbstractERK(AbstractExplicitSolver, AbstractRungeKutta):
    """An explicit Runge–Kutta method with an embedded error estimate.

    A method is a final subclass that sets the class attribute `tableau` (see
    `explicit/bosh3.py`), either in odeckpt's form or in diffrax's:

    ```python
    class BogackiShampine(odeckpt.AbstractERK):
        tableau = odeckpt.ButcherTableau(
            c=np.array([1 / 2, 3 / 4, 1.0]),
            b_sol=np.array([2 / 9, 1 / 3, 4 / 9, 0.0]),
            b_error=np.array([2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8]),
            a_lower=(np.array([1 / 2]), np.array([0.0, 3 / 4]), np.array([2 / 9, 1 / 3, 4 / 9])),
        )
        interpolation_cls = diffrax.ThirdOrderHermitePolynomialInterpolation  # any; unused

        def order(self, terms):
            return 3
    ```

    The order defaults to the one the tableau satisfies (`ButcherTableau.order`).
    `interpolation_cls` is accepted and not read: dense output is the tableau's own
    polynomial where it has one, otherwise cubic Hermite from the step's end values
    and slopes (third order, as diffrax's `ThirdOrderHermitePolynomialInterpolation`).
    """

    calculate_jacobian: ClassVar[CalculateJacobian] = CalculateJacobian.never


class AbstractDIRK(AbstractRungeKutta, AbstractImplicitSolver):
    """A diagonally implicit Runge–Kutta method: each stage an implicit equation."""

    calculate_jacobian: ClassVar[CalculateJacobian] = CalculateJacobian.every_stage


class AbstractSDIRK(AbstractDIRK):
    """A singly diagonally implicit method: the same diagonal coefficient in every
    stage. (No odeckpt solver is one; the class is diffrax's.)"""

    calculate_jacobian: ClassVar[CalculateJacobian] = CalculateJacobian.first_stage
