"""The backward sweep of a continuous adjoint: the adjoint ODE from a time down to `lo`.

The sweep stops at every mark (output times, anchors, and on the forward grid every
accepted step time); between stops it takes one step of the adjoint ODE (forward
grid) or the adaptive steps its own controller asks for. See `docs/adjoints.md`,
"The backward pass's steps".
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._controllers import AbstractLoopController, ControllerState
from odeckpt._core import RESULTS, Y, batch_cond, promoted, row
from odeckpt._solvers import AbstractSolver, ButcherTableau

from .adjoint_ode import AdjointField, AdjointStep, Flow, Slopes, adjoint_rk_step, anchor_distance
from .implicit_step import implicit_adjoint_step


class Marks(eqx.Module):
    """Times where the sweep stops and acts: `times[lo:hi]`, ascending.

    Attributes:
        jump: rows added to `a` on arrival (cotangents of saved outputs), or `None`.
        anchor: rows of the forward `y`: on arrival the backward `y` is measured
            against them and reset to them (`BacksolveAdjoint`), or `None`.
    """

    times: jax.Array
    lo: jax.Array
    hi: jax.Array
    jump: Y | None = None
    anchor: Y | None = None


MAX_SPLITS = 16
"""A too stiff forward-grid step is taken in parts of at least 2^-16 of it; a part
still too stiff at that size ends the sweep (`RESULTS.nonfinite_state`)."""


class SweepContext(eqx.Module):
    """What every iteration of a sweep reads.

    Attributes:
        tableau: the explicit Runge–Kutta method of the adjoint ODE, or `None`.
        implicit: else the implicit solver that steps it (`implicit_step.py`).
        controller: the backward pass's own step-size controller; `None` steps
            exactly from mark to mark (the forward grid is then one of the marks).
        seminorm: leave `g` out of the controller's error norm.
        stiff_limit: on the forward grid, a step whose stiffness estimate `h rho`
            exceeds it (while the stiff part is above tolerance) is taken in halves,
            at most `MAX_SPLITS` times over.
        give_up_above: an anchor distance beyond which the sweep stops (the
            gradient will not be returned).
        rtol, atol: the scale of an anchor's distance (`anchor_distance`).
        max_steps: bound on attempted adaptive steps.
    """

    tableau: ButcherTableau | None = eqx.field(static=True)
    implicit: AbstractSolver | None
    marks: tuple[Marks, ...]
    controller: AbstractLoopController | None
    seminorm: bool = eqx.field(static=True)
    error_order: int | None = eqx.field(static=True)
    stiff_limit: float | None = eqx.field(static=True)  # h rho above it: split the step
    give_up_above: float = eqx.field(static=True)  # anchor distance that ends the sweep
    rtol: jax.Array
    atol: jax.Array
    max_steps: int = eqx.field(static=True)


class Sweep(eqx.Module):
    """The backward pass's state between two iterations."""

    tau: jax.Array  # current time (solver's internal time; the sweep decreases it)
    flow: Flow
    g: object  # dL/dtheta accumulated so far
    slopes: Slopes  # the right-hand side at (tau, flow), unless `fresh`
    fresh: jax.Array  # `slopes` is stale and must be recomputed
    splits: jax.Array  # halvings of this forward-grid step found needed (sub-step: `dt`)
    pointers: tuple[jax.Array, ...]  # per mark list: rows below are still ahead
    dt: jax.Array  # next adaptive step size; on the grid, the sub-step while splits > 0
    controller: ControllerState
    worst: jax.Array  # largest anchor distance met so far
    num_steps: jax.Array  # attempted steps
    result: jax.Array


def _arrive_one(marks: Marks, pointer, tau, flow: Flow, worst, ctx: SweepContext):
    """Act on every mark of one list at time `tau` (or later: none are left behind)."""

    def pending(carry):
        p = carry[0]
        return (p > marks.lo) & (marks.times[jnp.maximum(p - 1, 0)] >= tau)

    def act(carry):
        p, flow, worst = carry
        i = p - 1
        a = flow.a if marks.jump is None else jax.tree.map(jnp.add, flow.a, row(marks.jump, i))
        y = flow.y
        if marks.anchor is not None and y is not None:
            y = row(marks.anchor, i)
            worst = jnp.maximum(worst, anchor_distance(flow.y, y, ctx.rtol, ctx.atol))
        return i, Flow(y, a), worst

    return lax.while_loop(pending, act, (pointer, flow, worst))


def arrive(ctx: SweepContext, sw: Sweep) -> Sweep:
    """Apply the jumps and anchors due at `sw.tau`."""
    flow, worst, fresh, pointers = sw.flow, sw.worst, sw.fresh, []
    for marks, p in zip(ctx.marks, sw.pointers, strict=True):
        p_new, flow, worst = _arrive_one(marks, p, sw.tau, flow, worst, ctx)
        if marks.jump is not None or marks.anchor is not None:
            fresh = fresh | (p_new != p)
        pointers.append(p_new)
    return eqx.tree_at(
        lambda s: (s.flow, s.worst, s.fresh, s.pointers), sw, (flow, worst, fresh, tuple(pointers))
    )


def next_stop(ctx: SweepContext, pointers, lo):
    """The latest mark before the current time, or `lo`."""
    stop = lo
    for marks, p in zip(ctx.marks, pointers, strict=True):
        t = jnp.where(p > marks.lo, marks.times[jnp.maximum(p - 1, 0)], -jnp.inf)
        stop = jnp.maximum(stop, t.astype(stop.dtype))
    return stop


def _refreshed(ctx: SweepContext, field: AdjointField, sw: Sweep) -> Sweep:
    """`sw` with the slopes at its point, which an explicit step starts from."""
    if ctx.implicit is not None:
        return sw
    # `batch_cond`: under `jax.vmap`, the field's parameters stay unbatched.
    slopes = batch_cond(
        sw.fresh,
        lambda field, sw: field(-sw.tau, sw.flow),
        lambda field, sw: sw.slopes,
        field,
        sw,
    )
    return eqx.tree_at(lambda s: s.slopes, sw, slopes)


def _adjoint_step(ctx: SweepContext, field: AdjointField, sw: Sweep, dt, error=None):
    """One step of the adjoint ODE of length `dt` from `sw`: explicit or implicit."""
    if ctx.implicit is not None:
        return implicit_adjoint_step(ctx.implicit, field, -sw.tau, dt, sw.flow, error)
    assert ctx.tableau is not None
    return adjoint_rk_step(ctx.tableau, field, -sw.tau, dt, sw.flow, sw.slopes, error)


def _after_step(sw: Sweep, tau, step: AdjointStep) -> Sweep:
    """The sweep moved to `tau` by the adjoint step `step` (its flow, its increment of
    the parameter gradient, and its last slopes when the method is FSAL)."""
    g = jax.tree.map(jnp.add, sw.g, step.g_increment)
    fsal = step.slopes is not None
    slopes = step.slopes if fsal else sw.slopes
    return eqx.tree_at(
        lambda s: (s.tau, s.flow, s.g, s.slopes, s.fresh),
        sw,
        (tau, step.flow, g, slopes, jnp.asarray(not fsal)),
    )


def _too_stiff(ctx: SweepContext, sw: Sweep, step: AdjointStep, dt) -> jax.Array:
    """Whether a forward-grid step is too stiff for the adjoint: `h rho` beyond the stiff
    limit, `rho` estimated from the last two stages, with that stiff part above tolerance
    (`docs/adjoints.md`, "The backward pass's steps").
    """
    if ctx.stiff_limit is None or step.probe is None:
        return jnp.asarray(False)
    d_flow, d_slope = (_moduli(t) for t in step.probe)
    size = jnp.sqrt(jnp.sum(d_flow**2))
    # dt may be float64 against a float32 state: cast as standard promotion does
    rho_h = jnp.multiply(*promoted(dt, jnp.sqrt(jnp.sum(d_slope**2))))
    rho_h = jnp.divide(*promoted(rho_h, jnp.where(size > 0, size, 1.0)))
    scale = jnp.max(_moduli(sw.flow), initial=0.0)
    visible = jnp.max(d_flow, initial=0.0) > ctx.atol + ctx.rtol * scale
    return (rho_h > ctx.stiff_limit) & visible & (dt > 1e-12 * jnp.maximum(jnp.abs(sw.tau), 1))


def _moduli(tree) -> jax.Array:
    """`|x|` of every element of every leaf of `tree` (real or complex), as one vector
    (empty for a state without elements)."""
    leaves = [jnp.ravel(jnp.abs(x)) for x in jax.tree.leaves(tree)]
    return jnp.concatenate(leaves) if leaves else jnp.zeros((0,))


def _grid_iteration(ctx: SweepContext, field: AdjointField, sw: Sweep, lo) -> Sweep:
    """One step of the adjoint ODE to the next mark; or, once a try had to be split, one
    sub-step towards it. An explicit step is split in halves where it is too stiff
    (sub-steps then keep their size to the mark: the stiffness within one forward step
    changes little, `MAX_SPLITS` at most); an implicit one where its error estimate
    exceeds the forward tolerances or its stage solves failed (a boundary layer of the
    adjoint that the forward steps never met), its sub-steps then sized from the
    estimate as a controller would. The next forward step is tried whole again."""
    sw = _refreshed(ctx, field, sw)
    mark = next_stop(ctx, sw.pointers, lo)
    gap = sw.tau - mark
    whole = (sw.splits == 0) | (sw.dt * (1 + 1e-3) >= gap)  # the last sub-step lands
    dt = jnp.where(whole, gap, sw.dt)
    target = jnp.where(whole, mark, sw.tau - dt)
    implicit = ctx.implicit is not None
    step = _adjoint_step(ctx, field, sw, dt, "flow" if implicit else None)
    if implicit:
        error = _error_ratio(ctx, sw, step)
        bad = error > 1
        split = bad & (dt > 1e-12 * jnp.maximum(jnp.abs(sw.tau), 1))
        factor = 0.9 * error ** (-1 / ((ctx.error_order or 1) + 1))
        factor = jnp.where(bad, jnp.clip(factor, 0.1, 0.5), jnp.clip(factor, 1, 5))
        sub_dt = dt * factor
        splits = jnp.where(split, 1, jnp.where(whole, 0, sw.splits))
        given_up = RESULTS.dt_min_reached  # still inaccurate at a vanishing step
    else:
        bad = _too_stiff(ctx, sw, step, dt)
        split = bad & (sw.splits < MAX_SPLITS)
        sub_dt = jnp.where(split, 0.5 * dt, sw.dt)
        splits = jnp.where(split, sw.splits + 1, jnp.where(whole, 0, sw.splits))
        given_up = RESULTS.nonfinite_state  # still too stiff after MAX_SPLITS halvings
    moved = _after_step(sw, target, step)
    sw = jax.tree.map(lambda new, old: jnp.where(split, old, new), moved, sw)
    result = jnp.where(bad & ~split, given_up, sw.result)  # the sweep ends, and reports it
    return arrive(
        ctx,
        eqx.tree_at(
            lambda s: (s.splits, s.dt, s.num_steps, s.result),
            sw,
            (
                splits.astype(sw.splits.dtype),
                sub_dt.astype(sw.dt.dtype),
                sw.num_steps + 1,
                result.astype(sw.result.dtype),
            ),
        ),
    )


def _error_ratio(ctx: SweepContext, sw: Sweep, step: AdjointStep) -> jax.Array:
    """The implicit step's error estimate against the forward tolerances: the largest
    over the flow's leaves of the leaf's RMS error scaled by `atol + rtol` times the
    leaf's largest element before or after the step (the adjoint's elements differ by
    orders of magnitude, and the gradient reads them all at the scale of the largest,
    as `anchor_distance` does); `inf` where the step failed."""
    assert step.flow_error is not None

    def leaf(before, after, err):
        size = jnp.maximum(jnp.max(jnp.abs(before), initial=0), jnp.max(jnp.abs(after), initial=0))
        return jnp.sqrt(jnp.mean(jnp.abs(err) ** 2)) / (ctx.atol + ctx.rtol * size)

    leaves = (jax.tree.leaves(t) for t in (sw.flow, step.flow, step.flow_error))
    ratios = [leaf(*parts) for parts in zip(*leaves, strict=True) if parts[0].size]
    ratio = jnp.max(jnp.stack(ratios)) if ratios else jnp.zeros(())
    failed = jnp.asarray(False) if step.failure is None else step.failure != RESULTS.successful
    return jnp.where(failed | ~jnp.isfinite(ratio), jnp.inf, ratio)


def _controlled(ctx: SweepContext, sw: Sweep, step: AdjointStep):
    """The trees the controller's error norm sees: `g` is left out under a seminorm."""
    if ctx.seminorm:
        return sw.flow, step.flow, step.flow_error
    g1 = jax.tree.map(jnp.add, sw.g, step.g_increment)
    return (sw.flow, sw.g), (step.flow, g1), (step.flow_error, step.g_error)


def _adaptive_iteration(ctx: SweepContext, field: AdjointField, sw: Sweep, lo) -> Sweep:
    """One attempted adaptive step towards the next mark; lands on it exactly."""
    sw = _refreshed(ctx, field, sw)
    target = next_stop(ctx, sw.pointers, lo)
    gap = sw.tau - target
    land = sw.dt * (1 + 1e-3) >= gap  # stretch a step by at most 0.1% to land on a mark
    dt = jnp.where(land, gap, sw.dt)
    error = "flow" if ctx.seminorm else "all"
    step = _adjoint_step(ctx, field, sw, dt, error)  # a failed one: error inf, rejected
    assert ctx.controller is not None
    decision = ctx.controller.decide(
        -sw.tau, dt, *_controlled(ctx, sw, step), ctx.error_order, sw.controller
    )
    moved = _after_step(sw, jnp.where(land, target, sw.tau - dt), step)
    sw = jax.tree.map(lambda new, old: jnp.where(decision.accept, new, old), moved, sw)
    sw = eqx.tree_at(
        lambda s: (s.dt, s.controller, s.num_steps, s.result),
        sw,
        (
            decision.dt_next.astype(sw.dt.dtype),
            decision.state,
            sw.num_steps + 1,
            jnp.maximum(sw.result, decision.result).astype(sw.result.dtype),
        ),
    )
    return arrive(ctx, sw)


def sweep_to(ctx: SweepContext, field: AdjointField, sw: Sweep, lo) -> Sweep:
    """Integrate the adjoint ODE from `sw.tau` down to `lo`, acting on every mark."""
    adaptive = ctx.controller is not None
    iterate = _adaptive_iteration if adaptive else _grid_iteration

    def going(sw):
        more = (sw.tau > lo) & (sw.result == RESULTS.successful)
        more = more & (sw.worst <= ctx.give_up_above)  # backsolve: diverged, stop
        # On the grid, sub-steps of too stiff forward steps count against `max_steps`
        # beyond the forward pass's own steps.
        return more & (sw.num_steps < (ctx.max_steps if adaptive else 2 * ctx.max_steps))

    sw = lax.while_loop(going, lambda sw: iterate(ctx, field, sw, lo), sw)
    stuck = (sw.tau > lo) & (sw.result == RESULTS.successful)
    result = jnp.where(stuck, RESULTS.max_steps_reached, sw.result).astype(sw.result.dtype)
    return eqx.tree_at(lambda s: s.result, sw, result)
