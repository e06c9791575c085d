"""What a step-size controller is: the interface `diffeqsolve` and the loop see.

`AbstractStepSizeController` (what `diffeqsolve` takes) becomes, once the interval is
known, the `AbstractLoopController` the loop runs (`for_solve`). See
`docs/controllers.md`, "Two levels".
"""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import Y, promoted_dtype

from .protocol import protocol_adapt, protocol_init


def rms_norm(x: Y) -> jax.Array:
    """Root mean square of the modulus `|x|` over every element of every leaf (real
    leaves and complex ones alike), in the real dtype of the leaves; 0 when `x` has no
    elements (`None`, `{}`, zero-size leaves), as diffrax's `rms_norm`: an empty state
    has no error, so every step is accepted and grows by `factormax`."""
    leaves = [jnp.ravel(jnp.abs(leaf)) for leaf in jax.tree.leaves(x)]
    if not leaves:
        return jnp.asarray(0.0)
    dtype = promoted_dtype(*leaves)
    flat = jnp.concatenate([leaf.astype(dtype) for leaf in leaves])
    if flat.size == 0:
        return jnp.zeros((), dtype)
    return jnp.sqrt(jnp.mean(flat**2))


class ControllerState(eqx.Module):
    """Controller memory carried between steps (all non-differentiable)."""

    prev_inv_error: jax.Array
    prev_prev_inv_error: jax.Array
    at_dtmin: jax.Array
    index: jax.Array

    @classmethod
    def initial(cls, dtype) -> "ControllerState":
        """The memory before the first step: inverse errors of 1 (in `dtype`, the time
        dtype), not at `dtmin`, no step taken."""
        one = jnp.ones((), dtype)
        return cls(one, one, jnp.asarray(False), jnp.asarray(0, jnp.int32))


class Decision(eqx.Module):
    """Outcome of one step's error control: accept?, the next step size, and status."""

    accept: jax.Array
    dt_next: jax.Array
    state: ControllerState
    result: jax.Array


class AbstractStepSizeController(eqx.Module):
    """Chooses step sizes: what `diffeqsolve(stepsize_controller=...)` accepts.

    A subclass provides `for_solve`, the controller the loop runs. The properties below
    tell `diffeqsolve` what the controller needs from the inputs; their defaults suit a
    controller that chooses its own steps from `dt0` and has no tolerances. Concrete
    controllers are final.
    """

    @abc.abstractmethod
    def for_solve(self, t0, t1, dt0, sign) -> "AbstractLoopController":
        """The controller the loop runs, in the solve's internal (increasing) time.

        Args:
            t0, t1: the interval in internal time (`t0 <= t1`), JAX scalars.
            dt0: the first step in internal time (positive), or `None`.
            sign: `+1` or `-1` (a float, or a traced scalar when the direction is not
                known at trace time): internal time is `sign * t`.
        """

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order) -> tuple:
        """diffrax's protocol (see `protocol`): `(end of the first step, state)`, with
        `func(terms, t, y, args)` the vector field and `error_order` the solver's."""
        return protocol_init(
            self, terms, t0, t1, y0, dt0, args, func, error_order, (ControllerState, Decision)
        )

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        """diffrax's protocol (see `protocol`): `(keep_step, next_t0, next_t1, made_jump,
        state, result)` for the step from `t0` to `t1`, `state` from `init` or the last
        call."""
        return protocol_adapt(t0, t1, y0, y1_candidate, y_error, error_order, state)

    @property
    def adaptive(self) -> bool:
        """Whether steps follow an error estimate (the solver needs an embedded one)."""
        return False

    @property
    def tolerances(self) -> tuple | None:
        """`(rtol, atol)` when steps follow them, else `None`. `diffeqsolve` checks that
        both are positive; the continuous adjoints scale their anchors' distance by them."""
        return None

    @property
    def needs_dt0(self) -> bool:
        """Whether `diffeqsolve` needs `dt0`: the controller cannot choose a first step."""
        return False

    @property
    def step_times(self) -> jax.Array | None:
        """The times the controller steps to exactly (as given: from t0 to t1), or `None`.
        They fix every step, so `dt0` must be `None`; `diffeqsolve` checks that they
        start at t0, end at t1 and are strictly monotone."""
        return None

    @property
    def jump_times(self) -> jax.Array | None:
        """Times at which the vector field may jump (as given, in the solve's own time
        for a controller `diffeqsolve` takes; in internal time, sorted, for one the loop
        runs), or `None`. A step ends just before each, and the next starts just after
        it with the vector field evaluated afresh (`ClipStepSizeController(jump_ts)`)."""
        return None

    @property
    def landing_times(self) -> jax.Array | None:
        """Times a step must end on exactly, besides those the controller chooses
        (`ClipStepSizeController(step_ts)`; unlike `step_times` they do not fix every
        step), or `None`. `diffeqsolve` checks that they, and `jump_times`, are finite."""
        return None

    def expected_steps(self, t0, t1, t1_floor, dt0) -> int | None:
        """The number of steps, when it is known before the solve runs; else `None`.

        Arguments are the internal (increasing) times as NumPy scalars of the time
        dtype, `None` where not known at trace time (see `expected_step_count`).
        """
        return None


class AbstractAdaptiveStepSizeController(AbstractStepSizeController):
    """A controller whose steps follow error tolerances, as diffrax names it: it has
    `rtol`, `atol` and the error `norm` (`PIDController`, and `ClipStepSizeController`
    around one). `isinstance` checks against it work as they do with diffrax."""

    rtol: eqx.AbstractVar[float]
    atol: eqx.AbstractVar[float]
    norm: eqx.AbstractVar[Callable]


class AbstractLoopController(AbstractStepSizeController):
    """The controller the loop runs, in the solver's internal (increasing) time.

    A subclass provides `first_step` and `decide`; `next_time`, `replayable` and
    `first_step_evaluations` have defaults. A controller written this way can be passed
    to `diffeqsolve` as it is: `for_solve` returns it unchanged.
    """

    def for_solve(self, t0, t1, dt0, sign) -> "AbstractLoopController":
        """Itself: it already runs in internal time."""
        return self

    @abc.abstractmethod
    def first_step(self, solver, term, t0, y0, dt0, args) -> jax.Array:
        """The size of the first attempted step (`dt0` is in internal time, or `None`)."""

    @abc.abstractmethod
    def decide(self, t0, dt, y0, y1, y_error, error_order, state) -> Decision:
        """Accept or reject the step of size `dt` from `t0` (`y0` to `y1` with the error
        estimate `y_error`, of the solver's `error_order`), given the memory `state`."""

    def next_time(self, t_new, decision: Decision):
        """The end of the next attempted step (before clipping to `t1`)."""
        return t_new + decision.dt_next

    def restart(self, t) -> tuple[jax.Array, jax.Array]:
        """Where the next step starts after an accepted step ending at `t`, and whether
        it starts past a jump of the vector field (`made_jump`: its first stage must
        then be evaluated afresh). By default at `t`, with no jump."""
        return t, jnp.asarray(False)

    def replayed_next(self, t, recorded) -> jax.Array:
        """The end of the next step from `t` under a replay: the `recorded` value, with
        the derivatives `next_time` gives it. By default those of `t` (the step size is
        not differentiated); a controller that lands on given times overrides this."""
        return t + jax.lax.stop_gradient(recorded - t)

    @property
    def replayable(self) -> bool:
        """Whether a recomputed step may skip error control under a replay of its
        recorded decisions: true when every decision is recorded (accept and `t_next`)
        and nothing under a replay reads the controller's memory. Then a replayed step
        costs less (see the integrator's light replay)."""
        return False

    def first_step_evaluations(self, dt0) -> int:
        """Vector-field evaluations `first_step` makes for this `dt0` (counted in
        `Solution.stats["num_vf_evals"]`)."""
        return 0
