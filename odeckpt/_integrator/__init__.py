"""The step pipeline: `Integrator` (one attempted step, its decisions, its outputs) and
the records it shares with the loops, the adjoints and the Solution.

Modules: `state` (the records), `outputs` (the emitters), `conditions` and `events`
(the solve's `Event` inside the loop), `integrator`, `reconstruction`; see
`docs/architecture.md`, layer 6 and "How a solve flows".
"""

from .conditions import EventRequest as EventRequest
from .events import event_end as event_end, event_mask as event_mask
from .integrator import (
    Integrator as Integrator,
    attempt_step as attempt_step,
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
