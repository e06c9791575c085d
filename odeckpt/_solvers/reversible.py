"""`Reversible`: any explicit Runge–Kutta method made algebraically reversible, with
its inverse step.

References:
    McCallum & Foster (2024), "Efficient, accurate and stable gradients for neural
    ODEs", arXiv:2410.11648 (the reversible method and its coupling parameter).
"""

from typing import final

import jax
import jax.numpy as jnp

from .base import (
    AbstractAdaptiveSolver,
    AbstractReversibleSolver,
    AbstractWrappedSolver,
    StepOutput,
)
from .runge_kutta import AbstractERK


def _base_step(solver: AbstractERK, term, t0, dt, y0, args, dense):
    """One step of the base method from `(t0, y0)`, its first stage evaluated afresh
    (the two solutions never share a first stage, so nothing is carried)."""
    k0 = solver.init(term, t0, y0, args)
    return solver.step(term, t0, dt, y0, k0, args, dense=dense)


def _coupled(coupling, a, b, c):
    """`coupling (a - b) + c`, per leaf in the leaf's dtype."""
    return jax.tree.map(lambda x, y, z: coupling * (x - y) + z, a, b, c)


def _plus_minus(a, b, c):
    """`a + b - c`, per leaf."""
    return jax.tree.map(lambda x, y, z: x + y - z, a, b, c)


def _uncoupled(coupling, y1, stepped, z0):
    """`(y1 - stepped) / coupling + z0`: the inverse of `_coupled`, per leaf."""
    return jax.tree.map(lambda a, b, z: (a - b) / coupling + z, y1, stepped, z0)


def _shifted_dense(coeffs, y0, y1):
    """The base step's polynomial from `z0`, moved to run from `y0` to `y1`: its
    increments plus the straight line that closes the gap at the end (`coeffs[0]`, the
    linear term, takes `y1 - y0 - sum(coeffs)`, which is `(1 - coupling) (z0 - y0)`)."""

    def leaf(c, a, b):
        return c.at[0].add(b - a - c.sum(axis=0))

    return jax.tree.map(leaf, coeffs, y0, y1)


def _error(base_error, y0, z0, y1, z1):
    """`|base_error| + |(y1 - z1) - (y0 - z0)|`: the base method's estimate, plus the
    change of the gap between the two solutions over the step, where the coupled pair's
    parasitic mode shows (see `Reversible`)."""

    def leaf(e, a0, b0, a1, b1):
        return jnp.abs(e) + jnp.abs((a1 - b1) - (a0 - b0))

    return jax.tree.map(leaf, base_error, y0, z0, y1, z1)


@final
class Reversible(AbstractAdaptiveSolver, AbstractReversibleSolver):
    """An algebraically reversible method built from any explicit Runge–Kutta method
    (`AbstractERK`: `Tsit5`, `Dopri5`, `Bosh3`, `Heun`, ...), as McCallum & Foster's
    reversible solvers (diffrax's open pull request calls it `Reversible(solver,
    l=...)`; the parameter is `coupling` here).

    Besides `y` it carries a second solution `z` (`z0 = y0`). With `Psi_h(t, x)` the
    base method's step from `(t, x)` of size `h` (the new value), a step is

        y1 = coupling (y0 - z0) + Psi_h(t0, z0),
        z1 = y1 + z0 - Psi_{-h}(t1, y1),

    and its inverse (`reverse_step`), from `(y1, z1)`:

        z0 = z1 - y1 + Psi_{-h}(t1, y1),
        y0 = (y1 - Psi_h(t0, z0)) / coupling + z0.

    It converges with the base method's order. Each step costs two base steps, each
    with its first stage evaluated afresh (`2 x stages` evaluations; no FSAL reuse:
    the two solutions never share a stage). Dense output is the base step's polynomial
    from `z0`, moved to run from `y0` to `y1` (exact at both ends, the base method's
    interpolant's order in between, plus the `(1 - coupling) (z0 - y0)` gap closed
    linearly).

    Stability: the coupled pair has a second, parasitic mode. On `y' = lambda y`, with
    exact base steps, the step's eigenvalues are `e^(h lambda)` and
    `coupling e^(-h lambda)`: on a decaying mode the second exceeds 1 once
    `h |lambda| > -log(coupling)`, and `y - z` grows from the local errors. The error
    estimate is therefore the base method's for the step from `y1` (the reference's)
    plus the change of `y - z` over the step, so that an adaptive controller keeps the
    parasitic mode at the tolerance (on a strongly damped problem with steps too small
    to finish: the solve then stops at `max_steps`). Smaller couplings damp `y - z` but
    amplify round-off in the inverse step by `1 / coupling` per step. The default 0.999
    is the reference's; the measured trade-off is in `docs/adjoints.md`. The method is
    for neural ODEs and oscillatory or conservative problems.

    It is a solver in its own right: `CheckpointAdjoint` (checkpoints store `(y, z)`:
    `state_rebuildable` is false) and `ForwardMode` differentiate it like any other;
    `ReversibleAdjoint()` reconstructs its states backwards and gives the same
    gradient with O(1) states in memory. After a jump of the vector field it restarts
    (`z = y`).

    Args:
        solver: the base method, an explicit Runge–Kutta method with an error estimate
            (`AbstractERK`).
        coupling: the coupling parameter, in `(0, 1]` (`l` / lambda in the paper).

    References:
        McCallum & Foster (2024), "Efficient, accurate and stable gradients for
        neural ODEs", arXiv:2410.11648.
    """

    solver: AbstractERK
    coupling: float = 0.999

    def __check_init__(self):
        wrapped = isinstance(self.solver, AbstractWrappedSolver)
        if not isinstance(self.solver, AbstractERK) or wrapped:
            raise ValueError(
                "`Reversible(solver=...)` wraps an explicit Runge–Kutta method with an "
                f"error estimate (an `AbstractERK`, e.g. `Tsit5()`); got {self.solver!r}."
            )
        c = self.coupling
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 < c <= 1:
            raise ValueError(
                f"`Reversible(coupling=...)` must be a number in (0, 1]; got {c!r}. "
                "The default 0.999 suits most problems."
            )

    def order(self, terms) -> int | None:
        return self.solver.order(terms)

    def error_order(self, terms) -> int | None:
        return self.solver.error_order(terms)

    @property
    def evals_per_step(self) -> int:
        return 2 * self.solver.tableau.stages

    @property
    def state_rebuildable(self) -> bool:
        return False

    def init(self, term, t0, y0, args):
        """`z0 = y0`."""
        del term, t0, args
        return y0

    def step(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        z0 = solver_state
        from_z = _base_step(self.solver, term, t0, dt, z0, args, dense)
        y1 = _coupled(self.coupling, y0, z0, from_z.y1)
        from_y = _base_step(self.solver, term, t0 + dt, -dt, y1, args, False)
        z1 = _plus_minus(y1, z0, from_y.y1)
        coeffs = None if from_z.coeffs is None else _shifted_dense(from_z.coeffs, y0, y1)
        return StepOutput(y1, _error(from_y.y_error, y0, z0, y1, z1), z1, coeffs)

    def reverse_step(self, term, t0, dt, y1, solver_state, args):
        """`(y0, z0)` from `(y1, z1)`: undoes `step(term, t0, dt, ...)` up to round-off."""
        z1 = solver_state
        from_y = _base_step(self.solver, term, t0 + dt, -dt, y1, args, False)
        z0 = _plus_minus(z1, from_y.y1, y1)
        from_z = _base_step(self.solver, term, t0, dt, z0, args, False)
        return _uncoupled(self.coupling, y1, from_z.y1, z0), z0
