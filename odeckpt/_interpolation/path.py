"""`AbstractPath`: a function of time on an interval, with its derivative."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from odeckpt._core import RealScalarLike


class AbstractPath(eqx.Module):
    """A function of time on the interval `[t0, t1]`: data interpolated between
    measurements, or one step's dense output.

    A subclass provides `t0`, `t1` (fields or properties) and `evaluate`; `derivative`
    defaults to forward-mode differentiation of `evaluate`.

    Example:
        ```python
        class Parabola(odeckpt.AbstractPath):
            t0 = 0.0
            t1 = 3.0

            def evaluate(self, t0, t1=None, left=True):
                if t1 is not None:
                    return self.evaluate(t1) - self.evaluate(t0)
                return jnp.asarray(t0) ** 2
        ```
    """

    t0: eqx.AbstractVar[RealScalarLike]
    t1: eqx.AbstractVar[RealScalarLike]

    @abc.abstractmethod
    def evaluate(
        self, t0: RealScalarLike, t1: RealScalarLike | None = None, left: bool = True
    ) -> PyTree[jax.Array]:
        """The path at time `t0`, or its increment from `t0` to `t1`.

        Args:
            t0: a time in `[self.t0, self.t1]`.
            t1: if given, the increment `path(t1) - path(t0)` is returned instead.
            left: at a jump, whether to take the value from the left (the limit as
                `t` increases to the jump) or from the right.

        Returns:
            The value at `t0` (or the increment), a PyTree of arrays.
        """

    @property
    def piecewise_linear(self) -> bool:
        """Whether the path is linear between its knots (a `ControlTerm` stepped by
        increments is then exact on steps that stop at the knots)."""
        return False

    def derivative(self, t: RealScalarLike, left: bool = True) -> PyTree[jax.Array]:
        """The derivative of the path at `t`.

        By default `jax.jvp` of `evaluate` in `t`; subclasses with a closed form
        override it.

        Args:
            t: a time in `[self.t0, self.t1]`.
            left: at a kink, whether to take the left or the right derivative.

        Returns:
            The derivative at `t`, a PyTree shaped like `evaluate(t)`.
        """
        t = float_time(t)
        _, tangent = jax.jvp(lambda s: self.evaluate(s, left=left), (t,), (jnp.ones_like(t),))
        return tangent


def float_time(t) -> jax.Array:
    """`t` as an array of floating dtype (an integer time cast to the default float), to
    differentiate with respect to it."""
    t = jnp.asarray(t)
    return t if jnp.issubdtype(t.dtype, jnp.floating) else t.astype(jnp.result_type(float))


def increment(path: AbstractPath, t0, t1, left: bool) -> PyTree[jax.Array]:
    """`path.evaluate(t1) - path.evaluate(t0)`, leaf by leaf."""
    later, earlier = path.evaluate(t1, left=left), path.evaluate(t0, left=left)
    return jax.tree.map(lambda a, b: a - b, later, earlier)
