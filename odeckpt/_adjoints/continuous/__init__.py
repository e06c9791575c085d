"""Continuous adjoints (optimise-then-discretise): the adjoint ODE solved backwards.

Modules: `base` (what both adjoints share), `backsolve`, `interpolating`, `vjp` (the
custom VJP both loops run under), `tape` (its forward pass), `sweep` (its backward
sweep), `adjoint_ode`, `saved` and `event_jump`; see `docs/adjoints.md`, "The
continuous adjoints".
"""

from .backsolve import (
    BacksolveAdjoint as BacksolveAdjoint,
    adjoint_rms_seminorm as adjoint_rms_seminorm,
)
from .base import AbstractContinuousAdjoint as AbstractContinuousAdjoint
from .interpolating import InterpolatingAdjoint as InterpolatingAdjoint
