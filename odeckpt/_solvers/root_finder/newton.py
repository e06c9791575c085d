"""The implicit stage solve of the ESDIRK, IMEX and implicit Euler methods: simplified
Newton, differentiated implicitly (`docs/solver-internals.md`, "The stage iteration").

References:
    E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.8
    (simplified Newton iterations for implicit Runge–Kutta methods, stopping rule).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import zero_tangent
from odeckpt._solvers.linear import dense as la


class NewtonOptions(eqx.Module):
    """Stopping rule of the stage iterations (`docs/solver-internals.md`, "The stage iteration")."""

    rtol: float
    atol: float
    max_iters: int = eqx.field(static=True)


class Stage(eqx.Module):
    """The equation of one implicit stage: `k = f(t, base + hg k)`."""

    t: jax.Array
    base: jax.Array
    hg: jax.Array  # h * gamma


class StageResult(eqx.Module):
    """A stage's slope and how its iteration went.

    Attributes:
        k: the slope (meaningless unless `converged`).
        converged: whether the stopping rule was met within `max_iters` iterations.
        eta: the last error-bound factor, to start the next stage's test.
        lu: the factorisation in use at the end (refreshed if the first failed).
        iterations: Newton iterations spent, restart included.
    """

    k: jax.Array
    converged: jax.Array
    eta: jax.Array
    lu: la.Factorisation
    iterations: jax.Array


class _Iterate(eqx.Module):
    k: jax.Array
    prev: jax.Array  # |dz| of the previous iteration
    eta: jax.Array
    count: jax.Array
    converged: jax.Array
    failed: jax.Array


def verdict(size, prev, eta, count, max_iters: int):
    """The stopping rule (`docs/solver-internals.md`, "The stage iteration"), after an iteration.

    Args:
        size: the scaled RMS norm `|dz_k|` of this iteration's increment.
        prev: that of the previous iteration (unused on the first).
        eta: the error-bound factor so far (`eta_0` on the first iteration).
        count: iterations done before this one.
        max_iters: the iteration limit.

    Returns:
        `(eta, converged, failed)`: the updated factor, and whether to stop with
        success or with failure (never both).
    """
    theta = size / jnp.where(prev > 0, prev, 1)
    first = count == 0
    eta = jnp.where(first, eta, theta / jnp.maximum(1 - theta, 1e-30))
    # An increment a tenth of the tolerance ends the iteration whatever the rate:
    # near rounding level the rate estimate is noise.
    converged = (eta * size <= 1) | (size <= 0.1)
    stalled = ~first & (theta >= 1) & ~converged
    failed = ~jnp.isfinite(size) | stalled | ((count + 1 >= max_iters) & ~converged)
    return eta, converged & ~failed, failed


def iterating(it) -> jax.Array:
    """Whether a Newton iteration record (`converged`, `failed`) goes on."""
    return ~(it.converged | it.failed)


def _chord(f, stage: Stage, guess, lu, eta0, options: NewtonOptions) -> _Iterate:
    """Simplified Newton from `guess` with the fixed factorisation `lu`."""
    dtype = guess.dtype
    floor = 100 * jnp.finfo(dtype).eps  # below this, increments are rounding noise
    rtol = jnp.maximum(jnp.asarray(options.rtol, dtype), floor)

    def body(it: _Iterate) -> _Iterate:
        z = stage.base + stage.hg * it.k
        dk = la.solve(lu, f(stage.t, z) - it.k)
        atol = jnp.maximum(jnp.asarray(options.atol, dtype), floor * la.rms(z))
        size = la.rms(stage.hg * dk / (atol + rtol * jnp.abs(z)))
        eta, converged, failed = verdict(size, it.prev, it.eta, it.count, options.max_iters)
        return _Iterate(it.k + dk, size, eta, it.count + 1, converged, failed)

    zero = jnp.zeros((), dtype)
    start = _Iterate(
        guess,
        zero,
        jnp.asarray(eta0, dtype),
        jnp.asarray(0, jnp.int32),
        jnp.asarray(False),
        jnp.asarray(False),
    )
    return lax.while_loop(iterating, body, start)


def solve_stage(
    f, stage: Stage, guess, lu: la.Factorisation, eta0, options: NewtonOptions
) -> StageResult:
    """Solve `k = f(t, base + hg k)` (forward: chord Newton; derivative: implicit).

    Args:
        f: the flat vector field `f(t, z)`.
        stage: the stage's equation.
        guess: the starting slope (the predictor); it does not affect derivatives.
        lu: the factorisation of `I - hg J` for the step's Jacobian `J`.
        eta0: the error-bound factor to judge the first iteration with.
        options: tolerances and iteration limit.
    """
    # The arrays `f` closes over become arguments, so that the custom JVP sees
    # their tangents.
    pure, consts = jax.closure_convert(f, stage.t, stage.base)

    @jax.custom_jvp
    def root(consts, t, base, hg, guess, lu, eta0):
        field = lambda t, z: pure(t, z, *consts)
        return _solve_with_restart(field, Stage(t, base, hg), guess, lu, eta0, options)

    def root_jvp(primals, tangents):
        out = root(*primals)
        k = out[0]

        def residual(consts, t, base, hg, k):
            return k - pure(t, base + hg * k, *consts)

        _, linear = jax.linearize(residual, *primals[:4], k)
        rhs = linear(*tangents[:4], jnp.zeros_like(k))
        # The matrix from the transpose (`docs/solver-internals.md`, "The stage iteration").
        transposed = jax.linear_transpose(linear, *primals[:4], k)
        basis = jnp.eye(k.shape[0], dtype=k.dtype)
        matrix = jax.vmap(lambda e: transposed(e)[-1])(basis)
        dk = -la.solve(la.factor(matrix), rhs)
        return out, (dk, *jax.tree.map(zero_tangent, out[1:]))

    _ = root.defjvp(root_jvp)
    k, converged, eta, lu_out, iterations = root(
        tuple(consts), stage.t, stage.base, stage.hg, guess, lu, eta0
    )
    return StageResult(k, converged, eta, lu_out, iterations)


def _solve_with_restart(f, stage: Stage, guess, lu, eta0, options: NewtonOptions):
    """Chord Newton; on failure, refresh the Jacobian at the guess and restart once.

    Why a `while_loop`, and the counter-scaled basis (`unit`): `docs/solver-internals.md`,
    "The stage iteration".
    """
    first = _chord(f, stage, guess, lu, eta0, options)

    def again(carry):
        it, _, restarts = carry
        return it.failed & (restarts < 1)

    def restart(carry):
        _, _, restarts = carry
        unit = jnp.where(restarts >= 0, 1, 0)  # always 1; see the docstring
        jac = la.jacobian(f, stage.t, stage.base + stage.hg * guess, unit)
        fresh = la.factor(la.shifted(jac, stage.hg))
        return _chord(f, stage, guess, fresh, jnp.ones_like(eta0), options), fresh, restarts + 1

    it, lu_out, restarts = lax.while_loop(again, restart, (first, lu, jnp.asarray(0, jnp.int32)))
    iterations = it.count + jnp.where(restarts > 0, first.count, 0)
    return it.k, it.converged, it.eta, lu_out, iterations


def dense_tangent_solve(linear, rhs):
    """Solve `linear(x) = rhs` by forming its matrix (`n` products) and factorising it.

    `linear` is the stage equation linearised at its solution, `I - hg df/dy(t, z)`.
    The matrix depends only on the solution, so reverse mode transposes the solve
    alone.
    """
    basis = jnp.eye(rhs.shape[0], dtype=rhs.dtype)
    matrix = jax.vmap(linear)(basis).T
    return la.solve(la.factor(matrix), rhs)
