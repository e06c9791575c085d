"""odeckpt: ODE solves in JAX, differentiated with optimal checkpointing."""

from . import schedules as schedules
from ._adjoints import (
    AbstractAdjoint as AbstractAdjoint,
    BacksolveAdjoint as BacksolveAdjoint,
    CheckpointAdjoint as CheckpointAdjoint,
    DirectAdjoint as DirectAdjoint,
    ForwardMode as ForwardMode,
    ImplicitAdjoint as ImplicitAdjoint,
    InterpolatingAdjoint as InterpolatingAdjoint,
    ReversibleAdjoint as ReversibleAdjoint,
    adjoint_rms_seminorm as adjoint_rms_seminorm,
)
from ._compiled import (
    clear_compiled_cache as clear_compiled_cache,
    compiled_cache_info as compiled_cache_info,
    compiled_cache_size as compiled_cache_size,
)
from ._control import (
    ControlTerm as ControlTerm,
    WeaklyDiagonalControlTerm as WeaklyDiagonalControlTerm,
)
from ._controllers import (
    AbstractAdaptiveStepSizeController as AbstractAdaptiveStepSizeController,
    AbstractLoopController as AbstractLoopController,
    AbstractStepSizeController as AbstractStepSizeController,
    ClipStepSizeController as ClipStepSizeController,
    ConstantStepSize as ConstantStepSize,
    ControllerState as ControllerState,
    Decision as Decision,
    PIDController as PIDController,
    StepTo as StepTo,
    rms_norm as rms_norm,
)
from ._core import (
    RESULTS as RESULTS,
    is_event as is_event,
    is_okay as is_okay,
    is_successful as is_successful,
)
from ._event import (
    AbstractDiscreteTerminatingEvent as AbstractDiscreteTerminatingEvent,
    DiscreteTerminatingEvent as DiscreteTerminatingEvent,
    Event as Event,
    SteadyStateEvent as SteadyStateEvent,
    steady_state_event as steady_state_event,
)
from ._hvp import hvp as hvp
from ._interpolation import (
    AbstractGlobalInterpolation as AbstractGlobalInterpolation,
    AbstractLocalInterpolation as AbstractLocalInterpolation,
    AbstractPath as AbstractPath,
    CubicInterpolation as CubicInterpolation,
    FourthOrderPolynomialInterpolation as FourthOrderPolynomialInterpolation,
    LinearInterpolation as LinearInterpolation,
    LocalLinearInterpolation as LocalLinearInterpolation,
    ThirdOrderHermitePolynomialInterpolation as ThirdOrderHermitePolynomialInterpolation,
    backward_hermite_coefficients as backward_hermite_coefficients,
    linear_interpolation as linear_interpolation,
    rectilinear_interpolation as rectilinear_interpolation,
)
from ._progress import (
    AbstractProgressMeter as AbstractProgressMeter,
    NoProgressMeter as NoProgressMeter,
    TextProgressMeter as TextProgressMeter,
    TqdmProgressMeter as TqdmProgressMeter,
)
from ._saveat import SaveAt as SaveAt, SubSaveAt as SubSaveAt, save_y as save_y
from ._solution import DenseInterpolation as DenseInterpolation, Solution as Solution
from ._solve import diffeqsolve as diffeqsolve
from ._solvers import (
    AbstractAdaptiveSolver as AbstractAdaptiveSolver,
    AbstractDIRK as AbstractDIRK,
    AbstractERK as AbstractERK,
    AbstractESDIRK as AbstractESDIRK,
    AbstractIMEX as AbstractIMEX,
    AbstractImplicitSolver as AbstractImplicitSolver,
    AbstractItoSolver as AbstractItoSolver,
    AbstractPreconditioner as AbstractPreconditioner,
    AbstractReversibleSolver as AbstractReversibleSolver,
    AbstractRosenbrock as AbstractRosenbrock,
    AbstractRungeKutta as AbstractRungeKutta,
    AbstractSDIRK as AbstractSDIRK,
    AbstractSolver as AbstractSolver,
    AbstractStratonovichSolver as AbstractStratonovichSolver,
    AbstractWrappedSolver as AbstractWrappedSolver,
    BlockJacobiPreconditioner as BlockJacobiPreconditioner,
    Bosh3 as Bosh3,
    ButcherTableau as ButcherTableau,
    CalculateJacobian as CalculateJacobian,
    Dopri5 as Dopri5,
    Dopri8 as Dopri8,
    Euler as Euler,
    HalfSolver as HalfSolver,
    Heun as Heun,
    ImplicitEuler as ImplicitEuler,
    JacobiPreconditioner as JacobiPreconditioner,
    KenCarp3 as KenCarp3,
    KenCarp4 as KenCarp4,
    KenCarp5 as KenCarp5,
    Kvaerno3 as Kvaerno3,
    Kvaerno4 as Kvaerno4,
    Kvaerno5 as Kvaerno5,
    LeapfrogMidpoint as LeapfrogMidpoint,
    Midpoint as Midpoint,
    MultiButcherTableau as MultiButcherTableau,
    RadauIIA5 as RadauIIA5,
    Ralston as Ralston,
    Reversible as Reversible,
    ReversibleHeun as ReversibleHeun,
    Rodas5P as Rodas5P,
    Ros3P as Ros3P,
    SemiImplicitEuler as SemiImplicitEuler,
    Sil3 as Sil3,
    Tsit5 as Tsit5,
    VeryChord as VeryChord,
    with_stepsize_controller_tols as with_stepsize_controller_tols,
)
from ._terms import AbstractTerm as AbstractTerm, MultiTerm as MultiTerm, ODETerm as ODETerm

__version__ = "0.1.0"
