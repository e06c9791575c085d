"""How reverse (or forward) mode goes through a solve: the adjoint methods.

An adjoint chooses the loop the solve runs in (`AbstractAdjoint.loop`), and so how it
is differentiated. Modules: `docs/architecture.md`, layer 8; which adjoint to use:
`docs/adjoints.md`.
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
