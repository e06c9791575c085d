"""Vector-field terms."""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import Args, RealScalarLike, Y


class AbstractTerm(eqx.Module):
    """A term `dy/dt = vf(t, y, args)`."""

    @abc.abstractmethod
    def vf(self, t: RealScalarLike, y: Y, args: Args) -> Y:
        """The vector field at `(t, y)`: a PyTree like `y`."""


class ODETerm(AbstractTerm):
    """Wraps a vector field `f(t, y, args) -> dy/dt`, with `dy/dt` the same PyTree as `y`.

    Example:
        `ODETerm(lambda t, y, args: -args * y)`
    """

    vector_field: Callable

    def vf(self, t, y, args):
        return self.vector_field(t, y, args)


class _TimeReversed(AbstractTerm):
    """The term in reversed time tau = direction * t (integrates backwards in time)."""

    term: AbstractTerm
    direction: jax.Array

    def vf(self, t, y, args):
        out = self.term.vf(self.direction * t, y, args)
        return jax.tree.map(lambda v: (self.direction * v).astype(v.dtype), out)


def as_term(terms) -> AbstractTerm:
    """Accept an `AbstractTerm` or a plain callable `f(t, y, args)`."""
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
    return _TimeReversed(term, jnp.asarray(direction))
