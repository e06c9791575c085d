"""`AbstractSolver`: odeckpt's stepping protocol and what the integrator asks of a
method, `StepOutput`, and the abstract marker classes that say what kind of method a
solver is.

See `docs/solver-internals.md`, "The stepping protocol", for the protocol, diffrax's
derived from it, and the markers' meaning.
"""

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
from jaxtyping import PyTree

from odeckpt._core import Args, Y
from odeckpt._terms import AbstractTerm

from . import diffrax_protocol


class StepOutput(eqx.Module):
    """What one attempted step produces.

    Attributes:
        y1: the candidate solution at `t0 + dt`.
        y_error: the embedded error estimate (`None` without an embedded method).
        state: the solver state after the step (for Runge–Kutta methods the vector
            field at `(t0 + dt, y1)`, reused as the next step's first stage).
        coeffs: dense-output polynomial coefficients (see `DenseStep`).
        failure: for implicit methods, a `RESULTS` code saying why `y1` could not be
            computed (`0` when it was); `None` for methods that cannot fail.
    """

    y1: Y
    y_error: Y | None
    state: PyTree
    coeffs: Y
    failure: jax.Array | None = None


# The protocol, its diffrax adapter and the marker classes read one another (the
# metaclass names the adapter and `AbstractWrappedSolver`; `estimates_error` asks
# `AbstractAdaptiveSolver`), so they share this module, past 300 lines.
_ODECKPT_PROTOCOL = frozenset({"init_state", "attempt"})
_DIFFRAX_PROTOCOL = frozenset({"init", "step"})


def _steps_by_diffrax(bases, namespace) -> bool:
    """Whether a new class is a solver written against diffrax's protocol alone: its body
    defines `init` or `step`, and neither it nor a solver among its bases provides
    `init_state` or `attempt`."""
    if not _DIFFRAX_PROTOCOL & namespace.keys() or _ODECKPT_PROTOCOL & namespace.keys():
        return False
    solvers = [base for base in bases if issubclass(base, AbstractSolver)]
    return bool(solvers) and all(_ODECKPT_PROTOCOL <= base.__abstractmethods__ for base in solvers)


class _SolverMeta(type(eqx.Module)):
    """The solvers' metaclass: a class written against diffrax's protocol takes
    `AbstractDiffraxSolver` as its first base, and `isinstance(wrapped, Marker)` also
    asks the solver an `AbstractWrappedSolver` wraps, as diffrax's solvers do (a wrapped
    implicit solver is implicit)."""

    def __new__(mcs, name, bases, namespace, **kwargs):
        if _steps_by_diffrax(bases, namespace):
            bases = (AbstractDiffraxSolver, *bases)
        return super().__new__(mcs, name, bases, namespace, **kwargs)

    def __instancecheck__(cls, obj):
        if super().__instancecheck__(obj):
            return True
        meta = super(_SolverMeta, AbstractWrappedSolver)  # pyright: ignore[reportArgumentType]
        return meta.__instancecheck__(obj) and isinstance(obj.solver, cls)


# Given as keyword arguments, so that type checkers keep treating solvers as dataclasses.
_METACLASS: dict[str, Any] = {"metaclass": _SolverMeta}


class AbstractSolver(eqx.Module, **_METACLASS):
    """A one-step (or multistep) method. Concrete solvers are final.

    A subclass provides `order`, `init_state` and `attempt` (or, written against
    diffrax's protocol, `order`, `init`, `step` and `interpolation_cls`); the integrator
    asks nothing else of it, and diffrax's protocol is derived from odeckpt's, or back.
    See `docs/solver-internals.md`, "The stepping protocol".

    Attributes:
        term_structure: the terms the solver takes (`AbstractTerm` for every odeckpt
            solver: one term, possibly a `MultiTerm`), as in diffrax.
        interpolation_cls: for a solver written against diffrax's protocol, the class
            of its dense output, built as `interpolation_cls(t0=, t1=, **dense_info)`
            (odeckpt's own solvers give their dense output as a polynomial).
    """

    term_structure: ClassVar[Any] = AbstractTerm
    interpolation_cls: ClassVar[Any] = None

    @abc.abstractmethod
    def order(self, terms: AbstractTerm) -> int | None:
        """The order of the method (of `y1`) on the ODE `terms`."""

    @abc.abstractmethod
    def init_state(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """The solver state at `(t0, y0)`, carried between steps.

        Also the state after a jump of the vector field
        (`ClipStepSizeController(jump_ts=...)`): the solve restarts there, as from an
        initial value.

        Args:
            term: the vector field.
            t0, y0: the time and the solution there.
            args: the vector field's arguments.

        Returns:
            The state (Runge–Kutta: the first stage `f(t0, y0)`; `()` for a method that
            carries nothing).
        """

    @abc.abstractmethod
    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        """Attempt one step of size `dt` from `(t0, y0)`.

        Args:
            term, args: the vector field and its arguments.
            t0, dt: the step's start and size.
            y0, solver_state: the solution and the solver state at `t0`.
            dense: whether the dense output is needed (`False` may skip it).

        Returns:
            The candidate step (`StepOutput`), which the controller accepts or rejects.
        """

    def init(self, terms: AbstractTerm, t0, t1, y0: Y, args: Args) -> PyTree:
        """diffrax's `init`: the solver state for a first step from `t0` to `t1`."""
        return diffrax_protocol.init_from_init_state(self, terms, t0, t1, y0, args)

    def step(
        self, terms: AbstractTerm, t0, t1, y0: Y, args: Args, solver_state, made_jump
    ) -> tuple:
        """diffrax's `step` from `t0` to `t1`: `(y1, y_error, dense_info, solver_state,
        result)`; `made_jump` (or a `solver_state` of `None`) rebuilds the state at
        `(t0, y0)` first."""
        return diffrax_protocol.step_from_attempt(
            self, terms, t0, t1, y0, args, solver_state, made_jump
        )

    def error_order(self, terms: AbstractTerm) -> int | None:
        """The local order of the error estimate: the exponent denominator of
        `PIDController`. For an ODE this is `order(terms)` (the estimate compares the
        method with an embedded one of one order less), as in diffrax."""
        return self.order(terms)

    @property
    def term_parts(self) -> int | None:
        """How many parts (`AbstractTerm.parts`) the solver's term must have: `None`,
        any term, for every solver but the IMEX methods (2: `MultiTerm(explicit,
        implicit)`)."""
        return None

    def strong_order(self, terms: AbstractTerm) -> float | None:
        """The strong order on SDEs: `None`, since odeckpt solves ODEs only."""
        return None

    @property
    def estimates_error(self) -> bool:
        """Whether an adaptive controller may drive the solver: whether it is an
        `AbstractAdaptiveSolver` (or, `AbstractDiffraxSolver`, written against diffrax's
        protocol)."""
        return isinstance(self, AbstractAdaptiveSolver)

    @property
    def evals_per_step(self) -> int:
        """Evaluations of the vector field per step (`Solution.stats["num_vf_evals"]`):
        0, uncounted, unless the solver says."""
        return 0

    def func(self, terms: AbstractTerm, t0, y0: Y, args: Args) -> Y:
        """The vector field at `(t0, y0)`, as diffrax's `AbstractSolver.func`."""
        return terms.vf(t0, y0, args)

    @property
    def carries_first_stage(self) -> bool:
        """Whether the carried state holds a vector-field evaluation that `init_state` makes
        and the next step reads (FSAL methods' first stage `f(t, y)`): a checkpoint restored
        by `init_state` then costs one evaluation, unless it stores the state
        (`docs/adjoints.md`, "The first stage"). False (the default): restores cost nothing.
        """
        return False

    @property
    def state_rebuildable(self) -> bool:
        """Whether `init_state(term, t, y, args)` rebuilds, bit for bit, the state the steps
        carry to `(t, y)` (true of one-step methods). If not (`LeapfrogMidpoint`,
        `ReversibleHeun`), a checkpoint stores the state besides `y`.
        """
        return True

    def for_adjoint_ode(self, integrates_y: bool) -> "AbstractSolver | None":
        """This solver as a continuous adjoint integrates its adjoint ODE with it by the
        solver's own steps (the implicit solvers: `_adjoints/continuous/implicit_step.py`),
        on `a` alone or, where `integrates_y`, on `(y, a)`; `None` (the default) where
        it does not: explicit Runge–Kutta methods step it by their tableau, and other
        solvers are refused.

        Raises:
            ValueError: for a setting that has no meaning on the adjoint ODE.
        """
        return None

    @property
    def reversible(self) -> bool:
        """Whether this solver's own steps can be undone (`AbstractReversibleSolver`'s
        `reverse_step`). A wrapper answers for itself: `HalfSolver(ReversibleHeun())`
        is not reversible, though `isinstance` looks through it."""
        return False


class AbstractDiffraxSolver(AbstractSolver):
    """A solver written against diffrax's stepping protocol: a subclass provides `order`,
    `init`, `step` and `interpolation_cls`, and `init_state` and `attempt` are derived
    from them (`docs/solver-internals.md`, "The stepping protocol").
    """

    @abc.abstractmethod
    def init(self, terms: AbstractTerm, t0, t1, y0: Y, args: Args) -> PyTree:
        """diffrax's `init`: the solver state for a first step from `t0` to `t1`."""

    @abc.abstractmethod
    def step(
        self, terms: AbstractTerm, t0, t1, y0: Y, args: Args, solver_state, made_jump
    ) -> tuple:
        """diffrax's `step` from `t0` to `t1`: `(y1, y_error, dense_info, solver_state,
        result)`."""

    def init_state(self, term: AbstractTerm, t0, y0: Y, args: Args) -> PyTree:
        """`init(term, t0, t0, y0, args)` (the first step's end is not known here)."""
        return diffrax_protocol.init_state_from_init(self, term, t0, y0, args)

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        """`step` from `t0` to `t0 + dt`, its dense output sampled into a polynomial."""
        y1, y_error, state, coeffs, failure = diffrax_protocol.attempt_from_step(
            self, term, t0, dt, y0, solver_state, args, dense
        )
        return StepOutput(y1=y1, y_error=y_error, state=state, coeffs=coeffs, failure=failure)

    @property
    def estimates_error(self) -> bool:
        return True


class AbstractReversibleSolver(AbstractSolver):
    """A solver whose step can be undone algebraically: from the state after a step
    (`y1` and the carried solver state) `reverse_step` recomputes the state before it,
    exactly up to round-off, without storing it. `BacksolveAdjoint()` (without
    `solver=`) uses it to reconstruct the forward states backwards and differentiate
    the solver's own steps in O(1) memory."""

    @property
    def reversible(self) -> bool:
        return True

    @abc.abstractmethod
    def reverse_step(self, term, t0, dt, y1, solver_state, args) -> tuple[Y, PyTree]:
        """The inverse of `attempt(term, t0, dt, ...)`: `(y0, solver_state0)` from the
        state `(y1, solver_state)` at `t0 + dt`."""

    def reconstructed(self, solver_state) -> PyTree:
        """The part of the solver state that `reverse_step` must rebuild exactly and that
        derivatives flow through (what a reconstruction's drift is measured on); the
        default: all of it."""
        return solver_state

    def linearised_reverse_step(
        self, term, t0, dt, y1, solver_state, args, dense: bool
    ) -> "tuple[Y, PyTree, AbstractSolver] | None":
        """`reverse_step`, and the step it undoes, linearised where the inverse
        evaluated it: `(y0, solver_state0, step)` with `step` a `LinearisedStep` that
        replays `attempt(term, t0, dt, y0, solver_state0, args, dense)` without evaluating
        it again. `None` (the default): the solver has no such inverse, and a replay
        evaluates the step."""
        del term, t0, dt, y1, solver_state, args, dense
        return None


class AbstractAdaptiveSolver(AbstractSolver):
    """A solver with an error estimate (`StepOutput.y_error`), so that an adaptive
    step-size controller such as `PIDController` can drive it."""


class AbstractImplicitSolver(AbstractSolver):
    """A solver whose steps solve nonlinear equations with a root finder.

    Subclasses provide `root_finder` (in odeckpt a `VeryChord`) and
    `root_find_max_steps`, as fields or properties.
    """

    root_finder: eqx.AbstractVar[Any]
    root_find_max_steps: eqx.AbstractVar[int]


class AbstractItoSolver(AbstractSolver):
    """Marks a method that, used on an SDE, would converge to the Itô solution (as
    diffrax marks `Euler`). odeckpt solves ODEs, where the mark changes nothing."""


class AbstractStratonovichSolver(AbstractSolver):
    """Marks a method that, used on an SDE, would converge to the Stratonovich
    solution (as diffrax marks `Heun`, `Midpoint`, `Ralston`). odeckpt solves ODEs,
    where the mark changes nothing."""


class AbstractWrappedSolver(AbstractSolver):
    """Wraps another solver, `solver`; `isinstance` checks against the abstract solver
    classes answer true when they hold for the wrapped solver. Its order, error order
    and initial state are the wrapped solver's unless a subclass says otherwise."""

    solver: eqx.AbstractVar[AbstractSolver]

    def order(self, terms: AbstractTerm) -> int | None:
        return self.solver.order(terms)

    def error_order(self, terms: AbstractTerm) -> int | None:
        return self.solver.error_order(terms)

    def init_state(self, term, t0, y0, args):
        return self.solver.init_state(term, t0, y0, args)


def combine_stages(y0: Y, dt, weights, ks) -> Y:
    """`y0 + dt * sum_j weights[j] ks[j]`, per leaf in the leaf's dtype.

    Zero weights (Python floats, known at trace time) are skipped, so no work is
    traced for them; with no nonzero weight `y0` itself is returned. `ks` are PyTrees
    like `y0`; `dt` is a scalar array.
    """
    terms = [(w, k) for w, k in zip(weights, ks, strict=False) if w != 0]
    if not terms:
        return y0

    def leaf(y, *kl):
        acc = sum(w * k for (w, _), k in zip(terms, kl, strict=True))
        return y + dt.astype(y.dtype) * acc

    return jax.tree.map(leaf, y0, *[k for _, k in terms])
