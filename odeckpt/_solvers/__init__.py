"""The solvers: one-step methods behind one interface, `AbstractSolver`.

- `base`: `AbstractSolver` (what the integrator asks of a method) and `StepOutput`.
- `tableau`, `order_conditions`: `ButcherTableau`, validated against the B-series
  order conditions (rooted trees) when it is defined; the stiff tableaux use the same
  order-condition routines.
- `runge_kutta`: `AbstractRungeKutta` and the one generic explicit step.
- `explicit/`: one module per explicit method (its tableau and its final class).
- `rosenbrock`, `esdirk` (with `newton`, `linalg`, `stiff_tableaux`): the stiff solvers.
- `dense`: `DenseStep`, the per-step dense-output polynomial, and cubic Hermite.

`EXPLICIT` and `STIFF` are the registries of the concrete solvers; the tests read them.
Adding an explicit Runge–Kutta method touches exactly: its own module
`odeckpt/_solvers/explicit/<method>.py`, this file (one import line and one entry in
`EXPLICIT`), and one export line in `odeckpt/__init__.py`.
"""

from .base import AbstractSolver as AbstractSolver, StepOutput as StepOutput
from .dense import DenseStep as DenseStep, hermite_coeffs as hermite_coeffs
from .esdirk import AbstractESDIRK as AbstractESDIRK, Kvaerno3 as Kvaerno3, Kvaerno5 as Kvaerno5
from .explicit.bosh3 import Bosh3 as Bosh3
from .explicit.dopri5 import Dopri5 as Dopri5
from .explicit.dopri8 import Dopri8 as Dopri8
from .explicit.euler import Euler as Euler
from .explicit.heun import Heun as Heun
from .explicit.midpoint import Midpoint as Midpoint
from .explicit.ralston import Ralston as Ralston
from .explicit.tsit5 import Tsit5 as Tsit5
from .rosenbrock import (
    AbstractRosenbrock as AbstractRosenbrock,
    Rodas5P as Rodas5P,
    Ros3P as Ros3P,
)
from .runge_kutta import (
    AbstractRungeKutta as AbstractRungeKutta,
    combine_stages as combine_stages,
    weighted_stages as weighted_stages,
)
from .tableau import ButcherTableau as ButcherTableau

EXPLICIT: tuple[type[AbstractRungeKutta], ...] = (
    Euler,
    Heun,
    Midpoint,
    Ralston,
    Bosh3,
    Tsit5,
    Dopri5,
    Dopri8,
)
"""The explicit Runge–Kutta solvers, lowest order first (the tests parametrise over it)."""

STIFF: tuple[type[AbstractSolver], ...] = (Ros3P, Rodas5P, Kvaerno3, Kvaerno5)
"""The stiff solvers: Rosenbrock, then ESDIRK (the tests parametrise over it)."""
