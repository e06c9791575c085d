"""`ClipStepSizeController`: steps that land on given times (`step_ts`), and that stop
just before the jumps of the vector field and start again just after them (`jump_ts`).

See `docs/controllers.md` ("Landing on times, and jumps of the vector field") for the
rule and its derivatives.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt._core import concrete

from .base import (
    AbstractAdaptiveStepSizeController,
    AbstractLoopController,
    AbstractStepSizeController,
)

sg = lax.stop_gradient

_COMPARE_ALL = 256  # up to this many times, search by comparing with all of them


class ClipStepSizeController(AbstractAdaptiveStepSizeController):
    """Wraps a controller so that its steps land exactly on `step_ts`, and stop just
    before and restart just after each of `jump_ts` (times where the vector field may
    jump, e.g. a dose given at fixed times). Both are given in the solve's own time
    (also when it runs backwards), in any order; times outside the interval are
    ignored. See docs/controllers.md.

    Args:
        controller: the controller to wrap: `PIDController(...)`,
            `ConstantStepSize()` (its grid of equal steps, plus the clipped ones; diffrax
            accepts adaptive controllers only), or another `ClipStepSizeController`.
        step_ts: times every solve steps to exactly, or `None`.
        jump_ts: times at which the vector field may be discontinuous, or `None`.
        store_rejected_steps: accepted and unused: diffrax revisits the times of up to
            this many rejected steps, which matters for SDEs (the Brownian path must not
            be sampled with a bias); an ODE solve's values need no revisiting.

    Raises:
        TypeError: `controller` is not a step-size controller, or the times are not
            real numbers.
        ValueError: `controller` fixes every step itself (`StepTo`), the times are not
            a 1-D array or (when known at construction) not finite, or
            `store_rejected_steps` is not a positive integer or None.

    """

    controller: AbstractStepSizeController
    step_ts: jax.Array | None
    jump_ts: jax.Array | None
    store_rejected_steps: int | None = eqx.field(static=True)

    def __init__(self, controller, step_ts=None, jump_ts=None, store_rejected_steps=None):
        if not isinstance(controller, AbstractStepSizeController):
            raise TypeError(
                "`ClipStepSizeController(controller=...)` expects a step-size controller, "
                f"e.g. `PIDController(rtol=1e-6, atol=1e-8)`; got {type(controller).__name__}."
            )
        if controller.step_times is not None:
            name = type(controller).__name__
            raise ValueError(
                f"`ClipStepSizeController` cannot wrap `{name}`, which fixes every step "
                f"itself: add the times to `{name}(ts=...)` instead."
            )
        positive = isinstance(store_rejected_steps, int) and store_rejected_steps > 0
        if store_rejected_steps is not None and not positive:
            raise ValueError(
                "`ClipStepSizeController(store_rejected_steps=...)` must be a positive "
                f"integer or None; got {store_rejected_steps!r}."
            )
        self.controller = controller
        self.step_ts = _sorted_times(step_ts, "step_ts")
        self.jump_ts = _sorted_times(jump_ts, "jump_ts")
        self.store_rejected_steps = store_rejected_steps

    # diffrax's names for the wrapped controller's tolerances and norm (`None` around a
    # controller without them).
    @property
    def rtol(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return None if self.controller.tolerances is None else self.controller.tolerances[0]

    @property
    def atol(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return None if self.controller.tolerances is None else self.controller.tolerances[1]

    @property
    def norm(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        inner = self.controller
        return inner.norm if isinstance(inner, AbstractAdaptiveStepSizeController) else None

    def for_solve(self, t0, t1, dt0, sign) -> "ClippedSteps":
        """The wrapped controller's running form, clipped to the times in internal
        time (`sign * t`, sorted, in the time dtype)."""
        inner = self.controller.for_solve(t0, t1, dt0, sign)
        internal = lambda ts: None if ts is None else jnp.sort(jnp.asarray(ts, t0.dtype) * sign)
        return ClippedSteps(inner, internal(self.step_ts), internal(self.jump_ts), t0)

    @property
    def adaptive(self) -> bool:
        return self.controller.adaptive

    @property
    def tolerances(self) -> tuple | None:
        return self.controller.tolerances

    @property
    def needs_dt0(self) -> bool:
        return self.controller.needs_dt0

    @property
    def jump_times(self) -> jax.Array | None:
        return _joined(self.jump_ts, self.controller.jump_times)

    @property
    def landing_times(self) -> jax.Array | None:
        return _joined(self.step_ts, self.controller.landing_times)


def _sorted_times(ts, name: str) -> jax.Array | None:
    """`ClipStepSizeController`'s `step_ts` or `jump_ts` as a sorted 1-D array; `None`
    for none. Checked here when concrete; traced ones are checked by `diffeqsolve`."""
    if ts is None:
        return None
    ts = jnp.asarray(ts)
    if not (jnp.issubdtype(ts.dtype, jnp.floating) or jnp.issubdtype(ts.dtype, jnp.integer)):
        raise TypeError(
            f"`ClipStepSizeController({name}=...)` must hold real times; got dtype {ts.dtype}."
        )
    if ts.ndim != 1:
        raise ValueError(
            f"`ClipStepSizeController({name}=...)` must be a 1-D array of times; got shape "
            f"{ts.shape}. (Pass e.g. `{name}=[0.5, 1.0]`.)"
        )
    values = concrete(ts)
    if values is not None and not np.all(np.isfinite(values)):
        i = int(np.nonzero(~np.isfinite(values))[0][0])
        raise ValueError(
            f"`ClipStepSizeController({name}=...)` must be finite; got {name}[{i}]={values[i]}."
        )
    return jnp.sort(ts) if ts.shape[0] else None


def _joined(a: jax.Array | None, b: jax.Array | None) -> jax.Array | None:
    """The times of `a` and `b`, sorted (`None` where both are)."""
    if a is None or b is None:
        return a if b is None else b
    return jnp.sort(jnp.concatenate([a, b.astype(a.dtype)]))


class ClippedSteps(AbstractLoopController):
    """`ClipStepSizeController` inside the solve: the wrapped controller's running
    form, and the times in internal time (sorted, the time dtype)."""

    inner: AbstractLoopController
    step_ts: jax.Array | None
    jump_ts: jax.Array | None
    t0: jax.Array | None = None  # the solve's start (internal time): the first landing

    def first_step(self, solver, term, t0, y0, dt0, args):
        return self.inner.first_step(solver, term, t0, y0, dt0, args)

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        return self.inner.decide(t0, dt, y0, y1, y_error, error_order, state)

    def next_time(self, t_new, decision):
        """The wrapped controller's proposal (at least one ulp long), shortened to the
        first stop after `t_new`."""
        proposal = self.inner.next_time(t_new, decision).astype(t_new.dtype)
        proposal = jnp.maximum(proposal, jnp.nextafter(sg(t_new), jnp.inf))
        stop = self._stop_after(t_new)
        return jnp.where(stop < proposal, stop, self._in_proportion(t_new, proposal))

    def _stop_after(self, t) -> jax.Array:
        """The first time after `t` a step must end on: the next of `step_ts`, or the
        float before the next of `jump_ts` (`inf`: none)."""
        stop = jnp.asarray(jnp.inf, t.dtype)
        if self.step_ts is not None:
            stop = jnp.minimum(stop, _first_after(self.step_ts, t))
        if self.jump_ts is not None:
            jump = _first_after(self.jump_ts, t)
            before = jump + sg(jnp.nextafter(sg(jump), -jnp.inf) - sg(jump))
            stop = jnp.where(jnp.isfinite(jump) & (before < stop), before, stop)
        return stop

    def restart(self, t):
        """After a step ending just before a jump (or on one), the next starts just
        after it: on the float after the jump."""
        t, made_jump = self.inner.restart(t)
        if self.jump_ts is None:
            return t, made_jump
        after = jnp.nextafter(sg(t), jnp.inf)
        just_before = jnp.any(after == self.jump_ts)
        on_jump = jnp.any(sg(t) == self.jump_ts)
        start = jnp.where(just_before, jnp.nextafter(after, jnp.inf), after)
        start = jnp.where(just_before | on_jump, start, sg(t))
        return t + sg(start - t), made_jump | just_before | on_jump

    def replayed_next(self, t, recorded):
        """A step that was clipped to a stop moves with the stop; others as the wrapped
        controller's do."""
        stop = self._stop_after(t)
        free = self._in_proportion(t, self.inner.replayed_next(t, recorded))
        return jnp.where(recorded == stop, stop, free)

    def _in_proportion(self, t, proposal) -> jax.Array:
        """`proposal` (a step's end after `t`), with the derivatives of the point at its
        fraction of the interval between the landing times around `t` (see the module
        docstring): for an adaptive controller between `t0` or a time of `step_ts` and
        the next time of `step_ts`. Otherwise unchanged."""
        if self.step_ts is None or self.t0 is None or not self.inner.adaptive:
            return proposal
        start = jnp.maximum(self.t0.astype(t.dtype), _last_at_or_before(self.step_ts, t))
        end = _first_after(self.step_ts, t)
        bounded = jnp.isfinite(end)
        end = jnp.where(bounded, end, start + 1)
        fraction = sg((proposal - start) / (end - start))
        placed = start + fraction * (end - start)
        return jnp.where(bounded, sg(proposal) + (placed - sg(placed)), proposal)

    @property
    def adaptive(self) -> bool:
        return self.inner.adaptive

    @property
    def tolerances(self) -> tuple | None:
        return self.inner.tolerances

    @property
    def replayable(self) -> bool:
        return self.inner.replayable

    def first_step_evaluations(self, dt0) -> int:
        return self.inner.first_step_evaluations(dt0)

    @property
    def jump_times(self) -> jax.Array | None:
        return _joined(self.jump_ts, self.inner.jump_times)

    @property
    def landing_times(self) -> jax.Array | None:
        return _joined(self.step_ts, self.inner.landing_times)


def _last_at_or_before(ts, t) -> jax.Array:
    """The last of the ascending `ts` at or before `t`, or `-inf`."""
    n = ts.shape[0]
    method = "compare_all" if n <= _COMPARE_ALL else "scan"
    i = jnp.searchsorted(sg(ts), sg(t), side="right", method=method) - 1
    return jnp.where(i >= 0, ts[jnp.maximum(i, 0)], -jnp.inf).astype(t.dtype)


def _first_after(ts, t) -> jax.Array:
    """The first of the ascending `ts` after `t`, or `inf`."""
    n = ts.shape[0]
    method = "compare_all" if n <= _COMPARE_ALL else "scan"
    i = jnp.searchsorted(sg(ts), sg(t), side="right", method=method)
    return jnp.where(i < n, ts[jnp.minimum(i, n - 1)], jnp.inf).astype(t.dtype)
