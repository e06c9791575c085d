"""Explicit Runge–Kutta solvers: a tableau (data) plus one generic step."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core.custom_types import Args, Y
from odeckpt._terms import AbstractTerm

from . import tableaux as tab
from .dense import hermite_coeffs


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


def _combine(y0: Y, dt, weights, ks) -> Y:
    """`y0 + dt * sum_j weights[j] ks[j]`, skipping zero weights, per leaf dtype."""
    terms = [(w, k) for w, k in zip(weights, ks, strict=False) if w != 0]
    if not terms:
        return y0

    def leaf(y, *kl):
        acc = sum(w * k for (w, _), k in zip(terms, kl, strict=True))
        return y + dt.astype(y.dtype) * acc

    return jax.tree.map(leaf, y0, *[k for _, k in terms])


def _weighted(dt, weights, ks, like: Y) -> Y:
    zero = jax.tree.map(jnp.zeros_like, like)
    return _combine(zero, dt, weights, ks)


def rk_step(tableau: tab.ButcherTableau, term: AbstractTerm, t0, dt, y0, k0, args, dense=True):
    """One explicit Runge–Kutta step with FSAL reuse of `k0 = f(t0, y0)`.

    `dense=False` skips the dense-output coefficients (`coeffs=None`)."""
    ks = [k0]
    y_stage = y0
    for i in range(1, tableau.stages):
        y_stage = _combine(y0, dt, tableau.a[i], ks)
        ks.append(term.vf(t0 + tableau.c[i] * dt, y_stage, args))
    t1 = t0 + dt
    if tableau.fsal:
        y1, k1 = y_stage, ks[-1]
    else:
        y1 = _combine(y0, dt, tableau.b, ks)
        k1 = term.vf(t1, y1, args)
    y_error = None if tableau.b_err is None else _weighted(dt, tableau.b_err, ks, y0)
    if not dense:
        coeffs = None
    elif tableau.dense is None:
        coeffs = hermite_coeffs(y0, y1, k0, k1, dt)
    else:
        degree = len(tableau.dense[0])
        rows = [[poly[j] for poly in tableau.dense] for j in range(degree)]
        parts = [_weighted(dt, row, ks, y0) for row in rows]
        coeffs = jax.tree.map(lambda *xs: jnp.stack(xs), *parts)
    return StepOutput(y1=y1, y_error=y_error, state=k1, coeffs=coeffs)


class AbstractSolver(eqx.Module):
    """A one-step method. Concrete solvers are final."""

    @property
    def order(self) -> int:
        raise NotImplementedError

    @property
    def error_order(self) -> int | None:
        """Exponent denominator used by `PIDController` (`None`: not adaptive)."""
        raise NotImplementedError

    @property
    def evals_per_step(self) -> int:
        raise NotImplementedError

    def init(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """The solver state at `(t0, y0)`, carried between steps and recomputed from
        `(t, y)` when a checkpoint is restored. Runge–Kutta: the first stage f(t0, y0)."""
        return term.vf(t0, y0, args)

    def step(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        """Attempt one step of size `dt`; `dense=False` may skip the dense output."""
        raise NotImplementedError


class AbstractRungeKutta(AbstractSolver):
    """An explicit Runge–Kutta method defined by its `tableau`.

    Every step carries `k = f(t, y)` forward: for FSAL methods it is the last stage,
    otherwise it is evaluated at the end of the step. Dense output uses the method's
    own interpolant where the tableau has one, cubic Hermite otherwise.
    """

    tableau: ClassVar[tab.ButcherTableau]

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def error_order(self) -> int | None:
        return None if self.tableau.b_err is None else self.tableau.order

    @property
    def evals_per_step(self) -> int:
        return self.tableau.stages - 1 if self.tableau.fsal else self.tableau.stages

    def step(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        return rk_step(self.tableau, term, t0, dt, y0, solver_state, args, dense)


class Euler(AbstractRungeKutta):
    """Forward Euler, order 1, no error estimate (use a constant step size)."""

    tableau = tab.EULER


class Heun(AbstractRungeKutta):
    """Heun's method, order 2, embedded Euler error estimate."""

    tableau = tab.HEUN


class Midpoint(AbstractRungeKutta):
    """Explicit midpoint method, order 2, embedded Euler error estimate."""

    tableau = tab.MIDPOINT


class Ralston(AbstractRungeKutta):
    """Ralston's second-order method (minimal truncation error), embedded Euler."""

    tableau = tab.RALSTON


class Bosh3(AbstractRungeKutta):
    """Bogacki–Shampine 3(2), FSAL.

    References:
        Bogacki & Shampine (1989), "A 3(2) pair of Runge–Kutta formulas",
        Appl. Math. Lett. 2(4).
    """

    tableau = tab.BOSH3


class Tsit5(AbstractRungeKutta):
    """Tsitouras 5(4), FSAL, with its own 4th-order interpolant. The usual first choice.

    References:
        Tsitouras (2011), "Runge–Kutta pairs of order 5(4) satisfying only the first
        column simplifying assumption", Comput. Math. Appl. 62(2).
    """

    tableau = tab.TSIT5


class Dopri5(AbstractRungeKutta):
    """Dormand–Prince 5(4), FSAL, with Shampine's dense output.

    References:
        Dormand & Prince (1980), "A family of embedded Runge–Kutta formulae",
        J. Comput. Appl. Math. 6(1).
    """

    tableau = tab.DOPRI5


class Dopri8(AbstractRungeKutta):
    """Prince–Dormand 8(7), 13 stages; for tight tolerances.

    References:
        Prince & Dormand (1981), "High order embedded Runge–Kutta formulae",
        J. Comput. Appl. Math. 7(1).
    """

    tableau = tab.DOPRI8
