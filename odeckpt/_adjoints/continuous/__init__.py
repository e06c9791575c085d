"""Continuous adjoints (optimise-then-discretise): the adjoint ODE solved backwards.

- `base`: `AbstractContinuousAdjoint`, what both adjoints share.
- `backsolve`: `BacksolveAdjoint` (`y` integrated backwards, re-anchored).
- `interpolating`: `InterpolatingAdjoint` (`y` from the forward solve's dense output).
- `vjp`: the continuous adjoint's VJP, the custom VJP both loops run under.
- `tape`: what its forward pass records; `sweep`: its backward sweep;
  `adjoint_ode`: the adjoint ODE and one Runge–Kutta step of it.
"""

from .backsolve import (
    BacksolveAdjoint as BacksolveAdjoint,
    adjoint_rms_seminorm as adjoint_rms_seminorm,
)
from .base import AbstractContinuousAdjoint as AbstractContinuousAdjoint
from .interpolating import InterpolatingAdjoint as InterpolatingAdjoint
