"""The solvers: one-step methods behind one interface, `AbstractSolver`.

- `base`: `AbstractSolver` (what the integrator asks of a method), `StepOutput`, and
  diffrax's abstract marker classes (`AbstractAdaptiveSolver`, `AbstractImplicitSolver`,
  ...).
- `tableau`, `order_conditions`: `ButcherTableau`, validated against the B-series
  order conditions (rooted trees) when it is defined (in odeckpt's fields or diffrax's);
  the stiff tableaux use the same order-condition routines; `coefficients`: helpers
  that build the explicit tableaux' weights.
- `runge_kutta`: diffrax's Runge–Kutta classes (`AbstractRungeKutta`, `AbstractERK`,
  `AbstractDIRK`, `AbstractSDIRK`), `AbstractExplicitSolver` and the one generic
  explicit step.
- `explicit/`: one module per explicit method (its tableau and its final class).
- `rosenbrock`, `esdirk` (with `newton`, `newton_settings`, `linalg`, `stiff_tableaux`,
  `esdirk_tableaux`, `verychord`), `implicit_euler`, `radau` (with `radau_tableau`): the
  stiff solvers; `imex` (with `imex_tableaux`): the IMEX additive Runge–Kutta methods,
  for `MultiTerm(explicit, implicit)`; `imex_multi`: diffrax's `MultiButcherTableau` (a
  tableau per term) and the additive step of an `AbstractRungeKutta` defined with one.
- `partitioned`: `SemiImplicitEuler`, for a tuple of terms (`PartitionedTerm`).
- `half`: `HalfSolver`, an error estimate for any solver from two half steps.
- `leapfrog_midpoint`, `reversible_heun`: solvers that carry state `init_state` cannot
  rebuild (`LeapfrogMidpoint`'s previous point; `ReversibleHeun`'s `yhat`, which also
  makes its step algebraically reversible: `AbstractReversibleSolver.reverse_step`).
- `reversible`: `Reversible`, any explicit Runge–Kutta method made algebraically
  reversible (a second solution `z` carried, coupled to `y`).
- `dense`: `DenseStep`, the per-step dense-output polynomial, and cubic Hermite.

`EXPLICIT`, `STIFF`, `IMEX` and `STATEFUL` are the registries of the concrete solvers; the
tests read them.
Adding an explicit Runge–Kutta method touches exactly: its own module
`odeckpt/_solvers/explicit/<method>.py`, this file (one import line and one entry in
`EXPLICIT`), and one export line in `odeckpt/__init__.py`.
"""

from .base import (
    AbstractAdaptiveSolver as AbstractAdaptiveSolver,
    AbstractImplicitSolver as AbstractImplicitSolver,
    AbstractItoSolver as AbstractItoSolver,
    AbstractReversibleSolver as AbstractReversibleSolver,
    AbstractSolver as AbstractSolver,
    AbstractStratonovichSolver as AbstractStratonovichSolver,
    AbstractWrappedSolver as AbstractWrappedSolver,
    StepOutput as StepOutput,
    combine_stages as combine_stages,
)
from .dense import (
    DenseStep as DenseStep,
    hermite_coeffs as hermite_coeffs,
    linear_coeffs as linear_coeffs,
)
from .esdirk import (
    AbstractESDIRK as AbstractESDIRK,
    Kvaerno3 as Kvaerno3,
    Kvaerno4 as Kvaerno4,
    Kvaerno5 as Kvaerno5,
)
from .explicit.bosh3 import Bosh3 as Bosh3
from .explicit.dopri5 import Dopri5 as Dopri5
from .explicit.dopri8 import Dopri8 as Dopri8
from .explicit.euler import Euler as Euler
from .explicit.heun import Heun as Heun
from .explicit.midpoint import Midpoint as Midpoint
from .explicit.ralston import Ralston as Ralston
from .explicit.tsit5 import Tsit5 as Tsit5
from .half import HalfSolver as HalfSolver
from .imex import (
    AbstractIMEX as AbstractIMEX,
    KenCarp3 as KenCarp3,
    KenCarp4 as KenCarp4,
    KenCarp5 as KenCarp5,
    Sil3 as Sil3,
)
from .imex_multi import MultiButcherTableau as MultiButcherTableau
from .implicit_euler import ImplicitEuler as ImplicitEuler
from .leapfrog_midpoint import LeapfrogMidpoint as LeapfrogMidpoint
from .newton_settings import AbstractNewtonSolver as AbstractNewtonSolver
from .partitioned import SemiImplicitEuler as SemiImplicitEuler
from .radau import RadauIIA5 as RadauIIA5
from .reversible import Reversible as Reversible
from .reversible_heun import ReversibleHeun as ReversibleHeun
from .rosenbrock import (
    AbstractRosenbrock as AbstractRosenbrock,
    Rodas5P as Rodas5P,
    Ros3P as Ros3P,
)
from .runge_kutta import (
    AbstractDIRK as AbstractDIRK,
    AbstractERK as AbstractERK,
    AbstractExplicitSolver as AbstractExplicitSolver,
    AbstractRungeKutta as AbstractRungeKutta,
    AbstractSDIRK as AbstractSDIRK,
    CalculateJacobian as CalculateJacobian,
    weighted_stages as weighted_stages,
)
from .tableau import ButcherTableau as ButcherTableau
from .verychord import AbstractRootFinder as AbstractRootFinder, VeryChord as VeryChord

EXPLICIT: tuple[type[AbstractExplicitSolver], ...] = (
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

STIFF: tuple[type[AbstractSolver], ...] = (
    Ros3P,
    Rodas5P,
    ImplicitEuler,
    Kvaerno3,
    Kvaerno4,
    Kvaerno5,
    RadauIIA5,
)
"""The stiff solvers: Rosenbrock, then the Newton-based ones (ESDIRK, Radau IIA; the
tests parametrise over it)."""

IMEX: tuple[type[AbstractIMEX], ...] = (Sil3, KenCarp3, KenCarp4, KenCarp5)
"""The IMEX solvers, for `MultiTerm(explicit, implicit)` (the tests parametrise over it)."""

STATEFUL: tuple[type[AbstractSolver], ...] = (LeapfrogMidpoint, ReversibleHeun)
"""The solvers whose state a checkpoint stores (`state_rebuildable` false): multistep
and reversible methods (the tests parametrise over it). `RadauIIA5`'s state is stored
too, but it holds only the Newton iteration's starting values (`tests/test_radau.py`)."""
