"""Checkpointing schedules for reversing a chain of steps: offline Revolve, online
placement, mixed (state and tape) plans.

This package is pure Python (it does not import JAX). It is the reference for the traced
integer bookkeeping of the checkpointed loop (`odeckpt._checkpointing`), which must make
the same decisions; the tests check it against this reference decision for decision.

## Definitions

- A run has `n` steps. *State i* is the state after i steps (state 0 is the initial
  state). *Step i* maps state i to state i + 1.
- `c` is the number of checkpoint slots. It counts *every* stored state, the initial one
  included (as diffrax's `checkpoints` does).
- `beta(c, r) = C(c + r, c)`, and `beta(., r) = 0` for `r < 0`. For n steps and c
  checkpoints, the *repetition number* r is the least r with `beta(c, r) >= n`; the fewest
  extra (non-taped) step evaluations of a reversal is
  `t(n, c) = r*n - beta(c + 1, r - 1)`.
- A full reversal costs `n + t(n, c)` step evaluations. The n counts the *taped*
  evaluations: each step i is evaluated once more immediately before it is reversed, as
  part of its VJP. `t(n, c)` counts the plain advances, the initial forward sweep
  included. E.g. n = 1 costs 1; c = 1, n = 2 costs 3 (advance 0 -> 1, tape step 1,
  restore 0, tape step 0).

## Execution model

*Forward pass* (n unknown while it runs). At each iteration i = 0, 1, 2, ... the engine
holds state i and calls `online_decide(state, i)`, which answers a slot in `[0, c)`
("store state i into that slot, overwriting what it held") or -1 ("do not store"). At
i = 0 it always stores. Then the engine performs step i. The loop ends after n steps.

*Backward pass* (n now known). The engine holds the stored checkpoints as a stack sorted
by position, `p_0 = 0 < p_1 < ... < p_m`, and `b = n` (the next step to reverse is
`b - 1`). With `p` the top position, it loops:

- if `p == b - 1`: restore p (unless it is the state in hand), tape and reverse step
  `b - 1`, `b -= 1`, pop the top;
- else, with `l = b - p` and `s = (c - stack size) + 1` (the free slots plus the top's
  own): if `s == 1`, advance from p to `b - 1`, tape and reverse step `b - 1`, `b -= 1`
  (the top stays); otherwise advance `m = revolve_split(l, s)` steps from p and push
  `p + m` (the state in hand is now `p + m`).

The loop ends when the stack is empty. From the stack `[0]` with `b = n` (no separate
forward pass) it *is* the offline Revolve schedule, of cost `n + t(n, c)` exactly
(`offline_plan`). Online (`online_plan`) the cost is the n forward advances plus the
backward loop from the forward pass's surviving checkpoints.

## Cost of an online schedule

From a stack with segment lengths `d_j = p_{j+1} - p_j` (`p_{m+1} = n`), the backward
loop reverses segment j with `c - j` snapshots, optimally, so an online schedule costs
`2n + sum_j t(d_j, c - j)`. Even knowing n in advance, no schedule of this model can do
better than `online_lower_bound(n, c) = 2n + G(n, c)`, where `G(n, c)` is the sum of the
n smallest marginal costs `r(e, s)` (e = 2, 3, ... within a segment of s snapshots,
s = 1, ..., c; the first step of a segment is free). Since the forward pass evaluates
step n - 1 for nothing and cannot anticipate n, the offline optimum `n + t(n, c)` is out
of reach: `online_lower_bound(n, c) / optimal_total(n, c)` is as large as 1.4 (c = 2,
n = 3) and tends to 1 as n grows.

## Online placement

`kind="greedy"` (the default) keeps the c stored positions and, at each iteration with
every slot in use, picks the cheapest of: not storing, or storing state i in place of the
checkpoint at stack index q (1 <= q < c), where the cost of a choice is the increase of
the backward cost `sum_j t(d_j, c - j)` of the configuration for `n = i + 1`. Ties go to
storing, then to the earliest q. Storing at q merges segments q - 1 and q and gives every
later segment one more snapshot. Each `t(d, s)` is convex and piecewise linear in d; the
rule evaluates it through its pieces at the repetition levels `rho - 2 .. rho + 2`
around the current level `rho` (the least rho with `beta(c, rho + 1) - 1 >= i + 1`), a
lower envelope that is exact for every segment whose own repetition number lies in that
window, and exactly as `d(d - 1)/2` for the last segment (one snapshot). A merge whose
segment of s snapshots would exceed `beta(s, rho + 1)` is not considered, so that merged
segments stay where the envelope is exact. The per-iteration work is O(c) integer
operations on fixed-size arrays.

The published placement rules of Stumm & Walther (2010), Algorithms I and II, could not be
recovered for this module, so this rule is our own design. It meets the headline property
of their Algorithm I: for every `n < beta(c, 2)` its configuration attains
`online_lower_bound(n, c)` (checked in the tests for c <= 12 and c = 16, 32, 64).
Beyond, measured for n <= 10^5 and c in 2..12, 16, 32, 64, 128: at most 10.3% above the
bound for c = 2, 5.5% for c = 3 and 5% for c >= 4; against the offline optimum, for
n >= 100, within 8.7% (c = 2), 6.5% (c = 3) and 5% (c >= 4).

`kind="wang"` is the dynamic checkpointing of Wang, Moin & Iaccarino (2009): every state
is stored; a full memory evicts the latest *dispensable* checkpoint (one with a lower
level than a later checkpoint), else the most recent checkpoint, whose level the new one
inherits plus one. It is kept as a baseline; on this cost model it is worse than
`"greedy"`.

## Known number of steps

With fixed step sizes the number of steps is known before the forward pass runs.
`known_slots` then stores where Revolve's first sweep would (or where the greedy rule
would, if that is cheaper for this n), and `known_plan` is the resulting schedule: the
offline optimum plus the forward pass's evaluation of the last step and a few restarts
(within 0.2% of `n + t(n, c)` for n >= 1000).

## Mixed schedules

`mixed_plan(n, budget, tape_units)` may also keep a step's *tape* (what reversing the
step needs without evaluating it again; `tape_units` units of memory where a state is
one), with the actions `TapeStep` and `ReverseTaped`: the optimum over states and tapes
by dynamic programming (`_mixed`), checked against an exhaustive search. It is an
offline plan (n known). The traced loop does not run it: `CheckpointAdjoint` stores
states only.

## Where each part lives

- `_binomial`: `beta`, `repetition_number`, `revolve_extra_cost`, `optimal_total`,
  `online_lower_bound`, `revolve_split` and the saturation cap `SATURATION`.
- `_actions`: the actions `Advance`, `Store`, `Restore`, `Reverse`, `Free`,
  `TapeStep`, `ReverseTaped` and `Plan`.
- `_offline`: the backward loop shared by every plan, and `offline_plan` (Revolve).
- `_placement`: `OnlineState`, `online_init` and the placement rules `KINDS`.
- `_greedy`: the greedy rule (the reference decision, and the incremental runner that
  makes the same decisions for whole forward passes); `_wang`: the rule of Wang, Moin &
  Iaccarino.
- `_online`: `online_decide`, `online_slots`, `online_positions`, `online_total`,
  `online_plan`.
- `_known`: `known_slots`, `known_plan` and `KNOWN_GREEDY_LIMIT`.
- `_mixed`: `mixed_total`, `mixed_plan`.
- `_validate`: `validate`.

## References

- A. Griewank, A. Walther (2000), "Algorithm 799: Revolve: an implementation of
  checkpointing for the reverse or adjoint mode of computational differentiation",
  ACM Trans. Math. Softw. 26(1):19-45.
- P. Stumm, A. Walther (2010), "New algorithms for optimal online checkpointing",
  SIAM J. Sci. Comput. 32(2):836-854.
- J. R. Maddison (2024), "Step-based checkpointing with high-level algorithmic
  differentiation", J. Comput. Sci. 82:102405 (mixed schedules).
- Q. Wang, P. Moin, G. Iaccarino (2009), "Minimal repetition dynamic checkpointing
  algorithm for unsteady adjoint calculation", SIAM J. Sci. Comput. 31(4):2549-2567.
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
