"""`ImplicitEuler`: the backward Euler method, with diffrax's error estimate.

See `docs/solver-internals.md`, "Implicit Euler".
"""

from typing import final

import jax.numpy as jnp

from odeckpt._solvers.base import AbstractAdaptiveSolver, StepOutput
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.root_finder.newton import Stage, solve_stage, stage_failure
from odeckpt._solvers.root_finder.newton_solver import AbstractNewtonSolver


@final
class ImplicitEuler(AbstractNewtonSolver, AbstractAdaptiveSolver):
    """The implicit (backward) Euler method: order 1, A- and L-stable, one implicit
    stage, with diffrax's embedded error estimate (against the trapezoidal rule, so
    `error_order` is 2).

    For very stiff problems at loose tolerances, or as the robust baseline; for accuracy
    beyond `rtol = 1e-3` prefer `Kvaerno3`/`Kvaerno4`/`Kvaerno5` or `Rodas5P`. Constructed
    as the ESDIRKs (`AbstractNewtonSolver`), with Newton tolerances of its own (diffrax's
    default takes the controller's). Dense output: linear between the ends of each step
    (as diffrax). See `docs/solver-internals.md`, "Implicit Euler".

    Raises:
        ValueError: for non-positive tolerances or iteration counts, for both
            spellings at once, or a `root_finder` that is not a `VeryChord`.

    References:
        E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.3.
    """

    def order(self, terms) -> int:
        return 1

    def error_order(self, terms) -> int:
        """2: the estimate is the local error of the order-1 method, as diffrax's."""
        return 2

    @property
    def evals_per_step(self) -> int:
        """A lower bound: `f(t0, y0)` and one evaluation for the implicit stage (each
        Newton iteration costs one more, the Jacobian `n` forward-mode products)."""
        return 2

    def init_state(self, term, t0, y0, args):
        """No state is carried between steps: `()`."""
        return ()

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        flat = la.flatten(term, y0, args)
        h = dt.astype(flat.y.dtype)
        k0 = flat.f(t0, flat.y)
        matrix = self.step_jacobian((term, y0, args), t0).matrix(h)
        eta0 = jnp.ones((), flat.y.dtype)
        stage = Stage(t0 + dt, flat.y, h)
        stage = solve_stage(flat.f, stage, k0, matrix, eta0, self.newton_options)
        y1 = jnp.where(stage.converged, flat.y + h * stage.k, jnp.nan)
        error = jnp.where(stage.converged, h * (stage.k - k0) / 2, jnp.inf)
        coeffs = None
        if dense:
            coeffs = la.unravel_rows(flat, (y1 - flat.y)[None])
        failure = stage_failure(stage.converged, stage.unsolved)
        return StepOutput(flat.unravel(y1), flat.unravel(error), (), coeffs, failure)
