"""Evaluating a `Target` where `_fd` says, and turning the values into raw estimates.

Each check compiles one program: `f(x)`, the analytic side (the gradient, or in
forward directional mode the JVPs) and every perturbed evaluation, the latter in one
`lax.map` so that `fn` appears once in the compiled code. The points are chosen on
the host in float64 and rounded to each leaf's dtype before they are sent.
"""

import dataclasses
import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt._core import promoted_dtype

from . import _fd
from ._fd_target import Target


@dataclasses.dataclass(frozen=True)
class RawLeaf:
    """Analytic and FD values for one leaf (or all directions), before judging."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    analytic: np.ndarray
    fd: np.ndarray
    fd_error: np.ndarray
    eps: float


def _analytic(scalar_fn, ad, batch_size, leaves, tangents):
    """`f(x)` and the gradient (`tangents is None`), else the JVPs along `tangents`."""
    if tangents is None and ad == "reverse":
        return jax.value_and_grad(scalar_fn)(leaves)
    if tangents is None:
        return scalar_fn(leaves), jax.jacfwd(scalar_fn)(leaves)
    jvp = lambda t: jax.jvp(scalar_fn, (leaves,), (t,))
    primals, tangents_out = lax.map(jvp, tangents, batch_size=batch_size)
    return primals[0], tangents_out


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _full_program(scalar_fn, ad, batch_size, leaves, leaf_id, index, values):
    """`f(x)`, the gradient, and `f` with `leaves[leaf_id[j]].ravel()[index[j]] = values[j]`."""
    f = lax.map(at_entry(scalar_fn, leaves), (leaf_id, index, values), batch_size=batch_size)
    return *_analytic(scalar_fn, ad, batch_size, leaves, None), f


def at_entry(fn, leaves):
    """`(k, i, v) -> fn(leaves with leaves[k].ravel()[i] = v)`, for `lax.map` over points.

    `v` has the widest dtype; it is cast back (exactly) to its leaf's dtype.
    """

    def setter(k):
        def set_entry(i, v):
            new = leaves[k].ravel().at[i].set(v.astype(leaves[k].dtype)).reshape(leaves[k].shape)
            return [*leaves[:k], new, *leaves[k + 1 :]]

        return set_entry

    branches = [setter(k) for k in range(len(leaves))]

    def one(kiv):
        k, i, v = kiv
        new = branches[0](i, v) if len(branches) == 1 else lax.switch(k, branches, i, v)
        return fn(new)

    return one


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _directional_program(scalar_fn, ad, batch_size, leaves, points, tangents):
    """`f(x)`, the gradient or the JVPs along `tangents`, and `f` at each stacked point."""
    f = lax.map(scalar_fn, points, batch_size=batch_size)
    return *_analytic(scalar_fn, ad, batch_size, leaves, tangents), f


def host(values) -> np.ndarray:
    return np.asarray(values).astype(np.float64)


def entry_points(x: np.ndarray, dtype, eps: float, order: int, scale) -> np.ndarray:
    """`[x₊, x₋]` for every level and entry of a flat leaf: shape `(2, levels, n)`."""
    steps = _fd.smallest_step(eps) * _fd.magnitude(x, scale) * _fd.ladder(order)[:, None]
    return np.stack([_fd.round_to(x + steps, dtype), _fd.round_to(x - steps, dtype)])


def full_check(target: Target, ad: str, order: int, scale, batch_size):
    """Entry-by-entry central differences of every leaf.

    Returns:
        `(f(x), [RawLeaf per leaf], number of evaluations)`.
    """
    leaves = target.leaves
    xs = [np.asarray(leaf, np.float64).ravel() for leaf in leaves]
    eps = [target.eps(leaf) for leaf in leaves]
    points = [
        entry_points(x, leaf.dtype, e, order, scale)
        for x, leaf, e in zip(xs, leaves, eps, strict=True)
    ]
    leaf_id = np.concatenate([np.full(p.size, k) for k, p in enumerate(points)])
    index = np.concatenate(
        [np.broadcast_to(np.arange(p.shape[-1]), p.shape).ravel() for p in points]
    )
    values = jnp.asarray(np.concatenate([p.ravel() for p in points]), promoted_dtype(*leaves))
    value, grads, f = _full_program(
        target.scalar_fn,
        ad,
        batch_size,
        leaves,
        jnp.asarray(leaf_id, jnp.int32),
        jnp.asarray(index, jnp.int32),
        values,
    )
    f_split = np.split(host(f), np.cumsum([p.size for p in points])[:-1])
    raw = []
    for leaf, path, grad, p, e, fk in zip(
        leaves, target.paths, grads, points, eps, f_split, strict=True
    ):
        fk, delta, analytic = fk.reshape(p.shape), p[0] - p[1], host(grad).ravel()
        est = _fd.extrapolate(fk[0], fk[1], analytic * delta, delta, target.out_eps)
        fd = analytic + est.residual
        raw.append(RawLeaf(path, leaf.shape, str(leaf.dtype), analytic, fd, est.error, e))
    return float(value), raw, int(f.size)


def directional_check(
    target: Target, ad: str, order: int, num_directions: int, rng, scale, batch_size
):
    """Directional derivatives along `num_directions` random directions.

    Returns:
        `(f(x), [one RawLeaf over the directions], number of evaluations)`.
    """
    leaves, n = target.leaves, num_directions
    eps = max(target.eps(leaf) for leaf in leaves)
    d = directions(leaves, n, eps, order, rng, scale)
    dirs, t, tangents = d.dirs, d.t, d.tangents
    jvp_at = None if ad == "reverse" else d.tangent_stack(leaves)
    value, analytic, f = _directional_program(
        target.scalar_fn, ad, batch_size, leaves, d.points, jvp_at
    )
    f = host(f).reshape(2, t.size, n)
    if ad == "forward":  # JVPs along [dirs, tangents]
        jvps = host(analytic)
        nominal, predicted = jvps[:n], jvps[n:].reshape(t.size, n)
    else:  # the gradient
        grads = [host(g) for g in analytic]
        nominal, predicted = _dot(grads, dirs), _dot(grads, tangents)
    delta = np.broadcast_to(2 * t[:, None], (t.size, n))
    est = _fd.extrapolate(f[0], f[1], predicted, delta, target.out_eps)
    dtype = str(promoted_dtype(*leaves))
    leaf = RawLeaf("directions", (n,), dtype, nominal, nominal + est.residual, est.error, eps)
    return float(value), [leaf], int(f.size)


@dataclasses.dataclass(frozen=True)
class Directions:
    """Random directions `v_j` and the points `x ± t_k v_j` of a directional check.

    Attributes:
        dirs: per leaf, `(n, *shape)`, exactly representable in the leaf's dtype.
        t: the step ladder `t_k`, largest first.
        tangents: per leaf, `x₊ − x₋` of the rounded points, `(levels, n, *shape)`.
        points: per leaf, `[x₊; x₋]` stacked on one axis, in the leaf's dtype.
    """

    dirs: list[np.ndarray]
    t: np.ndarray
    tangents: list[np.ndarray]
    points: list[jax.Array]

    def tangent_stack(self, leaves: list[jax.Array]) -> list[jax.Array]:
        """Per leaf, `[dirs; tangents]` on one axis: where the analytic side is taken."""
        return [_stack(*z) for z in zip(leaves, self.dirs, self.tangents, strict=True)]


def directions(leaves: list[jax.Array], n: int, eps: float, order: int, rng, scale) -> Directions:
    """`n` standard normal directions in coordinates scaled by each entry's magnitude."""
    xs = [np.asarray(leaf, np.float64) for leaf in leaves]
    dirs = [
        _fd.round_to(_fd.magnitude(x, scale) * rng.standard_normal((n, *x.shape)), leaf.dtype)
        for x, leaf in zip(xs, leaves, strict=True)
    ]
    t = _fd.smallest_step(eps) * _fd.ladder(order)
    plus = [_along(x, d, t, leaf.dtype) for x, d, leaf in zip(xs, dirs, leaves, strict=True)]
    minus = [_along(x, d, -t, leaf.dtype) for x, d, leaf in zip(xs, dirs, leaves, strict=True)]
    tangents = [p - m for p, m in zip(plus, minus, strict=True)]  # exact
    points = [_stack(leaf, p, m) for leaf, p, m in zip(leaves, plus, minus, strict=True)]
    return Directions(dirs, t, tangents, points)


def _along(x: np.ndarray, dirs: np.ndarray, t: np.ndarray, dtype) -> np.ndarray:
    """`x + t_k v_j` rounded to `dtype`, shape `(levels, n, *x.shape)`."""
    return _fd.round_to(x + t.reshape(-1, *[1] * dirs.ndim) * dirs, dtype)


def _stack(leaf: jax.Array, *parts: np.ndarray) -> jax.Array:
    """Concatenate stacks of `leaf`-shaped arrays along one leading axis, in its dtype."""
    flat = [p.reshape(-1, *leaf.shape) for p in parts]
    return jnp.asarray(np.concatenate(flat).astype(leaf.dtype))


def _dot(grads: list[np.ndarray], stacks: list[np.ndarray]) -> np.ndarray:
    """`Σ_leaves ⟨g, v⟩` for each of the stacked `v` (leading axes kept)."""
    sums = [
        np.sum(g * v, axis=tuple(range(v.ndim - g.ndim, v.ndim)))
        for g, v in zip(grads, stacks, strict=True)
    ]
    return functools.reduce(operator.add, sums)
