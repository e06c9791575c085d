"""Bounded while loops over a step function, and the checkpointed one with its VJP.

`forward_loop` runs any `AbstractForwardBody`; `checkpointed_loop` runs a `LoopBody`
under a custom VJP that stores at most `checkpoints` states, placed online, and reverses
each step with one `jax.vjp` of it; `reversible_loop` reconstructs each state by the
step's inverse instead (O(1) states); `bounded_loop` is a scan both autodiff modes go
through. Outputs are written to buffers outside the loop state, so checkpoints never
hold them. See `docs/architecture.md` (layer 5 and "How a solve flows", steps 6–7) and
`docs/adjoints.md` ("CheckpointAdjoint: how reverse mode works").
"""

from .body import (
    AbstractForwardBody as AbstractForwardBody,
    Checksum as Checksum,
    Emitter as Emitter,
    ForwardBody as ForwardBody,
    Inverse as Inverse,
    LoopBody as LoopBody,
    LoopOutput as LoopOutput,
)
from .bounded import bounded_loop as bounded_loop
from .checkpointed import checkpointed_loop as checkpointed_loop
from .forward import forward_loop as forward_loop, forward_only_loop as forward_only_loop
from .reversible import reversible_loop as reversible_loop
from .window import SMALL_STATE_BYTES as SMALL_STATE_BYTES
