"""Adaptive step sizes: accuracy against references, and step-for-step parity with diffrax."""

import functools

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    ARENSTORF,
    DAMPED,
    DECAY,
    LOTKA_VOLTERRA,
    VAN_DER_POL,
    ODEProblem,
    reference,
)

import odeckpt as oc

# (odeckpt solver, diffrax solver, rtol = atol): tolerances suited to each order.
SOLVERS = {
    "Bosh3": (oc.Bosh3, dfx.Bosh3, 1e-6),
    "Tsit5": (oc.Tsit5, dfx.Tsit5, 1e-8),
    "Dopri5": (oc.Dopri5, dfx.Dopri5, 1e-8),
    "Dopri8": (oc.Dopri8, dfx.Dopri8, 1e-10),
}
PROBLEMS = (LOTKA_VOLTERRA, VAN_DER_POL, DAMPED, ARENSTORF)


def _case(problem, name):
    # Default run: every pair on Lotka–Volterra but Dopri5 (a 5(4) pair with first-same-
    # as-last stages, as Tsit5), and Tsit5 on Arenstorf's orbit; the others are slow
    # (the same controller path on another problem or with another such pair).
    fast = (problem is LOTKA_VOLTERRA and name != "Dopri5") or (
        problem is ARENSTORF and name == "Tsit5"
    )
    marks = () if fast else (pytest.mark.slow,)
    return pytest.param(problem, name, id=f"{problem.name}-{name}", marks=marks)


CASES = [_case(p, name) for p in PROBLEMS for name in SOLVERS]

# An explicit first step for parity with diffrax: diffrax's `dt0=None` path differs
# (see `test_first_step_is_hairers`). 0.1 also keeps the first error estimates of
# Dopri8 well above round-off: at dt0=0.01 its estimate is ~1e-18, pure round-off,
# and then the summation order of the stages alone decides the next step size.
DT0 = 0.1


def _save_times(problem: ODEProblem) -> np.ndarray:
    # Arenstorf's orbit passes close to the moon, where local errors are amplified by
    # ~1e3-1e4 (the final point, near the moon again, is off by ~1e4 x tol in every
    # solver, diffrax's included). Compare it on its first 40%, before that approach.
    end = problem.t0 + (0.4 if problem is ARENSTORF else 1.0) * (problem.t1 - problem.t0)
    return np.linspace(problem.t0, end, 11)[1:]


@functools.cache
def _odeckpt_solve(problem: ODEProblem, name: str, **controller_kwargs):
    solver, _, tol = SOLVERS[name]
    controller = oc.PIDController(rtol=tol, atol=tol, **controller_kwargs)
    return _jit_solve(oc.diffeqsolve, oc.SaveAt, problem, solver(), controller)


@functools.cache
def _diffrax_solve(problem: ODEProblem, name: str, **controller_kwargs):
    _, solver, tol = SOLVERS[name]
    controller = dfx.PIDController(rtol=tol, atol=tol, **controller_kwargs)
    term = dfx.ODETerm(problem.vector_field)
    return _jit_solve(dfx.diffeqsolve, dfx.SaveAt, problem, solver(), controller, term)


def _jit_solve(diffeqsolve, saveat, problem, solver, controller, term=None, dt0=DT0):
    """The same call for odeckpt and diffrax: `(ys at _save_times, accepted, rejected)`."""
    term = problem.vector_field if term is None else term

    @jax.jit
    def solve(y0):
        sol = diffeqsolve(
            term,
            solver,
            problem.t0,
            problem.t1,
            dt0,
            y0,
            problem.args,
            saveat=saveat(ts=jnp.asarray(_save_times(problem))),
            stepsize_controller=controller,
            max_steps=4096,
        )
        return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    ys, accepted, rejected = solve(jnp.asarray(problem.y0))
    return np.asarray(ys), int(accepted), int(rejected)


@pytest.mark.parametrize("problem, name", CASES)
def test_accuracy_against_reference(problem, name):
    ys, _, _ = _odeckpt_solve(problem, name)
    tol = SOLVERS[name][2]
    expected = reference(problem, _save_times(problem))
    # The controller bounds the *local* error per step by ~tol; the global error sums
    # a few hundred propagated local errors, so it is larger. For these problems it is
    # 1-50 x tol (diffrax's solutions, with identical steps, are as far off); 100 x tol
    # leaves margin while any wrong step, tableau or interpolant is off by >> 1e3 x tol.
    bound = 100 * (tol + tol * np.abs(expected))
    assert np.all(np.abs(ys - expected) <= bound), np.max(np.abs(ys - expected) / bound)


@pytest.mark.parametrize("problem, name", CASES)
def test_step_counts_match_diffrax(problem, name):
    ys, accepted, rejected = _odeckpt_solve(problem, name)
    ys_dfx, accepted_dfx, rejected_dfx = _diffrax_solve(problem, name)
    assert (accepted, rejected) == (accepted_dfx, rejected_dfx)
    assert rejected > 0  # the comparison covers rejected steps
    # Same steps, same arithmetic up to summation order: round-off differences only,
    # amplified by the problem's conditioning (most for Arenstorf's orbit).
    np.testing.assert_allclose(ys, ys_dfx, rtol=1e-9, atol=1e-9)


PID_COEFFS = [
    dict(pcoeff=0.3, icoeff=0.3),  # PI, as diffrax recommends for non-stiff problems
    dict(pcoeff=0.2, icoeff=0.4, dcoeff=0.1),  # PID
]


# PI: slow; PID runs the same update with every coefficient
@pytest.mark.parametrize(
    "coeffs",
    [pytest.param(PID_COEFFS[0], marks=pytest.mark.slow), PID_COEFFS[1]],
    ids=["PI", "PID"],
)
def test_pid_coefficients_match_diffrax(coeffs):
    problem, name = VAN_DER_POL, "Tsit5"
    _, accepted, rejected = _odeckpt_solve(problem, name, **coeffs)
    _, accepted_dfx, rejected_dfx = _diffrax_solve(problem, name, **coeffs)
    assert (accepted, rejected) == (accepted_dfx, rejected_dfx)
    # The coefficients matter: the integral controller takes different steps.
    _, accepted_i, rejected_i = _odeckpt_solve(problem, name)
    assert (accepted, rejected) != (accepted_i, rejected_i)


def _steps(problem: ODEProblem, controller, dt0=DT0, max_steps=4096):
    """Solve saving every step; returns the solution and its accepted step sizes."""
    sol = oc.diffeqsolve(
        problem.vector_field,
        oc.Tsit5(),
        problem.t0,
        problem.t1,
        dt0,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=controller,
        max_steps=max_steps,
        throw=max_steps > 1,
    )
    n = int(sol.stats["num_accepted_steps"])
    ts = np.asarray(sol.ts[:n])
    return sol, np.diff(np.concatenate([[problem.t0], ts]))


def _diffrax_counts(problem: ODEProblem, controller, dt0=DT0):
    sol = dfx.diffeqsolve(
        dfx.ODETerm(problem.vector_field),
        dfx.Tsit5(),
        problem.t0,
        problem.t1,
        dt0,
        jnp.asarray(problem.y0),
        problem.args,
        stepsize_controller=controller,
        max_steps=4096,
    )
    return int(sol.stats["num_accepted_steps"]), int(sol.stats["num_rejected_steps"])


def _counts(sol):
    return int(sol.stats["num_accepted_steps"]), int(sol.stats["num_rejected_steps"])


@pytest.mark.parametrize("dt0", [0.01, 1.0], ids=["dt0<dtmax", "dt0>dtmax"])
def test_dtmax_bounds_every_step(dt0):
    problem = LOTKA_VOLTERRA
    kwargs = dict(rtol=1e-6, atol=1e-6, dtmax=0.07)
    sol, steps = _steps(problem, oc.PIDController(**kwargs), dt0=dt0)
    assert sol.result == oc.RESULTS.successful
    assert np.all(steps <= 0.07 * (1 + 1e-12)), steps.max()
    assert np.sum(steps > 0.07 * (1 - 1e-12)) > 10  # dtmax is active, not just respected
    assert _counts(sol) == _diffrax_counts(problem, dfx.PIDController(**kwargs), dt0)


@pytest.mark.parametrize("dt0", [0.1, 1e-3], ids=["dt0>dtmin", "dt0<dtmin"])
def test_force_dtmin_keeps_steps_at_dtmin(dt0):
    # Tolerances far too tight for steps of 0.05: the controller wants smaller steps,
    # `force_dtmin=True` accepts steps of dtmin instead.
    problem = LOTKA_VOLTERRA
    kwargs = dict(rtol=1e-13, atol=1e-13, dtmin=0.05, force_dtmin=True)
    sol, steps = _steps(problem, oc.PIDController(**kwargs), dt0=dt0)
    assert sol.result == oc.RESULTS.successful
    # Every step is >= dtmin except the last, shortened to land on t1.
    assert np.all(steps[:-1] >= 0.05 * (1 - 1e-12)), steps.min()
    assert np.sum(steps[:-1] < 0.05 * (1 + 1e-12)) > 10  # dtmin is active
    assert _counts(sol) == _diffrax_counts(problem, dfx.PIDController(**kwargs), dt0)


def _hairer_first_step(problem: ODEProblem, rtol, atol, order) -> float:
    """Hairer–Nørsett–Wanner II.4 in NumPy, with diffrax's exponent `1 / order`."""
    f = jax.jit(problem.vector_field)
    t0, y0 = problem.t0, problem.y0
    args = jax.tree.map(jnp.asarray, problem.args)

    def norm(x):
        return np.sqrt(np.mean((x / (atol + rtol * np.abs(y0))) ** 2))

    f0 = np.asarray(f(t0, y0, args))
    d0, d1 = norm(y0), norm(f0)
    h0 = 1e-6 if min(d0, d1) < 1e-5 else 0.01 * d0 / d1
    f1 = np.asarray(f(t0 + h0, y0 + h0 * f0, args))
    d2 = norm(f1 - f0) / h0
    h1 = max(1e-6, h0 * 1e-3) if max(d1, d2) <= 1e-15 else (0.01 / max(d1, d2)) ** (1 / order)
    return min(100 * h0, h1)


# decay: slow; the same heuristic as on Lotka–Volterra
@pytest.mark.parametrize(
    "problem",
    [LOTKA_VOLTERRA, pytest.param(DECAY, marks=pytest.mark.slow)],
    ids=["lotka_volterra", "decay"],
)
def test_first_step_is_hairers(problem):
    controller = oc.PIDController(rtol=1e-6, atol=1e-8)
    expected = _hairer_first_step(problem, 1e-6, 1e-8, order=5)
    assert 1e-6 <= expected < 0.5  # sensible: neither tiny nor the whole interval
    # One step only: it is accepted here, so it shows up as the first saved step.
    sol, steps = _steps(problem, controller, dt0=None, max_steps=1)
    assert sol.result == oc.RESULTS.max_steps_reached
    assert _counts(sol) == (1, 0)
    np.testing.assert_allclose(steps[0], expected, rtol=1e-12)


def test_dt0_none_equals_explicit_first_step():
    problem = VAN_DER_POL
    controller = oc.PIDController(rtol=1e-8, atol=1e-8)
    sol, steps = _steps(problem, controller, dt0=None)
    first = _hairer_first_step(problem, 1e-8, 1e-8, order=5)
    sol_explicit, steps_explicit = _steps(problem, controller, dt0=first)
    assert sol.result == oc.RESULTS.successful
    assert _counts(sol) == _counts(sol_explicit)
    np.testing.assert_allclose(steps, steps_explicit, rtol=1e-12)
    np.testing.assert_allclose(sol.ys, sol_explicit.ys, rtol=1e-12, atol=1e-14)


def test_step_to_lands_exactly_on_ts():
    problem = LOTKA_VOLTERRA
    # Uneven steps, squeezed towards t0; not representable as t0 + k dt.
    ts = problem.t0 + (problem.t1 - problem.t0) * np.linspace(0.0, 1.0, 41) ** 1.5
    controller = oc.StepTo(ts=jnp.asarray(ts))
    sol, _ = _steps(problem, controller, dt0=None)
    assert _counts(sol) == (40, 0)
    np.testing.assert_array_equal(np.asarray(sol.ts[:40]), ts[1:])
    assert np.all(np.isinf(np.asarray(sol.ts[40:])))
    expected = dfx.diffeqsolve(
        dfx.ODETerm(problem.vector_field),
        dfx.Tsit5(),
        problem.t0,
        problem.t1,
        None,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=dfx.SaveAt(steps=True),
        stepsize_controller=dfx.StepTo(ts=jnp.asarray(ts)),
        max_steps=4096,
    )
    np.testing.assert_allclose(sol.ys[:40], expected.ys[:40], rtol=1e-13, atol=1e-13)


def test_step_to_backwards_in_time():
    problem = DECAY
    ts = np.array([2.0, 1.7, 1.0, 0.2, 0.0])
    sol = oc.diffeqsolve(
        problem.vector_field,
        oc.Tsit5(),
        2.0,
        0.0,
        None,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=oc.StepTo(ts=ts),
        max_steps=6,
    )
    assert _counts(sol) == (4, 0)
    np.testing.assert_array_equal(np.asarray(sol.ts[:4]), ts[1:])
    expected = problem.y0 * np.exp(-problem.args * (ts[1:, None] - 2.0))
    np.testing.assert_allclose(sol.ys[:4], expected, rtol=1e-4)
