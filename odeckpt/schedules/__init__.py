"""Checkpointing schedules for reversing a chain of steps: offline Revolve, online
placement, mixed (state and tape) plans.

This package is pure Python (it does not import JAX). It is the reference for the traced
integer bookkeeping of the checkpointed loop (`odeckpt._checkpointing`), which must make
the same decisions; the tests check it against this reference decision for decision.
A run has `n` steps and `c` checkpoint slots, counting every stored state, the initial
one included (as diffrax's `checkpoints` does); a full reversal costs `n + t(n, c)` step
evaluations, `offline_plan(n, c).total`.

See docs/schedules.md for the definitions, the execution model, the online placement
rules, mixed plans, where each part lives and the references.
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
