"""Result codes of a solve: the reason a solve stopped, and the message raised for it."""

import enum

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Int


class RESULTS(enum.IntEnum):
    """Why a solve stopped. `Solution.result` holds one of these as an integer array.

    The message of each code is what `diffeqsolve(..., throw=True)` raises.
    """

    successful = 0
    max_steps_reached = 1
    dt_min_reached = 2
    nonfinite_state = 3
    backsolve_diverged = 4

    @property
    def message(self) -> str:
        return _MESSAGES[self]


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
}


def is_successful(result: Int[Array, ""]) -> Array:
    return result == RESULTS.successful


def raise_if_failed(x, result: Int[Array, ""]):
    """Raise the message of `result` (under jit too) unless it is `successful`."""
    messages = [code.message or "success" for code in RESULTS]
    return eqx.branched_error_if(x, result != RESULTS.successful, jnp.asarray(result), messages)
