"""What a solve returns: `SaveAt`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import concrete


class SaveAt(eqx.Module):
    """Which outputs a solve saves.

    Args:
        t0: save the initial state.
        t1: save the final state.
        ts: save at these times (monotone in the direction of integration, inside
            `[t0, t1]`), by dense interpolation within the step that crosses each.
        steps: save after every accepted step (`max_steps` rows; unused rows are inf).
            `True` or `False` (diffrax's `1` and `0` mean the same); every n-th step
            for n > 1 is refused.
        dense: keep every step's interpolating polynomial, for `Solution.evaluate(t)`.

    Saved outputs live in write-only buffers outside the checkpointed loop state, so
    checkpointing memory does not grow with the number of outputs.
    """

    t0: bool = False
    t1: bool = False
    ts: jax.Array | None = None
    steps: bool = False
    dense: bool = False

    def __init__(self, *, t0=False, t1=False, ts=None, steps=False, dense=False):
        steps = _every_step(steps)
        if ts is not None:
            ts = jnp.asarray(ts)
            if not jnp.issubdtype(ts.dtype, jnp.floating):
                ts = ts.astype(jnp.result_type(float))
            if ts.ndim != 1:
                raise ValueError(f"`SaveAt(ts=...)` must be 1-D; got shape {ts.shape}.")
            _check_monotone(ts)
        if not (t0 or t1 or steps or dense or ts is not None):
            raise ValueError(
                "`SaveAt()` saves nothing: pass at least one of t0, t1, ts, steps, dense."
            )
        self.t0, self.t1, self.ts, self.steps, self.dense = t0, t1, ts, steps, dense


def _every_step(steps) -> bool:
    """`steps` as a bool: `True`/`False`, or diffrax's spelling `1`/`0` (every step /
    none). Every n-th step for n > 1 is refused rather than read as `True`."""
    if isinstance(steps, bool | np.bool_):
        return bool(steps)
    if isinstance(steps, int | np.integer) and steps in (0, 1):
        return bool(steps)
    raise ValueError(
        f"`SaveAt(steps=...)` must be True or False; got {steps!r}. Saving every n-th "
        "step is not supported: pass `steps=True` and take `sol.ys[n - 1::n]`."
    )


def _check_monotone(ts):
    values = concrete(ts)
    if values is None:
        return
    if not np.all(np.isfinite(values)):
        i = int(np.argmin(np.isfinite(values)))
        raise ValueError(f"`SaveAt(ts=...)` must be finite; got ts[{i}]={values[i]}.")
    if values.shape[0] < 2:
        return
    diffs = np.diff(values)
    if not (np.all(diffs >= 0) or np.all(diffs <= 0)):
        i = int(np.argmax(np.sign(diffs) != np.sign(diffs[np.nonzero(diffs)[0][0]])))
        raise ValueError(
            "`SaveAt(ts=...)` must be monotone (in the direction of integration); got "
            f"ts[{i + 1}]={values[i + 1]} after ts[{i}]={values[i]}."
        )
