"""Fixed steps: `ConstantStepSize`, and `UniformSteps`, its grid of equal steps that the
loop runs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt._core import RESULTS, concrete

from .base import AbstractLoopController, AbstractStepSizeController, Decision
from .landing import stretched_to_end

sg = lax.stop_gradient

MAX_COUNTED = 10**6
"""`ConstantStepSize.expected_steps` counts steps at trace time up to this many."""


def uniform_steps(t0, t1, dt0):
    """The number of equal steps `ceil((t1 - t0) / dt0)` (at least 1) that cover
    `[t0, t1]` with steps no longer than `dt0`, which is first rounded up by one ulp: a
    `dt0` that divides `t1 - t0` but for rounding gives that many steps, not one more.

    The same IEEE operations on NumPy scalars (concrete times) and on JAX arrays
    (traced times), so both give the same count."""
    xp = jnp if any(isinstance(v, jax.Array) for v in (t0, t1, dt0)) else np
    dt = xp.nextafter(dt0, xp.asarray(np.inf, xp.result_type(dt0)))
    count = xp.ceil((t1 - t0) / dt)
    return xp.clip(count, 1, 2**30).astype(xp.int32)


def uniform_time(t0, t1, k, n):
    """The end of the k-th of n equal steps from t0 to t1: `t0 + (t1 - t0) * (k / n)`,
    exactly t1 for k = n. A fraction of the span, not a sum of k steps: no rounding
    accumulates."""
    xp = jnp if any(isinstance(v, jax.Array) for v in (t0, t1, k, n)) else np
    dtype = xp.result_type(t0)
    fraction = xp.asarray(k, dtype) / xp.asarray(n, dtype)
    return xp.where(k >= n, t1, t0 + (t1 - t0) * fraction).astype(dtype)


def counted_step(dt, state) -> Decision:
    """A fixed step's decision: accepted, the same size again, one more step counted."""
    state = eqx.tree_at(lambda s: s.index, state, state.index + 1)
    return Decision(jnp.asarray(True), sg(dt), state, jnp.asarray(RESULTS.successful))


class ConstantStepSize(AbstractStepSizeController):
    """Fixed steps: `n = ceil((t1 - t0) / dt0)` equal steps from t0 to t1, each ending
    at `t0 + (t1 - t0) k / n` (so no step is longer than `dt0`, and rounding does not
    accumulate over the steps). diffrax 0.7 places its steps after the first at the
    same times; its first step is `dt0` long, so where `dt0` does not divide `t1 - t0`
    its first two steps differ from these.

    The solve runs it as `UniformSteps`, built from t0, t1 and dt0 (`diffeqsolve`
    requires `dt0` with it)."""

    def for_solve(self, t0, t1, dt0, sign) -> "UniformSteps | EndlessSteps":
        """The grid of `uniform_steps(t0, t1, dt0)` equal steps (the count is not
        differentiated; the grid moves with t0 and t1); for an infinite t1 (a solve an
        `Event` ends), steps of `dt0` from t0 (`EndlessSteps`)."""
        if (end := concrete(t1)) is not None and np.isinf(end):  # ended by an `Event`
            return EndlessSteps(t0, lax.stop_gradient(dt0))
        span = lax.stop_gradient((t0, t1))
        return UniformSteps(t0, t1, jnp.asarray(uniform_steps(*span, lax.stop_gradient(dt0))))

    @property
    def needs_dt0(self) -> bool:
        return True

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        """Counted by repeating the loop's time arithmetic (`UniformSteps`, and
        `Integrator.init` and `clip_to_end`), when t0, t1 and dt0 are concrete and there
        are at most `MAX_COUNTED` steps."""
        if t0 is None or t1 is None or t1_floor is None or dt0 is None:
            return None
        t0, t1, floor, dt0 = (np.asarray(v)[()] for v in (t0, t1, t1_floor, dt0))
        if not (dt0 > 0 and t1 > t0) or (t1 - t0) / dt0 > MAX_COUNTED:
            return None
        n = int(uniform_steps(t0, t1, dt0))
        ends = uniform_time(t0, t1, np.arange(1, n + 1), n)
        starts = np.concatenate([[t0], ends[:-1]]).astype(ends.dtype)
        stretched = np.nonzero(stretched_to_end(starts, ends, t1, floor))[0]
        return int(stretched[0]) + 1 if stretched.size else n


class UniformSteps(AbstractLoopController):
    """`ConstantStepSize` inside the solve: its n and span in the internal time.
    `ControllerState.index` counts the steps taken. The grid moves with t0 and t1 (n
    stays): a solve's derivatives with respect to them are those of its steps' ends
    `t0 + (t1 - t0) k / n`, as finite differences of the solve see them."""

    t0: jax.Array
    t1: jax.Array
    num_steps: jax.Array

    def first_step(self, solver, term, t0, y0, dt0, args):
        return sg(uniform_time(self.t0, self.t1, 1, self.num_steps) - self.t0)

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        return counted_step(dt, state)

    def next_time(self, t_new, decision):
        """The next grid point: after `index` steps from t0 the one after the `index`-th.
        A step clipped short of the grid (`ClipStepSizeController`) leaves `t_new`
        between grid points; the next step then ends on the first grid point after it."""
        index, n = decision.state.index, self.num_steps
        on_grid = uniform_time(self.t0, self.t1, index, n) == t_new
        after = jnp.where(on_grid, index, self._count_at_or_before(t_new)) + 1
        return uniform_time(self.t0, self.t1, after, n).astype(t_new.dtype)

    def _count_at_or_before(self, t):
        """The index of the last grid point at or before `t`: the rounded estimate from
        the fraction of the span, corrected by one either way."""
        n, grid = self.num_steps, lambda k: uniform_time(self.t0, self.t1, k, self.num_steps)
        fraction = sg((t - self.t0) / (self.t1 - self.t0))
        span = n.astype(fraction.dtype)
        k = jnp.clip(jnp.floor(fraction * span), 0, span).astype(n.dtype)
        k = jnp.where((k > 0) & (grid(k) > t), k - 1, k)
        return jnp.where((k < n) & (grid(k + 1) <= t), k + 1, k)


class EndlessSteps(AbstractLoopController):
    """`ConstantStepSize` inside a solve to an infinite `t1` (which an `Event` ends):
    the k-th step ends at `t0 + k dt0` (a product, so no rounding accumulates).
    `ControllerState.index` counts the steps taken."""

    t0: jax.Array
    dt0: jax.Array

    def first_step(self, solver, term, t0, y0, dt0, args):
        return self.dt0

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        return counted_step(dt, state)

    def next_time(self, t_new, decision):
        after = (decision.state.index + 1).astype(t_new.dtype)
        return (self.t0 + self.dt0 * after).astype(t_new.dtype)
