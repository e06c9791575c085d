"""`ForwardMode`: forward-mode autodiff through a plain loop."""

from odeckpt._checkpointing import forward_loop

from .base import AbstractAdjoint


class ForwardMode(AbstractAdjoint):
    """Forward-mode autodiff (`jax.jvp`, `jax.jacfwd`) through the solve.

    The loop is a plain `lax.while_loop`, which JAX differentiates in forward mode;
    cost per tangent is about one extra solve, memory one state. Reverse mode
    (`jax.grad`, `jax.vjp`, `jax.hessian`) is refused with an error naming
    `CheckpointAdjoint()`; for a Hessian under `ForwardMode`, use
    `jax.jacfwd(jax.jacfwd(f))`.
    """

    @property
    def forward_mode(self) -> bool:
        return True

    @property
    def reverse_mode(self) -> bool:
        return False

    def loop(self, integrator, problem, state0, max_steps):
        return forward_loop(integrator.body(), problem, state0, max_steps)
