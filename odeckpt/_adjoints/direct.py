"""`DirectAdjoint`: both autodiff modes through a loop that stores every iteration."""

from odeckpt._checkpointing import bounded_loop

from .base import AbstractAdjoint


class DirectAdjoint(AbstractAdjoint):
    """Reverse *and* forward mode through the solve, as diffrax's `DirectAdjoint`.

    The loop is a `lax.scan` of `max_steps` iterations (each one step, or nothing once
    the solve has ended), which JAX differentiates directly: `jax.grad`, `jax.jvp`,
    `jax.jacfwd`, `jax.jacrev` and their compositions (forward-over-reverse Hessians)
    all work, giving the exact derivative of the numerical solution, the same as
    `CheckpointAdjoint`'s gradient and `ForwardMode`'s tangents.

    Cost: every one of the `max_steps` iterations is run (an ended solve's iterations
    do nothing, but under `jax.vmap` both branches of each are evaluated), and reverse
    mode stores each iteration's intermediate values: memory grows with `max_steps`,
    not with the steps taken. Keep `max_steps` close to the steps the solve needs. For
    reverse mode alone `CheckpointAdjoint` is cheaper in time and memory (it stores
    only the steps taken, or fewer with checkpoints); for forward mode alone, so is
    `ForwardMode`. Needs an integer `max_steps`.
    """

    @property
    def forward_mode(self) -> bool:
        """JAX differentiates this solve in both modes itself: no mode is refused."""
        return True

    def loop(self, integrator, problem, state0, max_steps):
        if max_steps is None:
            raise ValueError(
                "`DirectAdjoint` runs a loop of `max_steps` iterations: pass an integer "
                "`max_steps` (`max_steps=None` works with `ForwardMode()`, and with "
                "`CheckpointAdjoint()` for a solve that is not differentiated in reverse mode)."
            )
        return bounded_loop(integrator.body(), problem, state0, max_steps)
