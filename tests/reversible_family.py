"""A family of problems on which `ReversibleAdjoint`'s refusal is checked: for every
case, its gradient is either refused or within its tolerance of `CheckpointAdjoint`'s
through the same solver.

Kinds: damped linear systems (3 states, damping rates 0-3, random rotations), Van der
Pol (mu 0.2-3), Lorenz (the classic parameters, perturbed) and neural ODEs (an MLP
2-16-2 with random weights of scale 0.5-2); horizons 1-100; constant steps and
`PIDController(rtol=1e-6, atol=1e-8)`. The loss is `sum(y(t1)^2)`, differentiated with
respect to `y0` and the parameters. Each kind runs as one `jax.vmap` over its cases
(one compilation per kind, controller and adjoint).

Used by `tests/test_reversible_safety.py` and `benchmarks/bench_reversible_safety.py`.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import odeckpt as oc

HORIZONS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
MAX_STEPS = 4096


def _linear(t, y, a):
    return a @ y


def _van_der_pol(t, y, mu):
    return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


def _lorenz(t, y, p):
    sigma, rho, beta = p[0], p[1], p[2]
    return jnp.stack([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1], y[0] * y[1] - beta * y[2]])


def _mlp(t, y, w):
    w1, b1, w2 = w
    return w2 @ jnp.tanh(w1 @ y + b1)


def _damped_matrices(key, n):
    k1, k2, k3 = jr.split(key, 3)
    q, _ = jnp.linalg.qr(jr.normal(k1, (n, 3, 3)))
    rates = jr.uniform(k2, (n, 3), maxval=3.0)
    skew = jr.normal(k3, (n, 3, 3))
    skew = skew - jnp.swapaxes(skew, 1, 2)
    return jnp.einsum("nij,nj,nkj->nik", q, -rates, q) + skew


def _mlp_weights(key, n):
    k1, k2, k3, k4 = jr.split(key, 4)
    scale = jr.uniform(k4, (n, 1, 1), minval=0.5, maxval=2.0)
    w1 = scale * jr.normal(k1, (n, 16, 2)) / np.sqrt(2)
    w2 = scale * jr.normal(k3, (n, 2, 16)) / np.sqrt(16)
    return (w1, 0.1 * jr.normal(k2, (n, 16)), w2)


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    field: Callable
    draw: Callable  # (key, n) -> (y0, args), batched over n
    dt: float  # constant step (adaptive: the first step)


KINDS = (
    Kind(
        "damped linear",
        _linear,
        lambda key, n: (jr.normal(key, (n, 3)), _damped_matrices(jr.fold_in(key, 1), n)),
        0.02,
    ),
    Kind(
        "Van der Pol",
        _van_der_pol,
        lambda key, n: (
            jr.normal(key, (n, 2)) + jnp.array([[2.0, 0.0]]),
            jr.uniform(jr.fold_in(key, 1), (n,), minval=0.2, maxval=3.0),
        ),
        0.02,
    ),
    Kind(
        "Lorenz",
        _lorenz,
        lambda key, n: (
            jr.normal(key, (n, 3)) + jnp.array([[1.0, 1.0, 20.0]]),
            jnp.array([[10.0, 28.0, 8 / 3]])
            * jr.uniform(jr.fold_in(key, 1), (n, 3), minval=0.9, maxval=1.1),
        ),
        0.005,
    ),
    Kind(
        "neural ODE",
        _mlp,
        lambda key, n: (jr.normal(key, (n, 2)), _mlp_weights(jr.fold_in(key, 1), n)),
        0.02,
    ),
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Per case: `stopped` (the forward solve ended with a failure code), `refused`
    (the gradient came back NaN), `error` (relative max-norm distance from
    `CheckpointAdjoint`'s gradient; NaN where refused)."""

    horizon: np.ndarray
    stopped: np.ndarray
    refused: np.ndarray
    error: np.ndarray


def cases(kind: Kind, draws: int, dtype, seed: int = 0):
    """`draws` random problems at every horizon: `(y0, args, t1)`, batched."""
    n = draws * len(HORIZONS)
    y0, args = kind.draw(jr.PRNGKey(seed), n)
    t1 = jnp.repeat(jnp.asarray(HORIZONS), draws)
    cast = lambda x: x.astype(dtype)
    return jax.tree.map(cast, (y0, args, t1))


def _gradient(kind: Kind, adaptive: bool, solver, adjoint):
    dt = kind.dt
    controller = oc.PIDController(rtol=1e-6, atol=1e-8) if adaptive else oc.ConstantStepSize()

    def loss(y0, args, t1):
        sol = oc.diffeqsolve(
            oc.ODETerm(kind.field),
            solver,
            0.0,
            t1,
            jnp.asarray(dt, t1.dtype),
            y0,
            args,
            stepsize_controller=controller,
            adjoint=adjoint,
            max_steps=MAX_STEPS,
            throw=False,
        )
        return jnp.sum(sol.ys[-1] ** 2), sol.result

    grad = jax.grad(loss, argnums=(0, 1), has_aux=True)
    return jax.jit(jax.vmap(grad))


def _flat(tree) -> np.ndarray:
    leaves = [np.asarray(x).reshape(x.shape[0], -1) for x in jax.tree.leaves(tree)]
    return np.concatenate(leaves, axis=1)


@functools.cache
def _reference(kind: Kind, adaptive: bool, draws: int, dtype, solver, seed: int):
    """`CheckpointAdjoint()`'s gradients through `solver`, flattened per case."""
    y0, args, t1 = cases(kind, draws, dtype, seed)
    g_ref, _ = _gradient(kind, adaptive, solver, oc.CheckpointAdjoint())(y0, args, t1)
    return _flat(g_ref)


def evaluate(
    kind: Kind,
    adaptive: bool,
    draws: int,
    dtype,
    *,
    coupling: float = 0.999,
    max_amplification: float | None = 1.0,
    seed: int = 0,
    gradient_tol: float | None = None,
) -> Outcome:
    """Every case of `kind`: `ReversibleAdjoint()` against `CheckpointAdjoint()` through
    `Reversible(Tsit5(), coupling=..., max_amplification=...)`."""
    solver = oc.Reversible(oc.Tsit5(), coupling=coupling, max_amplification=max_amplification)
    y0, args, t1 = cases(kind, draws, dtype, seed)
    reversible = oc.ReversibleAdjoint(gradient_tol=gradient_tol, throw=False)
    g_rev, result = _gradient(kind, adaptive, solver, reversible)(y0, args, t1)
    rev, ref = _flat(g_rev), _reference(kind, adaptive, draws, dtype, solver, seed)
    refused = np.isnan(rev).any(axis=1)
    scale = np.max(np.abs(ref), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        error = np.max(np.abs(rev - ref), axis=1) / scale
    stopped = np.asarray(result) != 0
    return Outcome(np.asarray(t1), stopped, refused & ~stopped, np.where(refused, np.nan, error))


def tolerance(dtype) -> float:
    """`ReversibleAdjoint`'s default `gradient_tol` for `dtype`."""
    return float(jnp.finfo(dtype).eps) ** (1 / 3)
