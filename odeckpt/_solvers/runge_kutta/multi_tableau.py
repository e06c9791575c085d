"""`MultiButcherTableau`: one Butcher tableau per term of a `MultiTerm`, as diffrax
defines user methods with it, and the additive step it defines.

See `docs/solver-internals.md`, "Additive explicit methods", for the step, its carried
state, its dense output and the implicit tableaux it refuses.
"""

import dataclasses

import jax
import jax.numpy as jnp

from odeckpt._solvers.base import StepOutput, combine_stages
from odeckpt._solvers.dense import hermite_coeffs
from odeckpt._terms import AbstractTerm


@dataclasses.dataclass(frozen=True, init=False)
class MultiButcherTableau:
    """One tableau per term of a `MultiTerm`, in the terms' order.

    See `docs/solver-internals.md`, "Additive explicit methods".

    Args:
        *tableaus: `ButcherTableau`s (e.g. `Dopri5.tableau`), all with the same number
            of stages; diffrax also allows one implicit (ESDIRK) tableau among them.

    Raises:
        ValueError: no tableau, different numbers of stages, or more than one implicit
            tableau.
        TypeError: something that is not a Runge–Kutta tableau.
    """

    tableaus: tuple

    def __init__(self, *tableaus):
        if not tableaus:
            raise ValueError("`MultiButcherTableau(...)` needs at least one tableau.")
        try:
            implicit = [t.implicit for t in tableaus]
        except AttributeError:
            raise TypeError(
                "`MultiButcherTableau(...)` takes Runge–Kutta tableaux, e.g. "
                "`MultiButcherTableau(Dopri5.tableau, Dopri5.tableau)`; got "
                f"{', '.join(type(t).__name__ for t in tableaus)}."
            ) from None
        stages = [t.stages for t in tableaus]
        if len(set(stages)) > 1:
            raise ValueError(
                "`MultiButcherTableau(...)`: every tableau must have the same number of "
                f"stages; got {stages}."
            )
        if sum(implicit) > 1:
            raise ValueError(
                "`MultiButcherTableau(...)`: at most one tableau may be implicit; got "
                f"{sum(implicit)}."
            )
        object.__setattr__(self, "tableaus", tuple(tableaus))

    @property
    def implicit(self) -> bool:
        """Whether one of its tableaux is implicit."""
        return any(t.implicit for t in self.tableaus)

    @property
    def stages(self) -> int:
        return self.tableaus[0].stages

    @property
    def fsal(self) -> bool:
        """Every tableau is first-same-as-last: the last stage is each part at `y1`."""
        return all(t.fsal for t in self.tableaus)


class _BroadcastPart(AbstractTerm):
    """A part of the term whose vector field may return a scalar, as diffrax allows for
    a missing part (`ODETerm(lambda t, y, args: 0)`): broadcast to `y`'s leaves."""

    term: AbstractTerm

    def vf(self, t, y, args):
        out = self.term.vf(t, y, args)
        if jax.tree.structure(out) != jax.tree.structure(y):
            out = jax.tree.map(lambda _: out, y)
        return jax.tree.map(_like, out, y)


def _like(v, x) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(v).astype(jnp.result_type(x)), jnp.shape(x))


def broadcast_parts(parts) -> tuple:
    """Each part, its vector field broadcast to `y`'s leaves (see `_BroadcastPart`)."""
    return tuple(_BroadcastPart(part) for part in parts)


def _padded_row(weights, length: int) -> list:
    return [float(w) for w in weights][:length] + [0.0] * max(0, length - len(weights))


def _parts(tableau, term) -> tuple:
    parts = term.parts()
    if len(parts) != len(tableau.tableaus):
        raise ValueError(
            f"A method with a `MultiButcherTableau` of {len(tableau.tableaus)} tableaux takes "
            f"`MultiTerm(...)` of {len(tableau.tableaus)} terms (one per tableau); got a term "
            f"of {len(parts)}."
        )
    if tableau.implicit:
        raise ValueError(
            "A `MultiButcherTableau` with an implicit tableau is not supported by odeckpt's "
            "`AbstractRungeKutta`: use an IMEX method (`KenCarp3/4/5`, `Sil3`, or "
            "`AbstractIMEX` with an `ImexTableau`) for `MultiTerm(explicit, implicit)`."
        )
    return broadcast_parts(parts)


def multi_init(tableau, term, t0, y0, args) -> tuple:
    """Each part's slope at `(t0, y0)`: the first stage."""
    return tuple(part.vf(t0, y0, args) for part in _parts(tableau, term))


def multi_step(tableau: MultiButcherTableau, term, t0, dt, y0, k0s, args, dense=True):
    """One step of the additive method (`docs/solver-internals.md`, "Additive explicit methods")."""
    parts, tabs = _parts(tableau, term), tableau.tableaus
    ks = [[k0] for k0 in k0s]
    y_stage = y0
    for i in range(1, tableau.stages):
        weights = [w for t in tabs for w in _padded_row(t.a[i], i)]
        y_stage = combine_stages(y0, dt, weights, [k for kp in ks for k in kp])
        for part, t, kp in zip(parts, tabs, ks, strict=True):
            kp.append(part.vf(t0 + t.c[i] * dt, y_stage, args))
    flat = [k for kp in ks for k in kp]
    t1 = t0 + dt
    if tableau.fsal:
        y1, k1s = y_stage, tuple(kp[-1] for kp in ks)
    else:
        y1 = combine_stages(y0, dt, [w for t in tabs for w in t.b], flat)
        k1s = tuple(part.vf(t1, y1, args) for part in parts)
    y_error = None
    if all(t.b_err is not None for t in tabs):
        zero = jax.tree.map(lambda x: x * 0, y0)
        y_error = combine_stages(zero, dt, [w for t in tabs for w in t.b_err], flat)
    coeffs = hermite_coeffs(y0, y1, _sum(k0s), _sum(k1s), dt) if dense else None
    return StepOutput(y1=y1, y_error=y_error, state=k1s, coeffs=coeffs)


def _sum(slopes: tuple):
    return jax.tree.map(lambda *xs: sum(xs[1:], xs[0]), *slopes)
