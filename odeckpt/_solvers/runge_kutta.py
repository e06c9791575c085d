"""Explicit Runge–Kutta solvers: a tableau (data) plus one generic step.

A method is a `ButcherTableau` and a three-line final subclass of
`AbstractRungeKutta` (see `explicit/`); `rk_step` is the only step code.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import Args, Y
from odeckpt._terms import AbstractTerm

from .base import AbstractSolver, StepOutput
from .dense import hermite_coeffs
from .tableau import ButcherTableau


def combine_stages(y0: Y, dt, weights, ks) -> Y:
    """`y0 + dt * sum_j weights[j] ks[j]`, per leaf in the leaf's dtype.

    Zero weights (Python floats, known at trace time) are skipped, so no work is
    traced for them; with no nonzero weight `y0` itself is returned. `ks` are PyTrees
    like `y0`; `dt` is a scalar array.
    """
    terms = [(w, k) for w, k in zip(weights, ks, strict=False) if w != 0]
    if not terms:
        return y0

    def leaf(y, *kl):
        acc = sum(w * k for (w, _), k in zip(terms, kl, strict=True))
        return y + dt.astype(y.dtype) * acc

    return jax.tree.map(leaf, y0, *[k for _, k in terms])


def weighted_stages(dt, weights, ks, like: Y) -> Y:
    """`dt * sum_j weights[j] ks[j]` (zero weights skipped), as a PyTree like `like`.

    Computed as `combine_stages` from zeros, so it rounds exactly as that does.
    """
    zero = jax.tree.map(jnp.zeros_like, like)
    return combine_stages(zero, dt, weights, ks)


def rk_step(tableau: ButcherTableau, term: AbstractTerm, t0, dt, y0, k0, args, dense=True):
    """One explicit Runge–Kutta step with FSAL reuse of `k0 = f(t0, y0)`.

    `dense=False` skips the dense-output coefficients (`coeffs=None`)."""
    ks = [k0]
    y_stage = y0
    for i in range(1, tableau.stages):
        y_stage = combine_stages(y0, dt, tableau.a[i], ks)
        ks.append(term.vf(t0 + tableau.c[i] * dt, y_stage, args))
    t1 = t0 + dt
    if tableau.fsal:
        y1, k1 = y_stage, ks[-1]
    else:
        y1 = combine_stages(y0, dt, tableau.b, ks)
        k1 = term.vf(t1, y1, args)
    y_error = None if tableau.b_err is None else weighted_stages(dt, tableau.b_err, ks, y0)
    if not dense:
        coeffs = None
    elif tableau.dense is None:
        coeffs = hermite_coeffs(y0, y1, k0, k1, dt)
    else:
        degree = len(tableau.dense[0])
        rows = [[poly[j] for poly in tableau.dense] for j in range(degree)]
        parts = [weighted_stages(dt, row, ks, y0) for row in rows]
        coeffs = jax.tree.map(lambda *xs: jnp.stack(xs), *parts)
    return StepOutput(y1=y1, y_error=y_error, state=k1, coeffs=coeffs)


class AbstractRungeKutta(AbstractSolver):
    """An explicit Runge–Kutta method defined by its `tableau`.

    Every step carries `k = f(t, y)` forward: for FSAL methods it is the last stage,
    otherwise it is evaluated at the end of the step. Dense output uses the method's
    own interpolant where the tableau has one, cubic Hermite otherwise.

    A new method is a final subclass that sets the class attribute `tableau` (see
    `explicit/bosh3.py`).
    """

    tableau: eqx.AbstractClassVar[ButcherTableau]

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def error_order(self) -> int | None:
        """The method's order where the tableau has an error estimate (the order of
        that estimate, `tableau.error_estimate_order`, for every tableau here)."""
        return None if self.tableau.b_err is None else self.tableau.order

    @property
    def evals_per_step(self) -> int:
        return self.tableau.stages - 1 if self.tableau.fsal else self.tableau.stages

    def init(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """The first stage `f(t0, y0)`."""
        return term.vf(t0, y0, args)

    def step(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        return rk_step(self.tableau, term, t0, dt, y0, solver_state, args, dense)
