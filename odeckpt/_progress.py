"""Progress meters for long solves: host callbacks from inside the compiled loop.

A meter costs nothing when off (`progress_meter=None`, the default): no callback is
compiled in. When on, the loop calls back to Python every `refresh_steps` attempted
steps with the fraction of `[t0, t1]` covered (under `jax.vmap`: the least advanced
batch element), so it works under `jax.jit`.
"""

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


class AbstractProgressMeter(eqx.Module):
    """Reports the progress of a solve. Concrete meters are final."""

    refresh_steps: int = 32

    def _open(self):
        """A fresh host-side display (called when a solve starts)."""
        raise NotImplementedError


class TextProgressMeter(AbstractProgressMeter):
    """Prints `odeckpt: 37.5%` lines to stdout, at most every `minimum_increase`."""

    minimum_increase: float = 0.1

    def _open(self):
        return _TextDisplay(self.minimum_increase)


class TqdmProgressMeter(AbstractProgressMeter):
    """A `tqdm` progress bar (needs `pip install tqdm`)."""

    def _open(self):
        try:
            import tqdm
        except ImportError as e:
            raise ImportError(
                "`TqdmProgressMeter` needs tqdm: `pip install tqdm`, or use `TextProgressMeter()`."
            ) from e
        return tqdm.tqdm(total=100, unit="%", desc="odeckpt", leave=False)


class _TextDisplay:
    def __init__(self, minimum_increase):
        self.minimum_increase = minimum_increase
        self.shown = -1.0

    def update(self, n):
        if n / 100 >= self.shown + self.minimum_increase or n >= 100:
            self.shown = n / 100
            print(f"odeckpt: {n:.1f}%", file=sys.stdout, flush=True)

    def close(self):
        pass


class _Host:
    """The host side of one compiled solve: opens, updates and closes a display."""

    def __init__(self, meter: AbstractProgressMeter):
        self.meter = meter
        self.display = None
        self.percent = 0.0

    def update(self, fraction):
        fraction = float(np.min(np.asarray(fraction)))
        if self.display is None:
            self.display, self.percent = self.meter._open(), 0.0
        percent = round(100 * min(max(fraction, 0.0), 1.0), 1)
        if percent > self.percent:
            if hasattr(self.display, "n"):  # tqdm: relative updates
                self.display.update(percent - self.percent)
            else:
                self.display.update(percent)
            self.percent = percent
        if fraction >= 1.0:
            self.display.close()
            self.display = None


def progress_callback(meter: AbstractProgressMeter | None):
    """`report(t0, t1, t, i, final=False)` for the loop body; `None` when off."""
    if meter is None:
        return None
    if not isinstance(meter, AbstractProgressMeter):
        raise TypeError(
            "`diffeqsolve(progress_meter=...)` expects `TextProgressMeter()`, "
            f"`TqdmProgressMeter()` or None; got {type(meter).__name__}."
        )
    host = _Host(meter)

    def report(t0, t1, t, i, final=False):
        span = jnp.where(t1 == t0, 1.0, t1 - t0)
        # The final report depends on the final time, so it runs after the loop.
        fraction = 1.0 + 0.0 * t if final else (t - t0) / span
        due = jnp.asarray(True) if final else (i % meter.refresh_steps == 0)
        lax.cond(due, lambda: jax.debug.callback(host.update, fraction), lambda: None)

    return report
