"""The solvers: one-step and multistep methods behind one interface, `AbstractSolver`.

Sorted by concept, one folder each (`runge_kutta/`, `explicit/`, `multistep/`,
`stiff/`, `imex/`, `reversible/`, `root_finder/`, `linear/`), with the protocol at the
top (`base`, `diffrax_protocol`, `dense`, `half`): see `docs/architecture.md`, layer 3.
`EXPLICIT`, `STIFF`, `IMEX` and `STATEFUL` are the registries of the concrete solvers
that the tests read; adding a method: `docs/architecture.md`, "Where to add".
"""

from .base import (
    AbstractAdaptiveSolver as AbstractAdaptiveSolver,
    AbstractDiffraxSolver as AbstractDiffraxSolver,
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
from .explicit.bosh3 import Bosh3 as Bosh3
from .explicit.dopri5 import Dopri5 as Dopri5
from .explicit.dopri8 import Dopri8 as Dopri8
from .explicit.euler import Euler as Euler
from .explicit.heun import Heun as Heun
from .explicit.midpoint import Midpoint as Midpoint
from .explicit.ralston import Ralston as Ralston
from .explicit.semi_implicit_euler import SemiImplicitEuler as SemiImplicitEuler
from .explicit.tsit5 import Tsit5 as Tsit5
from .half import HalfSolver as HalfSolver
from .imex.ark import (
    AbstractIMEX as AbstractIMEX,
    KenCarp3 as KenCarp3,
    KenCarp4 as KenCarp4,
    KenCarp5 as KenCarp5,
    Sil3 as Sil3,
)
from .linear.preconditioners import (
    AbstractPreconditioner as AbstractPreconditioner,
    BlockJacobiPreconditioner as BlockJacobiPreconditioner,
    JacobiPreconditioner as JacobiPreconditioner,
)
from .multistep.leapfrog_midpoint import LeapfrogMidpoint as LeapfrogMidpoint
from .reversible.reversible import Reversible as Reversible
from .reversible.reversible_heun import ReversibleHeun as ReversibleHeun
from .root_finder.newton_solver import AbstractNewtonSolver as AbstractNewtonSolver
from .root_finder.verychord import AbstractRootFinder as AbstractRootFinder, VeryChord as VeryChord
from .root_finder.with_tols import (
    ControllerTolerances as ControllerTolerances,
    filled_tolerances as filled_tolerances,
    with_stepsize_controller_tols as with_stepsize_controller_tols,
)
from .runge_kutta.base import (
    AbstractDIRK as AbstractDIRK,
    AbstractERK as AbstractERK,
    AbstractExplicitSolver as AbstractExplicitSolver,
    AbstractRungeKutta as AbstractRungeKutta,
    AbstractSDIRK as AbstractSDIRK,
    CalculateJacobian as CalculateJacobian,
    weighted_stages as weighted_stages,
)
from .runge_kutta.multi_tableau import MultiButcherTableau as MultiButcherTableau
from .runge_kutta.tableau import ButcherTableau as ButcherTableau
from .stiff.esdirk import (
    AbstractESDIRK as AbstractESDIRK,
    Kvaerno3 as Kvaerno3,
    Kvaerno4 as Kvaerno4,
    Kvaerno5 as Kvaerno5,
)
from .stiff.implicit_euler import ImplicitEuler as ImplicitEuler
from .stiff.radau import RadauIIA5 as RadauIIA5
from .stiff.rosenbrock import (
    AbstractRosenbrock as AbstractRosenbrock,
    Rodas5P as Rodas5P,
    Ros3P as Ros3P,
)

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
