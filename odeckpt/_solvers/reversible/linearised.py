"""`LinearisedStep`: a step already taken and linearised, replayed without evaluating it.

A reversible solver's inverse step evaluates the same base steps as the step it undoes,
at the same points (`Reversible`: `Psi_{-h}` at `y1` and `Psi_h` at `z0`). Linearising
them there gives the step's vector-Jacobian product as well as the state before it. The
backward pass of `ReversibleAdjoint` then reverses the step through a `LinearisedStep`
instead of evaluating it a third time: its `attempt` returns the step's known output, and
its derivative is the recorded pullback.
"""

from collections.abc import Callable
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import materialize, zero_tangent
from odeckpt._solvers.base import AbstractSolver, AbstractWrappedSolver, StepOutput


def _known(inputs, output, pullback):
    """`output` (the step from `inputs`, already computed), with `pullback` as its VJP.

    A `jax.custom_vjp` over the array leaves (not equinox's, whose non-differentiated
    arguments may not carry tangents: under forward-over-reverse `output` and
    `pullback` do, and their own cotangents are zero)."""
    parts = [eqx.partition(tree, eqx.is_array) for tree in (inputs, output, pullback)]
    arrays, static = tuple(p[0] for p in parts), tuple(p[1] for p in parts)

    @jax.custom_vjp
    def known(arrays):
        return arrays[1]

    def known_fwd(arrays):
        return arrays[1], arrays

    def known_bwd(arrays, ct):
        inputs, output, pullback = (eqx.combine(a, s) for a, s in zip(arrays, static, strict=True))
        ct_inputs = pullback(materialize(eqx.combine(ct, static[1]), output))
        ct_inputs = eqx.partition(ct_inputs, eqx.is_array)[0]
        like = eqx.partition(inputs, eqx.is_array)[0]
        ct_inputs = jax.tree.map(_cotangent, ct_inputs, like, is_leaf=lambda c: c is None)
        return ((ct_inputs, _zero_cotangents(arrays[1]), _zero_cotangents(arrays[2])),)

    _ = known.defvjp(known_fwd, known_bwd)
    return eqx.combine(known(arrays), static[1])


def _cotangent(c, x):
    """The cotangent of array `x`: `c` (zeros if `None`), float0 zeros for integers
    (`None` where `x` is no array)."""
    if x is None:
        return None
    if c is None or not jnp.issubdtype(x.dtype, jnp.inexact):
        return zero_tangent(x)
    return c


def _zero_cotangents(tree):
    return jax.tree.map(lambda x: _cotangent(None, x), tree)


@final
class LinearisedStep(AbstractWrappedSolver):
    """One step of `solver`, from known inputs, with its output and pullback computed
    beforehand (by `AbstractReversibleSolver.linearised_reverse_step`). `attempt` returns
    `output` whatever its arguments' values; its VJP is `pullback`, which maps the
    cotangent of a `StepOutput` to those of `(term, t0, dt, y0, solver_state, args)`.
    Only for a replay from the inputs it was linearised at."""

    solver: AbstractSolver
    output: StepOutput
    pullback: Callable

    @property
    def evals_per_step(self) -> int:
        return 0

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        del dense  # the output was computed with the dense output the replay needs
        return _known((term, t0, dt, y0, solver_state, args), self.output, self.pullback)
