"""Runtime checks' failures (`eqx.error_if` in a compiled program) raised as
`EquinoxRuntimeError` with their message, as `eqx.filter_jit` raises them."""

import equinox as eqx
import jax

try:  # where a failed runtime check (`eqx.error_if`) leaves its message
    from equinox import _jit as _eqx_jit
except ImportError:  # pragma: no cover - another equinox: JAX's error unchanged
    _eqx_jit = None


def translating(fn, *args):
    """`fn(*args)`, a compiled program's call, raising a failed runtime check as
    `EquinoxRuntimeError` (JAX would raise its `JaxRuntimeError`, the message buried
    in the callback's traceback)."""
    try:
        return fn(*args)
    except jax.errors.JaxRuntimeError as error:
        raise translated(error) from None


def translated(error: Exception) -> Exception:
    """The `EquinoxRuntimeError` a failed runtime check raised `error` for (with its
    message); any other error unchanged."""
    try:
        info = _eqx_jit.last_error_info  # pyright: ignore[reportOptionalMemberAccess]
    except AttributeError:  # no check has failed, or another equinox
        return error
    if info is None or "_EquinoxRuntimeError" not in str(error):
        return error
    _eqx_jit.last_error_info = None  # pyright: ignore[reportOptionalMemberAccess]
    return eqx.EquinoxRuntimeError(info[0])
