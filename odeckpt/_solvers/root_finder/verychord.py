"""`VeryChord`: the implicit solvers' root-finder settings, under diffrax's name."""

from collections.abc import Callable
from typing import Any, final

import equinox as eqx

from odeckpt._solvers.linear.dense import rms


class AbstractRootFinder(eqx.Module):
    """Settings of the stage iterations of an implicit solver: tolerances `rtol`,
    `atol`, and the fraction `kappa` of them the remaining error must be below."""

    rtol: eqx.AbstractVar[float]
    atol: eqx.AbstractVar[float]
    kappa: eqx.AbstractVar[float]


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
        linear_solver: accepted for compatibility with diffrax (a `lineax` solver); the
            stage systems are always solved with a dense LU factorisation.

    References:
        E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, IV.8.
    """

    rtol: float
    atol: float
    norm: Callable = rms
    kappa: float = 1e-2
    linear_solver: Any = None

    def __check_init__(self):
        if not (self.rtol > 0 and self.atol > 0 and self.kappa > 0):
            raise ValueError(
                "`VeryChord(rtol, atol, kappa)` needs positive values; got "
                f"rtol={self.rtol}, atol={self.atol}, kappa={self.kappa}."
            )
