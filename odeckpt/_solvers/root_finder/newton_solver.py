"""How the implicit solvers are told to solve their stage equations: one constructor for
every Newton-based solver (`AbstractNewtonSolver`, accepting odeckpt's spelling or
diffrax's), and the Newton matrix of a step.
"""

from collections.abc import Callable

import equinox as eqx

from odeckpt._solvers.base import AbstractImplicitSolver
from odeckpt._solvers.linear import choice
from odeckpt._solvers.linear.choice import DEFAULT_LINEAR_SOLVER, AbstractStepJacobian
from odeckpt._solvers.linear.preconditioners import AbstractPreconditioner
from odeckpt._solvers.linear.sparsity import Pattern
from odeckpt._solvers.runge_kutta.base import AbstractRungeKutta

from .newton import NewtonOptions
from .verychord import AbstractRootFinder, VeryChord

# The effective Newton tolerances when only one of `rtol`, `atol` is given.
_DEFAULT_RTOL, _DEFAULT_ATOL = 1e-10, 1e-12
DEFAULT_ROOT_FINDER = VeryChord(rtol=1e-8, atol=1e-10)
"""The root finder of an implicit solver built without tolerances (kappa `1e-2`)."""


class AbstractNewtonSolver(choice.AbstractLinearSettings, AbstractImplicitSolver):
    """An implicit solver whose stages are solved by simplified Newton (`newton.py`).

    Attributes:
        root_finder: a `VeryChord`: the stage iterations stop once their estimated
            error is within `kappa (atol + rtol |z|)` (RMS over the state), i.e. within
            the effective tolerances `rtol`, `atol` below. Default
            `VeryChord(rtol=1e-8, atol=1e-10)` (kappa `1e-2`).
        root_find_max_steps: iterations allowed per stage before the Jacobian is
            refreshed (and, on a second failure, the step is rejected). Default 10.
        preconditioner: with an iterative `linear_solver`, a function `(t, y, args,
            gamma_h)` returning a lineax operator (or a linear function of a PyTree
            shaped like `y`) that approximates the inverse of `I - gamma_h df/dy(t,
            y)`; it is called once per step (per diagonal entry of the method), at the
            step's start, with gradients stopped. Or a built-in one,
            `JacobiPreconditioner()` or `BlockJacobiPreconditioner(blocks)`, formed
            from the Jacobian's entries on `jac_sparsity`. Default `None`.
        jac_sparsity: the sparsity pattern of `df/dy` (of the implicit term, for the
            IMEX methods), `(N, N)` over the state's `N` elements in
            `jax.flatten_util.ravel_pytree(y0)` order: a boolean array, a SciPy sparse
            matrix or a JAX `BCOO`. The Jacobian then costs one forward-mode product
            per colour of the pattern instead of `N`; a dense `linear_solver`
            factorises it in band storage where the pattern is banded, and the
            built-in preconditioners read their entries from it. Default `None`
            (dense).
        jac: the Jacobian `df/dy` (of the implicit term, for the IMEX methods) as
            `jac(t, y, args)` returning a lineax operator on the state's structure
            (or a linear function of a PyTree shaped like `y`), or an `(N, N)` array
            over `ravel_pytree(y)`; called once per step, at its start, with
            gradients stopped. It steers the Newton iterations only (their residual,
            and the stages' derivatives, use `f` itself), so an approximate one is
            allowed: it costs iterations, not accuracy. A dense `linear_solver`
            materialises it; an iterative one applies it. Default `None` (from `f`
            by forward-mode products).

    The linear solver of the Newton iterations is `root_finder.linear_solver` (also
    read as `linear_solver`); the constructor's `linear_solver=` sets it:
    `lineax.LU()` (or diffrax's default, `lineax.AutoLinearSolver(well_posed=None)`)
    is odeckpt's dense LU; any other lineax solver (`lineax.GMRES(rtol, atol)`,
    `lineax.BiCGStab(rtol, atol)`, a user's) works matrix-free, on Jacobian-vector
    products. See `docs/stiff.md`.

    Constructed either the odeckpt way, `Solver(rtol=1e-10, atol=1e-12, max_iters=10)`,
    or diffrax's, `Solver(root_finder=VeryChord(rtol=1e-8, atol=1e-10),
    root_find_max_steps=10)`; not both. A subclass with more fields takes these
    arguments in its own `__init__` and sets the fields from `newton_settings`.

    Raises:
        ValueError: for non-positive tolerances or iteration counts, for both
            spellings at once, a `root_finder` that is not a `VeryChord`, or a
            `linear_solver` or `preconditioner` it cannot use (`linear/choice.py`).
    """

    root_finder: AbstractRootFinder = DEFAULT_ROOT_FINDER
    root_find_max_steps: int = 10
    preconditioner: Callable | AbstractPreconditioner | None = None
    jac_sparsity: Pattern | None = eqx.field(static=True, default=None)
    jac: Callable | None = None

    def __init__(
        self,
        rtol: float | None = None,
        atol: float | None = None,
        max_iters: int | None = None,
        *,
        root_finder: AbstractRootFinder | None = None,
        root_find_max_steps: int | None = None,
        linear_solver=None,
        preconditioner: Callable | AbstractPreconditioner | None = None,
        jac_sparsity=None,
        jac: Callable | None = None,
    ):
        self.root_finder, self.root_find_max_steps = newton_settings(
            type(self).__name__,
            rtol,
            atol,
            max_iters,
            root_finder,
            root_find_max_steps,
            linear_solver,
        )
        self.preconditioner = preconditioner
        name = type(self).__name__
        self.jac_sparsity = None if jac_sparsity is None else Pattern(name, jac_sparsity)
        self.jac = jac

    def __check_init__(self):
        if not (self.rtol > 0 and self.atol > 0 and self.max_iters >= 1):
            raise ValueError(
                f"`{type(self).__name__}(rtol, atol, max_iters)` need positive values; "
                f"got rtol={self.rtol}, atol={self.atol}, max_iters={self.max_iters}."
            )
        name = type(self).__name__
        choice.check_linear_solver(name, self.linear_solver, self.preconditioner, self.jac_sparsity)
        choice.check_jac(name, self.jac, self.jac_sparsity)

    @property
    def linear_solver(self):
        """The lineax solver of the Newton iterations (`root_finder.linear_solver`)."""
        return self.root_finder.linear_solver

    def step_jacobian(self, problem, t0) -> AbstractStepJacobian:
        """The step's Jacobian at `t0` of `problem = (term, y0, args)`, ready to give
        the Newton matrix of each diagonal entry, as the linear solver uses it. It is
        built from a copy with gradients stopped: it steers the iterations but is not
        part of the result (the stages' derivatives come from the implicit function
        theorem, `newton.solve_stage`)."""
        sparsity = choice.sparsity_of(
            type(self).__name__, self.jac_sparsity, self.preconditioner, problem[1]
        )
        return choice.step_jacobian(
            self.linear_solver, self.preconditioner, problem, t0, sparsity, self.jac
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

    @property
    def newton_options(self) -> NewtonOptions:
        """The stopping rule of the stage iterations."""
        return NewtonOptions(self.rtol, self.atol, self.max_iters)


class AbstractNewtonRK(AbstractRungeKutta, AbstractNewtonSolver):
    """A Runge–Kutta method whose implicit stages are solved by simplified Newton (the
    ESDIRKs, the IMEX methods): `AbstractNewtonSolver`'s settings, and diffrax's
    `scan_kind` (accepted; changes nothing). No state is carried between steps: a step
    is a function of `(t, y, args)` alone, so a step replayed from a checkpoint repeats
    the forward pass."""

    def __init__(
        self,
        rtol: float | None = None,
        atol: float | None = None,
        max_iters: int | None = None,
        *,
        root_finder: AbstractRootFinder | None = None,
        root_find_max_steps: int | None = None,
        scan_kind: str | None = None,
        linear_solver=None,
        preconditioner: Callable | AbstractPreconditioner | None = None,
        jac_sparsity=None,
        jac: Callable | None = None,
    ):
        self.scan_kind = scan_kind
        AbstractNewtonSolver.__init__(
            self,
            rtol,
            atol,
            max_iters,
            root_finder=root_finder,
            root_find_max_steps=root_find_max_steps,
            linear_solver=linear_solver,
            preconditioner=preconditioner,
            jac_sparsity=jac_sparsity,
            jac=jac,
        )

    def init_state(self, term, t0, y0, args):
        """`()`: nothing is carried between steps."""
        return ()


def newton_settings(
    name: str, rtol, atol, max_iters, root_finder, root_find_max_steps, linear_solver=None
) -> tuple[AbstractRootFinder, int]:
    """`(root_finder, root_find_max_steps)` from either spelling given to `name(...)`,
    with `linear_solver` (if given) as the root finder's.

    Raises:
        ValueError: for both spellings of the tolerances or of the iteration limit, a
            `root_finder` that is not a `VeryChord`, or a `linear_solver` given both
            ways.
    """
    finder = _root_finder(name, root_finder, rtol, atol)
    if root_finder is None and (rtol is not None or atol is not None):
        rtol = _DEFAULT_RTOL if rtol is None else rtol
        atol = _DEFAULT_ATOL if atol is None else atol
        finder = VeryChord(rtol=rtol, atol=atol, kappa=1.0)
    if linear_solver is not None:
        if finder.linear_solver != DEFAULT_LINEAR_SOLVER:
            raise ValueError(
                f"`{name}(linear_solver=...)` and `{name}(root_finder=VeryChord(..., "
                "linear_solver=...))` both set the linear solver: pass one of them."
            )
        finder = eqx.tree_at(lambda f: f.linear_solver, finder, linear_solver)
    return finder, _max_steps(name, max_iters, root_find_max_steps)


def _root_finder(name: str, root_finder, rtol, atol) -> AbstractRootFinder:
    """The `root_finder` given to `name(...)`, or the default; refuses a root finder
    of another kind, and both spellings of the tolerances at once."""
    if root_finder is None:
        return DEFAULT_ROOT_FINDER
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
