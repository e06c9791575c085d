"""`LeapfrogMidpoint`: the two-step leapfrog/midpoint method, a solver that carries its
previous point.
"""

from typing import final

import jax.numpy as jnp

from odeckpt._solvers.base import AbstractSolver, StepOutput, combine_stages
from odeckpt._solvers.dense import linear_coeffs


@final
class LeapfrogMidpoint(AbstractSolver):
    """The leapfrog/midpoint method, `y_{n+1} = y_{n-1} + (t_{n+1} - t_{n-1}) f(t_n, y_n)`:
    a linear two-step method of order 2 (on equal steps), one evaluation of the vector
    field per step, no error estimate (use a constant step size or `StepTo`).

    It carries the previous point `(t_{n-1}, y_{n-1})` as its solver state, so a
    checkpoint stores it (two copies of `y`; `state_rebuildable` is false). The first
    step, and the first after a jump of the vector field, is an explicit Euler step
    (the previous point is the current one), as in diffrax. Dense output is linear
    between the step's ends (diffrax's `LocalLinearInterpolation`): first order between
    steps, exact at them.

    Weakly stable only: on a decaying mode it grows a spurious oscillation of the
    second root (Shampine 2009). Meant for oscillatory, conservative problems.

    References:
        L. F. Shampine (2009), "Stability of the leapfrog/midpoint method", Applied
        Mathematics and Computation 208(1), 293-298.
    """

    def order(self, terms) -> int:
        return 2

    @property
    def evals_per_step(self) -> int:
        return 1

    @property
    def state_rebuildable(self) -> bool:
        return False

    def init_state(self, term, t0, y0, args):
        """The previous point: `(t0, y0)` itself, so the first step is Euler's."""
        del term, args
        return jnp.asarray(t0), y0

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        t_prev, y_prev = solver_state
        span = t0 + dt - t_prev
        y1 = combine_stages(y_prev, span, (1.0,), (term.vf(t0, y0, args),))
        coeffs = linear_coeffs(y0, y1) if dense else None
        return StepOutput(y1, None, (jnp.asarray(t0), y0), coeffs)
