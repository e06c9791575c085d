"""Closure conversion that a compiled solve can be reused for.

`eqx.filter_closure_convert`'s traced program is a leaf compared by identity, so a
solve holding one compiles anew on every call. Here the program compares by its text,
so `diffeqsolve`'s compiled loop is reused across calls, and, since every array the
function reads is a constant passed in, never with stale values.
"""

import enum
from collections.abc import Callable

import equinox as eqx
import jax
import jax.core
import jax.extend
import numpy as np


class _Program:
    """A traced program, equal to another with the same text, the same constants of its
    inner programs, and the very same objects among its parameters that print without
    their identity (callbacks, custom rules): hashable, for the compiled loop's cache
    key. A parameter of a type not known to print faithfully counts as such an object,
    so an unknown kind of program costs a compilation, never a stale result."""

    __slots__ = ("jaxpr", "text", "opaque", "inner_consts")

    def __init__(self, jaxpr: jax.extend.core.Jaxpr):
        self.jaxpr = jaxpr
        self.text = str(jaxpr)
        opaque, inner_consts = [], []
        _walk(jaxpr, opaque, inner_consts)
        self.opaque = tuple(opaque)
        self.inner_consts = tuple(inner_consts)

    def __eq__(self, other) -> bool:
        return (
            type(other) is type(self)
            and self.text == other.text
            and len(self.opaque) == len(other.opaque)
            and all(a is b for a, b in zip(self.opaque, other.opaque, strict=True))
            and self.inner_consts == other.inner_consts
        )

    def __hash__(self) -> int:
        return hash((self.text, self.inner_consts))


_PRINTED = (bool, int, float, complex, str, bytes, type(None), np.dtype, np.generic, enum.Enum)


def _walk(jaxpr, opaque: list, inner_consts: list) -> None:
    """Collect what `str(jaxpr)` leaves out: parameters that are not plain printable
    values, and the constants of inner closed programs (by value)."""
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            _visit(value, opaque, inner_consts)


def _visit(value, opaque: list, inner_consts: list) -> None:
    if isinstance(value, jax.extend.core.ClosedJaxpr):
        _walk(value.jaxpr, opaque, inner_consts)
        for c in value.consts:
            _visit_const(c, opaque, inner_consts)
    elif isinstance(value, jax.extend.core.Jaxpr):
        _walk(value, opaque, inner_consts)
    elif isinstance(value, tuple | list):
        for v in value:
            _visit(v, opaque, inner_consts)
    elif not isinstance(value, _PRINTED):
        opaque.append(value)


def _visit_const(c, opaque: list, inner_consts: list) -> None:
    """A concrete constant by value; a traced one (or anything else) by identity."""
    concrete = np.ndarray | np.generic | int | float | complex | bool | jax.Array
    if isinstance(c, concrete) and not isinstance(c, jax.core.Tracer):
        a = np.asarray(c)
        inner_consts.append((a.shape, str(a.dtype), a.tobytes()))
    else:
        opaque.append(c)


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
        _Program(closed.jaxpr),
        list(closed.consts),
        _Key(static),
        _Key(out_tree),
        _Key(out_static),
    )
