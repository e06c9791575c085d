"""The structural checks of `diffeqsolve`'s inputs (types, shapes, dtypes, which
options go together), raised at trace time; see `docs/errors.md`."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from odeckpt._adjoints import AbstractAdjoint
from odeckpt._controllers import AbstractStepSizeController
from odeckpt._core import concrete, real_dtype
from odeckpt._event import AbstractDiscreteTerminatingEvent, Event
from odeckpt._saveat import SaveAt, SubSaveAt, sub_saves
from odeckpt._solvers import AbstractSolver

from .predicates import (
    _backwards,
    _dt0_against_direction,
    _not_forwards,
    _not_from_t0_to_t1,
    _not_positive,
    _outside,
)


def floating_state(y0, time_dtype):
    """`y0` with array leaves, every leaf floating (real or complex) of one precision.

    Integer leaves are cast to the real dtype of the floating leaves, or to `time_dtype`
    when there is none (`y0=1` solves in the time dtype, as in diffrax). Real and
    complex leaves may be mixed when they share a precision (float32 with complex64,
    float64 with complex128). `y0` may have no leaves (`None`, `{}`, `()`) and leaves
    may have no elements: such a solve steps through time with nothing to integrate."""
    leaves, treedef = jax.tree.flatten(y0)
    arrays = [jnp.asarray(x) for x in leaves]
    for path, x in zip(jax.tree_util.tree_flatten_with_path(y0)[0], arrays, strict=True):
        name = jax.tree_util.keystr(path[0]) or "y0"
        if not (jnp.issubdtype(x.dtype, jnp.inexact) or _is_integer(x)):
            raise TypeError(
                f"`y0` must hold floating (or integer) arrays; leaf {name} has dtype "
                f"{x.dtype}. Convert it, e.g. `jnp.asarray(y0, dtype=float)`."
            )
    reals = sorted({str(real_dtype(x.dtype)) for x in arrays if not _is_integer(x)})
    if len(reals) > 1:
        dtypes = sorted({str(x.dtype) for x in arrays if not _is_integer(x)})
        raise TypeError(
            f"`y0` mixes floating precisions {dtypes}; use one precision for every leaf "
            "(e.g. cast all to float64, or complex leaves to complex128)."
        )
    dtype = reals[0] if reals else time_dtype
    arrays = [x.astype(dtype) if _is_integer(x) else x for x in arrays]
    return jax.tree.unflatten(treedef, arrays)


def _is_integer(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.integer)


def check_inputs(solver, controller, adjoint, saveat, max_steps, dt0):
    """The types of the solve's parts, and the options that must fit together."""
    _check_type(solver, AbstractSolver, "solver", "e.g. `odeckpt.Tsit5()`")
    _check_type(
        controller,
        AbstractStepSizeController,
        "stepsize_controller",
        "e.g. `odeckpt.PIDController(rtol=1e-6, atol=1e-8)`",
    )
    _check_type(adjoint, AbstractAdjoint, "adjoint", "e.g. `odeckpt.CheckpointAdjoint()`")
    _check_type(saveat, SaveAt, "saveat", "e.g. `odeckpt.SaveAt(t1=True)`")
    name = type(controller).__name__
    if controller.adaptive and not solver.estimates_error:
        raise ValueError(
            f"`{type(solver).__name__}` has no error estimate, so it cannot be used with "
            f"`{name}`; use `ConstantStepSize()` or a solver with an embedded method such "
            "as `Tsit5()`."
        )
    if controller.needs_dt0 and dt0 is None:
        raise ValueError(
            "`dt0=None` needs an adaptive controller: pass `dt0=...` with "
            f"`{name}()`, or use `PIDController(rtol, atol)`."
        )
    if controller.step_times is not None and dt0 is not None:
        raise ValueError(f"`{name}(ts)` fixes the steps itself: pass `dt0=None`.")
    integer = isinstance(max_steps, int | np.integer) and not isinstance(max_steps, bool)
    if max_steps is not None and (not integer or max_steps < 1):
        raise ValueError(f"`max_steps` must be a positive integer or None; got {max_steps!r}.")
    steps = any(sub.steps for sub in sub_saves(saveat)[0])
    if max_steps is None and (steps or saveat.dense):
        which = "steps" if steps else "dense"
        raise ValueError(
            f"`SaveAt({which}=True)` keeps one row per step, so it needs a bound: pass an "
            "integer `max_steps` (the buffers have that many rows)."
        )
    for tolerance, value in _tolerances(controller):
        value = concrete(value)
        if value is not None and _not_positive(np, value):
            raise ValueError(f"`{name}({tolerance}=...)` must be positive; got {value}.")


def check_terms(terms, solver, y0) -> None:
    """`terms` as `solver.term_structure` says: one term, or a tuple of terms (and a
    tuple `y0`, one part per term) for a partitioned solver (`SemiImplicitEuler`)."""
    wanted, name = solver.term_structure, type(solver).__name__
    if not isinstance(wanted, tuple) and isinstance(terms, tuple | list):
        raise ValueError(
            f"`{name}` takes one term, not {_described(terms)} terms: pass one `ODETerm(f)` "
            "returning the whole derivative, or `MultiTerm(*terms)` to add the terms' fields "
            "(a tuple of terms is for partitioned solvers such as `SemiImplicitEuler()`)."
        )
    if isinstance(wanted, tuple) and not (isinstance(terms, tuple) and len(terms) == len(wanted)):
        raise ValueError(
            f"`{name}` takes a tuple of {len(wanted)} terms, `(ODETerm(f), ODETerm(g))` for "
            "`y = (q, p)` with dq/dt = f(t, p, args), dp/dt = g(t, q, args); got "
            f"{_described(terms)}."
        )
    if isinstance(wanted, tuple) and not (isinstance(y0, tuple) and len(y0) == len(wanted)):
        raise ValueError(
            f"`{name}` needs `y0 = (q0, p0)`, a tuple of {len(wanted)} PyTrees; got "
            f"{_described(y0)}."
        )


def _described(x) -> str:  # "a tuple of 3" for a sequence, else the type's name
    return f"a {type(x).__name__} of {len(x)}" if isinstance(x, tuple | list) else type(x).__name__


def check_term_parts(solver, term) -> None:
    """A solver that treats a term's parts apart (the IMEX methods) gets that many."""
    want, got = solver.term_parts, len(term.parts())
    if want is not None and got != want:
        name = type(solver).__name__
        raise ValueError(
            f"`{name}` is an IMEX method: it takes `MultiTerm(explicit_term, "
            f"implicit_term)` and treats the first term explicitly, the second implicitly; "
            f"got {type(term).__name__} with {got} term(s). Pass e.g. "
            "`MultiTerm(ODETerm(f_explicit), ODETerm(f_implicit))` (`ODETerm(lambda t, y, "
            "args: jnp.zeros_like(y))` for a missing part)."
        )


def _check_type(value, cls, name, example):
    if not isinstance(value, cls):
        raise TypeError(
            f"`diffeqsolve({name}=...)` expects an `{cls.__name__}` ({example}); "
            f"got {type(value).__name__}."
        )


def _tolerances(controller) -> tuple:
    """`(("rtol", rtol), ("atol", atol))` for a controller with tolerances, else `()`."""
    tolerances = controller.tolerances
    return () if tolerances is None else tuple(zip(("rtol", "atol"), tolerances, strict=True))


def check_times(t0, t1, dt0, ts: tuple):
    """`t0`, `t1` and `dt0` must be real scalars. When `t0` and `t1` are concrete (and
    so the direction), a concrete `dt0` must point that way, and each array of save
    times in `ts` must lie in `[t0, t1]` and run that way; these messages quote the
    values (`check_values` repeats the checks with short messages for traced values)."""
    for name, value in (("t0", t0), ("t1", t1), ("dt0", dt0)):
        if value is None:  # only dt0 may be None (checked by `check_inputs`)
            continue
        shape = jnp.shape(value)
        if shape != ():
            raise ValueError(
                f"`{name}` must be a scalar; got shape {shape}. (For several intervals, "
                "`jax.vmap` the solve over them.)"
            )
        dtype = jnp.result_type(value)
        if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
            raise TypeError(f"`{name}` must be a real number; got dtype {dtype}.")
    c0, c1 = concrete(t0), concrete(t1)
    if c0 is None or c1 is None:
        return
    d = None if dt0 is None else concrete(dt0)
    if d is not None and _dt0_against_direction(np, c0, c1, d):
        raise ValueError(
            f"`dt0` must be nonzero with the sign of `t1 - t0`; got dt0={d} for t0={c0}, t1={c1}."
        )
    for times in ts:
        _check_save_times(c0, c1, concrete(times))


def _check_save_times(c0, c1, values) -> None:
    if values is None:
        return
    if (i := _first(_outside(np, c0, c1, values))) is not None:
        raise ValueError(
            f"`SaveAt(ts=...)` must lie within [t0, t1] = [{c0}, {c1}]; got ts[{i}]={values[i]}."
        )
    if (i := _first(_backwards(np, c0, c1, values))) is not None:
        raise ValueError(
            "`SaveAt(ts=...)` must run from t0 towards t1; got "
            f"ts[{i + 1}]={values[i + 1]} after ts[{i}]={values[i]}."
        )


def _check_step_times(controller, t0, t1) -> None:
    """A controller's own step times (`StepTo(ts)`), when they and t0, t1 are concrete:
    from t0 to t1, strictly monotone."""
    name = type(controller).__name__
    values, c0, c1 = concrete(controller.step_times), concrete(t0), concrete(t1)
    if values is None or c0 is None or c1 is None:
        return
    if _not_from_t0_to_t1(np, c0, c1, values):
        raise ValueError(
            f"`{name}(ts=...)` must start at t0 and end at t1; got "
            f"ts[0]={values[0]}, ts[-1]={values[-1]} for t0={c0}, t1={c1}."
        )
    if (i := _first(_not_forwards(np, c0, c1, values))) is not None:
        raise ValueError(
            f"`{name}(ts=...)` must be strictly monotone from t0 to t1; got "
            f"ts[{i + 1}]={values[i + 1]} after ts[{i}]={values[i]}."
        )


def _first(mask) -> int | None:
    """The index of the first true element of `mask`, or None."""
    where = np.nonzero(mask)[0]
    return int(where[0]) if where.size else None


def check_vector_field(term, t0, y0, args) -> None:
    """`f(t0, y0, args)` must return a PyTree like `y0`: same structure, shapes, dtypes."""
    out = eqx.filter_eval_shape(term.as_ode().vf, t0, y0, args)
    y_struct, out_struct = jax.tree.structure(y0), jax.tree.structure(out)
    if out_struct != y_struct:
        raise ValueError(
            "The vector field must return a PyTree with the structure of `y`; "
            f"`f(t0, y0, args)` returned {out_struct} for `y0` with {y_struct}."
        )
    for (path, y), dy in zip(
        jax.tree_util.tree_flatten_with_path(y0)[0], jax.tree.leaves(out), strict=True
    ):
        name = jax.tree_util.keystr(path) or "y0"
        if not isinstance(dy, jax.ShapeDtypeStruct):
            raise TypeError(
                f"The vector field must return arrays; for leaf {name} `f(t0, y0, args)` "
                f"returned a {type(dy).__name__}. Return e.g. `jnp.full_like(y, value)`."
            )
        shape, dtype = dy.shape, dy.dtype
        if shape != y.shape:
            raise ValueError(
                f"The vector field must return arrays shaped like `y`; for leaf {name} "
                f"`f(t0, y0, args)` returned shape {shape}, but `y0` has shape {y.shape}."
            )
        if dtype != y.dtype:
            raise TypeError(
                f"The vector field must return `y`'s dtype; for leaf {name} "
                f"`f(t0, y0, args)` returned {dtype}, but `y0` is {y.dtype}. "
                "Cast the result, e.g. `dy.astype(y.dtype)`."
            )


def event_from_discrete(discrete, event):
    """diffrax's deprecated `discrete_terminating_event=`: warns, and returns the `Event`
    it becomes (`event` itself when it is `None`)."""
    if discrete is None:
        return event
    example = "e.g. `odeckpt.DiscreteTerminatingEvent(cond_fn)`"
    _check_type(discrete, AbstractDiscreteTerminatingEvent, "discrete_terminating_event", example)
    if event is not None:
        raise ValueError(
            "`diffeqsolve` takes one of `event=...` and `discrete_terminating_event=...`, "
            "not both: pass the conditions together, `Event(cond_fn=(cond1, cond2))`."
        )
    warnings.warn(
        "`diffeqsolve(..., discrete_terminating_event=...)` is deprecated, as in diffrax: "
        "pass `event=Event(cond_fn)` with a boolean `cond_fn(t, y, args, **kwargs)`.",
        DeprecationWarning,
        stacklevel=3,
    )
    return discrete.as_event()


def check_event(event, adjoint, t0, y0, args, kwargs: dict) -> tuple[bool, ...]:
    """Per condition of `event`, whether it is real-valued (else boolean)."""
    if event is None:
        return ()
    _check_type(event, Event, "event", "e.g. `odeckpt.Event(cond_fn)`")
    if not adjoint.supports_events:
        raise ValueError(
            f"`{type(adjoint).__name__}` does not differentiate event times: use "
            "`CheckpointAdjoint()`, `InterpolatingAdjoint(solver=Tsit5())` or "
            "`BacksolveAdjoint(solver=Tsit5())` (reverse mode), or `ForwardMode()`, with "
            "`event=...`."
        )
    call = lambda c: lambda t, y, a: jnp.asarray(c(t, y, a, **kwargs))
    outs = [eqx.filter_eval_shape(call(c), t0, y0, args) for c in event.conditions]
    for i, out in enumerate(outs):
        if out.shape != () or not (jnp.issubdtype(out.dtype, jnp.floating) or out.dtype == bool):
            raise ValueError(
                "`Event(cond_fn=...)` conditions must return a real floating or boolean scalar; "
                f"condition {i} returned {out.dtype}{list(out.shape)}. Reduce or cast it."
            )
    return tuple(bool(jnp.issubdtype(out.dtype, jnp.floating)) for out in outs)


def check_save_fns(subs: list[SubSaveAt], t0, y0, args) -> None:
    """Each `SubSaveAt`'s `fn(t0, y0, args)` must return a PyTree of floating (or
    complex) arrays: its rows are filled with inf until written."""
    for sub in subs:
        out = eqx.filter_eval_shape(sub.fn, t0, y0, args)
        for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
            name = jax.tree_util.keystr(path) or "output"
            if not isinstance(leaf, jax.ShapeDtypeStruct):
                raise TypeError(
                    f"`SaveAt(fn=...)` must return a PyTree of arrays; for leaf {name} "
                    f"`fn(t0, y0, args)` returned a {type(leaf).__name__}. Return e.g. "
                    "`jnp.asarray(value)`."
                )
            if not jnp.issubdtype(leaf.dtype, jnp.inexact):
                raise TypeError(
                    f"`SaveAt(fn=...)` must return floating arrays (unfilled rows are "
                    f"inf); for leaf {name} `fn(t0, y0, args)` returned {leaf.dtype}. "
                    "Cast it, e.g. `x.astype(float)`."
                )
