"""`Reversible`: any explicit Runge–Kutta method made algebraically reversible, with
its inverse step.

References:
    McCallum & Foster (2024), "Efficient, accurate and stable gradients for neural
    ODEs", arXiv:2410.11648 (the reversible method and its coupling parameter).
"""

from collections.abc import Callable
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import RESULTS, largest_magnitude
from odeckpt._solvers.base import (
    AbstractAdaptiveSolver,
    AbstractReversibleSolver,
    AbstractWrappedSolver,
    StepOutput,
)
from odeckpt._solvers.runge_kutta.base import AbstractERK

from .linearised import LinearisedStep


class CoupledState(eqx.Module):
    """`Reversible`'s solver state: the second solution `z`, and `fed`, the sum of the
    local error estimates (and round-off) that have fed `y - z` since `z = y` (a
    diagnostic: no derivative flows through it)."""

    z: object
    fed: jax.Array


def _fed(errors, y1, dtype) -> jax.Array:
    """What a step adds to `CoupledState.fed`: the largest local error estimate of its two
    base steps (`errors`), plus the round-off of `y1` (`eps |y1|`, per leaf)."""
    rounding = jax.tree.map(lambda y: jnp.finfo(y.dtype).eps * jnp.abs(y), y1)
    return jax.lax.stop_gradient(
        largest_magnitude(errors, dtype) + largest_magnitude(rounding, dtype)
    )


def _base_step(solver: AbstractERK, term, t0, dt, y0, args, dense):
    """One step of the base method from `(t0, y0)`, its first stage evaluated afresh
    (the two solutions never share a first stage, so nothing is carried)."""
    k0 = solver.init_state(term, t0, y0, args)
    return solver.attempt(term, t0, dt, y0, k0, args, dense=dense)


def _coupled(coupling, a, b, c):
    """`coupling (a - b) + c`, per leaf in the leaf's dtype."""
    return jax.tree.map(lambda x, y, z: coupling * (x - y) + z, a, b, c)


def _plus_minus(a, b, c):
    """`a + b - c`, per leaf."""
    return jax.tree.map(lambda x, y, z: x + y - z, a, b, c)


def _uncoupled(coupling, y1, stepped, z0):
    """`(y1 - stepped) / coupling + z0`: the inverse of `_coupled`, per leaf."""
    return jax.tree.map(lambda a, b, z: (a - b) / coupling + z, y1, stepped, z0)


def _shifted_dense(coeffs, y0, y1):
    """The base step's polynomial from `z0`, moved to run from `y0` to `y1`: its
    increments plus the straight line that closes the gap at the end (`coeffs[0]`, the
    linear term, takes `y1 - y0 - sum(coeffs)`, which is `(1 - coupling) (z0 - y0)`)."""

    def leaf(c, a, b):
        return c.at[0].add(b - a - c.sum(axis=0))

    return jax.tree.map(leaf, coeffs, y0, y1)


def _error(base_error, y0, z0, y1, z1):
    """`|base_error| + |(y1 - z1) - (y0 - z0)|`: the base method's estimate, plus the
    change of the gap between the two solutions over the step, where the coupled pair's
    parasitic mode shows (see `Reversible`)."""

    def leaf(e, a0, b0, a1, b1):
        return jnp.abs(e) + jnp.abs((a1 - b1) - (a0 - b0))

    return jax.tree.map(leaf, base_error, y0, z0, y1, z1)


def _linearised_base(solver: AbstractERK, term, t0, dt, y0, args, dense: bool):
    """A base step from `(t0, y0)` and its VJP: `((y1, y_error, coeffs), pullback)`,
    the pullback giving the cotangents of `(term, t0, dt, y0, args)`."""

    def base(term, t0, dt, y0, args):
        out = _base_step(solver, term, t0, dt, y0, args, dense)
        return out.y1, out.y_error, out.coeffs

    return eqx.filter_vjp(base, term, t0, dt, y0, args)


def _tree_sum(*trees):
    return jax.tree.map(lambda *xs: sum(xs), *trees)


class _StepPullback(eqx.Module):
    """The VJP of `Reversible.step` from `(y0, z0)`, assembled from the VJPs of its two
    base steps (`from_y`: `Psi_{-h}` at `(t1, y1)`; `from_z`: `Psi_h` at `(t0, z0)`)
    and of the elementwise maps between them. Called with the cotangent of the step's
    `StepOutput`; returns those of `(term, t0, dt, y0, z0, args)`."""

    coupling: float = eqx.field(static=True)
    from_y: Callable
    from_z: Callable
    states: tuple  # (y0, z0, y1, z1)
    y_error: object  # the base step's error estimate from `y1`
    z_error: object  # the base step's error estimate from `z0` (no cotangent reaches it)
    coeffs: object  # the base step's dense coefficients from `z0` (or None)

    def __call__(self, ct: StepOutput):
        y0, z0, y1, z1 = self.states
        ct_y1, ct_z1 = ct.y1, ct.state.z
        ct_y0 = jax.tree.map(jnp.zeros_like, y0)
        ct_coeffs = None
        if self.coeffs is not None:  # coeffs = _shifted_dense(coeffs, y0, y1)
            pull = jax.vjp(_shifted_dense, self.coeffs, y0, y1)[1]
            ct_coeffs, ct_y0, d_y1 = pull(ct.coeffs)
            ct_y1 = _tree_sum(ct_y1, d_y1)
        # error = _error(e, y0, z0, y1, z1)
        ct_e, d_y0, ct_z0, d_y1, d_z1 = jax.vjp(_error, self.y_error, *self.states)[1](ct.y_error)
        ct_y0, ct_y1, ct_z1 = _tree_sum(ct_y0, d_y0), _tree_sum(ct_y1, d_y1), _tree_sum(ct_z1, d_z1)
        # z1 = y1 + z0 - Psi_{-h}(t1, y1)
        ct_z0 = _tree_sum(ct_z0, ct_z1)
        neg = jax.tree.map(jnp.negative, ct_z1)
        term_y, t1_y, mdt_y, d_y1, args_y = self.from_y((neg, ct_e, None))
        ct_y1 = _tree_sum(ct_y1, ct_z1, d_y1)
        # y1 = coupling (y0 - z0) + Psi_h(t0, z0)
        scaled = jax.tree.map(lambda x: self.coupling * x, ct_y1)
        ct_y0 = _tree_sum(ct_y0, scaled)
        ct_z0 = jax.tree.map(jnp.subtract, ct_z0, scaled)
        no_error = jax.tree.map(jnp.zeros_like, self.z_error)
        term_z, t0_z, dt_z, d_z0, args_z = self.from_z((ct_y1, no_error, ct_coeffs))
        ct_z0 = _tree_sum(ct_z0, d_z0)
        ct_t0 = _optional_sum(t1_y, t0_z)
        ct_dt = _optional_sum(t1_y, None if mdt_y is None else -mdt_y, dt_z)
        ct_state0 = CoupledState(ct_z0, ct.state.fed)  # `fed1 = fed0 + (no derivative)`
        ct_args = _tree_sum(args_y, args_z)
        return (_tree_sum(term_y, term_z), ct_t0, ct_dt, ct_y0, ct_state0, ct_args)


def _optional_sum(*xs):
    """The sum of the cotangents that are not `None` (`None` if all are)."""
    present = [x for x in xs if x is not None]
    return sum(present) if present else None


@final
class Reversible(AbstractAdaptiveSolver, AbstractReversibleSolver):
    """Any explicit Runge–Kutta method with an error estimate (`AbstractERK`: `Tsit5`,
    `Dopri5`, `Bosh3`, ...) made algebraically reversible (McCallum & Foster's method;
    diffrax's open pull request calls the coupling `l`).

    It carries a second solution `z` (`z0 = y0`); with `Psi_h` the base method's step,
    `y1 = coupling (y0 - z0) + Psi_h(t0, z0)` and `z1 = y1 + z0 - Psi_{-h}(t1, y1)`,
    which `reverse_step` undoes from `(y1, z1)`. It converges with the base method's
    order at two base steps per step. The pair's parasitic mode grows on damped modes:
    the solve stops with `RESULTS.reversible_unstable` where `|y - z|` outgrows
    `max_amplification` times the local errors that fed it. `CheckpointAdjoint` and
    `ForwardMode` differentiate it like any solver; `ReversibleAdjoint()` gives the
    same gradient with O(1) states. The equations, the stability analysis and the
    measured coupling trade-off: `docs/adjoints.md`, section "ReversibleAdjoint".

    Args:
        solver: the base method, an explicit Runge–Kutta method with an error estimate.
        coupling: the coupling parameter, in `(0, 1]` (`l` / lambda in the paper).
        max_amplification: how far `|y - z|` may outgrow the local errors that fed it
            before the solve stops (`None`: never; then only `ReversibleAdjoint`'s
            check guards gradients, and nothing the solution).

    References:
        McCallum & Foster (2024), "Efficient, accurate and stable gradients for
        neural ODEs", arXiv:2410.11648.
    """

    solver: AbstractERK
    coupling: float = 0.999
    max_amplification: float | None = 1.0

    def __check_init__(self):
        wrapped = isinstance(self.solver, AbstractWrappedSolver)
        if not isinstance(self.solver, AbstractERK) or wrapped:
            raise ValueError(
                "`Reversible(solver=...)` wraps an explicit Runge–Kutta method with an "
                f"error estimate (an `AbstractERK`, e.g. `Tsit5()`); got {self.solver!r}."
            )
        c = self.coupling
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 < c <= 1:
            raise ValueError(
                f"`Reversible(coupling=...)` must be a number in (0, 1]; got {c!r}. "
                "The default 0.999 suits most problems."
            )
        k = self.max_amplification
        real = isinstance(k, int | float) and not isinstance(k, bool)
        if k is not None and (not real or not k > 0):
            raise ValueError(
                f"`Reversible(max_amplification=...)` must be a positive number or None; got "
                f"{k!r}. The default 1.0 stops a solve whose `y - z` outgrew its local errors."
            )

    def order(self, terms) -> int | None:
        return self.solver.order(terms)

    def error_order(self, terms) -> int | None:
        return self.solver.error_order(terms)

    @property
    def evals_per_step(self) -> int:
        return 2 * self.solver.tableau.stages

    @property
    def state_rebuildable(self) -> bool:
        return False

    def init_state(self, term, t0, y0, args):
        """`z0 = y0`, nothing fed yet."""
        del term, args
        return CoupledState(y0, jnp.zeros((), jnp.result_type(t0)))

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        z0, fed0 = solver_state.z, solver_state.fed
        from_z = _base_step(self.solver, term, t0, dt, z0, args, dense)
        y1 = _coupled(self.coupling, y0, z0, from_z.y1)
        from_y = _base_step(self.solver, term, t0 + dt, -dt, y1, args, False)
        z1 = _plus_minus(y1, z0, from_y.y1)
        coeffs = None if from_z.coeffs is None else _shifted_dense(from_z.coeffs, y0, y1)
        fed1 = fed0 + _fed((from_z.y_error, from_y.y_error), y1, fed0.dtype)
        error = _error(from_y.y_error, y0, z0, y1, z1)
        return StepOutput(y1, error, CoupledState(z1, fed1), coeffs, self._unstable(y1, z1, fed1))

    def reconstructed(self, solver_state) -> object:
        """`z` (`fed` is a diagnostic, rebuilt only up to its own round-off)."""
        return solver_state.z

    def _unstable(self, y1, z1, fed1) -> jax.Array:
        """`RESULTS.reversible_unstable` where `|y1 - z1|` exceeds `max_amplification`
        times what fed it (the parasitic mode is growing), else `successful`."""
        if self.max_amplification is None:
            return jnp.asarray(RESULTS.successful, jnp.int32)
        gap = jax.lax.stop_gradient(
            largest_magnitude(jax.tree.map(jnp.subtract, y1, z1), fed1.dtype)
        )
        grown = gap > self.max_amplification * fed1
        return jnp.where(grown, RESULTS.reversible_unstable, RESULTS.successful).astype(jnp.int32)

    def linearised_reverse_step(self, term, t0, dt, y1, solver_state, args, dense: bool):
        """`reverse_step`, linearising its two base steps: they are the ones the step
        from `(y0, z0)` takes, at the same points, so the replay needs none."""
        z1, fed1 = solver_state.z, solver_state.fed
        (a_y, a_error, _), from_y = _linearised_base(
            self.solver, term, t0 + dt, -dt, y1, args, False
        )
        z0 = _plus_minus(z1, a_y, y1)
        (b_y, b_error, b_coeffs), from_z = _linearised_base(
            self.solver, term, t0, dt, z0, args, dense
        )
        y0 = _uncoupled(self.coupling, y1, b_y, z0)
        fed0 = fed1 - _fed((b_error, a_error), y1, fed1.dtype)
        coeffs = None if b_coeffs is None else _shifted_dense(b_coeffs, y0, y1)
        state1 = CoupledState(z1, fed1)
        output = StepOutput(
            y1, _error(a_error, y0, z0, y1, z1), state1, coeffs, self._unstable(y1, z1, fed1)
        )
        pullback = _StepPullback(
            self.coupling, from_y, from_z, (y0, z0, y1, z1), a_error, b_error, b_coeffs
        )
        return y0, CoupledState(z0, fed0), LinearisedStep(self, output, pullback)

    def reverse_step(self, term, t0, dt, y1, solver_state, args):
        """`(y0, (z0, fed0))` from `(y1, (z1, fed1))`: undoes `attempt(term, t0, dt, ...)`
        up to round-off."""
        z1, fed1 = solver_state.z, solver_state.fed
        from_y = _base_step(self.solver, term, t0 + dt, -dt, y1, args, False)
        z0 = _plus_minus(z1, from_y.y1, y1)
        from_z = _base_step(self.solver, term, t0, dt, z0, args, False)
        fed0 = fed1 - _fed((from_z.y_error, from_y.y_error), y1, fed1.dtype)
        return _uncoupled(self.coupling, y1, from_z.y1, z0), CoupledState(z0, fed0)
