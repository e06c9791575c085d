"""`ImplicitAdjoint`: the derivative of a steady state by the implicit function theorem."""

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
from jax import lax

from odeckpt._checkpointing import LoopOutput, forward_loop

from .base import AbstractAdjoint


class ImplicitAdjoint(AbstractAdjoint):
    """Differentiate a solve that ends at a steady state by the implicit function
    theorem, as diffrax's `ImplicitAdjoint`.

    For a solve run until `f(t, y, θ) ≈ 0` (usually `event=Event(steady_state_event())`
    and `t1=jnp.inf`), the final state `y*(θ)` satisfies `f(t, y*, θ) = 0`, so
    `dy*/dθ = -(∂f/∂y)^-1 ∂f/∂θ` at `y*`: no pass through the solver's steps at all.
    θ is every parameter the vector field reads (`args` and the arrays the term holds),
    not `y0`, which a steady state does not depend on (its derivative is zero).
    Both `jax.grad` and `jax.jvp` work (`lax.custom_root`).

    Cost: the forward solve (not differentiated) and one dense linear solve with the
    Jacobian `∂f/∂y` (`n` forward-mode products and an LU factorisation: fine up to a
    few thousand unknowns). The result is only meaningful at a steady state: with a
    final state where `f` is not zero the derivative is that of the root of `f` near
    it, not of the solve.

    Args:
        linear_solver: accepted for compatibility with diffrax (a lineax solver there);
            odeckpt always solves the system densely with LU.

    Raises:
        ValueError: with an output other than the final state (`SaveAt(t1=True)`, and
            `t0=True`, which is `y0`).
    """

    linear_solver: object = eqx.field(static=True, default=None)

    @property
    def forward_mode(self) -> bool:
        """JAX differentiates this solve in both modes itself: no mode is refused."""
        return True

    def loop(self, integrator, problem, state0, max_steps):
        if integrator.save_dense or any(s.num_ts or s.steps for s in integrator.saves):
            raise ValueError(
                "`ImplicitAdjoint()` differentiates the final (steady) state only: use "
                "`SaveAt(t1=True)`, or `CheckpointAdjoint()` to differentiate other outputs."
            )
        fixed = _stopped(problem)
        out = forward_loop(integrator.body(), fixed, _stopped(state0), max_steps)
        t = lax.stop_gradient(out.state.t)

        def field(y):
            return problem.term.vf(t, y, problem.args)

        steady = lax.custom_root(field, out.state.y, lambda f, y: y, _dense_solve)
        return LoopOutput(eqx.tree_at(lambda s: s.y, out.state, steady), out.buffers, out.num_steps)


def _stopped(tree):
    dynamic, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(lax.stop_gradient(dynamic), static)


def _dense_solve(linear, rhs):
    """`x` with `linear(x) = rhs` (`linear` a linear map of PyTrees like `rhs`)."""
    flat, unravel = jax.flatten_util.ravel_pytree(rhs)
    matrix = jax.jacfwd(lambda x: jax.flatten_util.ravel_pytree(linear(unravel(x)))[0])(flat)
    return unravel(jnp.linalg.solve(matrix, flat))
