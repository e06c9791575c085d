"""What a solve returns: `SaveAt`, made of `SubSaveAt`s, and the default `save_y`."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from odeckpt._core import concrete


def save_y(t, y, args):
    """The default `fn` of `SaveAt` and `SubSaveAt`: save the state itself."""
    return y


class SubSaveAt(eqx.Module):
    """One group of outputs: a function of the state saved at some times.

    `SaveAt(subs=...)` takes a PyTree of these; `sol.ts` and `sol.ys` then have the
    same PyTree structure, one entry per `SubSaveAt`.

    Args:
        t0: save at the initial time.
        t1: save at the final time.
        ts: save at these times (monotone in the direction of integration, inside
            `[t0, t1]`), by dense interpolation within the step that crosses each.
        steps: save after every `steps`-th accepted step (`True` means 1; `0` or
            `False`: none). The buffer has `max_steps // steps` rows; unused rows are
            inf. With `t1=True` and `steps=n > 1`, `y(t1)` is saved after the last
            step row unless the last step was itself saved.
        fn: `fn(t, y, args)`, the PyTree of arrays to save (default `save_y`, the state
            itself): an observable or a projection, e.g. to keep only statistics of a
            large state. Gradients flow into arrays it holds or closes over.

    Raises:
        ValueError: for `ts` that is not 1-D, finite and monotone; `steps` that is not a
            non-negative integer; an `fn` that is not callable; nothing to save.
    """

    t0: bool
    t1: bool
    ts: jax.Array | None
    steps: int = eqx.field(static=True)
    fn: Callable

    def __init__(self, *, t0=False, t1=False, ts=None, steps=0, fn=save_y):
        self.t0, self.t1 = bool(t0), bool(t1)
        self.ts = None if ts is None else _save_times(ts)
        self.steps = _every_nth_step(steps)
        if not callable(fn):
            raise TypeError(
                f"`SaveAt(fn=...)` must be a function `fn(t, y, args)`; got {type(fn).__name__}."
            )
        self.fn = fn
        if not (self.t0 or self.t1 or self.steps or self.ts is not None):
            raise ValueError("`SubSaveAt()` saves nothing: pass at least one of t0, t1, ts, steps.")


class SaveAt(eqx.Module):
    """Which outputs a solve saves.

    `SaveAt(t0=, t1=, ts=, steps=, fn=)` is shorthand for
    `SaveAt(subs=SubSaveAt(t0=, t1=, ts=, steps=, fn=))`; `subs` may be any PyTree of
    `SubSaveAt`s, and `sol.ts`, `sol.ys` follow its structure. Outputs are written to
    buffers outside the checkpointed loop state, so checkpoint memory does not grow with
    them.

    Args:
        t0, t1, ts, steps, fn: one `SubSaveAt`'s worth of outputs (see there).
        subs: a PyTree of `SubSaveAt` (instead of `t0`, `t1`, `ts`, `steps`, `fn`).
        dense: keep every step's interpolating polynomial, for `Solution.evaluate(t)`
            and `Solution.derivative(t)`.
        solver_state: return the final solver state (`sol.solver_state`).
        controller_state: return the final controller state (`sol.controller_state`).
        made_jump: return whether the last step ended at a jump (`sol.made_jump`).

    Raises:
        ValueError: `subs` together with `t0`, `t1`, `ts`, `steps` or `fn`; `subs`
            holding something other than `SubSaveAt`s; nothing to save.
    """

    subs: PyTree[SubSaveAt] = None
    dense: bool = False
    solver_state: bool = False
    controller_state: bool = False
    made_jump: bool = False

    def __init__(
        self,
        *,
        t0=False,
        t1=False,
        ts=None,
        steps=False,
        fn=save_y,
        subs=None,
        dense=False,
        solver_state=False,
        controller_state=False,
        made_jump=False,
    ):
        own = bool(t0) or bool(t1) or ts is not None or _every_nth_step(steps) > 0
        if subs is None:
            subs = SubSaveAt(t0=t0, t1=t1, ts=ts, steps=steps, fn=fn) if own else None
        elif own or fn is not save_y:
            raise ValueError(
                "`SaveAt(subs=...)` takes every output from its `SubSaveAt`s: pass `t0`, "
                "`t1`, `ts`, `steps` and `fn` to them, not to `SaveAt`."
            )
        _check_subs(subs)
        flags = (dense, solver_state, controller_state, made_jump)
        self.dense, self.solver_state, self.controller_state, self.made_jump = map(bool, flags)
        if subs is None and not any(flags):
            raise ValueError(
                "`SaveAt()` saves nothing: pass at least one of t0, t1, ts, steps, dense."
            )
        self.subs = subs


def sub_saves(saveat: SaveAt) -> tuple[list[SubSaveAt], Any]:
    """`saveat.subs` as a list of `SubSaveAt`s and the structure to rebuild it."""
    return jax.tree.flatten(saveat.subs, is_leaf=_is_sub)


def _is_sub(x) -> bool:
    """Whether `x` is a `SubSaveAt` (a leaf of `SaveAt.subs`; the class is final)."""
    return type(x) is SubSaveAt


def _check_subs(subs) -> None:
    for leaf in jax.tree.leaves(subs, is_leaf=_is_sub):
        if not _is_sub(leaf):
            raise ValueError(
                "`SaveAt(subs=...)` must be a PyTree of `SubSaveAt`; it holds a "
                f"{type(leaf).__name__}. Wrap each group of outputs in `SubSaveAt(...)`."
            )


def _save_times(ts) -> jax.Array:
    ts = jnp.asarray(ts)
    if not jnp.issubdtype(ts.dtype, jnp.floating):
        ts = ts.astype(jnp.result_type(float))
    if ts.ndim != 1:
        raise ValueError(f"`SaveAt(ts=...)` must be 1-D; got shape {ts.shape}.")
    _check_monotone(ts)
    return ts


def _every_nth_step(steps) -> int:
    """`steps` as an int: `True`/`False` are 1/0 (every step / none), as in diffrax."""
    if isinstance(steps, bool | np.bool_):
        return int(steps)
    if isinstance(steps, int | np.integer) and steps >= 0:
        return int(steps)
    raise ValueError(
        f"`SaveAt(steps=...)` must be True, False or a non-negative integer n (every "
        f"n-th step); got {steps!r}."
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
