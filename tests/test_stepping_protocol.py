"""diffrax's stepping protocol: odeckpt's solvers stepped by hand with `init`/`step`,
and a solver written against that protocol (as diffrax's docs write one) solving in
`diffeqsolve`, against closed forms."""

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc
from odeckpt._solvers import AbstractDiffraxSolver

DECAY = oc.ODETerm(lambda t, y, args: -y)


class CrankNicolson(oc.AbstractSolver):
    """The trapezoidal rule by fixed-point iteration, against diffrax's protocol
    (diffrax's nonlinear heat PDE example), with Euler as its error estimate."""

    tol: float = 1e-13
    interpolation_cls = oc.LocalLinearInterpolation

    def order(self, terms):
        return 2

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        dt = t1 - t0
        f0 = terms.vf(t0, y0, args)

        def iterate(val):
            y1, _ = val
            new = y0 + 0.5 * dt * (f0 + terms.vf(t1, y1, args))
            return new, jnp.any(jnp.abs(new - y1) > self.tol)

        euler = y0 + dt * f0
        y1, _ = lax.while_loop(lambda val: val[1], iterate, (euler, jnp.asarray(True)))
        return y1, y1 - euler, dict(y0=y0, y1=y1), None, oc.RESULTS.successful


def _trapezoid_factor(h):
    return (1 - h / 2) / (1 + h / 2)


def test_user_solver_with_constant_steps_is_the_trapezoidal_rule():
    ts = jnp.linspace(0.0, 1.0, 11)
    sol = oc.diffeqsolve(
        DECAY, CrankNicolson(), 0.0, 1.0, 0.1, jnp.asarray(2.0), saveat=oc.SaveAt(ts=ts)
    )
    expected = 2.0 * _trapezoid_factor(0.1) ** np.arange(11)
    np.testing.assert_allclose(sol.ys, expected, rtol=1e-12)


def test_user_solver_dense_output_is_its_interpolation():
    # Save halfway through each step: the straight line between the step's ends.
    ts = jnp.linspace(0.05, 0.95, 10)
    sol = oc.diffeqsolve(
        DECAY, CrankNicolson(), 0.0, 1.0, 0.1, jnp.asarray(2.0), saveat=oc.SaveAt(ts=ts)
    )
    ends = 2.0 * _trapezoid_factor(0.1) ** np.arange(11)
    np.testing.assert_allclose(sol.ys, (ends[:-1] + ends[1:]) / 2, rtol=1e-12)


def test_user_solver_drives_an_adaptive_controller():
    controller = oc.PIDController(rtol=1e-6, atol=1e-8)
    ts = jnp.linspace(0.0, 2.0, 5)
    sol = oc.diffeqsolve(
        DECAY,
        CrankNicolson(),
        0.0,
        2.0,
        0.01,
        jnp.asarray(1.0),
        saveat=oc.SaveAt(ts=ts),
        stepsize_controller=controller,
    )
    np.testing.assert_allclose(sol.ys, np.exp(-np.asarray(ts)), rtol=1e-5)


def test_derivative_through_user_solver():
    # Its `lax.while_loop` has no reverse mode (in diffrax neither): forward mode.
    def final(y0):
        sol = oc.diffeqsolve(DECAY, CrankNicolson(), 0.0, 1.0, 0.1, y0, adjoint=oc.ForwardMode())
        return sol.ys[-1]

    grad = jax.jacfwd(final)(jnp.asarray(2.0))
    np.testing.assert_allclose(grad, _trapezoid_factor(0.1) ** 10, rtol=1e-12)


@pytest.mark.parametrize(
    "solver",
    [oc.Tsit5(), oc.Dopri5(), pytest.param(oc.Kvaerno5(), marks=pytest.mark.slow), oc.Euler()],
)
def test_stepping_by_hand_as_diffrax(solver):
    """`init`/`step` as diffrax's manual-stepping docs use them: the steps agree with
    `diffeqsolve` on the same grid and with the closed form."""
    y0, t, dt = jnp.asarray([1.0, -3.0]), jnp.asarray(0.0), 0.1
    state = solver.init(DECAY, t, t + dt, y0, None)
    y, step = y0, eqx.filter_jit(solver.step)
    for _ in range(10):
        y, y_error, dense_info, state, result = step(
            DECAY, t, t + dt, y, None, state, made_jump=False
        )
        assert result == oc.RESULTS.successful
        t += dt
    sol = oc.diffeqsolve(DECAY, solver, 0.0, 1.0, 0.1, y0)
    np.testing.assert_allclose(y, sol.ys[-1], rtol=1e-12)
    exact = 0.9**10 if isinstance(solver, oc.Euler) else np.exp(-1.0)  # (1 - h)^n for Euler
    np.testing.assert_allclose(y, exact * y0, rtol=1e-5)
    assert set(dense_info) >= {"y0", "y1"}


def test_made_jump_rebuilds_the_first_stage():
    """After a jump of the field, the carried first stage is stale: `made_jump=True`
    evaluates it afresh, as a first step does."""
    solver = oc.Tsit5()
    y0 = jnp.asarray(1.0)
    stale = solver.init(DECAY, 0.0, 0.1, jnp.asarray(5.0), None)
    fresh = solver.step(DECAY, 0.0, 0.1, y0, None, solver.init(DECAY, 0.0, 0.1, y0, None), False)
    jumped = solver.step(DECAY, 0.0, 0.1, y0, None, stale, True)
    np.testing.assert_allclose(jumped[0], fresh[0], rtol=1e-15)
    not_jumped = solver.step(DECAY, 0.0, 0.1, y0, None, stale, False)
    assert not np.allclose(not_jumped[0], fresh[0])


def test_a_solver_without_steps_is_refused():
    class NoSteps(oc.AbstractSolver):
        def order(self, terms):
            return 1

    with pytest.raises(TypeError, match="Can't instantiate abstract class NoSteps"):
        NoSteps()


def test_a_solver_with_half_of_diffraxs_protocol_is_refused():
    class NoInit(oc.AbstractSolver):
        interpolation_cls = oc.LocalLinearInterpolation

        def order(self, terms):
            return 1

        def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
            return y0, None, dict(y0=y0, y1=y0), None, oc.RESULTS.successful

    with pytest.raises(TypeError, match="Can't instantiate abstract class NoInit"):
        NoInit()


def test_user_solver_takes_the_adapter_as_its_first_base():
    """diffrax's protocol is turned into odeckpt's in one class, which the user's solver
    inherits from: its `init_state` and `attempt` are the adapter's."""
    assert CrankNicolson.__mro__[1] is AbstractDiffraxSolver
    assert CrankNicolson.attempt is AbstractDiffraxSolver.attempt
    assert CrankNicolson().estimates_error and not oc.Euler().estimates_error
