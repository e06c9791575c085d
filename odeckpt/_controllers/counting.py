"""The number of steps a solve takes, when it is known at trace time."""

import numpy as np

from odeckpt._core import concrete

from .base import AbstractStepSizeController
from .landing import t1_floor


def expected_step_count(controller: AbstractStepSizeController, t0, t1, dt0, tdtype) -> int | None:
    """The number of steps if the controller fixes it and the times are concrete, else
    `None`: `controller.expected_steps` asked with the internal (increasing) times as
    NumPy scalars of `tdtype`. `t0`, `t1`, `dt0` must be the raw inputs of the solve:
    under `jax.jit` anything computed from them is traced."""
    values = [concrete(x) for x in (t0, t1)] + [None if dt0 is None else concrete(dt0)]
    if any(v is None or v.ndim for v in values[:2]) or (dt0 is not None and values[2] is None):
        return controller.expected_steps(None, None, None, None)
    c0, c1 = (np.asarray(v, tdtype) for v in values[:2])
    sign = np.asarray(1 if c1 >= c0 else -1, tdtype)
    tau1 = sign * c1
    dt = None if values[2] is None else sign * np.asarray(values[2], tdtype)
    return controller.expected_steps(sign * c0, tau1, t1_floor(tau1), dt)
