"""Identities on a solve's values whose tangents refuse one use, with a message.

`refuse_forward` (`_forward_guard`, and `_core.refuse_linearising` for reverse over
reverse) uses primitives with their own JVP, `jax.vmap` and compilation rules that
raise just before JAX would fail with a message naming neither cause nor fix. See
`docs/adjoints.md`, "Autodiff modes" (where the refusals are raised).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from odeckpt._core import refuse_linearising

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
        values = refuse_linearising(primals[0], twice)
        return values, _through(forward, primals[0], tangents[0])

    _ = guard.defjvp(rule, symbolic_zeros=True)
    dynamic, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(guard(dynamic), static)
