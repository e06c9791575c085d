"""`AbstractSolver`: what the integrator asks of a one-step method, and `StepOutput`."""

import abc

import equinox as eqx
import jax
from jaxtyping import PyTree

from odeckpt._core import Args, Y
from odeckpt._terms import AbstractTerm


class StepOutput(eqx.Module):
    """What one attempted step produces.

    Attributes:
        y1: the candidate solution at `t0 + dt`.
        y_error: the embedded error estimate (`None` without an embedded method).
        state: the solver state after the step (for Runge–Kutta methods the vector
            field at `(t0 + dt, y1)`, reused as the next step's first stage).
        coeffs: dense-output polynomial coefficients (see `DenseStep`).
        failure: for implicit methods, a `RESULTS` code saying why `y1` could not be
            computed (`0` when it was); `None` for methods that cannot fail.
    """

    y1: Y
    y_error: Y | None
    state: PyTree
    coeffs: Y
    failure: jax.Array | None = None


class AbstractSolver(eqx.Module):
    """A one-step method. Concrete solvers are final.

    A subclass provides `order`, `error_order`, `evals_per_step`, `init` and `step`;
    the integrator asks nothing else of it.
    """

    @property
    @abc.abstractmethod
    def order(self) -> int:
        """The order of the method (of `y1`)."""

    @property
    @abc.abstractmethod
    def error_order(self) -> int | None:
        """The order of the error estimate: the exponent denominator used by
        `PIDController` (`None`: no error estimate, so not adaptive)."""

    @property
    @abc.abstractmethod
    def evals_per_step(self) -> int:
        """Evaluations of the vector field per step (`Solution.stats["num_vf_evals"]`)."""

    @abc.abstractmethod
    def init(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """The solver state at `(t0, y0)`, carried between steps and recomputed from
        `(t, y)` when a checkpoint is restored (Runge–Kutta: the first stage
        `f(t0, y0)`; `()` for a method that carries nothing)."""

    @abc.abstractmethod
    def step(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        """Attempt one step of size `dt`; `dense=False` may skip the dense output."""
