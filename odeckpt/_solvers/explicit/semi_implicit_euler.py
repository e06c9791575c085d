"""`SemiImplicitEuler`: the symplectic Euler method for partitioned systems.

See `docs/solver-internals.md`, "The symplectic Euler method".
"""

from typing import ClassVar, final

import jax
import jax.numpy as jnp

from odeckpt._solvers.base import AbstractSolver, StepOutput
from odeckpt._terms import AbstractTerm


@final
class SemiImplicitEuler(AbstractSolver):
    """Semi-implicit (symplectic) Euler for `y = (q, p)`: `q1 = q0 + h f(t0, p0)`, then
    `p1 = p0 + h g(t0, q1)`. Order 1, symplectic, explicit, one evaluation of each term
    per step; no error estimate (use constant steps, or `HalfSolver` around it).

    Takes a tuple of two terms, as diffrax's: `diffeqsolve((ODETerm(f), ODETerm(g)),
    SemiImplicitEuler(), t0, t1, dt0, (q0, p0))` with `dq/dt = f(t, p, args)` and
    `dp/dt = g(t, q, args)`; `q0`, `p0` may be any PyTrees (`f` returns one like `q`,
    `g` one like `p`).

    Dense output: linear interpolation between the ends of each step (as diffrax).

    References:
        E. Hairer, C. Lubich & G. Wanner, *Geometric Numerical Integration*, I.1.2, VI.3.
    """

    term_structure: ClassVar = (AbstractTerm, AbstractTerm)

    def order(self, terms) -> int:
        return 1

    @property
    def evals_per_step(self) -> int:
        """1: one evaluation of each of the two terms, the cost of one evaluation of the
        whole field (as `Euler`'s)."""
        return 1

    def init_state(self, term, t0, y0, args):
        """Nothing is carried between steps: `()`."""
        return ()

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        term_q, term_p = term.parts()
        q0, p0 = y0
        q1 = _euler(q0, term_q.vf_prod(t0, p0, args, dt))
        p1 = _euler(p0, term_p.vf_prod(t0, q1, args, dt))
        y1 = (q1, p1)
        coeffs = None
        if dense:  # linear: y(t0 + theta h) = y0 + theta (y1 - y0)
            coeffs = jax.tree.map(lambda a, b: jnp.expand_dims(b - a, 0), y0, y1)
        return StepOutput(y1, None, (), coeffs)


def _euler(y, increment):
    """`y + increment`, leaf by leaf (the increment in the leaf's dtype)."""
    return jax.tree.map(lambda a, da: a + da.astype(a.dtype), y, increment)
