"""`AbstractGlobalInterpolation`: a path through data at knots `ts`, and finding the
piece a time falls in."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import RealScalarLike, promoted

from .path import AbstractPath, increment


class AbstractGlobalInterpolation(AbstractPath):
    """A path made of one polynomial piece between each pair of neighbouring knots
    `ts[i] <= t <= ts[i + 1]`, defined on `[ts[0], ts[-1]]`.

    Outside that interval the first or last piece is extended. At a knot, `left=True`
    takes the piece before it and `left=False` the piece after it (which matters only
    where the path jumps: at a repeated knot, or next to missing data).

    A subclass provides `ts` (increasing times), `ts_size` (how many of them are
    used) and `evaluate`.
    """

    ts: eqx.AbstractVar[jax.Array]
    ts_size: eqx.AbstractVar[int]

    @property
    def t0(self) -> jax.Array:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The first knot, `ts[0]`."""
        return self.ts[0]

    @property
    def t1(self) -> jax.Array:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The last knot, `ts[-1]`."""
        return self.ts[-1]


class AbstractPiecewise(AbstractGlobalInterpolation):
    """A global interpolation whose pieces are computed by one compiled program per
    kind of query: `_value` and `_slope` at an array time (so that a new time, a Python
    number included, never recompiles them)."""

    @property
    def ts_size(self) -> int:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The number of knots."""
        return self.ts.shape[0]

    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The path at `t0`, or its increment from `t0` to `t1`.

        Args:
            t0: the time.
            t1: if given, `evaluate(t1) - evaluate(t0)` is returned.
            left: at a knot, the piece before it (the default) or after it; they differ
                only where the path jumps (a repeated knot, or next to missing data).

        Returns:
            A PyTree like one row of the data, in the dtype standard promotion gives
            the data and the times.
        """
        if t1 is not None:
            return increment(self, t0, t1, left)
        return self._value(jnp.asarray(t0), left)

    def derivative(self, t: RealScalarLike, left: bool = True) -> PyTree[jax.Array]:
        """The derivative of the piece `t` falls in.

        Args:
            t: the time.
            left: at a knot, the left derivative (the default) or the right one.

        Returns:
            A PyTree like one row of the data.
        """
        return self._slope(jnp.asarray(t), left)

    @abc.abstractmethod
    def _value(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The path at the time `t` (compiled)."""

    @abc.abstractmethod
    def _slope(self, t: jax.Array, left: bool) -> PyTree[jax.Array]:
        """The derivative at the time `t` (compiled)."""


class Piece(eqx.Module):
    """Where a time falls among the knots: the piece `index`, from `ts[index]` to
    `ts[index + 1]`, and the time's `offset` from the piece's start and the piece's
    `width`, in the dtype standard promotion gives the time and the knots."""

    index: jax.Array
    offset: jax.Array
    width: jax.Array

    @property
    def fraction(self) -> jax.Array:
        """`offset / width`, and 0 on a piece of zero width (a repeated knot)."""
        return ratio(self.offset, self.width)


def ratio(numerator, denominator) -> jax.Array:
    """`numerator / denominator`, and 0 (with zero gradients) where the denominator is
    0: a piece or step of zero width."""
    empty = denominator == 0
    return jnp.where(empty, 0, numerator) / jnp.where(empty, 1, denominator)


def locate(ts: jax.Array, size, t: RealScalarLike, left: bool) -> Piece:
    """The piece of `ts[:size]` that `t` falls in (the first or last piece outside
    `[ts[0], ts[size - 1]]`); at a knot, the piece before it when `left`."""
    t, ts = promoted(t, ts)
    found = jnp.searchsorted(ts, t, side="left" if left else "right")
    index = jnp.clip(found - 1, 0, size - 2)
    return Piece(index, t - ts[index], ts[index + 1] - ts[index])
