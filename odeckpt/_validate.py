"""Input checks with messages that say how to fix them.

Structural problems raise at trace time. Value problems raise at trace time too when
the value is known then (a `ValueError`), and otherwise at run time through
`eqx.error_if` (an `EquinoxRuntimeError`; `JaxRuntimeError` under plain `jax.jit`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._adjoints.checkpoint import AbstractAdjoint
from ._controllers.controllers import AbstractStepSizeController, ConstantStepSize, StepTo
from ._core.concrete import concrete
from ._saveat import SaveAt
from ._solvers.runge_kutta import AbstractSolver


def floating_state(y0):
    """`y0` with array leaves; every leaf floating and of one dtype."""
    leaves, treedef = jax.tree.flatten(y0)
    if not leaves:
        raise ValueError("`y0` is an empty PyTree; pass at least one floating array.")
    arrays = [jnp.asarray(x) for x in leaves]
    for path, x in zip(jax.tree_util.tree_flatten_with_path(y0)[0], arrays, strict=True):
        name = jax.tree_util.keystr(path[0]) or "y0"
        if jnp.issubdtype(x.dtype, jnp.complexfloating):
            raise TypeError(
                f"`y0` must hold real floating arrays; leaf {name} is complex ({x.dtype}). "
                "Solve for the real and imaginary parts as two leaves, `(y.real, y.imag)`, "
                "with the vector field written on them."
            )
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(
                f"`y0` must hold floating arrays; leaf {name} has dtype {x.dtype}. "
                "Convert it, e.g. `jnp.asarray(y0, dtype=float)`."
            )
    dtypes = sorted({str(x.dtype) for x in arrays})
    if len(dtypes) > 1:
        raise TypeError(
            f"`y0` mixes floating dtypes {dtypes}; use one dtype for every leaf "
            "(e.g. cast all to float64)."
        )
    return jax.tree.unflatten(treedef, arrays)


def check_times(t0, t1, dt0):
    """`t0`, `t1` and `dt0` must be real scalars."""
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


def check_inputs(solver, controller, adjoint, saveat, max_steps, dt0):
    _check_type(solver, AbstractSolver, "solver", "e.g. `odeckpt.Tsit5()`")
    _check_type(controller, AbstractStepSizeController, "stepsize_controller",
                "e.g. `odeckpt.PIDController(rtol=1e-6, atol=1e-8)`")  # fmt: skip
    _check_type(adjoint, AbstractAdjoint, "adjoint", "e.g. `odeckpt.CheckpointAdjoint()`")
    _check_type(saveat, SaveAt, "saveat", "e.g. `odeckpt.SaveAt(t1=True)`")
    if controller.adaptive and solver.error_order is None:
        raise ValueError(
            f"`{type(solver).__name__}` has no error estimate, so it cannot be used with "
            f"`{type(controller).__name__}`; use `ConstantStepSize()` or a solver with an "
            "embedded method such as `Tsit5()`."
        )
    if isinstance(controller, ConstantStepSize) and dt0 is None:
        raise ValueError(
            "`dt0=None` needs an adaptive controller: pass `dt0=...` with "
            "`ConstantStepSize()`, or use `PIDController(rtol, atol)`."
        )
    if isinstance(controller, StepTo) and dt0 is not None:
        raise ValueError("`StepTo(ts)` fixes the steps itself: pass `dt0=None`.")
    integer = isinstance(max_steps, int | np.integer) and not isinstance(max_steps, bool)
    if max_steps is not None and (not integer or max_steps < 1):
        raise ValueError(f"`max_steps` must be a positive integer or None; got {max_steps!r}.")
    if max_steps is None and (saveat.steps or saveat.dense):
        which = "steps" if saveat.steps else "dense"
        raise ValueError(
            f"`SaveAt({which}=True)` keeps one row per step, so it needs a bound: pass an "
            "integer `max_steps` (the buffers have that many rows)."
        )
    if hasattr(controller, "rtol"):
        for name in ("rtol", "atol"):
            value = concrete(jnp.asarray(getattr(controller, name)))
            if value is not None and not np.all(value > 0):
                raise ValueError(f"`PIDController({name}=...)` must be positive; got {value}.")


def _check_type(value, cls, name, example):
    if not isinstance(value, cls):
        raise TypeError(
            f"`diffeqsolve({name}=...)` expects an `{cls.__name__}` ({example}); "
            f"got {type(value).__name__}."
        )


def check_vector_field(term, t0, y0, args) -> None:
    """`f(t0, y0, args)` must return a PyTree like `y0`: same structure, shapes, dtypes."""
    out = eqx.filter_eval_shape(term.vf, t0, y0, args)
    y_struct, out_struct = jax.tree.structure(y0), jax.tree.structure(out)
    if out_struct != y_struct:
        raise ValueError(
            "The vector field must return a PyTree with the structure of `y`; "
            f"`f(t0, y0, args)` returned {out_struct} for `y0` with {y_struct}."
        )
    for (path, y), dy in zip(jax.tree_util.tree_flatten_with_path(y0)[0], jax.tree.leaves(out),
                             strict=True):  # fmt: skip
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


def check_values(y0, args, t0, t1, dt0, ts, controller, throw: bool):
    """`(y0, invalid)`: the value checks of every input.

    Each check runs now when its inputs are concrete (raising `ValueError`), else at run
    time. There, with `throw`, one `eqx.branched_error_if` threaded onto `y0` raises the
    message of the first failed check (and `invalid` is None); without, `invalid` is
    whether any check failed (None when nothing is checked at run time), for the solve
    to report as `RESULTS.invalid_input`."""
    pending = []
    for inputs, bad, message in _value_checks(y0, args, t0, t1, dt0, ts, controller):
        values = [concrete(x) for x in inputs]
        if all(v is not None for v in values):
            if bad(np, *values):
                raise ValueError(message)
        else:
            pending.append((bad(jnp, *[jnp.asarray(x) for x in inputs]), message))
    if not pending:
        return y0, None
    failed = jnp.stack([jnp.asarray(p) for p, _ in pending])
    if not throw:
        return y0, jnp.any(failed)
    messages = [m + " (checked at run time)" for _, m in pending]
    return eqx.branched_error_if(y0, jnp.any(failed), jnp.argmax(failed), messages), None


def _nonfinite(xp, x):
    return ~xp.all(xp.isfinite(x))


def _value_checks(y0, args, t0, t1, dt0, ts, controller):
    """`(inputs, bad(xp, *inputs), message)` for each value check."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(y0)[0]:
        name = jax.tree_util.keystr(path) or "y0"
        message = f"`y0` has NaN or inf values in leaf {name}; pass a finite `y0`."
        yield (leaf,), _nonfinite, message
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if isinstance(leaf, float) or eqx.is_inexact_array(leaf):
            name = jax.tree_util.keystr(path) or "args"
            message = f"`args` has NaN or inf values in leaf {name}; pass finite `args`."
            yield (leaf,), _nonfinite, message
    yield (t0,), _nonfinite, "`t0` must be finite."
    yield (t1,), _nonfinite, "`t1` must be finite."
    if dt0 is not None:
        message = "`dt0` must be finite and nonzero with the sign of `t1 - t0`."
        yield (t0, t1, dt0), _bad_dt0, message
    if ts is not None:
        yield (t0, t1, ts), _ts_outside, "`SaveAt(ts=...)` must lie within [t0, t1]."
        yield (t0, t1, ts), _ts_backwards, "`SaveAt(ts=...)` must run from t0 towards t1."
    if isinstance(controller, StepTo):
        steps = (t0, t1, controller.ts)
        yield steps, _step_to_ends, "`StepTo(ts=...)` must start at t0 and end at t1."
        yield steps, _step_to_backwards, "`StepTo(ts=...)` must be strictly monotone from t0 to t1."
    for name in ("rtol", "atol") if hasattr(controller, "rtol") else ():
        value = getattr(controller, name)
        yield (value,), _not_positive, f"`PIDController({name}=...)` must be positive."


def _bad_dt0(xp, t0, t1, dt0):
    wrong_sign = (t1 != t0) & (xp.sign(dt0) != xp.sign(t1 - t0))
    return (dt0 == 0) | wrong_sign | ~xp.isfinite(dt0)


def _step_to_ends(xp, t0, t1, ts):
    return (ts[0] != t0) | (ts[-1] != t1)


def _step_to_backwards(xp, t0, t1, ts):
    return xp.any(xp.where(t1 >= t0, 1, -1) * xp.diff(ts) <= 0)


def _ts_outside(xp, t0, t1, ts):
    return xp.any((ts < xp.minimum(t0, t1)) | (ts > xp.maximum(t0, t1)))


def _ts_backwards(xp, t0, t1, ts):
    return xp.any(xp.diff(ts) * xp.where(t1 >= t0, 1, -1) < 0)


def _not_positive(xp, x):
    return ~xp.all(x > 0)
