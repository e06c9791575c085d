"""`ImplicitEuler`: the backward Euler method, with diffrax's error estimate.

One step solves `k1 = f(t1, y0 + h k1)` and returns `y1 = y0 + h k1`: order 1, A- and
L-stable (its stability function `1 / (1 - z)` vanishes as `z -> -inf`), so it damps
stiff components however large the step. The stage equation is solved by the
simplified Newton iteration of the ESDIRKs (`newton.py`): the Jacobian at `(t0, y0)`
is formed and factorised afresh each step, nothing is carried between steps, so a step
replayed from a checkpoint repeats the forward one bit for bit; derivatives go through
the implicit function theorem at the converged stage.

**Error estimate** (as diffrax's): the difference between implicit Euler and the
trapezoidal rule `y0 + h (k0 + k1) / 2`, with `k0 = f(t0, y0)`, i.e. `h (k1 - k0) / 2`.
The trapezoidal rule is of order 2, so the estimate is of the local error of the
order-1 method, `O(h^2)`: `error_order` is 2 and `PIDController` drives the step size.
On stiff components `k0` is large where the solution moves fast, so the estimate is
conservative there, as in diffrax.

**Dense output**: linear interpolation between `y0` and `y1` (as diffrax's
`LocalLinearInterpolation`). It is of the method's order, and stays between the two
end values, so it never overshoots on a stiff decay; cubic Hermite with the slope
`k0` would (it grows like `theta h lambda` there).

**Failure**: a stage that does not converge (after one Jacobian refresh) gives
`y_error = inf` and a NaN `y1`: an adaptive controller rejects the step and shrinks it;
with constant steps the solve ends with `RESULTS.implicit_solve_failed`.

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.3
    (stability of the implicit Euler method), IV.8 (simplified Newton iterations).
"""

from typing import final

import jax.numpy as jnp

from odeckpt._core import RESULTS
from odeckpt._solvers.base import AbstractAdaptiveSolver, StepOutput
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.root_finder.newton import Stage, solve_stage
from odeckpt._solvers.root_finder.newton_solver import AbstractNewtonSolver, step_factorisation


@final
class ImplicitEuler(AbstractNewtonSolver, AbstractAdaptiveSolver):
    """The implicit (backward) Euler method: order 1, A- and L-stable, one implicit
    stage, with diffrax's embedded error estimate (against the trapezoidal rule, so
    `error_order` is 2).

    For very stiff problems at loose tolerances, or as the robust baseline; for
    accuracy beyond `rtol = 1e-3` prefer `Kvaerno3`/`Kvaerno4`/`Kvaerno5` or `Rodas5P`.

    Constructed as the ESDIRKs: `ImplicitEuler(rtol=1e-10, atol=1e-12, max_iters=10)`
    (the effective Newton tolerances) or diffrax's
    `ImplicitEuler(root_finder=VeryChord(rtol=1e-8, atol=1e-10), root_find_max_steps=10)`;
    not both. The defaults are the ESDIRKs' (see `AbstractNewtonSolver`). Unlike
    diffrax's, whose default root finder takes the step-size controller's tolerances,
    the Newton tolerances are the solver's own.

    Dense output: linear interpolation between the ends of each step (as diffrax).

    Raises:
        ValueError: for non-positive tolerances or iteration counts, for both
            spellings at once, or a `root_finder` that is not a `VeryChord`.

    References:
        E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.3.
    """

    def order(self, terms) -> int:
        return 1

    def error_order(self, terms) -> int:
        """2: the estimate is the local error of the order-1 method (see the module
        docstring), as diffrax's."""
        return 2

    @property
    def evals_per_step(self) -> int:
        """A lower bound: `f(t0, y0)` and one evaluation for the implicit stage (each
        Newton iteration costs one more, the Jacobian `n` forward-mode products)."""
        return 2

    def init_state(self, term, t0, y0, args):
        """No state is carried between steps (see the module docstring): `()`."""
        return ()

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        flat = la.flatten(term, y0, args)
        h = dt.astype(flat.y.dtype)
        k0 = flat.f(t0, flat.y)
        lu = step_factorisation((term, y0, args), t0, h)
        eta0 = jnp.ones((), flat.y.dtype)
        stage = solve_stage(flat.f, Stage(t0 + dt, flat.y, h), k0, lu, eta0, self.newton_options)
        y1 = jnp.where(stage.converged, flat.y + h * stage.k, jnp.nan)
        error = jnp.where(stage.converged, h * (stage.k - k0) / 2, jnp.inf)
        coeffs = None
        if dense:
            coeffs = la.unravel_rows(flat, (y1 - flat.y)[None])
        failure = jnp.where(stage.converged, RESULTS.successful, RESULTS.implicit_solve_failed)
        return StepOutput(flat.unravel(y1), flat.unravel(error), (), coeffs, failure)
