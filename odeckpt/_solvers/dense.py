"""Dense output: one polynomial per step, `y(t0 + theta h) = y0 + sum_j c_j theta^(j+1)`."""

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import Y


class DenseStep(eqx.Module):
    """The dense-output polynomial of one step (or, stacked, of many steps).

    Attributes:
        t0, t1: the step's start and end times (in the solver's internal time).
        y0: the state at `t0`.
        coeffs: a PyTree like `y0` whose leaves carry a leading axis of length `d`:
            `y(t0 + theta (t1 - t0)) = y0 + sum_j coeffs[j] theta^(j+1)`.
    """

    t0: jax.Array
    t1: jax.Array
    y0: Y
    coeffs: Y

    def _theta(self, t):
        """`(theta, h)`: where `t` lies in the step as a fraction of it, and its length
        (`theta = 0` for a step of length zero)."""
        h = self.t1 - self.t0
        return jnp.where(h == 0, 0.0, (t - self.t0) / jnp.where(h == 0, 1.0, h)), h

    def evaluate(self, t) -> Y:
        """Evaluate at time `t` in `[t0, t1]` (a single step, not stacked)."""
        theta, _ = self._theta(t)

        def leaf(y0, c):
            powers = theta ** jnp.arange(1, c.shape[0] + 1, dtype=theta.dtype)
            powers = powers.astype(c.dtype).reshape((-1,) + (1,) * (c.ndim - 1))
            return y0 + jnp.sum(c * powers, axis=0)

        return jax.tree.map(leaf, self.y0, self.coeffs)

    def derivative(self, t) -> Y:
        """The time derivative of the polynomial at `t` in `[t0, t1]` (a single step):
        `sum_j (j + 1) coeffs[j] theta^j / h`; zero for a step of length zero."""
        theta, h = self._theta(t)
        scale = jnp.where(h == 0, 0.0, 1 / jnp.where(h == 0, 1.0, h))

        def leaf(c):  # Horner's scheme in theta (no 0 ** 0 to differentiate)
            x = theta.astype(c.dtype)
            acc = jnp.zeros_like(c[0])
            for j in reversed(range(c.shape[0])):
                acc = acc * x + (j + 1) * c[j]
            return acc * scale.astype(c.dtype)

        return jax.tree.map(leaf, self.coeffs)


def linear_coeffs(y0: Y, y1: Y) -> Y:
    """The straight line from `y0` to `y1` (diffrax's `LocalLinearInterpolation`)."""
    return jax.tree.map(lambda a, b: (b - a)[None], y0, y1)


def hermite_coeffs(y0: Y, y1: Y, f0: Y, f1: Y, dt) -> Y:
    """Cubic Hermite interpolation from values and derivatives at both ends."""

    def leaf(a, b, fa, fb):
        h = dt.astype(a.dtype)
        c1 = h * fa
        c2 = 3 * (b - a) - h * (2 * fa + fb)
        c3 = 2 * (a - b) + h * (fa + fb)
        return jnp.stack([c1, c2, c3])

    return jax.tree.map(leaf, y0, y1, f0, f1)
