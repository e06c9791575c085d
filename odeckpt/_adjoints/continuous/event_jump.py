"""The event's jump term: where the continuous adjoint starts when an `Event` ended the solve.

A boolean condition, and a tangential crossing (`gdot = 0`), add nothing. See
`docs/events.md`, "The jump term of the continuous adjoints", for the formula, its
derivation and the references.
"""

from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import tree_add
from odeckpt._integrator import EventRequest

from .adjoint_ode import AdjointField
from .sweep import Sweep


class EventSplit(eqx.Module):
    """The solve's `EventRequest`, split into the differentiated arrays its conditions
    close over (`theta`) and the rest (`static`)."""

    theta: object
    static: object


def _pairing(cotangent, tangent) -> jax.Array:
    """`cotangent . tangent` under JAX's convention (complex states included): the
    derivative of `s -> cotangent . (s tangent)`."""
    scale = lambda s: jax.tree.map(lambda v: s.astype(jnp.real(v).dtype) * v, tangent)
    _, vjp_fn = jax.vjp(scale, jnp.ones(()))
    return vjp_fn(cotangent)[0]


def _scaled(c, tree):
    return jax.tree.map(lambda x: (c * x).astype(x.dtype), tree)


def _condition_pullback(field: AdjointField, split: EventSplit, i: int, tau, y, f):
    """`(gdot, (dg/dy, dg/dtheta, dg/d(event theta)))` of condition `i` at `(tau, y)`."""

    def g(tau, y, theta, event_theta):
        _, args = cast(tuple, eqx.combine(theta, field.static))
        event = cast(EventRequest, eqx.combine(event_theta, split.static))
        return event.conds[i](tau, y, args)

    point = (y, field.theta, split.theta)
    _, gdot = jax.jvp(lambda tau, y: g(tau, y, *point[1:]), (tau, y), (jnp.ones_like(tau), f))
    value, vjp_fn = jax.vjp(lambda *p: g(tau, *p), *point)
    return jnp.asarray(gdot).astype(tau.dtype), vjp_fn(jnp.ones_like(value))


def event_jump(field: AdjointField, split: EventSplit, real: tuple, final, tbar, sw: Sweep):
    """`(sw, event_ct)`: the sweep at `t*` (`final.t`, every mark there already added to
    `a`) with the jump term of the condition that fired, and the cotangent of the
    arrays the conditions close over (`split.theta`)."""
    tau, y = final.t, final.y
    f = field.vector_field(tau, y, field.theta)
    total = tbar.astype(tau.dtype) + _pairing(sw.flow.a, f).astype(tau.dtype)
    a, g = sw.flow.a, sw.g
    event_ct = jax.tree.map(jnp.zeros_like, split.theta)
    for i, is_real in enumerate(real):
        if not is_real:  # a step's end: its time does not move (see the module docstring)
            continue
        gdot, (dy, dtheta, devent) = _condition_pullback(field, split, i, tau, y, f)
        use = (final.event == i + 1) & (gdot != 0)
        coefficient = jnp.where(use, -total / jnp.where(use, gdot, 1), 0)
        a, g = tree_add(a, _scaled(coefficient, dy)), tree_add(g, _scaled(coefficient, dtheta))
        event_ct = tree_add(event_ct, _scaled(coefficient, devent))
    flow = eqx.tree_at(lambda fl: fl.a, sw.flow, a)
    sw = eqx.tree_at(lambda s: (s.flow, s.g, s.fresh), sw, (flow, g, jnp.asarray(True)))
    return sw, event_ct
