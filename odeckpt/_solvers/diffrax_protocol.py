"""diffrax's stepping protocol over odeckpt's, and back: the one place the two meet.

`AbstractSolver.init`/`step` (the first two functions) let odeckpt's solvers be
stepped by hand as diffrax's are; `AbstractDiffraxSolver.init_state`/`attempt` (the
last two) let a solver written against diffrax's protocol run in `diffeqsolve`. See
`docs/solver-internals.md`, "The stepping protocol".
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


def init_from_init_state(solver, terms, t0, t1, y0, args):
    """diffrax's `init` of an odeckpt solver: its `init_state` at `(t0, y0)` (the state
    does not depend on the first step's end `t1`)."""
    del t1
    return solver.init_state(terms, t0, y0, args)


def step_from_attempt(solver, terms, t0, t1, y0, args, solver_state, made_jump):
    """diffrax's `step` of an odeckpt solver, from its `attempt`.

    A `solver_state` of `None` (diffrax's for an expensive vector field) or `made_jump`
    rebuilds the state at `(t0, y0)` with `init_state` first.

    Args:
        solver: an odeckpt solver.
        terms, t0, t1, y0, args, solver_state, made_jump: as diffrax's `step`.

    Returns:
        `(y1, y_error, dense_info, solver_state, result)`, `dense_info` holding `y0`,
        `y1` and the dense-output polynomial's `coeffs`.
    """
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


def init_state_from_init(solver, term, t0, y0, args):
    """`init_state` of a solver written against diffrax's protocol: its
    `init(term, t0, t0, y0, args)` (the first step's end is not known here)."""
    return solver.init(term, t0, t0, y0, args)


def attempt_from_step(solver, term, t0, dt, y0, solver_state, args, dense: bool):
    """`attempt` of a solver written against diffrax's protocol, from its `step`.

    The dense output is its `interpolation_cls(t0=, t1=, **dense_info)` sampled at five
    fractions of the step, as the quintic through them.

    Args:
        solver: a solver written against diffrax's protocol.
        term, t0, dt, y0, solver_state, args: as `AbstractSolver.attempt`.
        dense: whether to build the dense output.

    Returns:
        `(y1, y_error, state, coeffs, failure)`, the fields of a `StepOutput` (`coeffs`
        `None` with `dense=False`).
    """
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
