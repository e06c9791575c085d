"""The input checks of the interpolation classes and functions, and their messages
(`docs/errors.md` lists them).

The order of `ts` is checked at trace time when concrete; otherwise the preprocessing
functions check it at run time (`eqx.error_if`), and the classes not at all, as they
may be built inside a vector field evaluated at every step.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import concrete


def knot_times(ts, caller: str, *, strict: bool) -> jax.Array:
    """`ts` as a 1-D floating array of at least two increasing times.

    Integer times become the default float dtype. `strict`: strictly increasing (the
    preprocessing functions); otherwise repeated times are allowed (a jump)."""
    ts = jnp.asarray(ts)
    if not (jnp.issubdtype(ts.dtype, jnp.floating) or jnp.issubdtype(ts.dtype, jnp.integer)):
        raise TypeError(f"`{caller}(ts=...)` must hold real times; got dtype {ts.dtype}.")
    if not jnp.issubdtype(ts.dtype, jnp.floating):
        ts = ts.astype(jnp.result_type(float))
    if ts.ndim != 1:
        raise ValueError(f"`{caller}(ts=...)` must be 1-D; got shape {ts.shape}.")
    if ts.shape[0] < 2:
        raise ValueError(f"`{caller}(ts=...)` needs at least 2 times; got {ts.shape[0]}.")
    values = concrete(ts)
    if values is not None:
        _check_increasing(values, caller, strict=strict)
    elif strict:
        bad = ~jnp.all(ts[1:] > ts[:-1])
        ts = eqx.error_if(
            ts, bad, f"`{caller}(ts=...)` must be strictly increasing (checked at run time)"
        )
    return ts


def _check_increasing(values: np.ndarray, caller: str, *, strict: bool) -> None:
    if not np.all(np.isfinite(values)):
        i = int(np.argmin(np.isfinite(values)))
        raise ValueError(f"`{caller}(ts=...)` must be finite; got ts[{i}]={values[i]}.")
    steps = np.diff(values)
    bad = steps <= 0 if strict else steps < 0
    if np.any(bad):
        i = int(np.argmax(bad))
        order = "strictly increasing" if strict else "increasing"
        fix = "merge the rows at repeated times" if strict and steps[i] == 0 else "sort by time"
        raise ValueError(
            f"`{caller}(ts=...)` must be {order}; got ts[{i + 1}]={values[i + 1]} after "
            f"ts[{i}]={values[i]}: {fix}."
        )


def leading_length(tree, length: int, caller: str, name: str) -> None:
    """Every leaf of `tree` has `length` entries along its first axis."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape = jnp.shape(leaf)
        if not shape or shape[0] != length:
            where = jax.tree_util.keystr(path) or name
            raise ValueError(
                f"`{caller}`: every leaf of `{name}` must have {length} entries along its "
                f"first axis; leaf {where} has shape {shape}."
            )


def cubic_coefficients(coeffs, length: int) -> None:
    """`coeffs` is `(d, c, b, a)`: four PyTrees of one structure, one row per piece."""
    if not (isinstance(coeffs, tuple | list) and len(coeffs) == 4):
        raise ValueError(
            "`CubicInterpolation(ts, coeffs)`: `coeffs` must be a tuple `(d, c, b, a)` of "
            "four PyTrees, e.g. from `backward_hermite_coefficients(ts, ys)`."
        )
    structures = {jax.tree.structure(c) for c in coeffs}
    if len(structures) > 1:
        raise ValueError(
            "`CubicInterpolation(ts, coeffs)`: `d, c, b, a = coeffs` must share one PyTree "
            f"structure; got {sorted(map(str, structures))}."
        )
    for name, tree in zip("dcba", coeffs, strict=True):
        leading_length(tree, length - 1, "CubicInterpolation(ts, coeffs)", f"coeffs.{name}")


def like_data(tree, ys, caller: str, name: str) -> None:
    """`tree` (an optional argument given per leaf of `ys`) has the structure of `ys`."""
    if tree is not None and jax.tree.structure(tree) != jax.tree.structure(ys):
        raise ValueError(
            f"`{caller}({name}=...)` must have the PyTree structure of `ys`, "
            f"{jax.tree.structure(ys)}; got {jax.tree.structure(tree)}."
        )
