"""`PIDController`: adaptive steps from an embedded error estimate, and the starting
step size it chooses when `dt0` is `None`."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import RESULTS, promoted

from .base import (
    AbstractAdaptiveStepSizeController,
    AbstractLoopController,
    ControllerState,
    Decision,
    rms_norm,
)
from .clip import ClipStepSizeController

sg = jax.lax.stop_gradient


class _TakesClipTimes(type(eqx.Module)):
    """`PIDController(..., step_ts=..., jump_ts=...)` builds
    `ClipStepSizeController(PIDController(...), step_ts, jump_ts)`, as in diffrax 0.7."""

    def __call__(cls, *args, step_ts=None, jump_ts=None, **kwargs):
        controller = super().__call__(*args, **kwargs)
        if step_ts is None and jump_ts is None:
            return controller
        return ClipStepSizeController(controller, step_ts=step_ts, jump_ts=jump_ts)


# Given as keywords so that type checkers keep treating the class as a dataclass.
_CLIP_TIMES = {"metaclass": _TakesClipTimes}


class PIDController(AbstractLoopController, AbstractAdaptiveStepSizeController, **_CLIP_TIMES):
    """Adaptive steps from an embedded error estimate, with PID control.

    A step is accepted when `norm(y_error / (atol + rtol * max(|y0|, |y1|))) < 1`; the
    next step is `dt * clip(safety * e^-(p+i+d)/k * e_prev^(p+2d)/k * e_prev2^-d/k,
    factormin, factormax)` with `k` the solver's error order. The defaults give an
    integral (I) controller, as in diffrax.

    `PIDController(..., step_ts=..., jump_ts=...)` returns
    `ClipStepSizeController(PIDController(...), step_ts=..., jump_ts=...)`, as diffrax
    0.7 does.

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

    @property
    def tolerances(self) -> tuple:
        return self.rtol, self.atol

    @property
    def replayable(self) -> bool:
        """Every decision is recorded, and under a replay nothing reads the memory."""
        return True

    def first_step_evaluations(self, dt0) -> int:
        """The starting-step heuristic's two evaluations when `dt0` is `None`."""
        return 2 if dt0 is None else 0

    def first_step(self, solver, term, t0, y0, dt0, args):
        if dt0 is not None:
            dt = sg(jnp.asarray(dt0))
        else:
            dt = _select_initial_step(self, solver.error_order(term), term, t0, y0, args)
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
            _product(self.safety * f1, f2, f3),
            jnp.where(accept, 1.0, self.factormin),
            jnp.where(accept, self.factormax, self.safety),
        )
        inv = jnp.where((inv == 0) | jnp.isinf(inv), 1.0, inv)
        dt_next, at_dtmin, result = self._clip(dt * factor.astype(dt.dtype), state, factor)
        dtype = state.prev_inv_error.dtype  # the carried dtype, e.g. float64 for float32 y
        new_state = ControllerState(
            prev_inv_error=jnp.where(accept, *promoted(inv, state.prev_inv_error)).astype(dtype),
            prev_prev_inv_error=jnp.where(
                accept, state.prev_inv_error, state.prev_prev_inv_error
            ).astype(dtype),
            at_dtmin=at_dtmin,
            index=state.index,
        )
        return Decision(accept, sg(dt_next), new_state, result)

    def _scale(self, y0, y1, err):
        y1 = jnp.where(jnp.isnan(y1), y0, y1)
        scale = self.atol + jnp.maximum(jnp.abs(y0), jnp.abs(y1)) * self.rtol
        return err / scale.astype(err.dtype)  # real scale, complex err: as promotion would

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


def _product(*factors):
    """`factors[0] * factors[1] * ...`, each product cast as standard promotion casts
    it (the error terms may be float32 from `y`, the carried ones float64)."""
    product = factors[0]
    for factor in factors[1:]:
        a, b = promoted(product, factor)
        product = a * b
    return product


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
    d0 = norm(jax.tree.map(lambda y, s: y / s.astype(y.dtype), y0, scale))
    d1 = norm(jax.tree.map(lambda f, s: f / s.astype(f.dtype), f0, scale))
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1, d1)))
    y1 = jax.tree.map(lambda y, f: y + h0.astype(y.dtype) * f, y0, f0)
    f1 = sg(term.vf(jnp.add(*promoted(t0, h0)), y1, args))
    d2 = norm(jax.tree.map(lambda a, b, s: (a - b) / s.astype(a.dtype), f1, f0, scale)) / h0
    max_d = jnp.maximum(d1, d2)
    h1 = jnp.where(
        max_d <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / max_d) ** (1 / error_order)
    )
    return jnp.minimum(100 * h0, h1)
