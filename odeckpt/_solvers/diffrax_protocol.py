"""diffrax's stepping protocol over odeckpt's, both ways.

diffrax drives a solver with `init(terms, t0, t1, y0, args)` and `step(terms, t0, t1,
y0, args, solver_state, made_jump) -> (y1, y_error, dense_info, solver_state, result)`,
its dense output being `interpolation_cls(t0=t0, t1=t1, **dense_info)`. odeckpt's
integrator drives `init_state(term, t0, y0, args)` and `attempt(term, t0, dt, y0,
solver_state, args, dense) -> StepOutput`, its dense output a polynomial in the step
fraction (`DenseStep`). `AbstractSolver` gives each protocol in terms of the other, so
that odeckpt's solvers can be stepped by hand as diffrax's docs show
(`docs/usage/manual-stepping.md`), and a solver written against diffrax's protocol runs
in `diffeqsolve`.
"""

import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import RESULTS, promoted

# The step fractions at which a diffrax-protocol solver's dense output is sampled, and
# the inverse of the matrix `theta_i ** (j + 1)`: the quintic through the samples and
# `y0`, exact for diffrax's local interpolations (polynomials of degree <= 5).
_FRACTIONS = np.arange(1, 6) / 5
_INVERSE = np.linalg.inv(_FRACTIONS[:, None] ** np.arange(1, 6)[None, :])


def diffrax_step(solver, terms, t0, t1, y0, args, solver_state, made_jump):
    """One step of `solver` (odeckpt's protocol) as diffrax's `step` returns it:
    `(y1, y_error, dense_info, solver_state, result)`, `dense_info` holding `y0`, `y1`
    and the dense-output polynomial's `coeffs`. A `solver_state` of `None` (diffrax's
    for an expensive vector field) or `made_jump` rebuilds the state at `(t0, y0)`."""
    t0, t1 = promoted(jnp.asarray(t0), jnp.asarray(t1))
    if solver_state is None:
        solver_state = solver.init_state(terms, t0, y0, args)
    elif made_jump is not False:
        fresh = solver.init_state(terms, t0, y0, args)
        jump = jnp.asarray(made_jump)
        solver_state = jax.tree.map(lambda a, b: jnp.where(jump, a, b), fresh, solver_state)
    out = solver.attempt(terms, t0, t1 - t0, y0, solver_state, args)
    dense_info = dict(y0=y0, y1=out.y1, coeffs=out.coeffs)
    failure = jnp.asarray(RESULTS.successful) if out.failure is None else out.failure
    return out.y1, out.y_error, dense_info, out.state, failure


def from_diffrax_step(solver, term, t0, dt, y0, solver_state, args, dense: bool):
    """`attempt` for a solver written against diffrax's protocol: its `step` from `t0`
    to `t0 + dt`, as `(y1, y_error, state, coeffs, failure)`. The dense output is its
    `interpolation_cls(t0=, t1=, **dense_info)` sampled at five fractions of the step,
    as the quintic through them (`None` with `dense=False`)."""
    t1 = t0 + dt
    y1, y_error, dense_info, state, result = solver.step(
        term, t0, t1, y0, args, solver_state, False
    )
    coeffs = None
    if dense:
        path = solver.interpolation_cls(t0=t0, t1=t1, **dense_info)
        samples = [path.evaluate(t0 + dt * float(f)) for f in _FRACTIONS]

        def leaf(start, *values):
            rise = jnp.stack([v - start for v in values])
            inverse = jnp.asarray(_INVERSE, dtype=rise.dtype)
            return jnp.tensordot(inverse, rise, axes=1)

        coeffs = jax.tree.map(leaf, y0, *samples)
    return y1, y_error, state, coeffs, jnp.asarray(result)
