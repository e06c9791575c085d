"""Closure conversion that a compiled solve can be reused for.

`eqx.filter_closure_convert` makes the arrays a function closes over leaves of a
PyTree, so that derivatives reach them; its traced program is a leaf compared by
identity, so a solve holding one is compiled anew on every call. Here the program is
compared by its text: two conversions with the same text are the same computation of
their inputs and constants, so `diffeqsolve`'s compiled loop is reused across calls
(as diffrax's `eqx.filter_jit` reuses it), and, since every array the function reads
(closed over or global) is a constant passed in, never with stale values.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.extend


class _Program:
    """A traced program, equal to another with the same text (hashable, for the
    compiled loop's cache key)."""

    __slots__ = ("jaxpr", "text")

    def __init__(self, jaxpr: jax.extend.core.Jaxpr):
        self.jaxpr = jaxpr
        self.text = str(jaxpr)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)


class _Key:
    """A static value compared by equality when it is hashable, else by identity."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return False
        try:
            return bool(self.value == other.value)
        except Exception:  # an unhashable or array-valued static: identity
            return self.value is other.value

    def __hash__(self) -> int:
        try:
            return hash(self.value)
        except TypeError:
            return id(self.value)


class ClosureConverted(eqx.Module):
    """`fn` traced at example inputs: its program (static, compared by text), the
    arrays it reads (leaves), and its inputs' and outputs' structure."""

    program: _Program = eqx.field(static=True)
    consts: list
    in_static: _Key = eqx.field(static=True)
    out_tree: _Key = eqx.field(static=True)
    out_static: _Key = eqx.field(static=True)

    def __call__(self, *args):
        dynamic, static = eqx.partition(args, eqx.is_array)
        if static != self.in_static.value:
            raise ValueError(  # an internal invariant: the solve calls it as traced
                "a closure-converted function was called with other static inputs"
            )
        flat = jax.core.eval_jaxpr(self.program.jaxpr, self.consts, *jax.tree.leaves(dynamic))
        out_dynamic = jax.tree.unflatten(self.out_tree.value, flat)
        return eqx.combine(out_dynamic, self.out_static.value)


def closure_convert(fn: Callable, *args) -> ClosureConverted:
    """`fn`, called as `fn(*args)`, closure-converted at `args` (whose arrays may be
    tracers): every array it reads becomes a leaf of the result."""
    dynamic, static = eqx.partition(args, eqx.is_array)
    aux = []

    def flat_fn(*leaves):
        inputs = eqx.combine(jax.tree.unflatten(jax.tree.structure(dynamic), leaves), static)
        out_dynamic, out_static = eqx.partition(fn(*inputs), eqx.is_array)
        aux.append((jax.tree.structure(out_dynamic), out_static))
        return jax.tree.leaves(out_dynamic)

    structs = jax.tree.leaves(jax.eval_shape(lambda: dynamic))  # weak types kept
    closed = jax.make_jaxpr(flat_fn)(*structs)
    out_tree, out_static = aux[-1]
    return ClosureConverted(
        _Program(closed.jaxpr), list(closed.consts), _Key(static), _Key(out_tree),
        _Key(out_static),
    )  # fmt: skip
