"""The explicit Runge–Kutta solvers: convergence orders, dense output, evaluation counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    CLOSED_FORM,
    HARMONIC,
    TANGENT,
    ODEProblem,
    problem_ids,
    reference,
    scipy_reference,
)

import odeckpt as oc
from odeckpt._solvers import EXPLICIT, STIFF

# The registered explicit solvers, by class name.
SOLVERS = {solver.__name__: solver for solver in EXPLICIT}

# The order of a Runge–Kutta step, hard-coded here (not read from the tableau) so that
# a wrong tableau cannot hide behind its own metadata.
ORDERS = {
    "Euler": 1,
    "Heun": 2,
    "Midpoint": 2,
    "Ralston": 2,
    "Bosh3": 3,
    "Tsit5": 5,
    "Dopri5": 5,
    "Dopri8": 8,
}

# Vector-field evaluations per step: stages, less one for first-same-as-last methods.
# Non-FSAL methods evaluate `f(t1, y1)` at the end of each step for the next one.
EVALS_PER_STEP = {
    "Euler": 1,
    "Heun": 2,
    "Midpoint": 2,
    "Ralston": 2,
    "Bosh3": 3,
    "Tsit5": 6,
    "Dopri5": 6,
    "Dopri8": 13,
}


# The default run takes one solver of a kind: `Euler` (its own class) and the
# Runge–Kutta methods (one `AbstractERK` path, each with its own tableau, whose order
# conditions `test_tableaux.py` checks by default) without and with first-same-as-last
# stages or, for dense output, with a Hermite and a polynomial interpolant; the other
# solvers are slow.
def _cases(cases, default):
    """`cases` (tuples led by a solver's name) as params, `slow` but for `default`."""
    slow = pytest.mark.slow
    return [pytest.param(*c, id=c[0], marks=() if c[0] in default else slow) for c in cases]


def _solve_each(problem: ODEProblem, solver, num_steps, saveat, output):
    """`output(sol)` for `ConstantStepSize` solves with each of `num_steps` equal steps.

    One compilation: the step size is an argument of a jitted solve.
    """
    span = problem.t1 - problem.t0

    @jax.jit
    def solve(dt0):
        sol = oc.diffeqsolve(
            problem.vector_field,
            solver,
            problem.t0,
            problem.t1,
            dt0,
            jnp.asarray(problem.y0),
            problem.args,
            saveat=saveat,
            max_steps=max(num_steps) + 1,
        )
        return output(sol)

    return np.stack([np.asarray(solve(span / n)) for n in num_steps])


def _fitted_order(num_steps, errors, span) -> float:
    """The slope of log(error) against log(step size), least squares."""
    return np.polyfit(np.log(span / np.asarray(num_steps)), np.log(errors), 1)[0]


# Step ranges sit in the asymptotic regime and well above round-off (every error here
# is > 1e-12, asserted). The nonlinear `TANGENT` problem (x = tan t on [0, 1.4]) has
# large high derivatives, which keeps the order-8 errors of Dopri8 far from round-off
# at step sizes where its leading error term dominates. For the two fifth-order pairs
# the error of `TANGENT` changes sign between its components inside the range where it
# is above round-off (the measured local rates wander between 3 and 7), so they are
# measured on the harmonic oscillator (5 periods), where they are clean.
CONVERGENCE_CASES = [
    ("Euler", TANGENT, [400, 800, 1600, 3200]),
    ("Heun", TANGENT, [100, 200, 400, 800]),
    ("Midpoint", TANGENT, [100, 200, 400, 800]),
    ("Ralston", TANGENT, [100, 200, 400, 800]),
    ("Bosh3", TANGENT, [100, 200, 400, 800]),
    ("Tsit5", HARMONIC, [320, 640, 1280]),
    ("Dopri5", HARMONIC, [160, 320, 640]),
    ("Dopri8", TANGENT, [20, 40, 80]),
]


@pytest.mark.parametrize(
    "name, problem, num_steps", _cases(CONVERGENCE_CASES, {"Euler", "Heun", "Bosh3"})
)
def test_convergence_order(name, problem, num_steps):
    solver, order = SOLVERS[name], ORDERS[name]
    ys = _solve_each(problem, solver(), num_steps, oc.SaveAt(t1=True), lambda sol: sol.ys[-1])
    errors = np.abs(ys - reference(problem, [problem.t1])).max(axis=-1)
    assert np.all(errors > 1e-12), errors  # the range is above round-off
    slope = _fitted_order(num_steps, errors, problem.t1 - problem.t0)
    assert abs(slope - order) <= 0.3, (slope, errors)


# Global order of dense output at points inside the steps: min(p, q + 1) for a step of
# order p and an interpolant of (local) order q: the interpolant adds an O(h^(q+1))
# error to the O(h^p) error of the step ends it starts from.
# Hermite-type interpolants of the two-stage methods: q = 1 or 2; Bosh3: cubic Hermite,
# q = 3; Tsit5 and Dopri5: their own quartic, q = 4; Dopri8: its degree-6 stage
# interpolant satisfies the continuous order conditions to order 5 only, q = 5.
DENSE_CASES = [
    ("Euler", 1, [800, 1600, 3200]),
    ("Heun", 2, [100, 200, 400, 800]),
    ("Midpoint", 2, [100, 200, 400, 800]),
    ("Ralston", 2, [100, 200, 400, 800]),
    ("Bosh3", 3, [100, 200, 400, 800]),
    ("Tsit5", 5, [160, 320, 640]),
    ("Dopri5", 5, [80, 160, 320, 640]),
    ("Dopri8", 6, [20, 40, 80, 160]),
]


@pytest.mark.parametrize(
    "name, dense_order, num_steps", _cases(DENSE_CASES, {"Euler", "Heun", "Dopri5"})
)
def test_dense_output_convergence(name, dense_order, num_steps):
    problem = HARMONIC
    span = problem.t1 - problem.t0
    # Query points that fall at varying positions inside the steps of every solve.
    tq = problem.t0 + span * (jnp.arange(1.0, 60.0) + 0.37) / 61
    solver = SOLVERS[name]()
    ys = _solve_each(problem, solver, num_steps, oc.SaveAt(dense=True), lambda s: s.evaluate(tq))
    errors = np.abs(ys - reference(problem, tq)).max(axis=(-1, -2))
    assert np.all(errors > 1e-12), errors
    slope = _fitted_order(num_steps, errors, span)
    assert abs(slope - dense_order) <= 0.3, (slope, errors)


@pytest.mark.parametrize(
    "name", _cases([("Bosh3",), ("Tsit5",), ("Dopri5",), ("Dopri8",)], {"Dopri5"})
)
def test_saveat_ts_matches_dense_and_closed_form(name):
    problem = HARMONIC
    ts = jnp.linspace(problem.t0, problem.t1, 23)[1:-1] + 0.013
    sol = oc.diffeqsolve(
        problem.vector_field,
        SOLVERS[name](),
        problem.t0,
        problem.t1,
        0.1,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=oc.SaveAt(ts=ts, dense=True),
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
    )
    # `SaveAt(ts)` interpolates inside the step that crosses each time, with the same
    # polynomial `evaluate` uses.
    np.testing.assert_allclose(sol.ys, sol.evaluate(ts), rtol=0, atol=1e-13)
    np.testing.assert_allclose(sol.ts, ts, rtol=0, atol=0)
    # Five periods at rtol=atol=1e-8: the global error grows with the number of steps;
    # 1e-5 is a loose but informative bound (a wrong step or interpolant is O(1e-2)).
    np.testing.assert_allclose(sol.ys, reference(problem, ts), rtol=0, atol=1e-5)


@pytest.mark.parametrize("problem", CLOSED_FORM, ids=problem_ids(CLOSED_FORM))
def test_registry_closed_forms_match_scipy(problem):
    """Guards the registry itself: each closed form solves its ODE."""
    ts = (problem.t0 + 0.5 * (problem.t1 - problem.t0), problem.t1)
    expected = scipy_reference(problem, ts)
    np.testing.assert_allclose(reference(problem, ts), expected, rtol=1e-9, atol=1e-9)


def _counted(vector_field):
    """`vector_field` plus a host-side count of its evaluations (under jit too)."""
    calls = []

    def counted(t, y, args):
        jax.debug.callback(lambda: calls.append(None))
        return vector_field(t, y, args)

    return counted, calls


def _solve_counted(name, dt0, controller):
    problem = TANGENT
    vector_field, calls = _counted(problem.vector_field)

    @jax.jit
    def solve(y0):
        return oc.diffeqsolve(
            vector_field,
            SOLVERS[name](),
            problem.t0,
            problem.t1,
            dt0,
            y0,
            stepsize_controller=controller,
        )

    sol = jax.block_until_ready(solve(jnp.asarray(problem.y0)))
    jax.effects_barrier()
    num_steps = int(sol.stats["num_steps"])
    assert num_steps == int(sol.stats["num_accepted_steps"] + sol.stats["num_rejected_steps"])
    return sol, num_steps, len(calls)


ADAPTIVE = [name for name in ORDERS if name != "Euler"]
# Hairer's starting step evaluates f at (t0, y0) (not shared with the solver state)
# and at (t0 + h0, y0 + h0 f0).
INITIAL_STEP_EVALS = 2


@pytest.mark.parametrize("name", _cases([(n,) for n in ADAPTIVE], {"Midpoint", "Tsit5"}))
def test_vector_field_evaluations_adaptive(name):
    # Loose enough to be cheap, tight enough to reject steps near the pole of tan.
    controller = oc.PIDController(rtol=1e-5, atol=1e-5)
    sol, num_steps, num_calls = _solve_counted(name, None, controller)
    assert int(sol.stats["num_rejected_steps"]) > 0  # rejected steps cost evaluations too
    first = int(SOLVERS[name]().carries_first_stage)  # `init`'s evaluation, if any
    expected = first + EVALS_PER_STEP[name] * num_steps + INITIAL_STEP_EVALS
    assert num_calls == expected
    assert int(sol.stats["num_vf_evals"]) == expected


def test_vector_field_evaluations_explicit_dt0():
    controller = oc.PIDController(rtol=1e-5, atol=1e-5)
    sol, num_steps, num_calls = _solve_counted("Tsit5", 0.05, controller)
    assert int(sol.stats["num_rejected_steps"]) > 0
    assert num_calls == 1 + EVALS_PER_STEP["Tsit5"] * num_steps
    assert int(sol.stats["num_vf_evals"]) == num_calls


def test_vector_field_evaluations_constant():
    sol, num_steps, num_calls = _solve_counted("Euler", 0.1, oc.ConstantStepSize())
    assert num_steps == 14
    assert num_calls == EVALS_PER_STEP["Euler"] * 14  # Euler carries no stage
    assert int(sol.stats["num_vf_evals"]) == num_calls


@pytest.mark.parametrize("solver", [*EXPLICIT, *STIFF], ids=lambda solver: solver.__name__)
def test_registered_solvers_are_exported(solver):
    """Each registered solver is public as `odeckpt.<Name>` (its one export line)."""
    assert getattr(oc, solver.__name__) is solver
