"""How reverse (or forward) mode goes through a solve: the adjoint methods.

An adjoint chooses the loop the solve runs in (`AbstractAdjoint.loop`), and so how it
is differentiated.

- `base`: `AbstractAdjoint`, and the memory figures the sizing rules share.
- `checkpoint`: `CheckpointAdjoint` (discretise-then-optimise through the checkpointed
  loop) and its sizing rule.
- `direct`: `DirectAdjoint` (both autodiff modes through a scan of `max_steps`).
- `implicit`: `ImplicitAdjoint` (a steady state's derivative by the implicit function
  theorem).
- `forward_mode`: `ForwardMode` (a plain loop, for `jax.jvp`).
- `continuous/`: `BacksolveAdjoint` and `InterpolatingAdjoint` (the adjoint ODE).
- `reversible`: `ReversibleAdjoint` (a reversible solver's states reconstructed
  backwards) and the loop it shares with `BacksolveAdjoint()` of a reversible solver.
"""

from .base import (
    DEFAULT_MEMORY_BUDGET as DEFAULT_MEMORY_BUDGET,
    STORE_EVERY_STEP_BYTES as STORE_EVERY_STEP_BYTES,
    AbstractAdjoint as AbstractAdjoint,
)
from .checkpoint import (
    CheckpointAdjoint as CheckpointAdjoint,
    useful_checkpoints as useful_checkpoints,
)
from .continuous import (
    AbstractContinuousAdjoint as AbstractContinuousAdjoint,
    BacksolveAdjoint as BacksolveAdjoint,
    InterpolatingAdjoint as InterpolatingAdjoint,
    adjoint_rms_seminorm as adjoint_rms_seminorm,
)
from .direct import DirectAdjoint as DirectAdjoint
from .forward_mode import ForwardMode as ForwardMode
from .implicit import ImplicitAdjoint as ImplicitAdjoint
from .reversible import ReversibleAdjoint as ReversibleAdjoint
