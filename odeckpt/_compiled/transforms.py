"""Where a call sits among JAX's transformations, and how each runs its compiled
program: inline under staging (`jax.jit`), batched under one `jax.vmap`, as a custom
VJP of two compiled programs under `jax.grad`/`jax.vjp` alone, and as one JAX call
otherwise (`jax.jvp`, `jax.linearize`, second order)."""

from typing import Any, NamedTuple

import jax
import jax.core
import numpy as np
from jax.extend.core import take_current_trace

from .cache import Entry
from .errors import translating

# JAX's transformations, told apart by the class of their trace (JAX exports the
# current trace, `jax.extend.core.take_current_trace`, but not these classes). Where a name is not
# found (another JAX), a call runs as one JAX call, which every transformation takes.
_EVAL, _STAGING = "EvalTrace", "DynamicJaxprTrace"
_REVERSE, _BATCH = "LinearizeTrace", "BatchTrace"


def _kind(trace) -> str:
    return type(trace).__name__


def _current():
    """The innermost transformation around the caller."""
    with take_current_trace() as trace:
        return trace


def _traces():
    """The transformations around the caller, innermost first."""
    trace = _current()
    while True:
        yield trace
        try:
            trace = trace.parent_trace
        except AttributeError:  # the evaluation at the bottom
            return


def staging() -> bool:
    """Whether the caller is being staged out (`jax.jit`, `jax.eval_shape`, a loop
    body, a custom rule): then a solve traces inline into the caller's program."""
    return any(_kind(trace) == _STAGING for trace in _traces())


# `jax.vmap` outside `jax.jit`: the program batches itself (so the solve sees the batch
# when it is traced, e.g. to size its checkpoints for the whole batch), and its outputs
# rejoin the caller's batch.


class Batch(NamedTuple):
    """A call under one `jax.vmap`: its trace, the axis, each input's batch axis."""

    trace: Any
    size: int
    name: Any
    dims: tuple


INLINE = Batch(None, 0, None, ())  # a `jax.vmap` among other transformations


def batch(dynamic: list) -> Batch | None:
    """For a call under one `jax.vmap` (nothing else around it, outside `jax.jit`):
    `(trace, axis size, axis name, batch axis per dynamic array)`; `INLINE` where a
    `jax.vmap` sits among other transformations; else None."""
    trace = _current()
    if _kind(trace) != _BATCH or _kind(trace.parent_trace) != _EVAL:
        return INLINE if any(_kind(t) == _BATCH for t in _traces()) else None
    axis = trace.axis_data
    if axis.spmd_name is not None or axis.explicit_mesh_axis is not None:
        return INLINE
    dims = []
    for x in dynamic:
        if not isinstance(x, jax.core.Tracer):
            dims.append(None)
            continue
        if x._trace is not trace:
            return INLINE
        if isinstance(x.val, jax.core.Tracer):
            return INLINE
        dims.append(x.batch_dim if type(x.batch_dim) is int else None)
    if all(d is None for d in dims):  # nothing of the solve's is batched
        return None
    return Batch(trace, axis.size, axis.name, tuple(dims))


def batched(entry: Entry, program, dynamic: list, batch: Batch):
    trace, size, name, dims = batch
    if entry.jitted is None:
        batched = jax.vmap(program, in_axes=(list(dims),), axis_size=size, axis_name=name)
        entry.jitted = jax.jit(batched)
    values = [x.val if isinstance(x, jax.core.Tracer) else x for x in dynamic]
    out = translating(entry.jitted, values)
    tracer = type(next(x for x, d in zip(dynamic, dims, strict=True) if d is not None))
    return jax.tree.map(lambda x: tracer(trace, x, 0), out)


# Reverse mode outside `jax.jit`: a custom VJP whose forward and backward passes are
# two compiled programs of the entry, so a failed check in the backward pass raises
# its own message (JAX would run a differentiated program's backward pass itself).


def reverse_mask(dynamic: list) -> tuple[bool, ...] | None:
    """For a call under `jax.grad`/`jax.vjp` alone (no other transformation around
    it, outside `jax.jit`), which dynamic arrays are differentiated; else None."""
    trace = _current()
    if _kind(trace) != _REVERSE or not trace.is_vjp or _kind(trace.parent_trace) != _EVAL:
        return None
    mask = []
    for x in dynamic:
        traced = isinstance(x, jax.core.Tracer)
        if traced and (x._trace is not trace or isinstance(x.primal, jax.core.Tracer)):
            return None
        mask.append(traced)
    return tuple(mask) if any(mask) else None


def reverse(entry: Entry, program, dynamic: list, mask: tuple[bool, ...]):
    if entry.forward is None:

        def forward(traced, fixed):
            return jax.vjp(lambda traced: program(_merged(traced, fixed, mask)), traced)

        def backward(pullback, cotangents, zeros):
            # The outputs the loss does not read have symbolic zero cotangents: zeros here.
            cotangents = [
                _zeros(aval) if aval is not None else ct
                for ct, aval in zip(cotangents, zeros, strict=True)
            ]
            return pullback(jax.tree.unflatten(pullback.out_tree, cotangents))[0]

        forward.__name__ = f"forward_{program.__name__}"
        backward.__name__ = f"backward_{program.__name__}"
        entry.forward = jax.jit(forward)
        entry.backward = jax.jit(backward, static_argnums=2)
    traced = [x for x, m in zip(dynamic, mask, strict=True) if m]
    fixed = [x for x, m in zip(dynamic, mask, strict=True) if not m]

    @jax.custom_vjp
    def solve(traced):
        return translating(entry.forward, traced, fixed)[0]

    def solve_forward(traced):
        traced = [x.value for x in traced]
        return translating(entry.forward, traced, fixed)

    def solve_backward(pullback, cotangent):
        leaves = jax.tree.leaves(cotangent, is_leaf=_is_symbolic_zero)
        zeros = tuple(_aval_of(ct) if _is_symbolic_zero(ct) else None for ct in leaves)
        given = [None if _is_symbolic_zero(ct) else ct for ct in leaves]
        return (translating(entry.backward, pullback, given, zeros),)

    _ = solve.defvjp(solve_forward, solve_backward, symbolic_zeros=True)
    return solve(traced)


def _is_symbolic_zero(x) -> bool:
    return isinstance(x, jax.custom_derivatives.SymbolicZero)


def _aval_of(zero) -> tuple:
    aval = zero.aval
    return (aval.shape, np.dtype(aval.dtype))


def _zeros(aval: tuple):
    shape, dtype = aval
    return np.zeros(shape, dtype)


def _merged(traced: list, fixed: list, mask: tuple[bool, ...]) -> list:
    these, those = iter(traced), iter(fixed)
    return [next(these) if m else next(those) for m in mask]
