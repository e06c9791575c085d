"""Where a value sits among JAX's transformations: whether a reverse pass linearises
it, read from its tracers (`linearised`), or raised where its tangent is formed
(`refuse_linearising`, an identity primitive with its own JVP, `jax.vmap` and
compilation rules)."""

import jax
import jax.core
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters.partial_eval import JaxprTracer

# JAX's tracer classes, told apart by name (JAX does not export them all): a reverse
# pass (`jax.vjp`, `jax.grad`, `jax.linearize`) linearises a value as one of these.
_LINEARISED = frozenset({"JaxprTracer", "LinearizeTracer"})


def _linearised(x) -> bool:
    name = type(x).__name__
    if name in _LINEARISED:
        return True
    if name == "BatchTracer":
        return _linearised(x.val)
    if name == "JVPTracer":
        return _linearised(x.primal) or _linearised(x.tangent)
    return False


def linearised(tree) -> bool:
    """Whether a reverse pass (`jax.vjp`, `jax.grad`, `jax.linearize`) is linearising
    any leaf of `tree`, under any `jax.vmap` and forward mode around it, as a custom
    JVP rule sees its tangents."""
    return any(_linearised(x) for x in jax.tree.leaves(tree))


# An identity carrying a `message`: compiled to nothing, batched as itself, its JVP
# itself again, raising the message first where its tangent is a partial-evaluation
# tracer (a reverse pass linearises it), its transpose the identity.
_guard = Primitive("odeckpt_linearise_guard")


def _guard_jvp(primals, tangents, *, message: str):
    (x,), (x_dot,) = primals, tangents
    if isinstance(x_dot, JaxprTracer):
        raise ValueError(message)
    out = _guard.bind(x, message=message)
    if type(x_dot) is ad.Zero:
        return out, x_dot
    return out, _guard.bind(x_dot, message=message)


_guard.def_impl(lambda x, **_: x)
_guard.def_abstract_eval(lambda x, **_: x)
mlir.register_lowering(_guard, lambda ctx, x, **_: [x])
batching.primitive_batchers[_guard] = lambda args, dims, *, message: (
    _guard.bind(args[0], message=message),
    dims[0],
)
ad.primitive_jvps[_guard] = _guard_jvp
ad.primitive_transposes[_guard] = lambda ct, x, *, message: [ct]


def refuse_linearising(tree, message: str):
    """`tree` (its leaves arrays), unchanged; raises `ValueError(message)` where a
    reverse pass linearises it (at trace time)."""
    return jax.tree.map(lambda x: _guard.bind(x, message=message), tree)
