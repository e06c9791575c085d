"""Progress meters for long solves: host callbacks from inside the compiled loop.

A meter costs nothing when off (`progress_meter=None`, the default): no callback is
compiled in. When on, the loop calls back to Python every `refresh_steps` attempted
steps with the fraction of `[t0, t1]` covered (under `jax.vmap`: the least advanced
batch element), so it works under `jax.jit`.
"""

import abc
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


class AbstractProgressMeter(eqx.Module):
    """Reports the progress of a solve. Concrete meters are final."""

    refresh_steps: int = 32

    @abc.abstractmethod
    def _open(self) -> "_Display":
        """A fresh host-side display (called when a solve starts)."""


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
        return _TqdmDisplay(tqdm.tqdm(total=100, unit="%", desc="odeckpt", leave=False))


class _Display(abc.ABC):
    """The host side of a meter: shown the percentage reached, then closed."""

    @abc.abstractmethod
    def show(self, percent: float, previous: float) -> None:
        """Show that `percent` is reached (it was `previous` at the last call)."""

    @abc.abstractmethod
    def close(self) -> None:
        """The solve is done."""


class _TextDisplay(_Display):
    def __init__(self, minimum_increase):
        self.minimum_increase = minimum_increase
        self.shown = -1.0

    def show(self, percent, previous):
        if percent / 100 >= self.shown + self.minimum_increase or percent >= 100:
            self.shown = percent / 100
            print(f"odeckpt: {percent:.1f}%", file=sys.stdout, flush=True)

    def close(self):
        pass


class _TqdmDisplay(_Display):
    """A tqdm bar, which takes relative updates."""

    def __init__(self, bar):
        self.bar = bar

    def show(self, percent, previous):
        self.bar.update(percent - previous)

    def close(self):
        self.bar.close()


class _Host:
    """The host side of one compiled solve: opens, updates and closes a display."""

    def __init__(self, meter: AbstractProgressMeter):
        self.meter = meter
        self.display: _Display | None = None
        self.percent = 0.0

    def update(self, fraction):
        fraction = float(np.min(np.asarray(fraction)))
        if self.display is None:
            self.display, self.percent = self.meter._open(), 0.0
        percent = round(100 * min(max(fraction, 0.0), 1.0), 1)
        if percent > self.percent:
            self.display.show(percent, self.percent)
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
