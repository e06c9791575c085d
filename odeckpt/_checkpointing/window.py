"""Windows: the checkpointed loop's passes work a few consecutive steps at a time.

The loops that run once per step touch only the state, the outputs and a window of
recorded decisions and checkpoints; the max_steps-long buffers are read and written
once per window. See `docs/performance.md`, "Windows and packed checkpoints".
"""

import equinox as eqx
import jax
from jax import lax

from odeckpt._core import nbytes

from .body import LoopBody

WINDOW_STEPS = 32
"""The most steps a window holds (the window of a small state)."""

WINDOW_BYTES = 64 * 1024
"""The most bytes a window of checkpoint records takes, when it has fewer than
`WINDOW_STEPS` rows."""

SMALL_STATE_BYTES = WINDOW_BYTES // WINDOW_STEPS
"""The largest state whose window of checkpoint records is full (`WINDOW_STEPS` rows):
the loops' "small state". Larger states get shorter windows, and their backward pass
replays rejected steps without evaluating them (`replay_step`)."""


def window_size(body: LoopBody, problem, state0) -> int:
    """Steps per window: `WINDOW_STEPS`, or fewer so that a window of checkpoints takes at
    most `WINDOW_BYTES`; at least 2 (the backward pass advances by one step within a
    window, from the state at its first row to the next)."""
    size = nbytes(eqx.filter_eval_shape(body.compress, state0))
    return int(min(WINDOW_STEPS, max(2, WINDOW_BYTES // max(size, 1))))


def read_window(buffer, i, w: int):
    """Rows `i, ..., i + w - 1` of a buffer padded by `w` rows."""
    return jax.tree.map(lambda b: lax.dynamic_slice_in_dim(b, i, w), buffer)


def flush(buffer, i, window):
    """Write a window into rows `i, ..., i + len(window) - 1` of a padded buffer."""
    return jax.tree.map(lambda b, w: lax.dynamic_update_slice_in_dim(b, w, i, 0), buffer, window)
