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

from odeckpt._core import RESULTS, zero_tangent
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.linear.stage_matrix import AbstractStageMatrix


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
        matrix: the Newton matrix in use at the end (refreshed if the first failed).
        iterations: Newton iterations spent, restart included.
        unsolved: whether the iteration failed because a linear solve did (an
            iterative linear solver short of its tolerance).
    """

    k: jax.Array
    converged: jax.Array
    eta: jax.Array
    matrix: AbstractStageMatrix
    iterations: jax.Array
    unsolved: jax.Array


class _Iterate(eqx.Module):
    k: jax.Array
    prev: jax.Array  # |dz| of the previous iteration
    eta: jax.Array
    count: jax.Array
    converged: jax.Array
    failed: jax.Array
    unsolved: jax.Array  # the last linear solve failed


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


def stage_failure(converged, unsolved) -> jax.Array:
    """A step's result code from its stages: whether they all `converged`, and whether
    a failing one failed in its linear solve (`unsolved`)."""
    failed = jnp.where(unsolved, RESULTS.breakdown, RESULTS.implicit_solve_failed)
    return jnp.where(converged, RESULTS.successful, failed)


def iterating(it) -> jax.Array:
    """Whether a Newton iteration record (`converged`, `failed`) goes on."""
    return ~(it.converged | it.failed)


def _chord(
    f, stage: Stage, guess, matrix: AbstractStageMatrix, eta0, options: NewtonOptions
) -> _Iterate:
    """Simplified Newton from `guess` with the fixed Newton matrix `matrix`; a linear
    solve that fails (an iterative solver short of its tolerance) fails the iteration."""
    dtype = guess.dtype
    floor = 100 * jnp.finfo(dtype).eps  # below this, increments are rounding noise
    rtol = jnp.maximum(jnp.asarray(options.rtol, dtype), floor)
    solve = matrix.prepared(f)

    def body(it: _Iterate) -> _Iterate:
        z = stage.base + stage.hg * it.k
        dk, solved = solve(f(stage.t, z) - it.k)
        atol = jnp.maximum(jnp.asarray(options.atol, dtype), floor * la.rms(z))
        size = la.rms(stage.hg * dk / (atol + rtol * jnp.abs(z)))
        eta, converged, failed = verdict(size, it.prev, it.eta, it.count, options.max_iters)
        converged, failed = converged & solved, failed | ~solved
        return _Iterate(it.k + dk, size, eta, it.count + 1, converged, failed, ~solved)

    zero = jnp.zeros((), dtype)
    start = _Iterate(
        guess,
        zero,
        jnp.asarray(eta0, dtype),
        jnp.asarray(0, jnp.int32),
        jnp.asarray(False),
        jnp.asarray(False),
        jnp.asarray(False),
    )
    return lax.while_loop(iterating, body, start)


def solve_stage(
    f, stage: Stage, guess, matrix: AbstractStageMatrix, eta0, options: NewtonOptions
) -> StageResult:
    """Solve `k = f(t, base + hg k)` (forward: chord Newton; derivative: implicit).

    Args:
        f: the flat vector field `f(t, z)`.
        stage: the stage's equation.
        guess: the starting slope (the predictor); it does not affect derivatives.
        matrix: the Newton matrix `I - hg J` for the step's Jacobian `J`.
        eta0: the error-bound factor to judge the first iteration with.
        options: tolerances and iteration limit.
    """
    # The arrays `f` closes over become arguments, so that the custom JVP sees
    # their tangents.
    pure, consts = jax.closure_convert(f, stage.t, stage.base)

    # The matrix's arrays pass as arguments, the rest (a preconditioner's closure-
    # converted program) is closed over.
    arrays, static = eqx.partition(matrix, eqx.is_array)

    @jax.custom_jvp
    def root(consts, t, base, hg, guess, arrays, eta0):
        field = lambda t, z: pure(t, z, *consts)
        matrix = eqx.combine(arrays, static)
        return _solve_with_restart(field, Stage(t, base, hg), guess, matrix, eta0, options)

    def root_jvp(primals, tangents):
        out = root(*primals)
        k, matrix = out[0], eqx.combine(primals[5], static)

        def residual(consts, t, base, hg, k):
            return k - pure(t, base + hg * k, *consts)

        _, linear = jax.linearize(residual, *primals[:4], k)
        rhs = linear(*tangents[:4], jnp.zeros_like(k))
        dk = -matrix.tangent_solve(linear, primals[:4], k, rhs)
        return out, (dk, *jax.tree.map(zero_tangent, out[1:]))

    _ = root.defjvp(root_jvp)
    k, converged, eta, arrays_out, iterations, unsolved = root(
        tuple(consts), stage.t, stage.base, stage.hg, guess, arrays, eta0
    )
    matrix_out = eqx.combine(arrays_out, static)
    return StageResult(k, converged, eta, matrix_out, iterations, unsolved)


def _solve_with_restart(f, stage: Stage, guess, matrix, eta0, options: NewtonOptions):
    """Chord Newton; on failure, refresh the Jacobian at the guess and restart once.

    Why a `while_loop`, and the counter-scaled basis (`unit`): `docs/solver-internals.md`,
    "The stage iteration".
    """
    first = _chord(f, stage, guess, matrix, eta0, options)

    def again(carry):
        it, _, restarts = carry
        return it.failed & (restarts < 1)

    arrays, static = eqx.partition(matrix, eqx.is_array)  # the loop carries arrays only

    def restart(carry):
        _, _, restarts = carry
        unit = jnp.where(restarts >= 0, 1, 0)  # always 1; see the docstring
        fresh = matrix.refreshed(f, stage.t, stage.base + stage.hg * guess, unit)
        it = _chord(f, stage, guess, fresh, jnp.ones_like(eta0), options)
        return it, eqx.filter(fresh, eqx.is_array), restarts + 1

    start = (first, arrays, jnp.asarray(0, jnp.int32))
    it, arrays_out, restarts = lax.while_loop(again, restart, start)
    iterations = it.count + jnp.where(restarts > 0, first.count, 0)
    unsolved = it.unsolved & ~it.converged
    return it.k, it.converged, it.eta, arrays_out, iterations, unsolved


def dense_tangent_solve(linear, rhs):
    """Solve `linear(x) = rhs` by forming its matrix (`n` products) and factorising it.

    `linear` is the stage equation linearised at its solution, `I - hg df/dy(t, z)`.
    The matrix depends only on the solution, so reverse mode transposes the solve
    alone.
    """
    basis = jnp.eye(rhs.shape[0], dtype=rhs.dtype)
    matrix = jax.vmap(linear)(basis).T
    return la.solve(la.factor(matrix), rhs)
