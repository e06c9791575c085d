"""The checks of input values (finite, ordered, in range): at trace time when the values
are known then, else at run time through `eqx.error_if`; see `docs/errors.md`."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from odeckpt._core import concrete

from .predicates import (
    _any,
    _backwards,
    _bad_dt0,
    _nonfinite,
    _not_forwards,
    _not_from_t0_to_t1,
    _not_positive,
    _outside,
    _uncovered,
)
from .structure import _check_step_times, _tolerances


def check_values(y0, args, t0, t1, dt0, ts, controller, throw: bool, *, event=False, spans=()):
    """`(y0, invalid)`: the value checks of every input.

    First the controller's own step times when concrete (with the values in the
    message). Then each check runs now when its inputs are concrete (raising
    `ValueError`), else at run time. There, with `throw`, one `eqx.branched_error_if`
    threaded onto `y0` raises the message of the first failed check (and `invalid` is
    None; for a `y0` without leaves, e.g. `None`, `invalid` is the flag the error is
    threaded onto, which the solve's result reads); without, `invalid` is whether any
    check failed (None when nothing is checked at run time), for the solve to report
    as `RESULTS.invalid_input`. `spans`: the `(t0, t1)` of each control path
    (`control_spans`), which must cover the solve's interval."""
    if controller.step_times is not None:
        _check_step_times(controller, t0, t1)
    pending = []
    for check in _value_checks(y0, args, t0, t1, dt0, ts, controller, event, spans):
        values = [concrete(x) for x in check.inputs]
        if all(v is not None for v in values):
            if check.bad(np, *values):
                raise ValueError(check.message)
        else:
            failed = check.bad(jnp, *[jnp.asarray(x) for x in check.inputs])
            pending.append((failed, check.message))
    if not pending:
        return y0, None
    failed = jnp.stack([jnp.asarray(p) for p, _ in pending])
    if not throw:
        return y0, jnp.any(failed)
    messages = [m + " (checked at run time)" for _, m in pending]
    if not jax.tree.leaves(y0):  # no state to thread onto: the flag carries the error
        flag = jnp.any(failed)
        return y0, eqx.branched_error_if(flag, flag, jnp.argmax(failed), messages)
    return eqx.branched_error_if(y0, jnp.any(failed), jnp.argmax(failed), messages), None


def check_spans_now(spans, t0, t1) -> None:
    """The check that each control path covers `[t0, t1]` (`control_spans`), where the
    values are concrete: an eager call's, whose compiled program would check the
    path's ends at run time only."""
    _raise_if_concretely_bad(_span_checks(t0, t1, spans))


def check_state_values(y0, args) -> None:
    """The checks of `y0` and `args` whose values are concrete (an eager call's),
    raising `ValueError` as `check_values` would: an eager call passes these arrays to
    its compiled program, where they are checked at run time only."""
    leaves = jax.tree.leaves((y0, args))
    if all(isinstance(x, jax.core.Tracer) or _finite(x) for x in leaves):
        return
    _raise_if_concretely_bad(_state_checks(y0, args))


def _raise_if_concretely_bad(checks) -> None:
    """`ValueError` with the message of the first check whose inputs are all concrete
    and fail it; checks with traced inputs are left to the compiled program."""
    for check in checks:
        values = [concrete(x) for x in check.inputs]
        if all(v is not None for v in values) and check.bad(np, *values):
            raise ValueError(check.message)


def _finite(x) -> bool:
    """Whether a concrete leaf holds no NaN or inf (non-numeric leaves count as finite)."""
    try:
        return bool(np.isfinite(x).all())
    except TypeError:
        return True


def _state_checks(y0, args):
    """The value checks of `y0` and `args`, in the order their failures are reported."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(y0)[0]:
        name = jax.tree_util.keystr(path) or "y0"
        message = f"`y0` has NaN or inf values in leaf {name}; pass a finite `y0`."
        yield _ValueCheck((leaf,), _nonfinite, message)
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if isinstance(leaf, float) or eqx.is_inexact_array(leaf):
            name = jax.tree_util.keystr(path) or "args"
            message = f"`args` has NaN or inf values in leaf {name}; pass finite `args`."
            yield _ValueCheck((leaf,), _nonfinite, message)


class _ValueCheck(eqx.Module):
    """One value check: `bad(xp, *inputs)` says whether the inputs fail it."""

    inputs: tuple
    bad: Callable
    message: str


def _value_checks(y0, args, t0, t1, dt0, ts, controller, event, spans):
    """Each value check, in the order their failures are reported."""
    yield from _state_checks(y0, args)
    yield _ValueCheck((t0,), _nonfinite, "`t0` must be finite.")
    nan = lambda xp, x: xp.isnan(x)  # (an event may end the solve: t1 may be inf)
    end = (nan, "`t1` must not be NaN.") if event else (_nonfinite, "`t1` must be finite.")
    yield _ValueCheck((t1,), *end)
    if dt0 is not None:
        message = "`dt0` must be finite and nonzero with the sign of `t1 - t0`."
        yield _ValueCheck((t0, t1, dt0), _bad_dt0, message)
    for times in ts:
        message = "`SaveAt(ts=...)` must lie within [t0, t1]."
        yield _ValueCheck((t0, t1, times), _any(_outside), message)
        message = "`SaveAt(ts=...)` must run from t0 towards t1."
        yield _ValueCheck((t0, t1, times), _any(_backwards), message)
    name = type(controller).__name__
    if controller.step_times is not None:
        steps = (t0, t1, controller.step_times)
        message = f"`{name}(ts=...)` must start at t0 and end at t1."
        yield _ValueCheck(steps, _not_from_t0_to_t1, message)
        message = f"`{name}(ts=...)` must be strictly monotone from t0 to t1."
        yield _ValueCheck(steps, _any(_not_forwards), message)
    for times, field in ((controller.landing_times, "step_ts"), (controller.jump_times, "jump_ts")):
        if times is not None:  # checked with the values when `ClipStepSizeController` is built
            yield _ValueCheck((times,), _nonfinite, f"`{name}({field}=...)` must be finite.")
    for tolerance, value in _tolerances(controller):
        message = f"`{name}({tolerance}=...)` must be positive."
        yield _ValueCheck((value,), _not_positive, message)
    yield from _span_checks(t0, t1, spans)


def _span_checks(t0, t1, spans):
    """That each control path's `(p0, p1)` in `spans` covers `[t0, t1]`."""
    for p0, p1 in spans:
        yield _ValueCheck((t0, t1, p0, p1), _uncovered, _SPAN_MESSAGE)


_SPAN_MESSAGE = (
    "The control of a `ControlTerm` must be defined over the solve's whole interval "
    "[t0, t1]: its path's `t0` and `t1` (for an interpolation, its first and last knot) "
    "must enclose it. Interpolate data whose times include t0 and t1, or solve over "
    "the path's interval."
)


# The predicates, for NumPy (concrete values) and jax.numpy (traced ones) alike. The
# direction is `t1 >= t0` and the interval `[min(t0, t1), max(t0, t1)]` as Python's
# `min`/`max` read them, also where t0 or t1 is NaN (at run time `t0`/`t1` must be
# finite is then reported first).
