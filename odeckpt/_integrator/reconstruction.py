"""How far a gradient through reconstructed states can be trusted: the checks behind
`Integrator.inverse`, which `reversible_loop` runs.

A reversible solver's backward pass evaluates each step's VJP at a state rebuilt from
the next one by the inverse step, off the forward state by the round-off the inverse
steps amplified (the drift). The gradient's error is that drift, and the round-off of
the backward pass itself, times how much the backward pass amplifies them: where its
cotangents grow (a coupled pair's parasitic mode grows the forward gap and, transposed,
the backward cotangents), and where the problem's cotangent is a sum over the steps
that cancels. So the refusal is on an estimate of the gradient's relative error,

    error = SAFETY * amplification * max(drift, eps),

with `amplification` the larger of the largest cotangent of the state over the backward
pass divided by the largest the outputs received, and the sum over the steps of the
problem's cotangents' magnitudes divided by their sum (`reversible_loop` measures
both), and `drift` the reconstructed states' distance from the forward ones, relative
to each state's largest entry: measured exactly at the initial state, and over every
step by two direction-sensitive checksums per leaf (each state's projections on
pseudo-random weights that change with the step, summed over the steps in both passes:
their difference is a random projection of every step's drift at once, so it does not
cancel where the drift alternates in sign). See `docs/adjoints.md` for the measured
false-negative rate.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._checkpointing import Checksum
from odeckpt._core import largest_magnitude, materialize

from .state import State

SAFETY = 10.0
"""The error estimate's factor over `amplification * drift` (calibrated on the
problem family of `benchmarks/bench_reversible_safety.py`)."""


def _floating(state: State, part: Callable) -> list:
    """The floating leaves of `state.y` and `part(state.solver_state)` (the part a
    reconstruction must rebuild: `AbstractReversibleSolver.reconstructed`)."""
    leaves = jax.tree.leaves((state.y, part(state.solver_state)))
    return [x for x in leaves if jnp.issubdtype(x.dtype, jnp.inexact)]


def largest(state: State, part: Callable) -> jax.Array:
    """`max |x|` over the floating leaves of `state.y` and `part(state.solver_state)` (of
    a state or its cotangent), in `state.t`'s dtype."""
    return largest_magnitude(_floating(state, part), jnp.result_type(state.t))


def initial_gradient_size(solver, problem, state0: State, ct_state) -> jax.Array:
    """`max |x|` over the cotangent of `y0` that `ct_state`, the initial state's, gives:
    its `y`'s plus its solver state's pulled back through `solver.init_state` (for
    `Reversible`, `z0 = y0`: where the pair's parasitic mode grew, the two are large
    and cancel)."""
    init = lambda y: solver.init_state(problem.term, state0.t, y, problem.args)
    k0, pull = jax.vjp(init, state0.y)
    ct_k = materialize(ct_state.solver_state, k0)
    ct_k = jax.tree.map(lambda c, k: c if jnp.issubdtype(k.dtype, jnp.inexact) else None, ct_k, k0)
    (ct_y0,) = pull(materialize(ct_k, k0))
    ct_y = materialize(ct_state.y, state0.y)
    return largest_magnitude(jax.tree.map(jnp.add, ct_y, ct_y0), jnp.result_type(state0.t))


def _weights(shape, index):
    """Pseudo-random weights in [-1, 1), in float32, a function of each element's
    position and the step `index` only: an integer hash, so both passes compute the same
    bits (the same for every leaf of a shape: each leaf's projections are its own)."""
    size = 1
    for n in shape:
        size *= n
    h = lax.iota(jnp.uint32, size).reshape(shape) * jnp.uint32(0x9E3779B1)
    h = h + index.astype(jnp.uint32) * jnp.uint32(0x85EBCA77)
    for shift, factor in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        h = (h ^ (h >> shift)) * jnp.uint32(factor)
    h = h ^ (h >> 16)
    return (h >> 8).astype(jnp.float32) * (2.0**-23) - 1


def checksum(state: State, index, part: Callable) -> Checksum:
    """Per floating leaf of `y` and `part(solver_state)`: its projections, relative to
    its own largest entry, on the weights `w` of step `index` and on `(3 w^2 - 1) / 2`
    (uncorrelated with `w`: one buffer of weights serves both); in the time dtype
    (complex leaves' projections complex)."""
    dtype = jnp.result_type(state.t)
    sums = []
    for x in _floating(state, part):
        w = _weights(x.shape, index)
        x = x.astype(jnp.promote_types(x.dtype, dtype))
        scale = jnp.maximum(jnp.max(jnp.abs(x), initial=0), jnp.finfo(dtype).tiny)
        first, second = w.astype(x.dtype), (1.5 * w * w - 0.5).astype(x.dtype)
        sums.append(jnp.stack([jnp.sum(first * x), jnp.sum(second * x)]) / scale)
    return Checksum(tuple(sums))


def drift(
    state0: State, reconstructed: State, forward: Checksum, backward: Checksum, part: Callable
):
    """The reconstructed states' distance from the forward ones, relative to each
    state's largest entry, per leaf, and the largest over the leaves: exact at the
    initial state, and estimated over every step by the checksums (the RMS of the
    projections' differences, each scaled to unit variance: weights uniform in [-1, 1)
    have variance 1/3, their second Legendre polynomial 1/5). Never below the leaves'
    round-off."""
    pairs = zip(_floating(reconstructed, part), _floating(state0, part), strict=True)
    rows = zip(forward.sums, backward.sums, pairs, strict=True)
    dtype = jnp.result_type(state0.t)
    out = jnp.zeros((), dtype)
    for f, b, (x, x0) in rows:
        scale = jnp.maximum(jnp.max(jnp.abs(x0), initial=0).astype(dtype), jnp.finfo(dtype).tiny)
        initial = jnp.max(jnp.abs(x - x0), initial=0).astype(dtype) / scale
        d = jnp.abs(f - b) ** 2
        steps = jnp.sqrt((3 * d[0] + 5 * d[1]) / 2).astype(dtype)
        eps = jnp.asarray(jnp.finfo(x.dtype).eps, dtype)
        out = jnp.maximum(out, jnp.maximum(jnp.maximum(initial, steps), eps))
    return out


def default_tolerance(state: State, part: Callable) -> float:
    """`gradient_tol=None`: `eps ** (1/3)` of the least precise floating leaf (6e-6 in
    float64, 4.9e-3 in float32)."""
    leaves = _floating(state, part)
    eps = max((float(jnp.finfo(x.dtype).eps) for x in leaves), default=2.0**-52)
    return eps ** (1 / 3)


def refused(
    state0: State,
    reconstructed: State,
    forward: Checksum,
    backward: Checksum,
    amplification,
    *,
    part: Callable,
    tolerance: float | None = None,
):
    """Whether the gradient's estimated relative error (see the module docstring)
    exceeds `tolerance` (`None`: `default_tolerance`)."""
    tol = default_tolerance(state0, part) if tolerance is None else tolerance
    off = drift(state0, reconstructed, forward, backward, part)
    estimate = SAFETY * jnp.maximum(amplification, 1) * off
    return jnp.logical_not(estimate <= tol)  # NaN refuses
