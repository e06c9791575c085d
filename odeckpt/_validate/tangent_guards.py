"""Identities on a solve's values whose tangents refuse one use, with a message.

JAX fails some autodiff modes of a solve only where it meets the loop or the custom VJP
(evaluating a custom VJP's tangent, transposing a `lax.while_loop`), with a message
that names neither the cause nor the fix. These identities put the refusal, with the
message `autodiff.py` writes, where JAX would meet it, just before:

- `refuse_forward` (on the inputs of a custom-VJP solve): the tangent goes through
  `_forward_guard`, a linear primitive that raises when it is evaluated, compiled or
  batched over tangents alone (`jax.jvp`, `jax.linearize`'s linear function,
  `jax.jacfwd`, of a jitted solve too), and is transposed as the identity
  (`jax.grad`, and forward over reverse, which only transposes it);
- `refuse_reverse` (on the outputs of a `ForwardMode()` solve): the tangent goes
  through `_reverse_guard`, an identity in forward mode (under `jax.jvp`, `jax.jacfwd`,
  `jax.linearize`, compiled to nothing) whose transpose raises. Reverse mode transposes
  the outputs' tangents before the loop's, so it meets this first;
- `refuse_forward`'s linearisation (where a reverse pass of a custom-VJP solve starts
  from its inputs): the inputs go through `_linearise_guard`, an identity whose JVP
  raises where a second pass linearises it (its tangent is a partial-evaluation
  tracer: `jax.grad`, `jax.vjp`, `jax.linearize` of a function that takes a gradient
  through the solve, compiled on its own too) and is itself again otherwise (forward
  over reverse: `jax.jvp`, `jax.jacfwd`, `jax.hessian`). A second pass evaluates the
  first one's values in order, so it meets the guard before the loops that use them.

Each is a primitive with its own JVP (itself again: forward over forward), `jax.vmap`
rule and compilation rule, through JAX's public extension API (`jax.extend`,
`jax.interpreters`). `_forward_guard` takes, besides the tangent, a size-0 view of
the primal: its `jax.vmap` rule tells `jax.jacfwd` (tangents batched, the primal not)
from reverse mode under `jax.vmap` (both batched), where the guard is batched before
it is transposed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters.partial_eval import JaxprTracer

_forward_guard = Primitive("odeckpt_forward_guard")


def _raise(*_, message: str):
    raise ValueError(message)


def _forward_batch(args, dims, *, message: str):
    (marker, tangent), (marker_dim, tangent_dim) = args, dims
    if marker_dim is None:  # tangents batched alone: `jax.jacfwd`
        raise ValueError(message)
    marker = jnp.moveaxis(marker, marker_dim, 0)
    if tangent_dim is None:
        tangent = jnp.broadcast_to(tangent, (marker.shape[0], *jnp.shape(tangent)))
    else:
        tangent = jnp.moveaxis(tangent, tangent_dim, 0)
    return _forward_guard.bind(marker, tangent, message=message), 0


def _forward_jvp(primals, tangents, *, message: str):
    (marker, tangent), (_, tangent_dot) = primals, tangents
    out = _forward_guard.bind(marker, tangent, message=message)
    if type(tangent_dot) is ad.Zero:
        return out, tangent_dot
    return out, _forward_guard.bind(marker, tangent_dot, message=message)


_forward_guard.def_impl(_raise)
_forward_guard.def_abstract_eval(lambda marker, tangent, **_: tangent)
mlir.register_lowering(_forward_guard, _raise)
batching.primitive_batchers[_forward_guard] = _forward_batch
ad.primitive_jvps[_forward_guard] = _forward_jvp
ad.primitive_transposes[_forward_guard] = lambda ct, marker, tangent, **_: [None, ct]


def _identity_guard(name: str, transpose, refuses_tangent=lambda tangent: False) -> Primitive:
    """An identity primitive carrying a `message`: compiled to nothing, batched as
    itself, its JVP itself again (raising the message first where `refuses_tangent`
    holds of the tangent), its transpose `transpose(ct, message)`."""
    guard = Primitive(name)

    def jvp(primals, tangents, *, message: str):
        (x,), (x_dot,) = primals, tangents
        if refuses_tangent(x_dot):
            raise ValueError(message)
        out = guard.bind(x, message=message)
        if type(x_dot) is ad.Zero:
            return out, x_dot
        return out, guard.bind(x_dot, message=message)

    guard.def_impl(lambda x, **_: x)
    guard.def_abstract_eval(lambda x, **_: x)
    mlir.register_lowering(guard, lambda ctx, x, **_: [x])
    batching.primitive_batchers[guard] = lambda args, dims, *, message: (
        guard.bind(args[0], message=message),
        dims[0],
    )
    ad.primitive_jvps[guard] = jvp
    ad.primitive_transposes[guard] = lambda ct, x, *, message: transpose(ct, message)
    return guard


# Transposing it raises: reverse mode through `ForwardMode()`.
_reverse_guard = _identity_guard(
    "odeckpt_reverse_guard", lambda ct, message: _raise(message=message)
)
# Linearising it (a partial-evaluation tracer as its tangent) raises: a second reverse pass.
_linearise_guard = _identity_guard(
    "odeckpt_linearise_guard",
    lambda ct, message: [ct],
    refuses_tangent=lambda tangent: isinstance(tangent, JaxprTracer),
)


def _through(bind, primals, tangents):
    """`bind(primal, tangent)` on each leaf whose tangent is not a symbolic zero."""
    return jax.tree.map(
        lambda x, t: t if isinstance(t, SymbolicZero) else bind(x, t),
        primals,
        tangents,
        is_leaf=lambda t: isinstance(t, SymbolicZero),
    )


def refuse_forward(tree, message: str, twice: str):
    """`tree`, whose floating leaves' tangents raise `ValueError(message)` when evaluated
    (forward mode) and are transposed as the identity (reverse mode); where reverse
    mode linearises `tree`, its values raise `ValueError(twice)` if a second reverse
    pass linearises them in turn (reverse over reverse)."""

    def forward(x, t):
        marker = jnp.ravel(jax.lax.stop_gradient(x))[:0]
        return _forward_guard.bind(marker, t, message=message)

    guard = jax.custom_jvp(lambda dynamic: dynamic)

    def rule(primals, tangents):
        values = jax.tree.map(lambda x: _linearise_guard.bind(x, message=twice), primals[0])
        return values, _through(forward, primals[0], tangents[0])

    _ = guard.defjvp(rule, symbolic_zeros=True)
    dynamic, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(guard(dynamic), static)


def refuse_reverse(tree, message: str):
    """`tree`, whose floating leaves' tangents raise `ValueError(message)` when
    transposed (reverse mode) and are the identity in forward mode."""

    def reverse(_, t):
        return _reverse_guard.bind(t, message=message)

    guard = jax.custom_jvp(lambda dynamic: dynamic)
    _ = guard.defjvp(
        lambda primals, tangents: (primals[0], _through(reverse, primals[0], tangents[0])),
        symbolic_zeros=True,
    )
    dynamic, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(guard(dynamic), static)
