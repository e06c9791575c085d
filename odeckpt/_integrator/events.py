"""Events in the step pipeline: whether a step triggers the solve's `Event`, and the
step cut short at the event.

The step ends at the earliest triggered crossing `t*`, as a function of its inputs
only, so a replayed step repeats it bit for bit. See `docs/events.md`, "How the time
is located".
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import RESULTS
from odeckpt._solvers import DenseStep

from .conditions import illinois, implicit_root
from .state import Problem, Record, State


def _earliest(triggered: list, times: list):
    """`(t*, event)`: the earliest time among the triggered conditions, and 1 + its
    condition's index (the first in order among equal times); `(inf, 0)` for none."""
    best = jnp.asarray(jnp.inf, times[0].dtype)
    event = jnp.asarray(0, jnp.int32)
    for i, (fired, t) in enumerate(zip(triggered, times, strict=True)):
        better = fired & (t < best)
        best, event = jnp.where(better, t, best), jnp.where(better, i + 1, event)
    return best, event


def _fixed(tree):
    """`tree` with its arrays cut from differentiation (for the root finder's loop)."""
    return jax.tree.map(lambda x: lax.stop_gradient(x) if eqx.is_array(x) else x, tree)


def _crossing(cond, dense: DenseStep, args, triggered, g0, g1):
    """Where a real condition crosses zero on `dense` (its end where not triggered),
    with the implicit function theorem's derivatives."""
    h = lambda s: cond(s, dense.evaluate(s), args)
    cond_, dense_, args_ = _fixed((cond, dense, args))
    h_fixed = lambda s: cond_(s, dense_.evaluate(s), args_)
    t0, t1 = dense_.t0, dense_.t1
    root = lax.cond(triggered, lambda: illinois(h_fixed, t0, t1, g0, g1), lambda: t1)
    return implicit_root(h, root)


def _truncated(dense: DenseStep, t_end) -> DenseStep:
    """The same polynomial over `[dense.t0, t_end]`: `theta` rescaled by the fraction
    `r` of the step, `coeffs[j] r^(j + 1)`."""
    h = dense.t1 - dense.t0
    r = jnp.where(h == 0, 1, (t_end - dense.t0) / jnp.where(h == 0, 1, h))

    def leaf(c):
        powers = r ** jnp.arange(1, c.shape[0] + 1, dtype=r.dtype)
        return c * powers.astype(c.dtype).reshape((-1,) + (1,) * (c.ndim - 1))

    return DenseStep(dense.t0, t_end, dense.y0, jax.tree.map(leaf, dense.coeffs))


def _chosen(pred, new, old):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), new, old)


def event_step(problem: Problem, state: State, new: State, record: Record, accepted):
    """`(new, record)` of an attempted step from `state` (which gave `new` and
    `record`), cut short at the event where an accepted step triggers one."""
    event = problem.event
    assert event is not None
    dense, args = record.dense, problem.args
    before = event.values(state.t, state.y, args)
    after = event.values(state.t_next, record.y1, args)
    going = accepted & (new.result == RESULTS.successful)
    triggered = [going & fired for fired in event.triggered(before, after)]
    times = [
        _crossing(cond, dense, args, fired, g0, g1) if real else state.t_next
        for cond, real, fired, g0, g1 in zip(
            event.conds, event.real, triggered, before, after, strict=True
        )
    ]
    earliest, index = _earliest(triggered, times)
    fired = index > 0
    # Evaluated at the step's end where nothing fired: `inf` would put NaN in gradients.
    t_star = jnp.where(fired, earliest, state.t_next)
    at_crossing = fired & jnp.asarray((False, *event.real))[index]
    y_star = _chosen(at_crossing, dense.evaluate(t_star), record.y1)
    cut = _chosen(fired, _truncated(dense, t_star), dense)
    moved = (jnp.where(fired, t_star, new.t), _chosen(fired, y_star, new.y))
    new = eqx.tree_at(lambda s: (s.t, s.y), new, moved)
    return new.with_event(fired, index), Record(cut, _chosen(fired, y_star, record.y1))


def event_at_start(problem: Problem, state: State) -> State:
    """`state` (the solve's initial state) with the event of a boolean condition that
    holds at `t0`: the solve then takes no step."""
    event = problem.event
    if event is None or all(event.real):
        return state
    held = event.at_start(event.values(state.t, state.y, problem.args))
    _, index = _earliest(held, [state.t] * len(held))
    fired = (index > 0) & (state.result == RESULTS.successful)
    return state.with_event(fired, index)


def event_end(problem: Problem, final: State, t1, sign):
    """`(t_end, tau_end)`: where the solve ended, as given and in internal time: at the
    event if one occurred, else `t1` (and `problem.t1`)."""
    if problem.event is None:
        return t1, problem.t1
    occurred = final.event > 0
    return jnp.where(occurred, final.t * sign, t1), jnp.where(occurred, final.t, problem.t1)


def event_mask(event, final: State):
    """`Solution.event_mask`: per condition of `event` (an `Event`, or `None`), whether
    it ended the solve, shaped like its `cond_fn`; `None` without an event."""
    if event is None:
        return None
    return event.mask([final.event == i + 1 for i in range(len(event.conditions))])
