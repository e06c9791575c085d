"""Vector-field terms: `AbstractTerm`, `ODETerm`, `MultiTerm` (diffrax's interface), and
`PartitionedTerm`, the pair of terms of a partitioned solver as one vector field."""

import abc
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._core import Args, RealScalarLike, Y, closure_convert

_VF = TypeVar("_VF")
_Control = TypeVar("_Control")
_Terms = TypeVar("_Terms", bound=tuple)


class AbstractTerm(eqx.Module, Generic[_VF, _Control]):
    """A term of the differential equation, `dy = vf(t, y, args) d(control)`, with
    diffrax's interface. For the ODE terms odeckpt solves the control is time:
    `contr(t0, t1) = t1 - t0`, and `prod(vf, dt)` scales the vector field by `dt`.

    A subclass provides `vf`; `contr`, `prod`, `vf_prod` and `is_vf_expensive` have
    the ODE meaning unless it overrides them. Generic as diffrax's: `AbstractTerm[VF,
    Control]` in annotations.
    """

    @abc.abstractmethod
    def vf(self, t: RealScalarLike, y: Y, args: Args) -> _VF:
        """The vector field at `(t, y)`: a PyTree like `y`."""

    def contr(self, t0: RealScalarLike, t1: RealScalarLike, **kwargs) -> Any:
        """The control's increment over `[t0, t1]`: `t1 - t0` for an ODE term."""
        del kwargs
        return t1 - t0  # pyright: ignore[reportOperatorIssue]

    def prod(self, vf: _VF, control: Any) -> Y:
        """The vector field applied to a control increment: `control * vf`, per leaf in
        the leaf's dtype."""
        return jax.tree.map(lambda v: _times(control, jnp.asarray(v)), vf)

    def vf_prod(self, t: RealScalarLike, y: Y, args: Args, control: Any) -> Y:
        """`prod(vf(t, y, args), control)`."""
        return self.prod(self.vf(t, y, args), control)

    def is_vf_expensive(self, t0: RealScalarLike, t1: RealScalarLike, y: Y, args: Args) -> bool:
        """Whether `vf` costs more than `vf_prod` (never for an ODE term)."""
        del t0, t1, y, args
        return False

    def parts(self) -> tuple["AbstractTerm", ...]:
        """The terms a solver that treats them apart reads one by one: a partitioned
        solver's (`SemiImplicitEuler`: `PartitionedTerm`) or an IMEX method's
        (`MultiTerm(explicit, implicit)`); `(self,)` for a term that is one vector field."""
        return (self,)

    def reversed_in_time(self, direction: jax.Array) -> "AbstractTerm":
        """This term in the reversed time `tau = direction * t` (`direction` +1 or -1):
        `dy/dtau = direction * vf(direction * tau, y, args)`."""
        return _TimeReversed(self, direction)

    def closure_converted(self, t0, y0: Y, args: Args) -> "AbstractTerm":
        """The term a solve holds: each part (`parts`) converted (`converted_part`), in a
        `MultiTerm` when there are several, so that solvers treating the parts apart
        still can."""
        parts = [p.converted_part(t0, y0, args) for p in self.parts()]
        return parts[0] if len(parts) == 1 else MultiTerm(*parts)

    def converted_part(self, t0, y0: Y, args: Args) -> "AbstractTerm":
        """This term as one vector field closure-converted at `(t0, y0, args)`
        (`closure_convert`), so that the arrays it reads are leaves the solve's
        derivatives reach (`diffeqsolve`): an `ODETerm`, unless a subclass (a
        `ControlTerm`) is stepped otherwise."""
        return ODETerm(closure_convert(self.vf, t0, y0, args))

    def as_ode(self) -> "AbstractTerm":
        """This term as an ODE, whose `vf` is `dy/dt`: the term itself, or a
        `ControlTerm`'s `to_ode()`."""
        return self

    @property
    def steps_by_increments(self) -> bool:
        """Whether a step must fix the term first (`for_step`): a `ControlTerm`, whose
        stages read the control's increment over the step."""
        return False

    def for_step(self, t0, dt) -> "AbstractTerm":
        """The term the step from `t0` to `t0 + dt` evaluates (the term itself but for
        a `ControlTerm`, see `steps_by_increments`)."""
        del t0, dt
        return self

    def controlled(self, y: Y) -> tuple:
        """`(term, y)` for each `ControlTerm` among the parts, with the state it is
        evaluated at (for the checks of its shapes and its path)."""
        del y
        return ()


def _times(control, v: jax.Array) -> jax.Array:
    """`control * v` in the dtype of a floating `v` (strict promotion allows no mixing);
    an integer `v` (a vector field evaluated at an integer state) promotes as usual."""
    if jnp.issubdtype(v.dtype, jnp.inexact):
        return jnp.asarray(control).astype(v.dtype) * v
    return control * v


class ODETerm(AbstractTerm[_VF, RealScalarLike]):
    """Wraps a vector field `f(t, y, args) -> dy/dt`, with `dy/dt` the same PyTree as `y`.

    Generic as diffrax's: `ODETerm[Array](f)` constructs the same term as `ODETerm(f)`.

    Example:
        `ODETerm(lambda t, y, args: -args * y)`
    """

    vector_field: Callable[..., _VF]

    def vf(self, t, y, args):
        """`vector_field(t, y, args)`, each leaf broadcast to the shape of `y`'s and cast
        to its dtype where that loses nothing, as diffrax's `ODETerm` does (`lambda t, y,
        args: 1.0` for an array `y`, an integer result for a floating `y`). A result of
        another structure, an unbroadcastable shape or a wider dtype is returned as it
        is, for `diffeqsolve` to refuse."""
        out = self.vector_field(t, y, args)
        if jax.tree.structure(out) != jax.tree.structure(y):
            return out
        return jax.tree.map(_like_leaf, out, y)


def _like_leaf(v, y):
    """`v` broadcast to `y`'s shape and cast to its dtype when that loses nothing."""
    try:
        v = jnp.asarray(v)
    except TypeError:
        return v
    y_shape, y_dtype = jnp.shape(y), jnp.asarray(y).dtype
    if v.shape != y_shape and _broadcasts(v.shape, y_shape):
        v = jnp.broadcast_to(v, y_shape)
    if v.dtype != y_dtype and _widens(v, y_dtype):
        v = v.astype(y_dtype)
    return v


def _broadcasts(shape, target) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _widens(v, dtype) -> bool:
    """Whether JAX's standard promotion of `v` with `dtype` is `dtype` (a Python scalar,
    an integer or bool, a narrower float, real to complex): its values are kept."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(v, jnp.empty((), dtype)) == dtype


class MultiTerm(AbstractTerm, Generic[_Terms]):
    """Several ODE terms solved as one: `dy/dt = sum_i terms[i].vf(t, y, args)`.

    The IMEX solvers (`KenCarp3`, `KenCarp4`, `KenCarp5`, `Sil3`) take
    `MultiTerm(explicit, implicit)` and treat its first term explicitly, its second
    implicitly (they ask for them with `parts()`). Every other solver treats the sum
    as one vector field, so an implicit one (`Kvaerno5`, `Rodas5P`, ...) treats every
    term implicitly. Unlike diffrax's, whose `vf` returns the tuple of the terms'
    vector fields, `vf` returns their sum (`contr` is `t1 - t0`, as for one ODE term).

    Args:
        *terms: the terms, e.g. `MultiTerm(ODETerm(f), ODETerm(g))`.
    """

    terms: _Terms

    def __init__(self, *terms: AbstractTerm):
        self.terms = cast(_Terms, terms)

    def vf(self, t, y, args):
        parts = [term.as_ode().vf(t, y, args) for term in self.terms]
        return jax.tree.map(lambda *leaves: sum(leaves[1:], leaves[0]), *parts)

    def parts(self) -> tuple[AbstractTerm, ...]:
        return tuple(self.terms)

    def as_ode(self) -> AbstractTerm:
        return MultiTerm(*[term.as_ode() for term in self.terms])

    @property
    def steps_by_increments(self) -> bool:
        return any(term.steps_by_increments for term in self.terms)

    def for_step(self, t0, dt) -> AbstractTerm:
        if not self.steps_by_increments:
            return self
        return MultiTerm(*[term.for_step(t0, dt) for term in self.terms])

    def controlled(self, y: Y) -> tuple:
        return tuple(pair for term in self.terms for pair in term.controlled(y))


class _TimeReversed(AbstractTerm):
    """The term in reversed time tau = direction * t (integrates backwards in time)."""

    term: AbstractTerm
    direction: jax.Array

    def vf(self, t, y, args):
        out = self.term.vf(self.direction * t, y, args)
        return jax.tree.map(lambda v: (self.direction * v).astype(v.dtype), out)

    def parts(self) -> tuple[AbstractTerm, ...]:
        """Each part of the wrapped term, in reversed time."""
        parts = self.term.parts()
        if len(parts) == 1 and parts[0] is self.term:
            return (self,)
        return tuple(part.reversed_in_time(self.direction) for part in parts)

    def as_ode(self) -> AbstractTerm:
        return _TimeReversed(self.term.as_ode(), self.direction)


class PartitionedTerm(AbstractTerm):
    """The two terms of a partitioned system, `y = (q, p)`, as one vector field:
    `dq/dt = term_q.vf(t, p, args)`, `dp/dt = term_p.vf(t, q, args)` (each term sees the
    *other* half of the state, as diffrax's `SemiImplicitEuler` calls them).

    `diffeqsolve((ODETerm(f), ODETerm(g)), SemiImplicitEuler(), ...)` builds it; `vf` is
    the whole field `(t, (q, p)) -> (f(t, p), g(t, q))`, which everything but the
    partitioned solver uses (the controllers' first step, the continuous adjoints'
    backward ODE, `Solution.derivative`), while the solver reads the two terms through
    `parts()`.

    Attributes:
        term_q: the field of `q`, evaluated at `p`.
        term_p: the field of `p`, evaluated at `q`.
    """

    term_q: AbstractTerm
    term_p: AbstractTerm

    def vf(self, t, y, args):
        q, p = y
        return (self.term_q.vf(t, p, args), self.term_p.vf(t, q, args))

    def parts(self) -> tuple[AbstractTerm, ...]:
        return (self.term_q, self.term_p)

    def reversed_in_time(self, direction: jax.Array) -> AbstractTerm:
        """Each part reversed: still partitioned."""
        return PartitionedTerm(
            self.term_q.reversed_in_time(direction), self.term_p.reversed_in_time(direction)
        )

    def closure_converted(self, t0, y0: Y, args: Args) -> AbstractTerm:
        """Each part converted at the half of the state it is evaluated at."""
        q0, p0 = y0
        return PartitionedTerm(
            self.term_q.closure_converted(t0, p0, args),
            self.term_p.closure_converted(t0, q0, args),
        )

    def as_ode(self) -> AbstractTerm:
        return PartitionedTerm(self.term_q.as_ode(), self.term_p.as_ode())

    @property
    def steps_by_increments(self) -> bool:
        return self.term_q.steps_by_increments or self.term_p.steps_by_increments

    def for_step(self, t0, dt) -> AbstractTerm:
        if not self.steps_by_increments:
            return self
        return PartitionedTerm(self.term_q.for_step(t0, dt), self.term_p.for_step(t0, dt))

    def controlled(self, y: Y) -> tuple:
        q, p = y
        return self.term_q.controlled(p) + self.term_p.controlled(q)


def as_term(terms) -> AbstractTerm:
    """Accept an `AbstractTerm`, a plain callable `f(t, y, args)`, or a tuple of two of
    those for a partitioned solver (a `PartitionedTerm`)."""
    if isinstance(terms, tuple):
        term_q, term_p = terms
        return PartitionedTerm(as_term(term_q), as_term(term_p))
    if isinstance(terms, AbstractTerm):
        return terms
    if callable(terms):
        return ODETerm(terms)
    raise TypeError(
        "`diffeqsolve(terms, ...)` needs an `ODETerm(f)` or a callable "
        f"`f(t, y, args)`; got {type(terms).__name__}."
    )


def time_reversed(term: AbstractTerm, direction) -> AbstractTerm:
    """`term` in the reversed time `tau = direction * t` (`direction` is +1 or -1)."""
    return term.reversed_in_time(jnp.asarray(direction))
