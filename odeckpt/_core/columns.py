"""A linear map transposed through its columns: `by_columns` evaluates a map linear in
its second argument on every unit direction at once (one batched forward-mode pass);
`forward_jvp` is a JVP evaluated in one call, which a reverse pass's partial evaluation
splits into its primal and a tangent (the primitive `_p`) whose transpose goes through
`by_columns`, so reverse mode goes through a map JAX can only evaluate forward (a
`lax.while_loop`'s tangent)."""

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir, partial_eval as pe


def _is_complex(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.complexfloating)


def direction_count(leaves) -> int:
    """The real directions of `leaves`: one per element, two per complex element."""
    return sum(int(np.prod(jnp.shape(x))) * (2 if _is_complex(x) else 1) for x in leaves)


def _basis(leaves):
    """Every unit direction of `leaves`, stacked on a leading axis (per leaf: its
    elements' unit vectors, then `1j` times them for a complex leaf)."""
    total, blocks, offset = direction_count(leaves), [], 0
    for x in leaves:
        n = int(np.prod(jnp.shape(x)))
        eye = jnp.eye(total, n, -offset, dtype=jnp.result_type(x))
        if _is_complex(x):
            eye = eye + 1j * jnp.eye(total, n, -(offset + n), dtype=eye.dtype)
        blocks.append(eye.reshape((total, *jnp.shape(x))))
        offset += n * (2 if _is_complex(x) else 1)
    return blocks


def _coordinates(leaves):
    """The real coordinates of `leaves` in the order of `_basis`."""
    parts = []
    for t in leaves:
        flat = jnp.ravel(t)
        parts += [jnp.real(flat), jnp.imag(flat)] if _is_complex(t) else [flat]
    return parts


def by_columns(fn, ts):
    """`(apply, aux)` for `fn` (of a list of arrays shaped like `ts`, returning its
    outputs, linear in them, and `aux`, which must not depend on them): `fn` evaluated on
    every direction of `ts` at once (one batched call), and `apply(t)`, the outputs at
    `t` as a contraction of those columns (linear in `t`, so JAX transposes it)."""
    columns, aux = jax.vmap(fn, out_axes=(0, None))(*_basis(ts))

    def apply(t):
        coordinates = _coordinates(t)
        x = jnp.concatenate(coordinates) if coordinates else jnp.zeros((0,))

        def contract(column):
            if column.dtype == jax.dtypes.float0:
                return np.zeros(column.shape[1:], jax.dtypes.float0)
            dtype = jnp.result_type(x.dtype, column.dtype)
            return jnp.tensordot(x.astype(dtype), column.astype(dtype), axes=1).astype(column.dtype)

        return jax.tree.map(contract, columns)

    return apply, aux


class _Map:
    """A flat linear map and its transpose, as primitive parameters (compared by
    identity): `call(*xs, *ts) -> outs` and `transpose(*xs, *cts) -> t cotangents`."""

    def __init__(self, call, transpose, n_x: int, n_out: int):
        self.call, self.transpose, self.n_x, self.n_out = call, transpose, n_x, n_out


_p = Primitive("odeckpt_forward_transposed")
_p.multiple_results = True


def _impl(*args, f):
    """`f.call` (a `_Map`'s or a `_Jvp`'s), compiled."""
    return jax.jit(f.call)(*args)


def _lower(ctx, *args, f):
    """`f.call` (a `_Map`'s or a `_Jvp`'s) lowered in place of the primitive."""
    return mlir.lower_fun(f.call, multiple_results=True)(ctx, *args)


def _abstract(*avals, f):
    """The outputs' shapes of `f.call` (a `_Map`'s or a `_Jvp`'s)."""
    shapes = jax.eval_shape(f.call, *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals))
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in shapes]


def _jvp(primals, tangents, *, f: _Map):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return _p.bind(*primals, f=f), jax.jvp(f.call, tuple(primals), tuple(tangents))[1]


def _transpose(cts, *args, f: _Map):
    xs = args[: f.n_x]
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    return [None] * f.n_x + list(f.transpose(*xs, *cts))


def _batched(args, dims, n_x: int):
    """The inputs of a batched bind, the tangents' batch axes moved (or broadcast) to
    the front: `(xs, ts, size, x_dims, in_axes)`."""
    xs, ts = args[:n_x], args[n_x:]
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    x_dims = tuple(dims[:n_x])
    ts = [
        jnp.broadcast_to(t, (size, *t.shape)) if d is None else jnp.moveaxis(t, d, 0)
        for t, d in zip(ts, dims[n_x:], strict=True)
    ]
    return xs, ts, size, x_dims, (*x_dims, *(0,) * len(ts))


def _vmapped(f: _Map, x_dims, in_axes) -> _Map:
    """`f` for inputs batched as `in_axes` (its outputs batched on their first axis)."""
    transpose = jax.vmap(f.transpose, in_axes=(*x_dims, *(0,) * f.n_out))
    return _Map(jax.vmap(f.call, in_axes=in_axes), transpose, f.n_x, f.n_out)


def _batch(args, dims, *, f: _Map):
    xs, ts, _, x_dims, in_axes = _batched(args, dims, f.n_x)
    outs = _p.bind(*xs, *ts, f=_vmapped(f, x_dims, in_axes))
    return outs, [0] * len(outs)


_p.def_impl(_impl)
_p.def_abstract_eval(_abstract)
mlir.register_lowering(_p, _lower)
ad.primitive_jvps[_p] = _jvp
ad.primitive_transposes[_p] = _transpose
batching.primitive_batchers[_p] = _batch


def _linear_map(fn, n_x: int, specs, n_out: int, on_transpose) -> _Map:
    """The `_Map` of `fn(xs, ts)` (`n_out` leaves out), linear in `ts` (shaped as
    `specs`): evaluated as `fn`, transposed by evaluating it on every direction of `ts`
    (`by_columns`), so `fn` needs forward mode only; `on_transpose()` runs first (where
    a reverse pass is traced), to refuse it."""

    def call(*args):
        return jax.tree.leaves(fn(list(args[:n_x]), list(args[n_x:])))

    def transpose(*args):
        on_transpose()
        xs_, cts = list(args[:n_x]), list(args[n_x:])
        t_like = [jnp.zeros(s.shape, s.dtype) for s in specs]
        apply, _ = by_columns(lambda *t: (call(*xs_, *t), None), t_like)
        return jax.linear_transpose(apply, t_like)(cts)[0]

    return _Map(call, transpose, n_x, n_out)


# ----------------------------------------------------------------------------------
# A JVP whose primal and tangent come from one call when evaluated, and which splits,
# where a reverse pass partially evaluates it, into the primal (known) and a tangent
# transposed through its columns (`_p`).


class _Jvp:
    """Primitive parameters (compared by identity): `call(*xs, *ts) -> (*outs,
    *tangents)`, `primal(*xs) -> outs`, `linear`: the `_Map` of the tangent."""

    def __init__(self, call, primal, linear: _Map, n_x: int, n_out: int):
        self.call, self.primal, self.linear = call, primal, linear
        self.n_x, self.n_out = n_x, n_out


_jvp_p = Primitive("odeckpt_forward_jvp")
_jvp_p.multiple_results = True


def _jvp_partial_eval(trace, *tracers, f: _Jvp):
    """Known inputs and unknown tangents (a reverse pass): the primal as known values,
    the tangent as `_p`, which transposes through its columns."""
    xs, ts = tracers[: f.n_x], tracers[f.n_x :]
    known = [t.pval.get_known() for t in xs]
    if any(k is None for k in known) or all(t.pval.is_known() for t in ts):
        return trace.default_process_primitive(_jvp_p, tracers, dict(f=f))
    outs = [trace.new_const(out) for out in f.primal(*known)]
    return outs + trace.default_process_primitive(_p, tracers, dict(f=f.linear))


def _jvp_batch(args, dims, *, f: _Jvp):
    xs, ts, size, x_dims, in_axes = _batched(args, dims, f.n_x)
    linear = _vmapped(f.linear, x_dims, in_axes)
    # with the inputs unbatched (a batch of tangents: `jax.jacfwd`) so is the primal
    primal_axis = 0 if any(d is not None for d in x_dims) else None

    def primal(*xs):
        return jax.vmap(f.primal, in_axes=x_dims, out_axes=primal_axis, axis_size=size)(*xs)

    out_axes = [primal_axis] * f.n_out + [0] * f.linear.n_out
    call = jax.vmap(f.call, in_axes=in_axes, out_axes=out_axes)
    outs = _jvp_p.bind(*xs, *ts, f=_Jvp(call, primal, linear, f.n_x, f.n_out))
    return outs, out_axes


def _jvp_jvp(primals, tangents, *, f: _Jvp):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jax.jvp(f.call, tuple(primals), tuple(tangents))


_jvp_p.def_impl(_impl)
_jvp_p.def_abstract_eval(_abstract)
mlir.register_lowering(_jvp_p, _lower)
ad.primitive_jvps[_jvp_p] = _jvp_jvp
batching.primitive_batchers[_jvp_p] = _jvp_batch
pe.custom_partial_eval_rules[_jvp_p] = _jvp_partial_eval


def forward_jvp(fn, xs: list, which: list[int], ts: list, on_transpose=lambda: None):
    """`(out, tangent)` of `fn(xs) -> (linear part, out)` (a list of arrays in, PyTrees
    out), the tangent that of the linear part along `ts`, tangents of `xs[i]` for `i`
    in `which`: one call of JAX's JVP where it is evaluated; where a reverse pass
    partially evaluates it, the primal `out` alone (known) and the tangent as a map
    transposed through its columns (`by_columns`), after `on_transpose()`."""
    n_x = len(xs)
    x_specs = [jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)) for x in xs]
    t_specs = [jax.ShapeDtypeStruct(jnp.shape(t), jnp.result_type(t)) for t in ts]

    def jvp(xs, ts):
        def of(leaves):
            full = list(xs)
            for i, leaf in zip(which, leaves, strict=True):
                full[i] = leaf
            return fn(full)

        leaves = [xs[i] for i in which]
        _, tangent, out = jax.jvp(of, (leaves,), (list(ts),), has_aux=True)
        return out, tangent

    out_shape, tangent_shape = jax.eval_shape(jvp, x_specs, t_specs)
    out_def, tangent_def = jax.tree.structure(out_shape), jax.tree.structure(tangent_shape)

    def call(*args):
        out, tangent = jvp(list(args[:n_x]), list(args[n_x:]))
        return jax.tree.leaves(out) + jax.tree.leaves(tangent)

    def primal(*xs):
        return jax.tree.leaves(fn(list(xs))[1])

    linear = _linear_map(
        lambda xs, ts: jvp(xs, ts)[1], n_x, t_specs, tangent_def.num_leaves, on_transpose
    )
    f = _Jvp(call, primal, linear, n_x, out_def.num_leaves)
    outs = _jvp_p.bind(*xs, *ts, f=f)
    n = out_def.num_leaves
    return jax.tree.unflatten(out_def, outs[:n]), jax.tree.unflatten(tangent_def, outs[n:])
