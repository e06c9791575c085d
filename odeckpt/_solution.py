"""The result of a solve, and how `diffeqsolve` builds it from the loop's output."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from ._checkpointing import LoopOutput
from ._core import RESULTS, Y, concrete, is_okay
from ._integrator import Integrator, Problem, State, event_end, event_mask
from ._saveat import SaveAt, sub_saves
from ._saved_rows import SolveEnd, sub_rows
from ._solvers import DenseStep


class DenseInterpolation(eqx.Module):
    """Every accepted step's polynomial: the solution between `t0` and `t1`.

    `evaluate(t)` and `derivative(t)` take a scalar or a 1-D array of times; between
    steps the polynomials meet, and `left` picks the step before (`True`) or after a
    step boundary (in the direction of `t`). Outside `[t0, t1]` the first or last
    step's polynomial is extrapolated.
    """

    steps: DenseStep  # stacked: leaves have a leading axis of length max_steps
    num_steps: jax.Array
    direction: jax.Array
    ends: jax.Array  # the steps' ends in internal time, inf past `num_steps` (searched)
    y0: Y | None = None  # returned when no step was taken (e.g. t0 == t1)
    reached: jax.Array | None = None  # internal time a failed solve reached; inf beyond
    start: jax.Array | None = None  # the solve's t0 as given (default: the first step's)

    def __init__(self, steps, num_steps, direction, y0=None, reached=None, start=None):
        self.steps, self.num_steps, self.direction = steps, num_steps, direction
        self.y0, self.reached, self.start = y0, reached, start
        # Masked once here, not at every evaluation (an evaluation then costs a
        # binary search, not a pass over all max_steps rows).
        n = steps.t1.shape[0]
        self.ends = jnp.where(jnp.arange(n, dtype=jnp.int32) < num_steps, steps.t1, jnp.inf)

    @property
    def t0(self) -> jax.Array:
        """The start of the interval the interpolation covers (the solve's `t0`)."""
        return self.steps.t0[0] * self.direction if self.start is None else self.start

    @property
    def t1(self) -> jax.Array:
        """The end of the interval: the end of the last step (`t0` without steps)."""
        last = self.steps.t1[jnp.maximum(self.num_steps - 1, 0)] * self.direction
        return jnp.where(self.num_steps > 0, last, self.t0)

    def evaluate(self, t0, t1=None, left: bool = True) -> Y:
        """The solution at `t0`; with `t1`, the increment `y(t1) - y(t0)`.

        Args:
            t0: a time (scalar) or 1-D array of times.
            t1: `None`, or times like `t0`: then `y(t1) - y(t0)` is returned.
            left: at a step boundary, use the step before it (the polynomials agree
                there, so only the rounding differs).

        Returns:
            A PyTree like `y0`, with a leading axis when the times have one.
        """
        if t1 is not None:
            y0, y1 = self.evaluate(t0, left=left), self.evaluate(t1, left=left)
            return jax.tree.map(jnp.subtract, y1, y0)
        return self._at(t0, left, derivative=False)

    def derivative(self, t, left: bool = True) -> Y:
        """`dy/dt` of the interpolating polynomials at `t` (scalar or 1-D array).

        It is the derivative of the numerical solution's interpolant, not of the exact
        solution: less accurate than `f(t, evaluate(t), args)`. At a step boundary the
        two neighbouring polynomials' slopes differ: `left` takes the step before `t`
        (in the direction of `t`), `left=False` the step after it.
        """
        return self._at(t, left, derivative=True)

    def _at(self, t, left: bool, *, derivative: bool) -> Y:
        t = jnp.asarray(t)
        if t.ndim > 0:
            return jax.vmap(lambda s: self._at(s, left, derivative=derivative))(t)
        tau = self.direction * t
        step = jax.tree.map(lambda x: x[self._index(tau, left)], self.steps)
        if derivative:
            value = jax.tree.map(lambda d: d * self.direction.astype(d.dtype),
                                 step.derivative(tau))  # fmt: skip
            fill = lambda y: jnp.zeros_like(y)
        else:
            value, fill = step.evaluate(tau), lambda y: y
        if self.y0 is not None:
            # Without steps, row 0 is an unfilled (inf) buffer row: its polynomial is NaN.
            value = jax.tree.map(lambda v, y: jnp.where(self.num_steps > 0, v, fill(y)),
                                 value, self.y0)  # fmt: skip
        if self.reached is None:
            return value
        # Nothing was computed beyond where a failed solve stopped: inf there.
        beyond = tau > self.reached
        return jax.tree.map(lambda v: jnp.where(beyond, jnp.inf, v), value)

    def _index(self, tau, left: bool):
        """The step whose polynomial holds at internal time `tau`: at a boundary, the
        earlier of the two in `t` for `left` (in internal time: the earlier one when
        integrating forwards, the later one backwards)."""
        ends = self.ends
        direction = concrete(self.direction)
        if direction is None:  # traced: both searches, and a select
            before = jnp.searchsorted(ends, tau, side="left")
            after = jnp.searchsorted(ends, tau, side="right")
            i = jnp.where((self.direction > 0) == left, before, after)
        else:
            side = "left" if (direction > 0) == left else "right"
            i = jnp.searchsorted(ends, tau, side=side)
        return jnp.clip(i, 0, jnp.maximum(self.num_steps - 1, 0))


def _dense_needed(name: str) -> ValueError:
    return ValueError(f"`Solution.{name}` needs dense output: pass `saveat=SaveAt(dense=True)`.")


class Solution(eqx.Module):
    """What `diffeqsolve` returns (diffrax's fields).

    Attributes:
        t0, t1: the integration interval.
        ts: the times of the saved outputs, a PyTree like `SaveAt.subs` (for a plain
            `SaveAt(t0=, ts=, steps=, t1=)`, one array): per `SubSaveAt`,
            `[t0] + ts + steps + [t1]`, in time order (unfilled rows, e.g. unused
            step rows or beyond a failure, are `inf`). `None` without `subs`.
        ys: the saved values, a PyTree like `SaveAt.subs` of PyTrees like `fn`'s
            output (the state by default), each with a leading axis matching `ts`.
        interpolation: the `DenseInterpolation` with `SaveAt(dense=True)`, else `None`.
        stats: `num_steps`, `num_accepted_steps`, `num_rejected_steps`, `max_steps`,
            and `num_vf_evals` (vector-field evaluations of the forward solve).
        result: an integer `RESULTS` code; `0` (`RESULTS.successful`) on success.
        solver_state, controller_state: the final solver state (for Runge–Kutta
            methods, `f(t1, y1)`) and `ControllerState`, with
            `SaveAt(solver_state=True)` / `SaveAt(controller_state=True)`; else `None`.
        made_jump: with `SaveAt(made_jump=True)`, whether the last step ended at a
            jump of the vector field (`ClipStepSizeController(jump_ts=...)`): a bool
            array, or the Python `False` when the controller has no jump times.
        event_mask: which condition of `event=...` ended the solve (bools like `cond_fn`).
    """

    t0: jax.Array
    t1: jax.Array
    ts: PyTree | None
    ys: PyTree | None
    interpolation: DenseInterpolation | None
    stats: dict
    result: jax.Array
    solver_state: PyTree | None = None
    controller_state: PyTree | None = None
    made_jump: jax.Array | bool | None = None
    event_mask: PyTree | None = None

    def evaluate(self, t0, t1=None, left: bool = True) -> Y:
        """The dense solution at `t0` (scalar or 1-D array), or with `t1` the increment
        `y(t1) - y(t0)`. Needs `SaveAt(dense=True)`; see `DenseInterpolation.evaluate`.

        Raises:
            ValueError: without dense output.
        """
        if self.interpolation is None:
            raise _dense_needed("evaluate")
        return self.interpolation.evaluate(t0, t1, left)

    def derivative(self, t, left: bool = True) -> Y:
        """`dy/dt` of the dense solution at `t` (scalar or 1-D array). Needs
        `SaveAt(dense=True)`; see `DenseInterpolation.derivative`.

        Raises:
            ValueError: without dense output.
        """
        if self.interpolation is None:
            raise _dense_needed("derivative")
        return self.interpolation.derivative(t, left)


def build_solution(
    *,
    saveat: SaveAt,
    integrator: Integrator,
    problem: Problem,
    state0: State,
    out: LoopOutput,
    t0: jax.Array,
    t1: jax.Array,
    sign,
    y0: Y,
    dt0: jax.Array | None,
    fixed_times: bool,
    event=None,
) -> Solution:
    """The `Solution` of a solve from its loop's output `out`.

    Args:
        saveat: the `SaveAt` as the user passed it.
        integrator, problem, state0: what the loop ran (in internal time).
        out: the loop's `LoopOutput`.
        t0, t1: the interval as given (arrays of the time dtype).
        sign: +1 or -1 (or a traced value): internal time is `sign * t`.
        y0: the initial state; dt0: the first step in internal time, or `None`.
        fixed_times: `t0`, `t1` are not traced, so no time derivative is carried.
    """
    final = out.state
    reached = final.t >= problem.t1
    result = jnp.where(
        (final.result == RESULTS.successful) & ~reached, RESULTS.max_steps_reached, final.result
    ).astype(jnp.int32)
    ok = is_okay(result)
    end_at = event_end(problem, final, t1, sign)
    end = SolveEnd(problem, state0, final, ok, out.num_steps, t0, t1, sign, y0, end_at,
                   fixed_times, integrator.max_steps)  # fmt: skip
    subs, structure = sub_saves(saveat)
    saved = integrator.outputs(out.buffers)
    rows = [
        sub_rows(sub, layout, request, buffers, end)
        for sub, layout, request, buffers in zip(
            subs, integrator.saves, problem.saves, saved.subs, strict=True
        )
    ]
    dense = None
    if saved.dense is not None:
        reached = jnp.where(ok, jnp.inf, final.t)  # a failed solve's output ends here
        dense = DenseInterpolation(saved.dense, final.num_accepted, jnp.asarray(sign), y0,
                                   reached, start=t0)  # fmt: skip
    return Solution(
        t0=t0, t1=t1,
        ts=jax.tree.unflatten(structure, [ts for ts, _ in rows]),
        ys=jax.tree.unflatten(structure, [ys for _, ys in rows]),
        interpolation=dense, stats=_stats(integrator, problem, out, dt0), result=result,
        solver_state=final.solver_state if saveat.solver_state else None,
        controller_state=final.controller if saveat.controller_state else None,
        made_jump=_made_jump(problem, final) if saveat.made_jump else None,
        event_mask=event_mask(event, final),
    )  # fmt: skip


def _made_jump(problem: Problem, final: State):
    """Whether the last step ended at a jump (`False` if there are no jump times)."""
    return False if problem.controller.jump_times is None else final.made_jump


def _stats(integrator: Integrator, problem: Problem, out: LoopOutput, dt0) -> dict:
    """`Solution.stats`: the loop's step counts and the forward vector-field evaluations."""
    solver = integrator.solver
    evals = int(solver.carries_first_stage) + solver.evals_per_step * out.num_steps
    evals = evals + problem.controller.first_step_evaluations(dt0)
    return {
        "num_steps": out.num_steps,
        "num_accepted_steps": out.state.num_accepted,
        "num_rejected_steps": out.state.num_rejected,
        "num_vf_evals": evals,
        "max_steps": integrator.max_steps,
    }
