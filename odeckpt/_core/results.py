"""Result codes of a solve: the reason a solve stopped, and the message raised for it."""

import enum
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Int


class _Lookup(enum.EnumMeta):
    """`RESULTS[name]` is the member, as for every enum; `RESULTS[code]`, for a code
    or an array of codes (e.g. `Solution.result`), is its message, as in diffrax."""

    def __getitem__(cls, key):
        if isinstance(key, str):
            return super().__getitem__(key)
        if isinstance(key, jax.core.Tracer):
            return "traced"
        codes = np.asarray(key)
        if codes.ndim == 0:
            return _MESSAGES[RESULTS(int(codes))]
        return str(np.vectorize(lambda code: _MESSAGES[RESULTS(int(code))])(codes))


class RESULTS(enum.IntEnum, metaclass=_Lookup):
    """Why a solve stopped. `Solution.result` holds one of these as an integer array.

    With `diffeqsolve(..., throw=True)` a failed solve raises its code's cause, the time
    the solve reached, and the code's `message` (what to do about it).

    The members are diffrax's (with optimistix's, which diffrax's `RESULTS` inherits),
    plus odeckpt's own; where two names mean the same failure they are one code
    (`nonlinear_divergence` and `nonlinear_max_steps_reached` are
    `implicit_solve_failed`, `nonfinite` is `nonfinite_state`, `nonfinite_input` is
    `invalid_input`). `event_occurred` counts as a success (`is_okay`). As in diffrax,
    `sol.result == RESULTS.successful` compares, and `RESULTS[sol.result]` is the
    message.
    """

    successful = 0
    max_steps_reached = 1
    dt_min_reached = 2
    nonfinite_state = 3
    backsolve_diverged = 4
    implicit_solve_failed = 5
    invalid_input = 6
    event_occurred = 7
    max_steps_rejected = 8
    internal_error = 9
    singular = 10
    breakdown = 11
    stagnation = 12
    conlim = 13
    reversible_drifted = 14
    reversible_unstable = 15
    nonlinear_divergence = 5
    nonlinear_max_steps_reached = 5
    nonfinite = 3
    nonfinite_input = 6

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    def __jax_array__(self) -> jax.Array:
        """The code as a weakly typed integer array, as a Python int converts (JAX sees
        an `IntEnum` as a strong int64 outside `jit`, which strict promotion refuses to
        compare with an int32 `Solution.result`)."""
        return jnp.asarray(int(self))

    @property
    def _value(self) -> int:
        """The code as a Python int, as diffrax's `RESULTS.successful._value`."""
        return int(self)

    @classmethod
    def where(cls, pred, a, b) -> Array:
        """`a` where `pred` holds, else `b` (codes, as `jnp.where`), as diffrax's."""
        return jnp.where(pred, a, b).astype(jnp.int32)


_UNUSED = " (odeckpt never reports this code; it is diffrax's.)"

_MESSAGES = {
    RESULTS.successful: "",
    RESULTS.max_steps_reached: (
        "The maximum number of solver steps was reached before the end of the "
        "integration interval. Try increasing `max_steps`, loosening the tolerances, "
        "or using a stiff-aware problem formulation."
    ),
    RESULTS.dt_min_reached: (
        "The step size fell below `PIDController(dtmin=...)`. The problem may be stiff "
        "or singular here; lower `dtmin`, pass `force_dtmin=True`, or loosen tolerances."
    ),
    RESULTS.nonfinite_state: (
        "The solution became non-finite (NaN or inf). Check the vector field and the "
        "initial condition, or use an adaptive step size controller."
    ),
    RESULTS.backsolve_diverged: (
        "BacksolveAdjoint: the state reconstructed by integrating backwards in time "
        "left the forward solution (the system is too strongly damped to be integrated "
        "backwards). Use `InterpolatingAdjoint()` or `CheckpointAdjoint()` instead."
    ),
    RESULTS.implicit_solve_failed: (
        "An implicit stage's Newton iteration did not converge, even after refreshing "
        "the Jacobian. Use an adaptive step size controller (a failed step is then "
        "rejected and retried smaller), a smaller `dt0`, or a larger `max_iters`."
    ),
    RESULTS.invalid_input: (
        "An input value checked at run time was invalid (NaN or inf in `y0`, `args`, `t0` "
        "or `t1`; `dt0` of the wrong sign; `SaveAt(ts)` outside `[t0, t1]`; a tolerance "
        "<= 0), so nothing was solved. Run with `throw=True` to raise which one."
    ),
    RESULTS.event_occurred: "The solve ended because an event occurred.",
    RESULTS.max_steps_rejected: ("The maximum number of rejected steps was reached." + _UNUSED),
    RESULTS.internal_error: (
        "An internal error occurred in odeckpt. This is a bug: please report it with a "
        "minimal example."
    ),
    RESULTS.singular: "A linear solve met a singular operator." + _UNUSED,
    RESULTS.breakdown: (
        "An implicit stage's iterative linear solve (the solver's `linear_solver`, e.g. "
        "`lineax.GMRES`) did not reach its tolerance: it ran out of `max_steps`, "
        "stagnated or broke down. Use an adaptive step size controller (a failed step "
        "is then rejected and retried smaller), raise the linear solver's `max_steps`, "
        "pass a `preconditioner`, or use `linear_solver=lineax.LU()` where the dense "
        "Jacobian fits in memory."
    ),
    RESULTS.stagnation: "An iterative linear solve stagnated." + _UNUSED,
    RESULTS.conlim: "An iterative linear solve reached its condition limit." + _UNUSED,
    RESULTS.reversible_drifted: (
        "ReversibleAdjoint: the gradient's estimated error exceeds `gradient_tol`: the "
        "states reconstructed backwards with the solver's inverse step drifted from the "
        "forward ones (round-off amplified, as on strongly damped or stiff modes), or the "
        "backward pass amplified that drift (the coupled pair's parasitic mode grew). Use "
        "`CheckpointAdjoint()` (the same gradient from stored states)."
    ),
    RESULTS.reversible_unstable: (
        "Reversible: the gap `y - z` between the coupled solutions grew past "
        "`max_amplification` times the local errors that fed it: the pair's parasitic "
        "mode is unstable on this problem (a damped or contracting mode), and the solution "
        "would leave its base solver's. Use the base solver itself (e.g. `Tsit5()` with "
        "`CheckpointAdjoint()`), or a smaller `Reversible(solver, coupling=...)`."
    ),
}

# What a failed forward solve names first; `{where}` becomes "t = 0.42 of [0, 10]".
_CAUSES = {
    RESULTS.max_steps_reached: "`max_steps` ({max_steps}) reached at {where}.",
    RESULTS.dt_min_reached: "Step size below `dtmin` at {where}.",
    RESULTS.nonfinite_state: "Non-finite state (NaN or inf) in the step from {where}.",
    RESULTS.backsolve_diverged: "Backward reconstruction diverged.",
    RESULTS.implicit_solve_failed: "Newton iteration failed in the step from {where}.",
    RESULTS.breakdown: "Linear solve failed in the step from {where}.",
    RESULTS.reversible_unstable: "Parasitic mode growing in the step from {where}.",
    RESULTS.invalid_input: "Invalid input value (nothing solved, at {where}).",
}

_CODE_BITS = 4  # the result code lives in the low bits of the error index
assert max(RESULTS) < 2**_CODE_BITS


def is_successful(result: Int[Array, ""]) -> Array:
    """Whether `result` is `RESULTS.successful` (as diffrax's `is_successful`)."""
    return jnp.asarray(result == RESULTS.successful)


def is_event(result: Int[Array, ""]) -> Array:
    """Whether the solve ended at an event (`RESULTS.event_occurred`)."""
    return jnp.asarray(result == RESULTS.event_occurred)


def is_okay(result: Int[Array, ""]) -> Array:
    """Whether `result` is a success: `successful` or `event_occurred`."""
    return is_successful(result) | is_event(result)


class _FailureMessages(Sequence):
    """The messages of `raise_if_failed`, indexed by `(time bits | code)`.

    `eqx.branched_error_if` raises `msgs[index]` for a runtime `index`; formatting the
    message from the index lets the raised text carry a runtime value (the time the
    solve reached) through equinox's own error machinery (`filter_jit`'s clean errors,
    `EQX_ON_ERROR`, vmap), which only ever indexes the sequence.
    """

    def __init__(self, t0, t1, max_steps: int):
        self.span = f"[{_fmt(t0)}, {_fmt(t1)}]" if t0 is not None and t1 is not None else None
        self.max_steps = max_steps

    def __len__(self) -> int:
        return 2**32

    # Equal messages hash equal, so that `filter_jit` (inside equinox) reuses its trace.
    def __eq__(self, other) -> bool:
        return type(other) is _FailureMessages and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((self.span, self.max_steps))

    def __getitem__(self, index):  # pyright: ignore[reportIncompatibleMethodOverride]
        index = int(index)
        code = RESULTS(index & (2**_CODE_BITS - 1))
        if code in (RESULTS.successful, RESULTS.event_occurred):
            return "success"
        t = float(np.array(index & ~(2**_CODE_BITS - 1), np.int32).view(np.float32))
        where = f"t = {_fmt(t)}" + (f" of {self.span}" if self.span else " (before `t1`)")
        cause = _CAUSES.get(code, "Failed at {where}.")
        cause = cause.format(max_steps=self.max_steps, where=where)
        return f"{cause} {code.message}"


def _fmt(x) -> str:
    return f"{float(x):.6g}"


def failure_index(result: Int[Array, ""], t) -> Array:
    """`result` and the time `t` packed into one int32 (see `_FailureMessages`).

    `t` is rounded to float32 less its last `_CODE_BITS` mantissa bits (about 6
    significant digits). Successful entries (`is_okay`) get the smallest int32, so that
    under `jax.vmap` (where equinox raises the largest index) a failed element's message
    wins."""
    bits = lax.bitcast_convert_type(jnp.asarray(t).astype(jnp.float32), jnp.int32)
    mask, exponent = ~(2**_CODE_BITS - 1), 0x7F800000
    rounded = (bits + 2 ** (_CODE_BITS - 1)) & mask
    overflow = ((rounded & exponent) == exponent) & ((bits & exponent) != exponent)
    index = jnp.where(overflow, bits & mask, rounded) | result.astype(jnp.int32)
    return jnp.where(is_okay(result), jnp.iinfo(jnp.int32).min, index)


def raise_if_failed(x, result: Int[Array, ""], t, t0=None, t1=None, max_steps: int = 0):
    """Raise (under jit too) unless `result` is a success (`is_okay`): the cause, the time `t`
    the solve reached in `[t0, t1]` (when these are known at trace time) and the
    code's message."""
    messages = _FailureMessages(t0, t1, max_steps)
    index = failure_index(result, t)
    return eqx.branched_error_if(x, ~is_okay(result), index, messages)


class HostCheck(eqx.Module):
    """`raise_if_failed`'s check, deferred to the host: the packed index (int32 min
    for a success) and the messages it indexes. An eager solve returns it from its
    compiled program instead of a host callback, so that JAX's persistent cache can
    store the program."""

    index: Array
    messages: _FailureMessages = eqx.field(static=True)

    def raise_if_failed(self) -> None:
        """Raise `EquinoxRuntimeError` with the failure's message, as `raise_if_failed`
        would have from inside the program."""
        index = np.asarray(self.index)
        if index.size and int(index.max()) != np.iinfo(np.int32).min:
            raise eqx.EquinoxRuntimeError(self.messages[int(index.max())])


def host_check(result: Int[Array, ""], t, t0=None, t1=None, max_steps: int = 0) -> HostCheck:
    """`raise_if_failed`'s check of `result` at time `t`, for the host (`HostCheck`)."""
    return HostCheck(failure_index(result, t), _FailureMessages(t0, t1, max_steps))
