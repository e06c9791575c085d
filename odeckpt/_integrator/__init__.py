"""The step pipeline: `Integrator` (one attempted step, its decisions, its outputs) and
the records it shares with the loops, the adjoints and the Solution.

- `state`: `State` (the loop state), `Problem` (what a step reads), `Checkpoint`,
  `RecordedDecisions` (what a replayed step imposes), `Record` (what an accepted step
  hands to the output writers).
- `outputs`: the emitters of each `SubSaveAt`'s rows and of dense output, the records
  of what they read (`SaveRequest`, `SaveLayout`) and of their buffers (`Outputs`).
- `integrator`: `Integrator`, and where a step starts after a jump of the vector
  field (`restart_after`, `fresh_stage`), for the replays of the continuous adjoints.
"""

from .integrator import (
    Integrator as Integrator,
    fresh_stage as fresh_stage,
    restart_after as restart_after,
)
from .outputs import (
    Outputs as Outputs,
    SaveLayout as SaveLayout,
    SaveRequest as SaveRequest,
    SubOutputs as SubOutputs,
    count_at_or_before as count_at_or_before,
)
from .state import (
    Checkpoint as Checkpoint,
    Problem as Problem,
    Record as Record,
    RecordedDecisions as RecordedDecisions,
    State as State,
)
