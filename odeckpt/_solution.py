"""The result of a solve."""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._core.custom_types import Y
from ._solvers.dense import DenseStep


class DenseInterpolation(eqx.Module):
    """Every accepted step's polynomial, for `Solution.evaluate`."""

    steps: DenseStep  # stacked: leaves have a leading axis of length max_steps
    num_steps: jax.Array
    direction: jax.Array
    y0: Y | None = None  # returned when no step was taken (e.g. t0 == t1)
    reached: jax.Array | None = None  # internal time a failed solve reached; inf beyond

    def evaluate(self, t) -> Y:
        t = jnp.asarray(t)
        if t.ndim > 0:
            return jax.vmap(self.evaluate)(t)
        tau = self.direction * t
        ends = jnp.where(
            jnp.arange(self.steps.t1.shape[0]) < self.num_steps, self.steps.t1, jnp.inf
        )
        i = jnp.clip(
            jnp.searchsorted(ends, tau, side="left"), 0, jnp.maximum(self.num_steps - 1, 0)
        )
        value = jax.tree.map(lambda x: x[i], self.steps).evaluate(tau)
        if self.y0 is not None:
            # Without steps, row 0 is an unfilled (inf) buffer row: its polynomial is NaN.
            value = jax.tree.map(lambda v, y: jnp.where(self.num_steps > 0, v, y), value, self.y0)
        if self.reached is None:
            return value
        # Nothing was computed beyond where a failed solve stopped: inf there.
        beyond = tau > self.reached
        return jax.tree.map(lambda v: jnp.where(beyond, jnp.inf, v), value)


class Solution(eqx.Module):
    """What `diffeqsolve` returns.

    Attributes:
        t0, t1: the integration interval.
        ts: the times of the saved outputs: `[t0] + ts + steps + [t1]`, as requested
            by `SaveAt` (unfilled rows, e.g. beyond a failure, are `inf`).
        ys: the saved states, a PyTree like `y0` with a leading axis matching `ts`.
        stats: `num_steps`, `num_accepted_steps`, `num_rejected_steps`,
            `num_vf_evals` (vector-field evaluations of the forward solve).
        result: an integer `RESULTS` code; `0` (`RESULTS.successful`) on success.
    """

    t0: jax.Array
    t1: jax.Array
    ts: jax.Array | None
    ys: Y | None
    stats: dict
    result: jax.Array
    interpolation: DenseInterpolation | None

    def evaluate(self, t) -> Y:
        """The dense solution at `t` (scalar or 1-D array). Needs `SaveAt(dense=True)`."""
        if self.interpolation is None:
            raise ValueError(
                "`Solution.evaluate` needs dense output: pass `saveat=SaveAt(dense=True)`."
            )
        return self.interpolation.evaluate(t)
