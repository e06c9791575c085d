"""Step-size controllers: the interface (`base`), and one module per controller.

Besides the controllers: `landing` (how the last step lands on t1), `counting` (the
step count known at trace time) and `protocol` (diffrax's `init` / `adapt_step_size`).
See `docs/architecture.md` (layer 4, and "Where to add" a controller) and
`docs/controllers.md`.
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
