"""One step of the adjoint ODE by an implicit solver, for stiff problems.

The flow (`a`, and `y` for `BacksolveAdjoint`) is stepped by the solver's own `attempt`
on the adjoint ODE written as a term (`AdjointField.flow_slope`): its Jacobian is
`(df/dy)^T` (with `-df/dy` and the second-order block on `y`), taken by products with
the vector field's VJP, so the solver's linear algebra (dense LU, band storage on the
transposed pattern, matrix-free Krylov) serves it unchanged. The parameter gradient `g`
is a quadrature beside it: the integral of `(df/dtheta)^T a` over the step, by
Gauss–Legendre quadrature of the step's dense output, so the number of parameters never
enters a factorisation. See `docs/adjoints.md`, "Stiff problems".
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._solvers import AbstractSolver, DenseStep
from odeckpt._terms import AbstractTerm, MultiTerm, ODETerm

from .adjoint_ode import AdjointField, AdjointStep, Flow


class _FlowSlope(eqx.Module):
    """`(s, flow, field) -> d(flow)/ds` of one part of the term (`None`: all of it)."""

    part: int | None = eqx.field(static=True)

    def __call__(self, s, flow: Flow, field: AdjointField) -> Flow:
        return field.flow_slope(s, flow, self.part)


def adjoint_term(solver: AbstractSolver) -> AbstractTerm:
    """The adjoint ODE as the term `solver` steps (its `args` are the `AdjointField`):
    split into the forward term's parts for a solver that reads parts (the IMEX methods:
    the adjoint of the explicit part explicitly, of the implicit part implicitly)."""
    parts = solver.term_parts
    if parts is None:
        return ODETerm(_FlowSlope(None))
    return MultiTerm(*[ODETerm(_FlowSlope(j)) for j in range(parts)])


def quadrature_nodes(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on `[0, 1]` exact for polynomials of degree
    `order` (and at least 2 nodes, 1 for a first-order method)."""
    count = 1 if order <= 1 else max(2, math.ceil((order + 1) / 2))
    x, w = np.polynomial.legendre.leggauss(count)
    return (x + 1) / 2, w / 2


def implicit_adjoint_step(
    solver: AbstractSolver,
    field: AdjointField,
    s,
    dt,
    flow: Flow,
    error: str | None = None,
) -> AdjointStep:
    """One step of the adjoint ODE by the implicit `solver` from `(s, flow)`.

    `error` as for `adjoint_rk_step`: `"all"` also estimates `g`'s error, as the
    pullback of the flow's error estimate through `(df/dtheta)^T` over the step.
    """
    term = adjoint_term(solver)
    state = solver.init_state(term, s, flow, field)
    out = solver.attempt(term, s, dt, flow, state, field, dense=True)
    polynomial = DenseStep(s, s + dt, flow, out.coeffs)
    nodes, weights = quadrature_nodes(solver.order(term) or 1)

    def integrand(x):
        at = polynomial.evaluate(s + x * dt)
        tau = -(s + x * dt)
        return field.pullback(tau, field.y_at(tau, at), at.a)[1]

    values = jax.vmap(integrand)(jnp.asarray(nodes, dt.dtype))
    g_increment = jax.tree.map(lambda v: _weighted(dt, weights, v), values)
    g_error = None
    if error == "all":
        assert out.y_error is not None  # an adaptive solver's estimate
        end = -(s + dt)
        g_error = field.pullback(end, field.y_at(end, out.y1), out.y_error.a)[1]
        g_error = jax.tree.map(lambda v: dt.astype(v.dtype) * v, g_error)
    flow_error = None if error is None else out.y_error
    return AdjointStep(out.y1, g_increment, None, flow_error, g_error, None, out.failure)


def _weighted(dt, weights: np.ndarray, values: jax.Array) -> jax.Array:
    """`dt * sum_q weights[q] values[q]`, in the values' dtype."""
    w = jnp.asarray(weights, values.dtype).reshape((-1,) + (1,) * (values.ndim - 1))
    return dt.astype(values.dtype) * jnp.sum(w * values, axis=0)
