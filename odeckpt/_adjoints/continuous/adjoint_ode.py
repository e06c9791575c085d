"""The adjoint ODE of a solve, and one explicit Runge–Kutta step of it.

`dy/ds = -F`, `da/ds = (dF/dy)^T a`, `dg/ds = (dF/dtheta)^T a` in backward time, `g` a
quadrature; see `docs/adjoints.md`, "The adjoint ODE".
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import Y
from odeckpt._solution import DenseInterpolation
from odeckpt._solvers import ButcherTableau, combine_stages, weighted_stages


class Flow(eqx.Module):
    """The integrated part of the backward state: `y` (backsolve only) and `a`."""

    y: Y | None
    a: Y


class Slopes(eqx.Module):
    """The adjoint right-hand side at one point: d(flow)/ds and dg/ds."""

    flow: Flow
    g: object


class AdjointField(eqx.Module):
    """`(s, flow) -> Slopes`: the adjoint right-hand side in backward time.

    Attributes:
        theta: the differentiated leaves of `(term, args)` (`None` elsewhere).
        static: the rest of `(term, args)`.
        dense: the forward dense output, where `y` is read from it rather than
            integrated (`InterpolatingAdjoint`); `None` for `BacksolveAdjoint`.
    """

    theta: object
    static: object
    dense: DenseInterpolation | None

    def vector_field(self, tau, y, theta, part: int | None = None) -> Y:
        """`f(tau, y)`, or that of the term's part `part` (`AbstractTerm.parts`)."""
        term, args = eqx.combine(theta, self.static)  # pyright: ignore[reportGeneralTypeIssues]
        if part is not None:
            term = term.parts()[part].as_ode()
        return term.vf(tau, y, args)

    def y_at(self, tau, flow: Flow) -> Y:
        """The forward `y` at `tau`: integrated (`flow.y`) or read from the dense output."""
        return flow.y if self.dense is None else self.dense.evaluate(tau)

    def flow_slope(self, s, flow: Flow, part: int | None = None) -> Flow:
        """d(flow)/ds alone (of the term's part `part`): the adjoint ODE an implicit
        solver integrates, whose Jacobian is `(df/dy)^T` (and `-df/dy` on `y`)."""
        tau = -s
        fy, vjp_fn = jax.vjp(
            lambda y: self.vector_field(tau, y, self.theta, part), self.y_at(tau, flow)
        )
        (da,) = vjp_fn(flow.a)
        return Flow(None if flow.y is None else jax.tree.map(jnp.negative, fy), da)

    def __call__(self, s, flow: Flow) -> Slopes:
        tau = -s
        y = self.y_at(tau, flow)
        fy, vjp_fn = jax.vjp(lambda y, th: self.vector_field(tau, y, th), y, self.theta)
        da, dg = vjp_fn(flow.a)
        dy = None if flow.y is None else jax.tree.map(jnp.negative, fy)
        return Slopes(Flow(dy, da), dg)

    def pullback(self, tau, y, cotangent) -> tuple[Y, object]:
        """`(dF/dy)^T c, (dF/dtheta)^T c` at `(tau, y)`: one VJP of the vector field."""
        _, vjp_fn = jax.vjp(lambda y, th: self.vector_field(tau, y, th), y, self.theta)
        return vjp_fn(cotangent)


class AdjointStep(eqx.Module):
    """One step of the adjoint ODE.

    Attributes:
        flow: the flow at `s + dt`.
        g_increment: what the step adds to `g`.
        slopes: the right-hand side at `(s + dt, flow)` for FSAL methods (the next
            step's first stage), `None` otherwise.
        flow_error, g_error: embedded error estimates (`None` unless asked for).
        probe: the differences of the last two stages and of their slopes, from which
            the sweep estimates the step's stiffness (`None` for one-stage methods and
            implicit ones).
        failure: an implicit step's `RESULTS` code (its stage iterations or linear
            solves failed); `None` for an explicit step, which cannot fail.
    """

    flow: Flow
    g_increment: object
    slopes: Slopes | None
    flow_error: Flow | None
    g_error: object
    probe: tuple[Flow, Flow] | None
    failure: jax.Array | None = None


def _accumulate(acc, weight: float, g):
    if weight == 0:
        return acc
    term = jax.tree.map(lambda x: weight * x, g)
    return term if acc is None else jax.tree.map(jnp.add, acc, term)


def _scale_by(dt, tree):
    return jax.tree.map(lambda x: dt.astype(x.dtype) * x, tree)


def adjoint_rk_step(
    tableau: ButcherTableau,
    field: AdjointField,
    s,
    dt,
    flow: Flow,
    k0: Slopes,
    error: str | None = None,
) -> AdjointStep:
    """One explicit RK step of the adjoint ODE from `(s, flow)`; `k0 = field(s, flow)`.

    `error`: `None` (no estimate), `"flow"` (the flow's only: a seminorm that leaves
    `g` out of error control) or `"all"`.
    """
    b_err = tableau.b_err if error == "all" else None
    ks, stages, slope = [k0.flow], [flow], k0
    g_sum = _accumulate(None, tableau.b[0], k0.g)
    g_err = None if b_err is None else _accumulate(None, b_err[0], k0.g)
    for i in range(1, tableau.stages):
        stages.append(combine_stages(flow, dt, tableau.a[i], ks))
        slope = field(s + tableau.c[i] * dt, stages[-1])
        ks.append(slope.flow)
        g_sum = _accumulate(g_sum, tableau.b[i], slope.g)
        if b_err is not None:
            g_err = _accumulate(g_err, b_err[i], slope.g)
    if tableau.fsal:
        flow1, k1 = stages[-1], slope
    else:
        flow1, k1 = combine_stages(flow, dt, tableau.b, ks), None
    flow_err = None if error is None else weighted_stages(dt, tableau.b_err, ks, flow)
    g_err = None if g_err is None else _scale_by(dt, g_err)
    probe = None
    if tableau.stages > 1:
        sub = lambda a, b: jax.tree.map(jnp.subtract, a, b)
        probe = (sub(stages[-1], stages[-2]), sub(ks[-1], ks[-2]))
    return AdjointStep(flow1, _scale_by(dt, g_sum), k1, flow_err, g_err, probe)


@functools.cache
def stability_limit(tableau: ButcherTableau) -> float:
    """The largest x with |R(-t)| <= 1 on [0, x], R the method's stability function."""
    s = tableau.stages
    a = np.zeros((s, s))
    for i, row in enumerate(tableau.a):
        a[i, : len(row)] = row

    def stable(x):
        r = 1 - x * np.asarray(tableau.b) @ np.linalg.solve(np.eye(s) + x * a, np.ones(s))
        return abs(r) <= 1 + 1e-12

    xs = np.arange(1, 2001) * 0.005  # up to 10, in steps of 0.005
    unstable = [x for x in xs if not stable(x)]
    return float(unstable[0] - 0.005) if unstable else 10.0


def anchor_distance(y_back: Y, y_forward: Y, rtol, atol) -> jax.Array:
    """max |y_back - y_forward| / (atol + rtol max |y_forward|), per leaf; inf if not finite.

    The scale is the forward leaf's size (a diverging `y_back` must not scale its own
    error down), and the whole leaf's: a component that decayed below `atol` and is
    reconstructed at `100 atol` perturbs the gradient no more than the others do.
    """

    def leaf(yb, yf):
        d = jnp.max(jnp.abs(yb - yf), initial=0.0) / (
            atol + rtol * jnp.max(jnp.abs(yf), initial=0.0)
        )
        return jnp.where(jnp.isfinite(d) & jnp.all(jnp.isfinite(yb)), d, jnp.inf)

    pairs = zip(jax.tree.leaves(y_back), jax.tree.leaves(y_forward), strict=True)
    distances = [leaf(yb, yf) for yb, yf in pairs]
    return jnp.max(jnp.stack(distances)) if distances else jnp.asarray(0.0)
