"""Step-size controllers.

All controllers work in the solver's internal time, which always increases (a solve
backwards in time is run in reversed time). Their decisions (accept or reject, the
next step size) are wrapped in `jax.lax.stop_gradient`: the gradient of a solve is the
gradient of the numerical solution on the time grid that was accepted. Differentiating
the decisions would differentiate a piecewise-constant function (zero almost
everywhere, undefined at the switches) and would put NaN into gradients whenever the
error norm is zero. diffrax, torchdiffeq and OrdinaryDiffEq.jl make the same choice.
`ConstantStepSize` decides only its number of steps: its grid of equal steps moves with
t0 and t1 (differentiably).
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core.concrete import concrete
from odeckpt._core.custom_types import Y
from odeckpt._core.results import RESULTS

sg = jax.lax.stop_gradient


def rms_norm(x: Y) -> jax.Array:
    """Root mean square over every element of every leaf."""
    leaves = [jnp.ravel(jnp.abs(leaf)) for leaf in jax.tree.leaves(x)]
    if not leaves:
        return jnp.asarray(0.0)
    dtype = jnp.result_type(*leaves)
    flat = jnp.concatenate([leaf.astype(dtype) for leaf in leaves])
    return jnp.sqrt(jnp.mean(flat**2))


class ControllerState(eqx.Module):
    """Controller memory carried between steps (all non-differentiable)."""

    prev_inv_error: jax.Array
    prev_prev_inv_error: jax.Array
    at_dtmin: jax.Array
    index: jax.Array


class Decision(eqx.Module):
    """Outcome of one step's error control: accept?, the next step size, and status."""

    accept: jax.Array
    dt_next: jax.Array
    state: ControllerState
    result: jax.Array


def _initial_state(dtype) -> ControllerState:
    one = jnp.ones((), dtype)
    return ControllerState(one, one, jnp.asarray(False), jnp.asarray(0, jnp.int32))


class AbstractStepSizeController(eqx.Module):
    """Chooses step sizes. Concrete controllers are final."""

    @property
    def adaptive(self) -> bool:
        return False

    def first_step(self, solver, term, t0, y0, dt0, args) -> jax.Array:
        raise NotImplementedError

    def decide(self, t0, dt, y0, y1, y_error, error_order, state) -> Decision:
        raise NotImplementedError

    def next_time(self, t_new, decision: Decision):
        """The end of the next attempted step (before clipping to `t1`)."""
        return t_new + decision.dt_next

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        """The number of steps, when it is known before the solve runs; else `None`.

        Arguments are the internal (increasing) times as NumPy scalars of the time
        dtype, `None` where not known at trace time.
        """
        return None


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


class ConstantStepSize(AbstractStepSizeController):
    """Fixed steps: `n = ceil((t1 - t0) / dt0)` equal steps from t0 to t1, each ending
    at `t0 + (t1 - t0) k / n` (so no step is longer than `dt0`, and rounding does not
    accumulate over the steps). diffrax 0.7 places its steps after the first at the
    same times; its first step is `dt0` long, so where `dt0` does not divide `t1 - t0`
    its first two steps differ from these.

    The solve runs it as `_UniformSteps`, built from t0, t1 and dt0 (`diffeqsolve`
    requires `dt0` with it)."""

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        """Counted by repeating the loop's time arithmetic (`_UniformSteps`, and
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


class _UniformSteps(AbstractStepSizeController):
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
        state = eqx.tree_at(lambda s: s.index, state, state.index + 1)
        return Decision(jnp.asarray(True), sg(dt), state, jnp.asarray(RESULTS.successful))

    def next_time(self, t_new, decision):
        index = decision.state.index + 1
        return uniform_time(self.t0, self.t1, index, self.num_steps).astype(t_new.dtype)


def stretched_to_end(t, t_next, t1, t1_floor):
    """Whether a step from t to t_next is made to end at t1 instead: it ends past t1,
    or within ~100 ulp of it (past `t1_floor`) and what it would leave is under half
    the step. The second condition matters only where 100 ulp is itself a step or more
    (times far from zero in float32): there it keeps steps from merging into one."""
    return (t_next > t1_floor) & (t1 - t_next <= 0.5 * (t_next - t))


class StepTo(AbstractStepSizeController):
    """Steps exactly to the given times `ts` (`ts[0] = t0`, `ts[-1] = t1`)."""

    ts: jax.Array = eqx.field(converter=jnp.asarray)

    def __check_init__(self):
        ts = concrete(self.ts)
        if ts is not None and (ts.ndim != 1 or ts.size < 2):
            raise ValueError(
                f"`StepTo(ts=...)` needs a 1-D array of at least 2 times; got shape {ts.shape}."
            )

    def first_step(self, solver, term, t0, y0, dt0, args):
        if dt0 is not None:
            raise ValueError("`StepTo(ts)` fixes the steps itself: pass `dt0=None`.")
        return sg(jnp.asarray(self.ts[1] - self.ts[0]))

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        state = eqx.tree_at(lambda s: s.index, state, state.index + 1)
        return Decision(jnp.asarray(True), dt, state, jnp.asarray(RESULTS.successful))

    def next_time(self, t_new, decision):
        index = jnp.minimum(decision.state.index + 1, self.ts.shape[0] - 1)
        return sg(self.ts[index]).astype(jnp.result_type(t_new))

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        return self.ts.shape[0] - 1


class PIDController(AbstractStepSizeController):
    """Adaptive steps from an embedded error estimate, with PID control.

    A step is accepted when `norm(y_error / (atol + rtol * max(|y0|, |y1|))) < 1`; the
    next step is `dt * clip(safety * e^-(p+i+d)/k * e_prev^(p+2d)/k * e_prev2^-d/k,
    factormin, factormax)` with `k` the solver's error order. The defaults give an
    integral (I) controller, as in diffrax.

    References:
        Hairer, Nørsett & Wanner, Solving ODEs I (II.4: starting step size);
        Söderlind (2002), "Automatic control and adaptive time-stepping".
    """

    rtol: float
    atol: float
    pcoeff: float = 0.0
    icoeff: float = 1.0
    dcoeff: float = 0.0
    dtmin: float | None = None
    dtmax: float | None = None
    force_dtmin: bool = True
    factormin: float = 0.2
    factormax: float = 10.0
    safety: float = 0.9
    norm: Callable = rms_norm

    @property
    def adaptive(self) -> bool:
        return True

    def first_step(self, solver, term, t0, y0, dt0, args):
        if dt0 is not None:
            dt = sg(jnp.asarray(dt0))
        else:
            dt = _select_initial_step(self, solver.error_order, term, t0, y0, args)
        if self.dtmax is not None:
            dt = jnp.minimum(dt, self.dtmax)
        if self.dtmin is not None:  # the first step obeys dtmin too (as in diffrax)
            dt = jnp.maximum(dt, self.dtmin)
        return dt

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        y0, y1, y_error, dt = sg(y0), sg(y1), sg(y_error), sg(dt)
        scaled = self.norm(jax.tree.map(self._scale, y0, y1, y_error))
        scaled = jnp.where(jnp.isfinite(scaled), scaled, jnp.inf)
        accept = (scaled < 1) | state.at_dtmin
        inv = 1 / scaled
        k = error_order
        f1 = _power(inv, (self.icoeff + self.pcoeff + self.dcoeff) / k)
        f2 = _power(state.prev_inv_error, -(self.pcoeff + 2 * self.dcoeff) / k)
        f3 = _power(state.prev_prev_inv_error, self.dcoeff / k)
        factor = jnp.clip(
            self.safety * f1 * f2 * f3,
            jnp.where(accept, 1.0, self.factormin),
            jnp.where(accept, self.factormax, self.safety),
        )
        inv = jnp.where((inv == 0) | jnp.isinf(inv), 1.0, inv)
        dt_next, at_dtmin, result = self._clip(dt * factor.astype(dt.dtype), state, factor)
        dtype = state.prev_inv_error.dtype  # the carried dtype, e.g. float64 for float32 y
        new_state = ControllerState(
            prev_inv_error=jnp.where(accept, inv, state.prev_inv_error).astype(dtype),
            prev_prev_inv_error=jnp.where(
                accept, state.prev_inv_error, state.prev_prev_inv_error
            ).astype(dtype),
            at_dtmin=at_dtmin,
            index=state.index,
        )
        return Decision(accept, sg(dt_next), new_state, result)

    def _scale(self, y0, y1, err):
        y1 = jnp.where(jnp.isnan(y1), y0, y1)
        return err / (self.atol + jnp.maximum(jnp.abs(y0), jnp.abs(y1)) * self.rtol)

    def _clip(self, dt, state, factor):
        result = jnp.asarray(RESULTS.successful)
        at_dtmin = state.at_dtmin
        if self.dtmax is not None:
            dt = jnp.minimum(dt, self.dtmax)
        if self.dtmin is not None:
            if not self.force_dtmin:
                result = jnp.where(dt < self.dtmin, RESULTS.dt_min_reached, result)
            dt = jnp.where(at_dtmin & (factor == 1), self.dtmin, dt)
            at_dtmin = dt <= self.dtmin
            dt = jnp.maximum(dt, self.dtmin)
        return dt, at_dtmin, result


def _power(x, exponent):
    """`x ** exponent`, skipping the work when the exponent is a literal zero."""
    if isinstance(exponent, int | float) and exponent == 0:
        return 1.0
    return x**exponent


def _select_initial_step(controller, error_order, term, t0, y0, args):
    """Hairer–Nørsett–Wanner's starting step (Solving ODEs I, II.4), as diffrax does."""
    if error_order is None:
        raise ValueError(
            "`dt0=None` needs a solver with an error estimate; this solver has none. "
            "Pass `dt0=...` explicitly."
        )
    y0, norm = sg(y0), controller.norm
    f0 = sg(term.vf(t0, y0, args))
    scale = jax.tree.map(lambda y: controller.atol + jnp.abs(y) * controller.rtol, y0)
    d0 = norm(jax.tree.map(lambda y, s: y / s, y0, scale))
    d1 = norm(jax.tree.map(lambda f, s: f / s, f0, scale))
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1, d1)))
    y1 = jax.tree.map(lambda y, f: y + h0.astype(y.dtype) * f, y0, f0)
    f1 = sg(term.vf(t0 + h0, y1, args))
    d2 = norm(jax.tree.map(lambda a, b, s: (a - b) / s, f1, f0, scale)) / h0
    max_d = jnp.maximum(d1, d2)
    h1 = jnp.where(
        max_d <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / max_d) ** (1 / error_order)
    )
    return jnp.minimum(100 * h0, h1)


__all__ = [
    "AbstractStepSizeController",
    "ConstantStepSize",
    "ControllerState",
    "Decision",
    "PIDController",
    "StepTo",
    "_initial_state",
    "rms_norm",
]
