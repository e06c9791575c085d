"""`VeryChord`: the implicit solvers' root-finder settings, under diffrax's name."""

from collections.abc import Callable
from typing import final

import equinox as eqx
import lineax as lx

from odeckpt._solvers.linear.choice import DEFAULT_LINEAR_SOLVER, check_linear_solver
from odeckpt._solvers.linear.dense import rms


class AbstractRootFinder(eqx.Module):
    """Settings of the stage iterations of an implicit solver: tolerances `rtol`,
    `atol`, and the fraction `kappa` of them the remaining error must be below."""

    rtol: eqx.AbstractVar[float]
    atol: eqx.AbstractVar[float]
    kappa: eqx.AbstractVar[float]
    linear_solver: eqx.AbstractVar[lx.AbstractLinearSolver]

    @property
    def wants_controller_tolerances(self) -> bool:
        """Whether `rtol` and `atol` are to be the step-size controller's
        (`with_stepsize_controller_tols`), filled in by `diffeqsolve`."""
        return False

    def with_controller_tolerances(self, rtol: float, atol: float) -> "AbstractRootFinder":
        """This root finder with the controller's tolerances where it wants them
        (`wants_controller_tolerances`), else itself."""
        del rtol, atol
        return self


@final
class VeryChord(AbstractRootFinder):
    """How an implicit solver (`Kvaerno3`, `Kvaerno5`) solves its stage equations:
    simplified Newton (the chord method) with the Jacobian formed once per step, as
    diffrax's `VeryChord`.

    The iteration of a stage stops once its estimated remaining error, in the RMS norm
    scaled by `atol + rtol |z|`, is below `kappa` (Hairer & Wanner's stopping rule, as
    diffrax's); the solver's effective Newton tolerances are `kappa * rtol` and
    `kappa * atol`.

    Attributes:
        rtol, atol: the tolerances the stopping rule is relative to. Unlike diffrax,
            which takes them from the step-size controller when not given, odeckpt
            needs them (its default solver settings are `rtol=1e-8, atol=1e-10`).
        norm: accepted for compatibility with diffrax (so that it can be replaced, as
            diffrax's tests do with `eqx.tree_at`); the stage iterations always use the
            RMS norm, the default here.
        kappa: the fraction of the tolerance the remaining error must be below.
        linear_solver: the lineax solver of the Newton systems `(I - gamma h J) dk =
            r`. The default (diffrax's), `lineax.AutoLinearSolver(well_posed=None)`,
            and `lineax.LU()` factorise `J` densely; `lineax.GMRES(rtol, atol)`,
            `lineax.BiCGStab(rtol, atol)` or another lineax solver work matrix-free
            (see `AbstractNewtonSolver` and `docs/stiff.md`).

    References:
        E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.8.
    """

    rtol: float
    atol: float
    norm: Callable = rms
    kappa: float = 1e-2
    linear_solver: lx.AbstractLinearSolver = DEFAULT_LINEAR_SOLVER

    def __check_init__(self):
        check_linear_solver("VeryChord", self.linear_solver, None)
        if not (self.rtol > 0 and self.atol > 0 and self.kappa > 0):
            raise ValueError(
                "`VeryChord(rtol, atol, kappa)` needs positive values; got "
                f"rtol={self.rtol}, atol={self.atol}, kappa={self.kappa}."
            )
