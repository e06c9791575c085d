"""The step pipeline: `Integrator` (one attempted step, its decisions, its outputs) and
the records it shares with the loops, the adjoints and the Solution.

- `state`: `State` (the loop state), `Problem` (what a step reads), `Checkpoint`,
  `RecordedDecisions` (what a replayed step imposes), `Record` (what an accepted step
  hands to the output writers).
- `outputs`: the emitters of each `SubSaveAt`'s rows and of dense output, the records
  of what they read (`SaveRequest`, `SaveLayout`) and of their buffers (`Outputs`).
- `conditions`, `events`: the solve's `Event` inside the loop (`EventRequest`), the
  step cut short at an event, and where the solve ended (`event_end`, `event_mask`).
- `integrator`: `Integrator`, and where a step starts after a jump of the vector
  field (`restart_after`, `fresh_stage`), for the replays of the continuous adjoints.
"""

from .conditions import EventRequest as EventRequest
from .events import event_end as event_end, event_mask as event_mask
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
