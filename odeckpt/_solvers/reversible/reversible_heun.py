"""`ReversibleHeun`: an algebraically reversible method of order 2, with its inverse
step.

References:
    Kidger, Foster, Li & Lyons (2021), "Efficient and accurate gradients for neural
    SDEs", NeurIPS (Section 3, the reversible Heun method).
"""

from typing import final

import jax

from odeckpt._solvers.base import (
    AbstractAdaptiveSolver,
    AbstractReversibleSolver,
    AbstractStratonovichSolver,
    StepOutput,
)
from odeckpt._solvers.dense import linear_coeffs


def _reflected(y, yhat, h, v):
    """`2 y - yhat + h v`, per leaf in the leaf's dtype."""
    return jax.tree.map(lambda a, b, c: 2 * a - b + h.astype(a.dtype) * c, y, yhat, v)


def _heun_update(y, half_h, v0, v1):
    """`y + (h / 2) (v0 + v1)`, per leaf in the leaf's dtype (`half_h` is `h / 2`)."""
    return jax.tree.map(lambda a, b, c: a + half_h.astype(a.dtype) * (b + c), y, v0, v1)


@final
class ReversibleHeun(AbstractAdaptiveSolver, AbstractStratonovichSolver, AbstractReversibleSolver):
    """The reversible Heun method: order 2 on ODEs, one evaluation of the vector field
    per step, an embedded first-order estimate (adaptive), and algebraically reversible.

    Besides `y` it carries `yhat`, a second solution, and `vf = f(t, yhat)`:

        yhat1 = 2 y0 - yhat0 + h vf0,   vf1 = f(t1, yhat1),
        y1 = y0 + (h / 2) (vf0 + vf1),  error estimate (h / 2) (vf1 - vf0).

    The step is its own inverse with `h -> -h` (`reverse_step`): from `(y1, yhat1, vf1)`
    it recomputes `(y0, yhat0, vf0)` up to round-off. `BacksolveAdjoint()` without
    `solver=` uses that to reconstruct the forward states backwards and differentiate
    the steps themselves: the gradient of the discretised solve (as `CheckpointAdjoint`'s)
    with no stored states. A checkpoint stores `(y, yhat, vf)` (`state_rebuildable` is
    false). Dense output is linear between the step's ends (diffrax's
    `LocalLinearInterpolation`). After a jump of the vector field the method restarts
    (`yhat = y`, `vf = f(t, y)`, as at `t0`); diffrax keeps `yhat` there and refreshes
    `vf` at `y`.

    References:
        Kidger, Foster, Li & Lyons (2021), "Efficient and accurate gradients for
        neural SDEs", NeurIPS.
    """

    def order(self, terms) -> int:
        return 2

    @property
    def evals_per_step(self) -> int:
        return 1

    @property
    def carries_first_stage(self) -> bool:
        return True

    @property
    def state_rebuildable(self) -> bool:
        return False

    def init_state(self, term, t0, y0, args):
        """`(yhat0, vf0) = (y0, f(t0, y0))`."""
        return y0, term.vf(t0, y0, args)

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        yhat0, vf0 = solver_state
        yhat1 = _reflected(y0, yhat0, dt, vf0)
        vf1 = term.vf(t0 + dt, yhat1, args)
        y1 = _heun_update(y0, 0.5 * dt, vf0, vf1)
        error = jax.tree.map(lambda a, b, y: (0.5 * dt).astype(y.dtype) * (b - a), vf0, vf1, y0)
        coeffs = linear_coeffs(y0, y1) if dense else None
        return StepOutput(y1, error, (yhat1, vf1), coeffs)

    def reverse_step(self, term, t0, dt, y1, solver_state, args):
        """`(y0, (yhat0, vf0))` from `(y1, (yhat1, vf1))`: the step with `-dt` from
        `t0 + dt`, which undoes `attempt(term, t0, dt, ...)` up to round-off."""
        yhat1, vf1 = solver_state
        yhat0 = _reflected(y1, yhat1, -dt, vf1)
        vf0 = term.vf(t0, yhat0, args)
        y0 = _heun_update(y1, -0.5 * dt, vf0, vf1)
        return y0, (yhat0, vf0)
