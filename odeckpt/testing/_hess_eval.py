"""Second derivatives against finite differences of the gradient, for `check_hessian`.

The scheme of `_fd_eval` one derivative up (`docs/testing.md`, "Second derivatives"):
each check compiles one program, the gradient at every perturbed point in one
`lax.map`, and the analytic side.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt._core import promoted_dtype

from . import _fd
from ._fd_eval import RawLeaf, at_entry, directions, entry_points, host
from ._fd_target import Target


def _gradient(scalar_fn, ad):
    """`leaves -> flat gradient` (one vector over every leaf), by `ad`'s mode."""
    grad = jax.grad(scalar_fn) if ad == "reverse" else jax.jacfwd(scalar_fn)

    def flat(leaves):
        grads = grad(leaves)
        dtype = promoted_dtype(*grads)
        return jnp.concatenate([g.astype(dtype).ravel() for g in grads])

    return flat


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _hessian_program(scalar_fn, ad, batch_size, leaves, leaf_id, index, values):
    """`f(x)`, the Hessian (columns of every leaf, `(N, n_k)` each), and the gradient at
    each point `leaves[leaf_id[j]].ravel()[index[j]] = values[j]`."""
    gradient = _gradient(scalar_fn, ad)
    g = lax.map(at_entry(gradient, leaves), (leaf_id, index, values), batch_size=batch_size)
    columns = jax.jacfwd(gradient)(leaves)  # jax.hessian's blocks, rows flattened
    columns = [c.reshape(c.shape[0], -1) for c in columns]
    return scalar_fn(leaves), columns, g


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _hvp_program(scalar_fn, ad, batch_size, leaves, points, tangents):
    """`f(x)`, the Hessian-vector products along `tangents`, and the gradient at each
    stacked point."""
    gradient = _gradient(scalar_fn, ad)
    g = lax.map(gradient, points, batch_size=batch_size)
    hvp = lambda t: jax.jvp(gradient, (leaves,), (t,))[1]
    return scalar_fn(leaves), lax.map(hvp, tangents, batch_size=batch_size), g


def _split_rows(flat: np.ndarray, target: Target) -> list[np.ndarray]:
    """Split a last axis over every leaf's entries into one array per leaf."""
    sizes = [leaf.size for leaf in target.leaves]
    return np.split(flat, np.cumsum(sizes)[:-1], axis=-1)


def _hessian_eps(target: Target) -> float:
    """The working precision of the Hessian: the coarsest over the leaves and output."""
    return max(target.eps(leaf) for leaf in target.leaves)


def full_hessian(target: Target, ad: str, order: int, scale, batch_size):
    """Entry-by-entry central differences of the gradient: every Hessian entry.

    Returns:
        `(f(x), [RawLeaf per block (l, k)], number of gradient evaluations)`.
    """
    leaves, eps = target.leaves, _hessian_eps(target)
    xs = [np.asarray(leaf, np.float64).ravel() for leaf in leaves]
    points = [
        entry_points(x, leaf.dtype, target.eps(leaf), order, scale)
        for x, leaf in zip(xs, leaves, strict=True)
    ]
    leaf_id = np.concatenate([np.full(p.size, k) for k, p in enumerate(points)])
    index = np.concatenate(
        [np.broadcast_to(np.arange(p.shape[-1]), p.shape).ravel() for p in points]
    )
    values = jnp.asarray(np.concatenate([p.ravel() for p in points]), promoted_dtype(*leaves))
    value, columns, g = _hessian_program(
        target.scalar_fn,
        ad,
        batch_size,
        leaves,
        jnp.asarray(leaf_id, jnp.int32),
        jnp.asarray(index, jnp.int32),
        values,
    )
    g_split = np.split(host(g), np.cumsum([p.size for p in points])[:-1])
    blocks: dict[tuple[int, int], RawLeaf] = {}
    for k, (p, gk, column) in enumerate(zip(points, g_split, columns, strict=True)):
        n_k = p.shape[-1]
        gk = np.swapaxes(gk.reshape(*p.shape, -1), -1, -2)  # (2, levels, N, n_k)
        delta = (p[0] - p[1])[:, None, :]  # (levels, 1, n_k)
        column = host(column)  # (N, n_k)
        est = _fd.extrapolate(
            gk[0].reshape(p.shape[1], -1),
            gk[1].reshape(p.shape[1], -1),
            (column * delta).reshape(p.shape[1], -1),
            np.broadcast_to(delta, gk.shape[1:]).reshape(p.shape[1], -1),
            eps,
        )
        parts = zip(
            *(
                _split_rows(a.reshape(-1, n_k).T, target)
                for a in (column.ravel(), est.residual, est.error)
            ),
            strict=True,
        )
        for row, (analytic, residual, error) in enumerate(parts):
            analytic, residual, error = (a.T.ravel() for a in (analytic, residual, error))
            blocks[row, k] = RawLeaf(
                f"H[{target.paths[row]}, {target.paths[k]}]",
                (*leaves[row].shape, *leaves[k].shape),
                str(promoted_dtype(leaves[row], leaves[k])),
                analytic,
                analytic + residual,
                error,
                eps,
            )
    n = len(leaves)
    return float(value), [blocks[row, k] for row in range(n) for k in range(n)], int(g.shape[0])


def directional_hessian(
    target: Target, ad: str, order: int, num_directions: int, rng, scale, batch_size
):
    """Central differences of the gradient along `num_directions` random directions.

    Returns:
        `(f(x), [RawLeaf per leaf of H v], number of gradient evaluations)`.
    """
    leaves, n, eps = target.leaves, num_directions, _hessian_eps(target)
    d = directions(leaves, n, eps, order, rng, scale)
    value, hvps, g = _hvp_program(
        target.scalar_fn, ad, batch_size, leaves, d.points, d.tangent_stack(leaves)
    )
    t = d.t
    g, hvps = host(g).reshape(2, t.size, n, -1), host(hvps)
    nominal, predicted = hvps[:n], hvps[n:].reshape(t.size, n, -1)
    delta = np.broadcast_to(2 * t[:, None, None], predicted.shape)
    levels = t.size
    est = _fd.extrapolate(
        g[0].reshape(levels, -1),
        g[1].reshape(levels, -1),
        predicted.reshape(levels, -1),
        delta.reshape(levels, -1),
        eps,
    )
    parts = zip(
        *(_split_rows(a.reshape(n, -1), target) for a in (nominal, est.residual, est.error)),
        strict=True,
    )
    raw = [
        RawLeaf(
            f"Hv[{path}]",
            (n, *leaf.shape),
            str(leaf.dtype),
            analytic.ravel(),
            (analytic + residual).ravel(),
            error.ravel(),
            eps,
        )
        for path, leaf, (analytic, residual, error) in zip(target.paths, leaves, parts, strict=True)
    ]
    return float(value), raw, int(g.size // g.shape[-1])
