"""An event's conditions inside the solve, and where a step's crossing lies.

The crossing is the root of `h(s) = g(s, p(s))` on the step's dense output `p`, in
internal time, located by the Illinois method and differentiated by the implicit
function theorem at the root (the iterations are not differentiated). See
`docs/events.md`, "How the time is located" and "Gradients".

References:
    Dowell, M. and Jarratt, P. (1971). A modified regula falsi method for computing
    the root of an equation. BIT 11, 168-174.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

_MAX_ITERATIONS = 200  # Illinois converges superlinearly: ~10-60 iterations in practice
_ULPS = 4  # the bracket's final width, in ulp of the time


class EventRequest(eqx.Module):
    """What a step reads of the solve's `Event`.

    Attributes:
        conds: one `cond(tau, y, args)` per condition, in internal time and
            closure-converted (gradients reach the arrays a condition closes over).
        directions: per condition `None`, `True` (upcrossing), `False` (downcrossing).
        real: per condition, whether it returns a real value (else a boolean).
    """

    conds: tuple[Callable, ...]
    directions: tuple = eqx.field(static=True)
    real: tuple[bool, ...] = eqx.field(static=True)

    def values(self, t, y, args) -> list:
        """Every condition at `(t, y)`."""
        return [cond(t, y, args) for cond in self.conds]

    def triggered(self, before: list, after: list) -> list:
        """Per condition, whether it triggers on a step whose ends give `before` and
        `after`: a real one changes sign (in its `direction`), a boolean one holds."""
        out = []
        for g0, g1, direction, real in zip(before, after, self.directions, self.real, strict=True):
            if not real:
                out.append(jnp.asarray(g1, bool))
            elif direction is None:
                out.append(jnp.sign(g0) != jnp.sign(g1))
            elif direction:
                out.append((jnp.sign(g0) <= 0) & (jnp.sign(g1) > 0))
            else:
                out.append((jnp.sign(g0) > 0) & (jnp.sign(g1) <= 0))
        return out

    def at_start(self, values: list) -> list:
        """Per condition, whether it triggers at `t0`: a boolean one that holds."""
        return [
            jnp.asarray(g if not real else False, bool)
            for g, real in zip(values, self.real, strict=True)
        ]


def _secant_or_middle(a, b, fa, fb):
    """Regula falsi's point, or the middle where rounding puts it outside `(a, b)`."""
    denominator = jnp.where(fb == fa, 1, fb - fa)
    x = (a * fb - b * fa) / denominator
    return jnp.where((x > a) & (x < b) & (fb != fa), x, a + (b - a) / 2)


def _illinois_step(h, carry):
    a, b, fa, fb, kept, i = carry
    x = _secant_or_middle(a, b, fa, fb)
    fx = h(x)
    like_b = jnp.sign(fx) == jnp.sign(fb)
    like_a = ~like_b & (jnp.sign(fx) == jnp.sign(fa))
    root = ~like_a & ~like_b  # fx == 0 (or NaN): stop there
    # `kept`: -1 when `a` was kept last time, +1 for `b`, 0 at the start.
    fa = jnp.where(like_b & (kept == -1), fa / 2, fa)
    fb = jnp.where(like_a & (kept == 1), fb / 2, fb)
    new_a = jnp.where(like_a | root, x, a)
    new_b = jnp.where(like_b | root, x, b)
    fa, fb = jnp.where(like_a | root, fx, fa), jnp.where(like_b | root, fx, fb)
    kept = jnp.where(like_b, -1, jnp.where(like_a, 1, 0)).astype(jnp.int32)
    return new_a, new_b, fa, fb, kept, i + 1


def illinois(h: Callable, a, b, fa, fb):
    """A root of `h` in `[a, b]` (with `sign(fa) != sign(fb)`, the values of `h` at the
    ends): the end of a bracket of width at most `_ULPS` ulp, or a point where `h` is
    zero, with the smaller `|h|`. Not differentiated."""
    a, b, fa, fb = (lax.stop_gradient(jnp.asarray(x)) for x in (a, b, fa, fb))
    fa, fb = fa.astype(a.dtype), fb.astype(a.dtype)
    h_real = lambda s: jnp.asarray(h(s)).astype(a.dtype)
    eps = jnp.finfo(a.dtype).eps

    def open_(carry):
        a, b, fa, fb, _, i = carry
        width = _ULPS * eps * jnp.maximum(jnp.abs(a), jnp.abs(b))
        return (b - a > width) & (fa != 0) & (fb != 0) & (i < _MAX_ITERATIONS)

    init = (a, b, fa, fb, jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))
    a, b, fa, fb, _, _ = lax.while_loop(open_, lambda c: _illinois_step(h_real, c), init)
    return jnp.where(jnp.abs(fa) <= jnp.abs(fb), a, b)


def implicit_root(h: Callable, root):
    """`root` (a root of `h`, not differentiated) with the derivatives of the implicit
    function theorem: `-(∂h/∂θ)(root) / h'(root)` for whatever `h` closes over. Its
    value is `root` exactly. (At a tangential root, `h' = 0`, the derivatives are 0.)"""
    root = lax.stop_gradient(root)
    value, slope = jax.jvp(h, (root,), (jnp.ones_like(root),))
    value = jnp.asarray(value).astype(root.dtype)
    slope = lax.stop_gradient(jnp.asarray(slope).astype(root.dtype))
    inverse = jnp.where(slope == 0, 0, 1 / jnp.where(slope == 0, 1, slope))
    return root - (value - lax.stop_gradient(value)) * inverse
