"""Events: `Event`, `steady_state_event`, and diffrax's deprecated discrete terminating
events (`DiscreteTerminatingEvent`, `SteadyStateEvent`), which become an `Event`.

The record only holds what the user asked for; see `docs/events.md`.
"""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
from jaxtyping import PyTree

from odeckpt._controllers import AbstractAdaptiveStepSizeController


def _is_condition(x) -> bool:
    return callable(x)


class Event(eqx.Module):
    """Ends the solve where a condition triggers (diffrax's `Event`).

    A real-valued condition ends the solve at the crossing, located on the step's dense
    output to machine precision in `t`; a boolean one at the end of the first accepted
    step where it holds. When several trigger in one step, the first in time wins
    (`Solution.event_mask` says which). See `docs/events.md` for the rules, how the time is
    located and differentiated.

    Args:
        cond_fn: a function `cond_fn(t, y, args, **kwargs)`, or a PyTree of them, each
            returning a scalar (real or boolean); the keyword arguments are diffrax's.
        root_finder: accepted for diffrax code (e.g. an `optimistix.Newton`) and not
            used: every crossing is located by odeckpt's own bracketed Illinois
            iteration.
        direction: `None` (either way), `True` (upcrossings only: from `<= 0` to
            `> 0`), `False` (downcrossings only), or a PyTree of these shaped like
            `cond_fn`. Ignored for boolean conditions.

    Raises:
        ValueError: for a `direction` not shaped like `cond_fn`, or whose leaves are
            not `None`/`True`/`False`.
    """

    cond_fn: PyTree[Callable]
    root_finder: object
    direction: PyTree[bool | None]

    def __init__(self, cond_fn, root_finder=None, direction=None):
        if direction is None or isinstance(direction, bool):
            direction = jax.tree.map(lambda _: direction, cond_fn, is_leaf=_is_condition)
        conditions = jax.tree.structure(cond_fn, is_leaf=_is_condition)
        leaves, structure = jax.tree.flatten(direction, is_leaf=lambda x: x is None)
        if structure != conditions:
            raise ValueError(
                "`Event(direction=...)` must be `None`, a bool, or a PyTree shaped like "
                f"`cond_fn`; got structure {structure} for `cond_fn` of structure "
                f"{conditions}."
            )
        bad = [leaf for leaf in leaves if not (leaf is None or isinstance(leaf, bool))]
        if bad:
            raise ValueError(
                f"`Event(direction=...)` leaves must be `None`, `True` or `False`; got {bad[0]!r}."
            )
        self.cond_fn = cond_fn
        self.root_finder = root_finder
        self.direction = direction

    @property
    def conditions(self) -> list[Callable]:
        """The condition functions, in `cond_fn`'s leaf order."""
        return jax.tree.leaves(self.cond_fn, is_leaf=_is_condition)

    @property
    def directions(self) -> tuple:
        """`direction` per condition, in the same order."""
        return tuple(jax.tree.leaves(self.direction, is_leaf=lambda x: x is None))

    def mask(self, fired: list) -> PyTree:
        """A PyTree shaped like `cond_fn` from one value per condition."""
        structure = jax.tree.structure(self.cond_fn, is_leaf=_is_condition)
        return jax.tree.unflatten(structure, fired)


def steady_state_event(rtol=None, atol=None, norm: Callable | None = None) -> Callable:
    """A condition for `Event` that ends the solve at a steady state (diffrax's):
    `norm(f(t, y, args)) < atol + rtol * norm(y)`.

    Args:
        rtol, atol, norm: the tolerances and norm; each defaults to the solve's
            adaptive controller's (`PIDController(rtol, atol, norm=...)`).

    Returns:
        `cond_fn(t, y, args, **kwargs)`, a boolean condition. It evaluates the vector
        field once more at the end of each step.

    Raises:
        ValueError: (when the solve runs) if a default is needed and the controller is
            not adaptive.
    """

    def cond_fn(t, y, args, *, terms, stepsize_controller, **kwargs):
        del kwargs
        adaptive = isinstance(stepsize_controller, AbstractAdaptiveStepSizeController)
        if not adaptive and any(x is None for x in (rtol, atol, norm)):
            raise ValueError(
                "`steady_state_event()` takes `rtol`, `atol` and `norm` from an adaptive "
                f"controller, and `{type(stepsize_controller).__name__}` is not one: pass "
                "them, e.g. `steady_state_event(rtol=1e-6, atol=1e-8, norm=rms_norm)`."
            )
        r = stepsize_controller.rtol if rtol is None else rtol
        a = stepsize_controller.atol if atol is None else atol
        n = stepsize_controller.norm if norm is None else norm
        return n(terms.vf(t, y, args)) < a + r * n(y)

    return cond_fn


class AbstractDiscreteTerminatingEvent(eqx.Module):
    """diffrax's deprecated event interface (`diffeqsolve(...,
    discrete_terminating_event=...)`): `__call__(state, **kwargs)` returns a boolean
    that ends the solve at the end of the first accepted step where it holds. `state`
    has `tprev` (the step's end) and `y` there; the keyword arguments are `Event`'s
    and `args`. Prefer `Event` with a boolean `cond_fn(t, y, args, **kwargs)`, which
    is what this becomes (`as_event`)."""

    @abc.abstractmethod
    def __call__(self, state, **kwargs):
        """Whether to stop at the end of the step `state` describes."""

    def as_event(self) -> Event:
        """The `Event` with this condition."""
        return Event(_DiscreteCondition(self))


class DiscreteTerminatingEvent(AbstractDiscreteTerminatingEvent):
    """diffrax's deprecated `DiscreteTerminatingEvent(cond_fn)`: `cond_fn(state,
    **kwargs)` returns whether to stop (see `AbstractDiscreteTerminatingEvent`)."""

    cond_fn: Callable

    def __call__(self, state, **kwargs):
        return self.cond_fn(state, **kwargs)


class SteadyStateEvent(AbstractDiscreteTerminatingEvent):
    """diffrax's deprecated `SteadyStateEvent(rtol, atol, norm)`: stops where
    `steady_state_event(rtol, atol, norm)` holds."""

    rtol: float | None = None
    atol: float | None = None
    norm: Callable | None = None

    def __call__(self, state, *, args, **kwargs):
        condition = steady_state_event(self.rtol, self.atol, self.norm)
        return condition(state.tprev, state.y, args, **kwargs)


class DiscreteState(eqx.Module):
    """What a discrete terminating event reads: `tprev`, the end of the step just
    accepted, and `y` there (diffrax's names)."""

    tprev: jax.Array
    y: PyTree


class _DiscreteCondition(eqx.Module):
    """A discrete terminating event as `Event`'s boolean `cond_fn(t, y, args)`."""

    event: AbstractDiscreteTerminatingEvent

    def __call__(self, t, y, args, **kwargs):
        return self.event(DiscreteState(tprev=t, y=y), args=args, **kwargs)
