"""Progress meters for long solves: host callbacks from inside the compiled loop
(`docs/usage.md`, "Progress").
"""

import abc
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from odeckpt._core import min_in_batch


class AbstractProgressMeter(eqx.Module):
    """Reports the progress of a solve. Concrete meters are final.

    A subclass says how often the loop calls back (`refresh_steps`) and opens the
    host-side display (`_open`; `None` for no display at all).
    """

    refresh_steps: eqx.AbstractVar[int]

    @property
    def enabled(self) -> bool:
        """Whether the meter shows anything (if not, no callback is compiled in)."""
        return True

    @abc.abstractmethod
    def _open(self) -> "_Display | None":
        """A fresh host-side display (called when a solve starts); `None`: none."""


class NoProgressMeter(AbstractProgressMeter):
    """No progress meter, as `progress_meter=None` (diffrax's default spelling): no
    callback is compiled in."""

    refresh_steps: int = 1

    @property
    def enabled(self) -> bool:
        return False

    def _open(self):
        return None


class TextProgressMeter(AbstractProgressMeter):
    """Prints the progress as diffrax's meter does: `0.00%` at the start, then a line
    such as `37.50%` whenever the progress has grown by more than `minimum_increase`
    (a fraction of `[t0, t1]`) since the last line, and `100.00%` at the end.

    Attributes:
        minimum_increase: the growth in progress (between 0 and 1) that prints a new
            line; default `0.02`, a line every 2%.
        refresh_steps: the loop calls back every `refresh_steps` attempted steps
            (default 1, every step, so that the lines are diffrax's).
    """

    minimum_increase: float = 0.02
    refresh_steps: int = 1

    def _open(self):
        return _TextDisplay(self.minimum_increase)


class TqdmProgressMeter(AbstractProgressMeter):
    """A `tqdm` progress bar, drawn as diffrax's (needs `pip install tqdm`).

    Attributes:
        refresh_steps: the bar is redrawn every `refresh_steps` attempted steps
            (default 20).
    """

    refresh_steps: int = 20

    def _open(self):
        try:
            import tqdm
        except ImportError as e:
            raise ImportError(
                "`TqdmProgressMeter` needs tqdm: `pip install tqdm`, or use `TextProgressMeter()`."
            ) from e
        bar_format = "{percentage:.2f}%|{bar}| [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
        return _TqdmDisplay(tqdm.tqdm(total=100, unit="%", bar_format=bar_format))


class _Display(abc.ABC):
    """The host side of a meter: shown the progress (a fraction), then closed."""

    @abc.abstractmethod
    def show(self, fraction: float) -> None:
        """Show that `fraction` of the interval is done."""

    @abc.abstractmethod
    def close(self) -> None:
        """The solve is done."""


class _TextDisplay(_Display):
    def __init__(self, minimum_increase):
        self.minimum_increase = minimum_increase
        self.shown = 0.0
        print("0.00%", file=sys.stdout, flush=True)

    def show(self, fraction):
        if fraction - self.shown > self.minimum_increase or fraction == 1:
            self.shown = fraction
            print(f"{100 * fraction:.2f}%", file=sys.stdout, flush=True)

    def close(self):
        if self.shown != 1:
            print("100.00%", file=sys.stdout, flush=True)


class _TqdmDisplay(_Display):
    """A tqdm bar, set to the percentage reached."""

    def __init__(self, bar):
        self.bar = bar

    def show(self, fraction):
        self.bar.n = round(100 * fraction, 2)
        self.bar.refresh()  # one redraw per report (`update` would add timed ones)

    def close(self):
        self.bar.n = 100.0  # drawn once, by `close`
        self.bar.close()


class _Host:
    """The host side of one compiled solve: opens, updates and closes a display."""

    def __init__(self, meter: AbstractProgressMeter):
        self.meter = meter
        self.display: _Display | None = None

    def update(self, fraction, final: bool):
        fraction = float(np.asarray(fraction))
        if self.display is None:
            self.display = self.meter._open()
        if self.display is None:
            return
        if final:
            self.display.close()
            self.display = None
        else:
            self.display.show(min(max(fraction, 0.0), 1.0))


def progress_callback(meter: AbstractProgressMeter | None):
    """`report(t0, t1, t, i, final=False)` for the loop body; `None` when off."""
    if meter is None:
        return None
    if not isinstance(meter, AbstractProgressMeter):
        raise TypeError(
            "`diffeqsolve(progress_meter=...)` expects `TextProgressMeter()`, "
            f"`TqdmProgressMeter()` or None; got {type(meter).__name__}."
        )
    if not meter.enabled:
        return None
    host = _Host(meter)

    def report(t0, t1, t, i, final=False):
        span = jnp.where(t1 == t0, 1.0, t1 - t0)
        # The final report depends on the final time, so it runs after the loop.
        fraction = 1.0 + 0.0 * t if final else (t - t0) / span
        # One report for a whole batch under `jax.vmap`: its least advanced element,
        # every `refresh_steps` steps of its busiest.
        steps = -min_in_batch(-jnp.asarray(i))
        due = jnp.asarray(True) if final else (steps % meter.refresh_steps == 0)
        fraction = min_in_batch(lax.stop_gradient(fraction))
        callback = lambda: jax.debug.callback(host.update, fraction, final)
        lax.cond(due, callback, lambda: None)

    return report
