"""The value predicates `bad(xp, ...)`: each evaluated with NumPy on concrete values and
with `jax.numpy` on traced ones (`values.py`, `structure.py`)."""

from collections.abc import Callable

import numpy as np

from odeckpt._core import concrete


def _any(mask: Callable) -> Callable:
    """The predicate "any element of `mask(xp, ...)` is true"."""
    return lambda xp, *values: xp.any(mask(xp, *values))


def _nonfinite(xp, x):
    return ~xp.all(xp.isfinite(x))


def _direction(xp, t0, t1):
    """+1 from t0 up to t1, else -1."""
    return xp.where(t1 >= t0, 1, -1)


def known_direction(t0, t1) -> int | None:
    """+1 (t0 up to t1) or -1 when t0 and t1 are known at trace time (or t1 is a
    known infinity, for a solve an `Event` ends); None when traced."""
    c0, c1 = concrete(t0), concrete(t1)
    if c1 is not None and np.isinf(c1):
        return 1 if c1 > 0 else -1
    if c0 is None or c1 is None:
        return None
    return int(_direction(np, c0, c1))


def _dt0_against_direction(xp, t0, t1, dt0):
    return (dt0 == 0) | ((t1 != t0) & (xp.sign(dt0) != _direction(xp, t0, t1)))


def _bad_dt0(xp, t0, t1, dt0):
    return _dt0_against_direction(xp, t0, t1, dt0) | ~xp.isfinite(dt0)


def _interval(xp, t0, t1):
    """`(min(t0, t1), max(t0, t1))`."""
    return xp.where(t1 < t0, t1, t0), xp.where(t1 > t0, t1, t0)


def _outside(xp, t0, t1, ts):
    """Per time: outside `[min(t0, t1), max(t0, t1)]`."""
    lo, hi = _interval(xp, t0, t1)
    return (ts < lo) | (ts > hi)


def _uncovered(xp, t0, t1, p0, p1):
    """`[min(t0, t1), max(t0, t1)]` not within `[p0, p1]`."""
    lo, hi = _interval(xp, t0, t1)
    return (lo < p0) | (hi > p1)


def _backwards(xp, t0, t1, ts):
    """Per step between save times: against the direction of integration."""
    return xp.diff(ts) * _direction(xp, t0, t1) < 0


def _not_from_t0_to_t1(xp, t0, t1, ts):
    return (ts[0] != t0) | (ts[-1] != t1)


def _not_forwards(xp, t0, t1, ts):
    """Per step between step times: not strictly in the direction of integration."""
    return _direction(xp, t0, t1) * xp.diff(ts) <= 0


def _not_positive(xp, x):
    return ~xp.all(x > 0)
