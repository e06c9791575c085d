"""What `odeckpt.testing` differentiates: `fn(*args)` as a scalar function of leaves.

`make_target` partitions the differentiated arguments into floating array leaves
(everything else is held fixed, as in `eqx.filter_grad`) and reduces a non-scalar
output with a cotangent.
"""

import dataclasses
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import from_real_view, is_complex, real_view


@dataclasses.dataclass(frozen=True)
class Target:
    """`fn` as a scalar function of the differentiated leaves.

    Attributes:
        leaves: the floating array leaves of `args[argnums]`, in flattening order; a
            complex leaf as its real view `[Re, Im]` (a last axis of 2), so that the
            real and imaginary parts are each checked against finite differences.
        paths: their paths, e.g. `args[1]['w']`.
        scalar_fn: `leaves -> scalar`, the other leaves and arguments held fixed.
        out_eps: machine epsilon of the output's (coarsest) dtype.
    """

    leaves: list[jax.Array]
    paths: list[str]
    scalar_fn: Callable[[list[jax.Array]], jax.Array]
    out_eps: float

    def eps(self, leaf: jax.Array) -> float:
        """Working precision for a leaf: the coarser of its dtype and the output's."""
        return max(_eps(leaf.dtype), self.out_eps)


def _eps(dtype) -> float:
    return float(jnp.finfo(dtype).eps)


def make_target(fn: Callable, args: tuple, argnums: Any, cotangent: Any, rng) -> Target:
    """Partition the arguments and scalarise `fn` (see `testing.check_grads`)."""
    argnums = _argnums(argnums, len(args))
    parts = [eqx.partition(args[i], eqx.is_inexact_array) for i in argnums]
    flat = [jax.tree_util.tree_flatten_with_path(diff) for diff, _ in parts]
    leaves = [jnp.asarray(x) for leaf_paths, _ in flat for _, x in leaf_paths]
    paths = [
        f"args[{i}]{jax.tree_util.keystr(path)}"
        for i, (leaf_paths, _) in zip(argnums, flat, strict=True)
        for path, _ in leaf_paths
    ]
    if not leaves:
        raise ValueError(
            f"`check_grads`: nothing to differentiate in args{list(argnums)}: no "
            "floating-point array leaves (Python floats and integer arrays are left "
            "alone, as in `eqx.filter_grad`); pass `jnp.asarray(x, float)`."
        )
    complex_like = [x if is_complex(x) else None for x in leaves]
    leaves = [real_view(x) for x in leaves]
    counts = [len(leaf_paths) for leaf_paths, _ in flat]

    def call(leaves):
        pairs = zip(leaves, complex_like, strict=True)
        leaves = [x if z is None else from_real_view(x, z) for x, z in pairs]
        new_args, start = list(args), 0
        for i, (_, static), (_, treedef), n in zip(argnums, parts, flat, counts, strict=True):
            diff = jax.tree_util.tree_unflatten(treedef, leaves[start : start + n])
            new_args[i], start = eqx.combine(diff, static), start + n
        return fn(*new_args)

    return _scalarise(call, leaves, paths, cotangent, rng)


def _argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not argnums or any(not isinstance(i, int) or not 0 <= i < nargs for i in argnums):
        raise ValueError(
            f"`check_grads(argnums=...)` must index the {nargs} positional argument(s); "
            f"got {argnums!r}."
        )
    return argnums


def _scalarise(call, leaves, paths, cotangent, rng) -> Target:
    out = jax.eval_shape(call, leaves)
    out_leaves, out_def = jax.tree.flatten(out)
    if not out_leaves or any(not jnp.issubdtype(o.dtype, jnp.floating) for o in out_leaves):
        raise TypeError(
            "`check_grads`: `fn` must return a real floating scalar or a PyTree of real "
            f"floating arrays; got {out}."
        )
    out_eps = max(_eps(o.dtype) for o in out_leaves)
    if cotangent is None and len(out_leaves) == 1 and out_leaves[0].shape == ():
        return Target(leaves, paths, lambda x: jax.tree.leaves(call(x))[0], out_eps)
    if cotangent is None:
        cts = [rng.standard_normal(o.shape).astype(o.dtype) for o in out_leaves]
    else:
        cts, ct_def = jax.tree.flatten(cotangent)
        if ct_def != out_def or any(
            np.shape(c) != o.shape for c, o in zip(cts, out_leaves, strict=True)
        ):
            raise ValueError(
                "`check_grads(cotangent=...)` must be shaped like the output of `fn`; "
                f"got {jax.tree.map(np.shape, cotangent)} for output {out}."
            )
    cts = [jnp.asarray(c, o.dtype) for c, o in zip(cts, out_leaves, strict=True)]

    def scalar_fn(x):
        products = [jnp.vdot(c, o) for c, o in zip(cts, jax.tree.leaves(call(x)), strict=True)]
        return functools.reduce(operator.add, products)

    return Target(leaves, paths, scalar_fn, out_eps)
