"""What every adjoint provides, and the memory figures their sizing rules share."""

import abc

import equinox as eqx

from odeckpt._checkpointing import LoopOutput
from odeckpt._integrator import Integrator, Problem, State

DEFAULT_MEMORY_BUDGET = 128 * 2**20
"""Bytes of stored states that `CheckpointAdjoint(checkpoints=None)` may use."""

STORE_EVERY_STEP_BYTES = 16 * 2**20
"""Without an explicit `memory_budget`, every step is stored only when `max_steps` full
states (for the whole batch under `jax.vmap`) take at most this many bytes: the store
is allocated and zero-filled by every gradient, whatever the number of steps taken."""


class AbstractAdjoint(eqx.Module):
    """Chooses the loop a solve runs in, and so how it is differentiated."""

    @abc.abstractmethod
    def loop(
        self, integrator: Integrator, problem: Problem, state0: State, max_steps: int | None
    ) -> LoopOutput:
        """Run the solve's loop; its reverse (or forward) mode is this adjoint's."""

    @property
    def forward_mode(self) -> bool:
        """Whether JAX differentiates the solve's loop in forward mode (`jax.jvp`,
        `jax.jacfwd`; `ForwardMode`) rather than by this adjoint's reverse mode (`jax.grad`,
        `jax.vjp`, and forward-over-reverse second derivatives)."""
        return False

    @property
    def supports_events(self) -> bool:
        """Whether its gradients carry an `Event`'s time dependence (`diffeqsolve`
        refuses an event with an adjoint that says no)."""
        return True

    def with_throw(self, throw: bool) -> "AbstractAdjoint":
        """This adjoint for a solve called with `diffeqsolve(throw=throw)`: an adjoint
        whose backward pass can fail takes it from there (unless it sets its own)."""
        return self


def check_checkpoints(adjoint) -> None:
    """Raise unless `adjoint.checkpoints` is `None` or a positive integer."""
    c = adjoint.checkpoints
    if c is not None and (not isinstance(c, int) or c < 1):
        raise ValueError(
            f"`{type(adjoint).__name__}(checkpoints=...)` must be a positive integer or "
            f"None; got {c!r}."
        )
