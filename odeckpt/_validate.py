"""Input checks made once, at trace time, with messages that say how to fix them."""

import jax
import jax.numpy as jnp
import numpy as np

from ._adjoints import AbstractAdjoint
from ._concrete import concrete
from ._controllers import AbstractStepSizeController, ConstantStepSize, StepTo
from ._saveat import SaveAt
from ._solvers import AbstractSolver


def floating_state(y0):
    """`y0` with array leaves; every leaf floating and of one dtype."""
    leaves, treedef = jax.tree.flatten(y0)
    if not leaves:
        raise ValueError("`y0` is an empty PyTree; pass at least one floating array.")
    arrays = [jnp.asarray(x) for x in leaves]
    for path, x in zip(jax.tree_util.tree_flatten_with_path(y0)[0], arrays, strict=True):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            name = jax.tree_util.keystr(path[0]) or "y0"
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
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"`max_steps` must be a positive integer or None; got {max_steps!r}.")
    if hasattr(controller, "rtol"):
        for name in ("rtol", "atol"):
            value = concrete(jnp.asarray(getattr(controller, name)))
            if value is not None and np.any(value <= 0):
                raise ValueError(f"`PIDController({name}=...)` must be positive; got {value}.")


def _check_type(value, cls, name, example):
    if not isinstance(value, cls):
        raise TypeError(
            f"`diffeqsolve({name}=...)` expects an `{cls.__name__}` ({example}); "
            f"got {type(value).__name__}."
        )
