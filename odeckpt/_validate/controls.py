"""The checks of a `ControlTerm` in `diffeqsolve`'s terms: the solver can step it, its
path covers the solve's interval, and its vector field's shapes fit the control's
(`docs/errors.md`, "Controlled terms")."""

import os
import sys
import warnings

import equinox as eqx
import jax
import lineax as lx
import numpy as np

from odeckpt._adjoints import AbstractContinuousAdjoint
from odeckpt._control import ControlTerm
from odeckpt._terms import AbstractTerm, as_term


def check_controls(term: AbstractTerm, solver, controller, adjoint, t0, y0, args) -> None:
    """Each `ControlTerm` among `term`'s parts: stepped by a solver that can, with a
    field whose shapes fit its control's; and a warning where adaptive steps cannot see
    their error (`_warn_if_blind`). (That its path covers `[t0, t1]` is a value check,
    `control_spans`.)"""
    found = term.controlled(y0)
    if not found:
        return
    if not solver.state_rebuildable or solver.reversible:
        name = type(solver).__name__
        raise ValueError(
            f"`{name}` carries state from one step to the next, which the steps of a "
            "`ControlTerm` cannot share (each reads its own increment of the control). "
            "Pass `ControlTerm(f, control).to_ode()`, the ODE dy/dt = f(t, y, args) "
            "dX/dt, or a one-step solver such as `Tsit5()`."
        )
    for control_term, y in found:
        control = eqx.filter_eval_shape(control_term.contr, t0, t0)  # the increment's shape
        _check_shapes(control_term, control, t0, y, args)
        _check_continuous_adjoint(control_term, controller, adjoint)
        _warn_if_blind(control_term, control, controller)


def _check_continuous_adjoint(term: ControlTerm, controller, adjoint) -> None:
    """A continuous adjoint reads the forward solution between steps from its dense
    output, which a step by increments gives right only where the step sees a linear
    path: a piecewise-linear one whose knots the steps stop at."""
    if not isinstance(adjoint, AbstractContinuousAdjoint):
        return
    if term.control.piecewise_linear and controller.jump_times is not None:
        return
    name = type(adjoint).__name__
    raise ValueError(
        f"`{name}` solves the backward ODE of `ControlTerm(f, control).to_ode()` along "
        "the forward solution between steps, which a `ControlTerm` stepped by its "
        "increments gives only where each step sees a linear path (a "
        "`LinearInterpolation` with its knots as `jump_ts=ts`). Pass "
        "`ControlTerm(f, control).to_ode()`, or use `CheckpointAdjoint()`, which "
        "differentiates the steps taken."
    )


def _warn_if_blind(term: ControlTerm, control, controller) -> None:
    """A step by increments treats the control as linear between the step's ends. For a
    control of one channel that costs nothing (the solve is the ODE in `X`), nor for a
    piecewise-linear path whose knots the steps stop at; otherwise the error it makes
    is of second order in the step (the path's Levy area) and an embedded error
    estimate does not see it, so adaptive steps do not meet their tolerance."""
    if not controller.adaptive:
        return
    channels = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(control))
    linear = term.control.piecewise_linear
    stops = controller.jump_times is not None
    if channels <= 1 or (linear and stops):
        return
    warnings.warn(
        f"A `ControlTerm` with a control of {channels} channels is stepped by its "
        "increments: each step treats the path as linear between its ends, an error "
        "of second order in the step that the solver's error estimate cannot see, so "
        "adaptive steps will not meet rtol/atol. For a smooth path (a cubic or Hermite "
        "interpolation) solve `ControlTerm(f, control).to_ode()`; for a "
        "`LinearInterpolation`, pass its knots as `jump_ts=ts` to the controller.",
        stacklevel=_callers_level(),
    )


_LIBRARIES = tuple(
    os.path.dirname(module.__file__ or "") + os.sep for module in (eqx, jax, sys.modules["odeckpt"])
)


def _callers_level() -> int:
    """The `stacklevel` of the first frame outside odeckpt, JAX and equinox: the
    user's call, however deep the trace it happens in."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        level, frame = level + 1, frame.f_back
    return level


def control_spans(terms, y0) -> tuple:
    """`(path.t0, path.t1)` of each `ControlTerm`'s control in `terms` (as `diffeqsolve`
    takes them), for the value check that they cover the solve's interval
    (`check_values`, `check_spans_now`); `()` for terms the structural checks will
    refuse."""
    try:
        found = as_term(terms).controlled(y0)
    except (TypeError, ValueError):
        return ()
    return tuple((term.control.t0, term.control.t1) for term, _ in found)


def _check_shapes(term: ControlTerm, control, t0, y, args) -> None:
    """`vf(t0, y, args)` applied to the increment `control` (its shape) must give a
    PyTree like `y`: leaf by leaf `y.shape + x.shape` for arrays, or an operator taking
    `x`."""
    vf = eqx.filter_eval_shape(term.vf, t0, y, args)
    if isinstance(vf, lx.AbstractLinearOperator):
        _check_operator(term, t0, y, args, control)
        return
    shapes = lambda tree: jax.tree.map(lambda s: getattr(s, "shape", None), tree)
    y_tree, vf_tree, x_tree = (jax.tree.structure(x) for x in (y, vf, control))
    if not (vf_tree == y_tree == x_tree):
        raise ValueError(
            "A `ControlTerm`'s vector field must return a PyTree with the structure of "
            "`y`, one array per leaf, and its control's increment must have that "
            f"structure too; got the field {vf_tree}, the control {x_tree} and `y` "
            f"{y_tree}. (Or return a lineax operator whose `mv` takes the control.)"
        )
    leaves = (jax.tree.leaves(vf), jax.tree.leaves(control), jax.tree.leaves(y))
    for v, x, yl in zip(*leaves, strict=True):
        want = tuple(np.shape(yl)) + tuple(x.shape)
        if tuple(v.shape) != want:
            raise ValueError(
                "A `ControlTerm`'s vector field must return, for each leaf of `y`, an "
                "array shaped `y.shape + control.shape`; got shape "
                f"{tuple(v.shape)} for `y` shaped {tuple(np.shape(yl))} and a control "
                f"increment shaped {tuple(x.shape)} (expected {want}). "
                f"Full shapes: field {shapes(vf)}, control {shapes(control)}."
            )


def _check_operator(term: ControlTerm, t0, y, args, control) -> None:
    """A field returning a lineax operator must map the control to a PyTree like `y`."""
    try:
        out = eqx.filter_eval_shape(lambda: term.vf_prod(t0, y, args, term.contr(t0, t0)))
    except (TypeError, ValueError) as error:
        raise ValueError(
            "A `ControlTerm`'s vector field returned a lineax operator whose `mv` cannot "
            f"take the control's increment (a {jax.tree.structure(control)}): {error}"
        ) from error
    got = jax.tree.map(lambda s: s.shape, out)
    want = jax.tree.map(lambda s: np.shape(s), y)
    if jax.tree.structure(got) != jax.tree.structure(want) or got != want:
        raise ValueError(
            "A `ControlTerm`'s vector field returned a lineax operator whose `mv` of the "
            f"control gives {got}, not a PyTree shaped like `y`, {want}."
        )
