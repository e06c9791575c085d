"""odeckpt: ODE solves in JAX, differentiated with optimal checkpointing."""

from . import schedules as schedules
from ._adjoints import (
    AbstractAdjoint as AbstractAdjoint,
    BacksolveAdjoint as BacksolveAdjoint,
    CheckpointAdjoint as CheckpointAdjoint,
    ForwardMode as ForwardMode,
    InterpolatingAdjoint as InterpolatingAdjoint,
)
from ._controllers import (
    AbstractAdaptiveStepSizeController as AbstractAdaptiveStepSizeController,
    AbstractLoopController as AbstractLoopController,
    AbstractStepSizeController as AbstractStepSizeController,
    ClipStepSizeController as ClipStepSizeController,
    ConstantStepSize as ConstantStepSize,
    ControllerState as ControllerState,
    Decision as Decision,
    PIDController as PIDController,
    StepTo as StepTo,
    rms_norm as rms_norm,
)
from ._core import RESULTS as RESULTS
from ._progress import (
    AbstractProgressMeter as AbstractProgressMeter,
    TextProgressMeter as TextProgressMeter,
    TqdmProgressMeter as TqdmProgressMeter,
)
from ._saveat import SaveAt as SaveAt
from ._solution import Solution as Solution
from ._solve import diffeqsolve as diffeqsolve
from ._solvers import (
    AbstractRungeKutta as AbstractRungeKutta,
    AbstractSolver as AbstractSolver,
    Bosh3 as Bosh3,
    Dopri5 as Dopri5,
    Dopri8 as Dopri8,
    Euler as Euler,
    Heun as Heun,
    Kvaerno3 as Kvaerno3,
    Kvaerno5 as Kvaerno5,
    Midpoint as Midpoint,
    Ralston as Ralston,
    Rodas5P as Rodas5P,
    Ros3P as Ros3P,
    Tsit5 as Tsit5,
)
from ._terms import AbstractTerm as AbstractTerm, ODETerm as ODETerm

__version__ = "0.1.0"
