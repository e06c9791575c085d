"""`ForwardMode`: forward-mode autodiff through a plain loop, and reverse mode by
forward sensitivities (every differentiated scalar's tangent carried through the same
loop, the VJP their contraction with the cotangent). See `docs/adjoints.md`,
"ForwardMode under `jax.grad`"."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from odeckpt._checkpointing import LoopOutput, forward_loop
from odeckpt._core import (
    by_columns,
    direction_count,
    forward_jvp,
    linearised,
    refuse_linearising,
    zero_tangent,
)

from .base import AbstractAdjoint

_TOO_MANY = (
    "`jax.grad`/`jax.vjp` of `diffeqsolve` with `adjoint=ForwardMode()` carries one tangent "
    "per differentiated scalar through the solve (forward sensitivities), and this one "
    "differentiates {count} scalars, more than `ForwardMode(max_tangents={limit})`. Use "
    "`adjoint=CheckpointAdjoint()` (reverse mode, whose cost does not grow with the number "
    "of inputs), or raise `max_tangents` (`None`: no limit)."
)
_REVERSE_OVER = (
    "Reverse mode over another derivative through `diffeqsolve` with "
    "`adjoint=ForwardMode()` (`jax.jacrev(jax.grad(f))`, `jax.jacrev(jax.jacfwd(f))`, "
    "`jax.grad` of a function that takes `jax.jvp`): the outer pass would have to "
    "transpose the forward-mode loop, which JAX cannot do (a `lax.while_loop`). Put "
    "forward mode outside: `jax.hessian(f)`, `jax.jacfwd(jax.grad(f))`, "
    "`jax.jvp(jax.grad(f), (x,), (v,))` and `jax.jacfwd(jax.jacfwd(f))` all work with "
    "`ForwardMode()`."
)


class ForwardMode(AbstractAdjoint):
    """Forward-mode autodiff through the solve; reverse mode by forward sensitivities.

    `jax.jvp`, `jax.jacfwd`: the loop is a plain `lax.while_loop`, which JAX
    differentiates in forward mode; cost per tangent about one extra solve, memory one
    state. `jax.grad`, `jax.vjp`, `jax.jacrev`: the solve carries one tangent per
    differentiated scalar (the leaves `jax.grad` differentiates, and only those), and
    the VJP contracts them with the cotangent. The gradient is the exact derivative of
    the discrete solution, as `CheckpointAdjoint`'s; memory does not grow with the
    number of steps, and the cost grows with the number of differentiated scalars: for
    a few dozen parameters and a long stiff solve it is the cheapest exact gradient.
    Second derivatives: forward over either (`jax.hessian`, `jax.jacfwd(jax.grad(f))`).

    Args:
        max_tangents: the most differentiated scalars reverse mode carries tangents
            for (a complex scalar counts twice); beyond it `jax.grad` raises naming
            `CheckpointAdjoint()`. `None`: no limit.
    """

    max_tangents: int | None = eqx.field(default=1024, static=True)

    def __check_init__(self):
        m = self.max_tangents
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(
                f"`ForwardMode(max_tangents=...)` must be a positive integer or None; got {m!r}."
            )

    @property
    def forward_mode(self) -> bool:
        return True

    def loop(self, integrator, problem, state0, max_steps):
        body = integrator.body()

        # From the state's checkpoint, which leaves out what the solver state rebuilds
        # from it (an FSAL method's first stage): reverse mode carries tangents for the
        # inputs the solve is differentiated with respect to, not for what is derived.
        def run(problem, checkpoint) -> LoopOutput:
            return forward_loop(body, problem, body.restore(problem, checkpoint), max_steps)

        return _by_sensitivities(run, (problem, body.compress(state0)), self.max_tangents)


def _differentiated(out: LoopOutput):
    """The outputs a solution reads derivatives of: the buffers, the final time and
    state (the solver and controller states, and the counters, are left out)."""
    return out.buffers, out.state.t, out.state.y


def _by_sensitivities(run, inputs, limit):
    """`run(*inputs)`, whose forward mode is JAX's through the loop and whose reverse
    mode contracts the forward sensitivities of the perturbed leaves with the
    cotangent."""
    # every array is an input of the rule (a traced one must not be closed over)
    dynamic, static = eqx.partition(inputs, eqx.is_array)

    def call(dynamic):
        return run(*eqx.combine(dynamic, static))

    solve = jax.custom_jvp(call)

    def rule(primals, tangents):
        (x,), (t,) = primals, tangents
        # An outer reverse pass over this one would transpose the forward-mode loop.
        x = refuse_linearising(x, _REVERSE_OVER)
        every, treedef = jax.tree.flatten(x)
        which, ts = _perturbed(every, jax.tree.leaves(t, is_leaf=_unperturbed))

        def part(every, leaves):
            full = list(every)
            for i, leaf in zip(which, leaves, strict=True):
                full[i] = leaf
            out = call(jax.tree.unflatten(treedef, full))
            return list(_differentiated(out)), out

        leaves = [every[i] for i in which]
        if linearised(ts):  # reverse mode, seen as such: sensitivities, one primal solve
            return _sensitivities(ft.partial(part, every), leaves, ts, limit)
        # Otherwise forward mode, or traced into a program that JAX may later evaluate
        # or partially evaluate and transpose (reverse mode: `jax.grad` of a
        # `jax.jit`-compiled function): one JVP through the loop where it is evaluated;
        # where it is partially evaluated, the primal solve and a tangent transposed
        # through the sensitivities.
        count = direction_count(ts)  # refused where a reverse pass transposes it

        def whole(every):  # of every input leaf: nothing traced is closed over
            return part(every, [every[i] for i in which])

        out, tangents_out = forward_jvp(whole, every, which, ts, lambda: _refuse(count, limit))
        return out, _tangent_out(out, tangents_out)

    _ = solve.defjvp(rule, symbolic_zeros=True)
    return solve(dynamic)


def _unperturbed(t) -> bool:
    return isinstance(t, SymbolicZero)


def _perturbed(every, ts):
    """The indices of the leaves with a tangent (floating, not a symbolic zero), and
    their tangents."""
    which = [
        i
        for i, (x, ti) in enumerate(zip(every, ts, strict=True))
        if not _unperturbed(ti) and jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]
    return which, [ts[i] for i in which]


def _tangent_out(out, part_tangents):
    """Tangents of the whole `LoopOutput` from those of its differentiated part (zero
    for the rest)."""
    zeros = jax.tree.map(zero_tangent, out)
    return eqx.tree_at(_differentiated, zeros, tuple(part_tangents))


def _refuse(count: int, limit):
    """Refuse reverse mode over `count` differentiated scalars beyond `limit`."""
    if limit is not None and count > limit:
        raise ValueError(_TOO_MANY.format(count=count, limit=limit))


def _sensitivities(part, leaves, ts, limit):
    """Reverse mode: the forward sensitivities of the differentiated outputs with
    respect to every perturbed scalar (one batched forward-mode solve, whose primal
    is the solve itself), and the tangent as their contraction with `ts`, linear in
    `ts`, which JAX transposes into the VJP."""
    _refuse(direction_count(ts), limit)

    def column(*directions):
        _, tangents, out = jax.jvp(part, (leaves,), (list(directions),), has_aux=True)
        return tangents, out

    apply, out = by_columns(column, ts)
    return out, _tangent_out(out, apply(ts))
