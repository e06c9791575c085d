"""Step-size controllers: the interface (`base`), and one module per controller.

- `base`: `AbstractStepSizeController` (what `diffeqsolve` takes) and
  `AbstractLoopController` (what the loop runs), `ControllerState`, `Decision`,
  `rms_norm`.
- `constant`: `ConstantStepSize`, and `UniformSteps`, its grid of equal steps.
- `step_to`: `StepTo`.
- `pid`: `PIDController` and its starting-step heuristic.
- `clip`: `ClipStepSizeController` (steps landing on `step_ts`, restarting past
  `jump_ts`) and `ClippedSteps`, its running form.
- `landing`: how the last step lands on t1 (`t1_floor`, `stretched_to_end`).
- `counting`: the step count known at trace time (`expected_step_count`).
- `protocol`: diffrax's `init` / `adapt_step_size`, which every controller has.

Adding a controller: docs/architecture.md ("Where to add").
"""

from .base import (
    AbstractAdaptiveStepSizeController as AbstractAdaptiveStepSizeController,
    AbstractLoopController as AbstractLoopController,
    AbstractStepSizeController as AbstractStepSizeController,
    ControllerState as ControllerState,
    Decision as Decision,
    rms_norm as rms_norm,
)
from .clip import ClippedSteps as ClippedSteps, ClipStepSizeController as ClipStepSizeController
from .constant import ConstantStepSize as ConstantStepSize, UniformSteps as UniformSteps
from .counting import expected_step_count as expected_step_count
from .landing import stretched_to_end as stretched_to_end, t1_floor as t1_floor
from .pid import PIDController as PIDController
from .step_to import StepTo as StepTo
