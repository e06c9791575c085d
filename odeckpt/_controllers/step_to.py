"""`StepTo`: steps to given times."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import RESULTS, concrete

from .base import AbstractLoopController, Decision

sg = lax.stop_gradient


class StepTo(AbstractLoopController):
    """Steps exactly to the given times `ts` (`ts[0] = t0`, `ts[-1] = t1`)."""

    ts: jax.Array = eqx.field(converter=jnp.asarray)

    def __check_init__(self):
        ts = concrete(self.ts)
        if ts is not None and (ts.ndim != 1 or ts.size < 2):
            raise ValueError(
                f"`StepTo(ts=...)` needs a 1-D array of at least 2 times; got shape {ts.shape}."
            )

    def for_solve(self, t0, t1, dt0, sign) -> "StepTo":
        """Its times in internal time: `sign * ts`, in the time dtype."""
        return StepTo(jnp.asarray(self.ts, t0.dtype) * sign)

    @property
    def step_times(self) -> jax.Array:
        return self.ts

    def first_step(self, solver, term, t0, y0, dt0, args):
        return sg(jnp.asarray(self.ts[1] - self.ts[0]))

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        state = eqx.tree_at(lambda s: s.index, state, state.index + 1)
        return Decision(jnp.asarray(True), dt, state, jnp.asarray(RESULTS.successful))

    def next_time(self, t_new, decision):
        index = jnp.minimum(decision.state.index + 1, self.ts.shape[0] - 1)
        return sg(self.ts[index]).astype(jnp.result_type(t_new))

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        return self.ts.shape[0] - 1
