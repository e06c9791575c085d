"""Bounded while loops over a step function, and the checkpointed one with its VJP.

The integrator hands the loop a body: a step `(problem, state) -> (state, record,
accepted)`, and `Emitter`s that write outputs into write-only buffers. The buffers are
outside the loop state: checkpoints never hold outputs, and the backward pass reads
their cotangents when it reverses the step that wrote them. `forward_loop` runs any
`AbstractForwardBody` (step, condition, emitters, progress); `checkpointed_loop` runs
a `LoopBody`, which adds what its reverse mode needs: recording a step's decisions,
skipping a rejected step, compressing and restoring checkpoints.

`checkpointed_loop` has a custom VJP. Its forward pass stores at most `checkpoints`
states, placed online (the number of steps is unknown while it runs; see
`odeckpt.schedules`); its backward pass then reverses the steps n-1, ..., 0, running
the optimal offline binomial plan inside each interval between stored states. Each
accepted step is reversed by one `jax.vjp` of the step: one re-evaluation and its
transpose. A rejected step moved only the next step's time, which is recorded: it is
reversed from that record (`LoopBody.skip`) without being evaluated, and so replayed
for large states (see `reverse.replay_step`). When `checkpoints >= max_steps` every
state is stored and the backward pass is a plain reverse sweep.

Both passes work a window of consecutive steps at a time (see `window`): the
loops that run once per step touch only the window's recorded decisions and
checkpoints, and the max_steps-long buffers are read and written once per window.
The backward pass keeps the plan's order of actions exactly, so it performs the
evaluations `odeckpt.schedules.online_plan` counts, less those of skipped rejected
steps.

Words: a step is *replayed* when it is run again with its recorded decisions (the
backward pass's advances and reversals); the backward pass *advances* the state in
hand from a checkpoint towards the next step to reverse.

`reversible_loop` is `forward_loop` with the same reversal of each step, but the
state a step started from is reconstructed from the state after it by the step's
algebraic inverse (`Inverse`), so that no state is stored: O(1) states, and a few
scalars per step (its recorded decisions and what its inverse needs).

Modules: `body` (the bodies and records), `forward` (`forward_loop`, output writing),
`reversible` (`reversible_loop`),
`bounded` (`bounded_loop`: a scan both autodiff modes go through),
`window` (window sizing), `reverse` (one step reversed or replayed), `checkpointed`
(the custom VJP and its forward passes), `backward` (its backward passes), `plan` (the
traced ports of the schedule decisions).
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
