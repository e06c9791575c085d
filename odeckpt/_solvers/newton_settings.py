"""`AbstractNewtonRK`: the settings of the Runge–Kutta methods whose implicit stages are
solved by simplified Newton (`newton.py`): the ESDIRKs and the IMEX methods.

Constructed either the odeckpt way, `Kvaerno5(rtol=1e-10, atol=1e-12, max_iters=10)`,
or diffrax's, `Kvaerno5(root_finder=VeryChord(rtol=1e-8, atol=1e-10),
root_find_max_steps=10)`; not both.
"""

from .base import AbstractImplicitSolver
from .runge_kutta import AbstractRungeKutta
from .verychord import AbstractRootFinder, VeryChord

# The effective Newton tolerances when none are given (see `AbstractNewtonRK`).
_DEFAULT_RTOL, _DEFAULT_ATOL = 1e-10, 1e-12
_DEFAULT_ROOT_FINDER = VeryChord(rtol=1e-8, atol=1e-10)


class AbstractNewtonRK(AbstractRungeKutta, AbstractImplicitSolver):
    """A Runge–Kutta method with implicit stages solved by simplified Newton.

    Attributes:
        root_finder: a `VeryChord`: the stage iterations stop once their estimated
            error is within `kappa (atol + rtol |z|)` (RMS over the state), i.e. within
            the effective tolerances `rtol`, `atol` below. Default
            `VeryChord(rtol=1e-8, atol=1e-10)` (kappa `1e-2`).
        root_find_max_steps: iterations allowed per stage before the Jacobian is
            refreshed (and, on a second failure, the step is rejected). Default 10.
        scan_kind: accepted for compatibility with diffrax; changes nothing.

    The effective tolerances (`rtol`, `atol`, and `max_iters`, the odeckpt spelling)
    must be well below the step-size controller's, or Newton errors pollute the error
    estimate and steps get rejected: the defaults suit controller tolerances down to
    about `rtol = 1e-9`, `atol = 1e-11`. Both are raised to `100 eps` of the state's
    dtype (see `newton.py`).

    Raises:
        ValueError: for non-positive tolerances or iteration counts, for both
            spellings at once, or a `root_finder` that is not a `VeryChord`.
    """

    root_finder: AbstractRootFinder = _DEFAULT_ROOT_FINDER
    root_find_max_steps: int = 10

    def __init__(
        self,
        rtol: float | None = None,
        atol: float | None = None,
        max_iters: int | None = None,
        *,
        root_finder: VeryChord | None = None,
        root_find_max_steps: int | None = None,
        scan_kind: str | None = None,
    ):
        self.scan_kind = scan_kind
        self.root_finder = _root_finder(type(self).__name__, root_finder, rtol, atol)
        if root_finder is None and (rtol is not None or atol is not None):
            rtol = _DEFAULT_RTOL if rtol is None else rtol
            atol = _DEFAULT_ATOL if atol is None else atol
            self.root_finder = VeryChord(rtol=rtol, atol=atol, kappa=1.0)
        steps = _max_steps(type(self).__name__, max_iters, root_find_max_steps)
        self.root_find_max_steps = steps

    def __check_init__(self):
        if not (self.rtol > 0 and self.atol > 0 and self.max_iters >= 1):
            raise ValueError(
                f"`{type(self).__name__}(rtol, atol, max_iters)` need positive values; "
                f"got rtol={self.rtol}, atol={self.atol}, max_iters={self.max_iters}."
            )

    @property
    def rtol(self) -> float:
        """The effective relative tolerance of the stage iterations, `kappa * rtol`."""
        return self.root_finder.kappa * self.root_finder.rtol

    @property
    def atol(self) -> float:
        """The effective absolute tolerance of the stage iterations, `kappa * atol`."""
        return self.root_finder.kappa * self.root_finder.atol

    @property
    def max_iters(self) -> int:
        """`root_find_max_steps`, by odeckpt's name."""
        return self.root_find_max_steps

    def init(self, term, t0, y0, args):
        """No state is carried between steps: `()` (a step is a function of `(t, y,
        args)` alone, so a step replayed from a checkpoint repeats the forward pass)."""
        return ()


def _root_finder(name: str, root_finder, rtol, atol) -> AbstractRootFinder:
    """The `root_finder` given to `name(...)`, or the default; refuses a root finder
    of another kind, and both spellings of the tolerances at once."""
    if root_finder is None:
        return _DEFAULT_ROOT_FINDER
    if not isinstance(root_finder, AbstractRootFinder):
        raise ValueError(
            f"`{name}(root_finder=...)` takes `odeckpt.VeryChord(rtol, atol)`; got "
            f"{type(root_finder).__name__}. The stages are solved by simplified Newton "
            "whatever the root finder, so only its tolerances can be chosen."
        )
    if rtol is not None or atol is not None:
        raise ValueError(
            f"`{name}(rtol, atol)` and `{name}(root_finder=...)` both set the Newton "
            "tolerances: pass one of them."
        )
    return root_finder


def _max_steps(name: str, max_iters, root_find_max_steps) -> int:
    """The iteration limit from either spelling (not both), default 10."""
    if max_iters is not None and root_find_max_steps is not None:
        raise ValueError(
            f"`{name}(max_iters=...)` and `{name}(root_find_max_steps=...)` are the same "
            "setting: pass one of them."
        )
    given = root_find_max_steps if max_iters is None else max_iters
    return 10 if given is None else given
