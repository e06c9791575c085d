"""`with_stepsize_controller_tols` (diffrax's): a root finder whose tolerances are the
step-size controller's, filled in when `diffeqsolve` knows the controller."""

import math
from collections.abc import Callable
from typing import final

import jax
import lineax as lx

from odeckpt._solvers.linear.choice import DEFAULT_LINEAR_SOLVER

from .verychord import AbstractRootFinder, VeryChord


def with_stepsize_controller_tols(cls: type) -> Callable[..., "ControllerTolerances"]:
    """Wraps a root-finder class so that its tolerances are the step-size controller's,
    as diffrax's function does: `with_stepsize_controller_tols(VeryChord)()` takes no
    `rtol`, `atol` or `norm`, and a solve with `PIDController(rtol, atol)` iterates
    the stages to `kappa * rtol`, `kappa * atol`.

    Args:
        cls: `odeckpt.VeryChord` (diffrax's spelling of the implicit solvers' stage
            iterations). The stages are always solved by simplified Newton, so other
            root finders (optimistix's `Chord`, `Newton`) are refused.

    Returns:
        A function of the remaining settings (`kappa`, `linear_solver`) giving the
        root finder, to pass as an implicit solver's `root_finder=`.

    Raises:
        TypeError: for a class other than `VeryChord`.

    Example:
        ```python
        root_finder = odeckpt.with_stepsize_controller_tols(odeckpt.VeryChord)()
        solver = odeckpt.Kvaerno5(root_finder=root_finder)
        odeckpt.diffeqsolve(..., solver=solver,
                            stepsize_controller=odeckpt.PIDController(rtol=1e-8, atol=1e-8))
        ```
    """
    if cls is not VeryChord:
        raise TypeError(
            "`with_stepsize_controller_tols(cls)` takes `odeckpt.VeryChord`: odeckpt's "
            "implicit solvers solve their stages by simplified Newton whatever the root "
            f"finder; got {cls.__name__ if isinstance(cls, type) else type(cls).__name__}. Write "
            "`with_stepsize_controller_tols(VeryChord)()`."
        )

    def make(kappa: float = 1e-2, linear_solver: lx.AbstractLinearSolver = DEFAULT_LINEAR_SOLVER):
        return ControllerTolerances(kappa=kappa, linear_solver=linear_solver)

    return make


@final
class ControllerTolerances(AbstractRootFinder):
    """A `VeryChord` whose `rtol` and `atol` are the step-size controller's
    (`with_stepsize_controller_tols`); until a solve fills them in they are infinite.

    Attributes:
        kappa: the fraction of the tolerances the stage iterations must reach.
        linear_solver: as `VeryChord`'s.
    """

    kappa: float = 1e-2
    linear_solver: lx.AbstractLinearSolver = DEFAULT_LINEAR_SOLVER
    rtol: float = math.inf
    atol: float = math.inf

    @property
    def wants_controller_tolerances(self) -> bool:
        return True

    def with_controller_tolerances(self, rtol: float, atol: float) -> AbstractRootFinder:
        return VeryChord(rtol, atol, kappa=self.kappa, linear_solver=self.linear_solver)


def filled_tolerances(solver, controller):
    """`solver` with each `ControllerTolerances` root finder in it made a `VeryChord`
    with the controller's tolerances.

    Raises:
        ValueError: for such a root finder and a controller without tolerances."""
    is_finder = lambda x: isinstance(x, AbstractRootFinder)
    finders = [x for x in jax.tree.leaves(solver, is_leaf=is_finder) if is_finder(x)]
    if not any(finder.wants_controller_tolerances for finder in finders):
        return solver
    tolerances = controller.tolerances
    if tolerances is None:
        raise ValueError(
            "`with_stepsize_controller_tols(VeryChord)()` takes its tolerances from an "
            f"adaptive step-size controller; `{type(controller).__name__}` has none. Pass "
            "`VeryChord(rtol, atol)` to the solver, or use `PIDController(rtol, atol)`."
        )
    fill = lambda x: x.with_controller_tolerances(*tolerances) if is_finder(x) else x
    return jax.tree.map(fill, solver, is_leaf=is_finder)
