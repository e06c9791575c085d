"""Checkpointing schedules for reversing a chain of steps: offline Revolve, online
placement, mixed (state and tape) plans.

Pure Python (no JAX), and the reference the traced loop's decisions are checked
against. A run has `n` steps and `c` checkpoint slots, the initial state included; a
full reversal costs `n + t(n, c)` evaluations, `offline_plan(n, c).total`. See
`docs/schedules.md`.
"""

from ._actions import (
    Action as Action,
    Advance as Advance,
    Free as Free,
    Plan as Plan,
    Restore as Restore,
    Reverse as Reverse,
    ReverseTaped as ReverseTaped,
    Store as Store,
    TapeStep as TapeStep,
)
from ._binomial import (
    SATURATION as SATURATION,
    beta as beta,
    online_lower_bound as online_lower_bound,
    optimal_total as optimal_total,
    repetition_number as repetition_number,
    revolve_extra_cost as revolve_extra_cost,
    revolve_split as revolve_split,
)
from ._known import (
    KNOWN_GREEDY_LIMIT as KNOWN_GREEDY_LIMIT,
    known_plan as known_plan,
    known_slots as known_slots,
)
from ._mixed import (
    mixed_plan as mixed_plan,
    mixed_total as mixed_total,
)
from ._offline import (
    offline_plan as offline_plan,
)
from ._online import (
    online_decide as online_decide,
    online_plan as online_plan,
    online_positions as online_positions,
    online_slots as online_slots,
    online_total as online_total,
)
from ._placement import (
    KINDS as KINDS,
    OnlineState as OnlineState,
    online_init as online_init,
)
from ._validate import (
    validate as validate,
)

__all__ = [
    "SATURATION",
    "KINDS",
    "Advance",
    "Store",
    "Restore",
    "Reverse",
    "Free",
    "TapeStep",
    "ReverseTaped",
    "Action",
    "Plan",
    "OnlineState",
    "beta",
    "repetition_number",
    "revolve_extra_cost",
    "optimal_total",
    "online_lower_bound",
    "revolve_split",
    "offline_plan",
    "online_init",
    "online_decide",
    "online_slots",
    "online_positions",
    "online_total",
    "online_plan",
    "KNOWN_GREEDY_LIMIT",
    "known_slots",
    "known_plan",
    "mixed_total",
    "mixed_plan",
    "validate",
]
