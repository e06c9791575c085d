"""Gradient accuracy: every adjoint x adaptive solver x registry problem x `SaveAt`.

**Loss.** `L = sum_k sum_i W[k, i] y_i(t_k)` over the saved outputs, with fixed O(1)
weights `W[k, i] = 1 + sin(1 + 0.7 k + 1.9 i) / 2` (rows of `SaveAt(steps=True)` past
the last step are inf and left out).

**References**, independent of odeckpt (`helpers.sensitivities`): the matrix
exponential and its Fréchet derivative for linear problems, `jax.jacfwd` of the
formula for the other closed form, and SciPy's DOP853 at `rtol = atol = 1e-12` on the
forward-sensitivity system for nonlinear problems. The step-size controller's choices
are not differentiated (the gradient is taken on the accepted time grid), so for
`SaveAt(steps=True)` the reference is the same loss over the exact solution at the
solve's own step times, held fixed.

**Error measure.** Solves run at `rtol = atol = TOL = 1e-8`. For each leaf `g` of the
gradient with respect to `y0` and `args`, with reference `r`,

    error(g, r) = max |g - r| / (TOL * max(1, max |r|))

is the error in units of the tolerance: the controller's mixed absolute/relative test
applied to the gradient, normwise per leaf (a small entry is held to its leaf's scale,
as in `odeckpt.testing`), with the absolute part `TOL` in loss units (states and
weights are O(1)); the worst leaf counts.

**What the tolerance buys.** The controller bounds the local error of `y`, not of
`dy/dy0` or `dy/dargs`: differentiating a solve integrates the sensitivities on a grid
chosen for `y` alone, and their global error is not bounded by `TOL`. Integrating the
forward-sensitivity system with SciPy's method of the same order at `TOL`, with steps
controlled by `y` alone as well, misses the exact gradient by 10-260 TOL on
Lotka–Volterra and the 5-period oscillators, and by ~1e3 TOL over Arenstorf's orbit.
So each case's error is measured against

    budget = max(1, error of that SciPy solve (RK23 for Bosh3, RK45 for Tsit5 and
                    Dopri5, DOP853 for Dopri8), error(y at the saved times, exact y))

(the second term: an output is no more accurate than the dense output it is read
from, e.g. Dopri8's fifth-order interpolant under `SaveAt(ts=...)`). Where the solve
reaches its tolerance the budget is 1 and this is plain "error <= 10 TOL".
Discretise-then-optimise (`CheckpointAdjoint`, `ForwardMode`) must reach
`error <= 10 budget`; the continuous adjoints, which solve the adjoint ODE on the
forward grid, `error <= 100 budget`.

The default run keeps each adjoint with each `SaveAt` mode and each problem at least once
(the solver and `SaveAt` rotate across problems); the rest of the matrix is
`@pytest.mark.slow`.
"""

import functools

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import (
    ADJOINTS,
    CLOSED_FORM,
    DAMPED,
    HARMONIC,
    PROBLEMS,
    ODEProblem,
    forward_sensitivities,
    problem_ids,
    sensitivities,
    solved_sensitivities,
    time_derivative,
)
from hypothesis import HealthCheck, given, settings, strategies as st

import odeckpt as oc

TOL = 1e-8
CONTROLLER = oc.PIDController(rtol=TOL, atol=TOL)
DTO_BOUND = 10.0  # discretise-then-optimise, in units of TOL
CONTINUOUS_BOUND = 100.0

SOLVERS = {"bosh3": oc.Bosh3(), "tsit5": oc.Tsit5(), "dopri5": oc.Dopri5(), "dopri8": oc.Dopri8()}
MAX_STEPS = {"bosh3": 8192, "tsit5": 1024, "dopri5": 1024, "dopri8": 1024}
SAVES = ("t1", "ts", "steps")
# SciPy's method of the same order, for the budget (module docstring).
YARDSTICK = {"bosh3": "RK23", "tsit5": "RK45", "dopri5": "RK45", "dopri8": "DOP853"}


def bound(adjoint_name: str) -> float:
    continuous = isinstance(ADJOINTS[adjoint_name], oc.BacksolveAdjoint | oc.InterpolatingAdjoint)
    return CONTINUOUS_BOUND if continuous else DTO_BOUND


def weights(m: int, n: int) -> np.ndarray:
    k, i = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    return 1.0 + 0.5 * np.sin(1.0 + 0.7 * k + 1.9 * i)


def save_times(problem: ODEProblem) -> np.ndarray:
    """Five outputs in `(t0, t1]`, unevenly spaced."""
    return problem.t0 + (problem.t1 - problem.t0) * np.array([0.15, 0.4, 0.55, 0.8, 1.0])


def saveat(problem: ODEProblem, save: str) -> oc.SaveAt:
    if save == "t1":
        return oc.SaveAt(t1=True)
    if save == "ts":
        return oc.SaveAt(ts=save_times(problem))
    return oc.SaveAt(steps=True)


def as_arrays(args):
    return jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), args)


def _loss(y0, args, t1, problem, solver, adjoint, save):
    """`(L, (saved times, saved states))`."""
    sol = oc.diffeqsolve(
        problem.vector_field,
        SOLVERS[solver],
        problem.t0,
        problem.t1 if t1 is None else t1,
        None,
        y0,
        args,
        saveat=saveat(problem, save),
        stepsize_controller=CONTROLLER,
        adjoint=adjoint,
        max_steps=MAX_STEPS[solver],
    )
    ys = jnp.where(jnp.isfinite(sol.ys), sol.ys, 0.0)
    return jnp.sum(jnp.asarray(weights(*ys.shape)) * ys), (sol.ts, sol.ys)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _gradient(y0, args, t1, problem, solver, adjoint, save, argnums):
    """`(dL/d(y0, args, t1)[argnums], (saved times, saved states))`; forward mode for
    `ForwardMode`, reverse mode otherwise. Compiled once per problem and configuration."""
    if isinstance(adjoint, oc.ForwardMode):
        derivative = jax.jacfwd(_loss, argnums=argnums, has_aux=True)
    else:
        derivative = jax.grad(_loss, argnums=argnums, has_aux=True)
    return derivative(y0, args, t1, problem, solver, adjoint, save)


def gradient(problem: ODEProblem, solver: str, adjoint: str, save: str):
    """`((dL/dy0, dL/dargs), (saved times, saved states))` as NumPy."""
    y0, args = jnp.asarray(problem.y0), as_arrays(problem.args)
    grads, saved = _gradient(y0, args, None, problem, solver, ADJOINTS[adjoint], save, (0, 1))
    return jax.tree.map(np.asarray, (grads, saved))


def error(got, want) -> float:
    """The worst leaf's `max |g - r| / (TOL max(1, max |r|))` (module docstring)."""
    errors = [
        np.max(np.abs(g - r)) / (TOL * max(1.0, float(np.max(np.abs(r)))))
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    ]
    return max(errors, default=0.0)


def check(problem: ODEProblem, solver: str, grads, saved) -> tuple[float, float]:
    """`(error, budget)` of `grads` (module docstring), from the saved times and states."""
    ts, ys = saved
    rows = np.isfinite(ts)
    times = tuple(float(t) for t in ts[rows])
    w = weights(ts.size, problem.y0.size)[rows]
    exact = sensitivities(problem, times)
    want = exact.gradient(w)
    standard = solved_sensitivities(problem, times, YARDSTICK[solver], TOL).gradient(w)
    budget = max(1.0, error(standard, want), error(ys[rows], exact.ys))
    return error(grads, want), budget


# ----------------------------------------------------------------------------------
# Every adjoint x solver x problem x SaveAt against the reference

ROTATION = ("tsit5", "dopri5", "dopri8", "bosh3")
DEFAULT = {p.name: (ROTATION[i % 4], SAVES[i % 3]) for i, p in enumerate(PROBLEMS)}
"""Each problem's `(solver, save)` in the default run."""
_NAMES = tuple(ADJOINTS)
DEFAULT_ADJOINTS = {p.name: {_NAMES[i % 5], _NAMES[(i + 1) % 5]} for i, p in enumerate(PROBLEMS)}
"""Each problem's two adjoints in the rotation: it puts every adjoint with every SaveAt
mode and several problems."""
# Pairs of the rotation left to `-m slow`: a second checkpoint count, or a second problem
# with the same adjoint and `SaveAt`. The default cases cover the path: `CheckpointAdjoint`
# decay-tsit5-t1-checkpoint_3, tangent-tsit5-ts-checkpoint and
# lotka_volterra-dopri5-steps-checkpoint; linear_system-dopri5-ts-backsolve;
# harmonic-dopri8-steps-interpolating.
ROTATION_SLOW = {
    ("decay", "checkpoint"),
    ("linear_system", "checkpoint_3"),
    ("lotka_volterra", "checkpoint_3"),
    ("van_der_pol", "checkpoint_3"),
    ("arenstorf", "backsolve"),
    ("forced", "interpolating"),
    ("mlp", "checkpoint"),
}


def _case(problem: ODEProblem, solver: str, save: str, adjoint: str):
    default = (
        DEFAULT[problem.name] == (solver, save)
        and adjoint in DEFAULT_ADJOINTS[problem.name]
        and (problem.name, adjoint) not in ROTATION_SLOW
    )
    return pytest.param(
        problem,
        solver,
        save,
        adjoint,
        id=f"{problem.name}-{solver}-{save}-{adjoint}",
        marks=() if default else (pytest.mark.slow,),
    )


CASES = [
    _case(problem, solver, save, adjoint)
    for problem in PROBLEMS
    for solver in SOLVERS
    for save in SAVES
    for adjoint in ADJOINTS
]


@pytest.mark.parametrize("problem, solver, save, adjoint", CASES)
def test_gradient_matches_reference(problem, solver, save, adjoint):
    grads, saved = gradient(problem, solver, adjoint, save)
    err, budget = check(problem, solver, grads, saved)
    assert err <= bound(adjoint) * budget, (
        f"error {err:.3g} TOL > {bound(adjoint):g} x budget {budget:.3g} TOL"
    )


@pytest.mark.parametrize("problem", CLOSED_FORM, ids=problem_ids(CLOSED_FORM))
def test_closed_form_references_agree_with_forward_sensitivities(problem):
    """The two independent references: closed form vs SciPy's sensitivity solve."""
    ts = tuple(float(t) for t in save_times(problem))
    closed = sensitivities(problem, ts)
    solved = forward_sensitivities(problem, np.asarray(ts))
    for got, want in zip(
        (solved.ys, solved.dy0, solved.dargs), (closed.ys, closed.dy0, closed.dargs), strict=True
    ):
        scale = np.max(np.abs(want), initial=1.0)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale)


# ----------------------------------------------------------------------------------
# The gradient with respect to t1: dL/dt1 = w . f(t1, y(t1))

DTO = ("checkpoint", "checkpoint_3", "forward_mode")
CONTINUOUS = ("backsolve", "interpolating")
T1_DEFAULT = {("harmonic", "checkpoint"), ("damped", "forward_mode")}


@pytest.mark.parametrize(
    "problem, adjoint",
    [
        pytest.param(
            problem,
            adjoint,
            id=f"{problem.name}-{adjoint}",
            marks=() if (problem.name, adjoint) in T1_DEFAULT else (pytest.mark.slow,),
        )
        for problem in (HARMONIC, DAMPED)
        for adjoint in DTO
    ],
)
def test_gradient_with_respect_to_t1(problem, adjoint):
    y0, args, t1 = jnp.asarray(problem.y0), as_arrays(problem.args), jnp.asarray(problem.t1)
    grad_t1, (_, ys) = _gradient(y0, args, t1, problem, "tsit5", ADJOINTS[adjoint], "t1", 2)
    want = weights(1, problem.y0.size)[0] @ time_derivative(problem, problem.t1)
    (y_exact,) = sensitivities(problem, (problem.t1,)).ys
    budget = max(1.0, error(np.asarray(ys[0]), y_exact))  # the error of y(t1) itself
    assert error(np.asarray(grad_t1), want) <= DTO_BOUND * budget


@pytest.mark.parametrize("adjoint", CONTINUOUS)
def test_gradient_with_respect_to_t1_is_refused_by_continuous_adjoints(adjoint):
    problem = HARMONIC
    y0, args, t1 = jnp.asarray(problem.y0), as_arrays(problem.args), jnp.asarray(problem.t1)
    with pytest.raises(ValueError, match=r"`t0`, `t1` or `SaveAt\(ts=...\)`.*CheckpointAdjoint"):
        _gradient(y0, args, t1, problem, "tsit5", ADJOINTS[adjoint], "t1", 2)


# ----------------------------------------------------------------------------------
# Schedule invariance over the registry: checkpoints change cost, never values
# (tests/test_checkpoint.py covers every SaveAt on Lotka–Volterra)

SCHEDULE_PROBLEMS = ("linear_system", "van_der_pol", "forced", "mlp")  # <= 120 steps each
COUNTS = (1, 2, 3, 7, 1024)  # 1024 = max_steps: more checkpoints than steps
SCHEDULE_DEFAULT = {("forced", 1)}


@pytest.mark.parametrize(
    "problem, c",
    [
        pytest.param(
            problem,
            c,
            id=f"{problem.name}-{c}",
            marks=() if (problem.name, c) in SCHEDULE_DEFAULT else (pytest.mark.slow,),
        )
        for problem in PROBLEMS
        if problem.name in SCHEDULE_PROBLEMS
        for c in COUNTS
    ],
)
def test_every_checkpoint_count_gives_the_stored_gradient(problem, c):
    """On each problem's default solver and `SaveAt` (so the stored gradient's
    compilation is shared with `test_gradient_matches_reference`)."""
    solver, save = DEFAULT[problem.name]
    y0, args = jnp.asarray(problem.y0), as_arrays(problem.args)
    stored, _ = _gradient(y0, args, None, problem, solver, ADJOINTS["checkpoint"], save, (0, 1))
    adjoint = oc.CheckpointAdjoint(checkpoints=c)
    recomputed, _ = _gradient(y0, args, None, problem, solver, adjoint, save, (0, 1))
    for got, want in zip(jax.tree.leaves(recomputed), jax.tree.leaves(stored), strict=True):
        scale = max(1.0, float(jnp.max(jnp.abs(want))))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * scale)


# ----------------------------------------------------------------------------------
# Property tests: random stable linear systems and random PyTrees of y0

PROPERTY = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def stable_systems(draw):
    """`(A, y0, t0, t1)`: `A` n x n (n in 1..5) with spectral abscissa in [-1, -0.1]
    (so `||expm(tA)||` stays moderate over the span in either direction)."""
    n = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m = rng.normal(size=(n, n)) / np.sqrt(n)
    abscissa = draw(st.floats(0.1, 1.0))
    a = m - (np.max(np.linalg.eigvals(m).real) + abscissa) * np.eye(n)
    t0 = draw(st.floats(-1.0, 1.0))
    span = draw(st.floats(0.3, 2.0)) * draw(st.sampled_from([1.0, -1.0]))
    return a, rng.normal(size=n), t0, t0 + span


def _linear_loss(a, y0, t0, t1, adjoint):
    sol = oc.diffeqsolve(
        lambda t, y, a: a @ y,
        oc.Tsit5(),
        t0,
        t1,
        None,
        y0,
        a,
        stepsize_controller=CONTROLLER,
        adjoint=adjoint,
        max_steps=1024,
    )
    return jnp.sum(jnp.asarray(weights(1, y0.shape[0])) * sol.ys)


@functools.partial(jax.jit, static_argnums=4)
def _linear_gradient(a, y0, t0, t1, adjoint):
    if isinstance(adjoint, oc.ForwardMode):
        return jax.jacfwd(_linear_loss, argnums=(0, 1))(a, y0, t0, t1, adjoint)
    return jax.grad(_linear_loss, argnums=(0, 1))(a, y0, t0, t1, adjoint)


def linear_closed_form(a, y0, tau):
    """`(dL/dA, dL/dy0)` of `L = w . expm(tau A) y0`: `dL/dA = tau L(tau A^T, w y0^T)`,
    with `L` the Fréchet derivative of `expm`; `dL/dy0 = expm(tau A)^T w`."""
    w = weights(1, y0.size)[0]
    expm, frechet = scipy.linalg.expm_frechet(tau * a.T, tau * np.outer(w, y0))
    return frechet, expm @ w


@pytest.mark.parametrize(
    "adjoint",
    [
        "checkpoint",
        *(pytest.param(a, marks=pytest.mark.slow) for a in ADJOINTS if a != "checkpoint"),
    ],
)
@PROPERTY
@given(system=stable_systems())
def test_random_stable_linear_system(adjoint, system):
    a, y0, t0, t1 = system
    got = _linear_gradient(jnp.asarray(a), jnp.asarray(y0), t0, t1, ADJOINTS[adjoint])
    want = linear_closed_form(a, y0, t1 - t0)
    assert error(jax.tree.map(np.asarray, got), want) <= bound(adjoint)


class Leaf:
    """A leaf's shape, hidden from `jax.tree` (a tuple would be a PyTree node)."""

    def __init__(self, shape):
        self.shape = shape

    def __repr__(self):
        return f"Leaf{self.shape}"


def _is_leaf(x):
    return isinstance(x, Leaf)


LEAVES = st.builds(Leaf, hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
TREES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, min_size=1, max_size=3).map(list)
        | st.lists(children, min_size=1, max_size=3).map(tuple)
        | st.dictionaries(st.sampled_from("abc"), children, min_size=1, max_size=3)
    ),
    max_leaves=4,
)
PYTREE_TOL = {"float64": TOL, "float32": 1e-5}
PYTREE_T1 = 1.5


def _pytree_solve(y0, rates, tol):
    return oc.diffeqsolve(
        lambda t, y, k: jax.tree.map(lambda k, y: -k * y, k, y),
        oc.Bosh3(),
        0.0,
        PYTREE_T1,
        None,
        y0,
        rates,
        stepsize_controller=oc.PIDController(rtol=tol, atol=tol),
        max_steps=1024,
    )


def _pytree_loss(y0, rates, tol):
    sol = _pytree_solve(y0, rates, tol)
    parts = [jnp.sum(jnp.asarray(_leaf_weights(y)) * y[0]) for y in jax.tree.leaves(sol.ys)]
    return sum(parts)


_pytree_final = jax.jit(lambda y0, rates, tol: _pytree_solve(y0, rates, tol).ys, static_argnums=2)


def _leaf_weights(y) -> np.ndarray:
    shape = y.shape[1:]
    return (1.0 + 0.5 * np.sin(np.arange(int(np.prod(shape))))).reshape(shape).astype(y.dtype)


_pytree_gradient = jax.jit(jax.grad(_pytree_loss, argnums=(0, 1)), static_argnums=2)


@settings(PROPERTY, max_examples=8)
@given(structure=TREES, dtype=st.sampled_from(["float64", "float32"]), seed=st.integers(0, 99))
def test_random_pytree_state(structure, dtype, seed):
    """`y' = -k y` leafwise: `y = y0 exp(-k t)`, gradients in closed form, within
    `DTO_BOUND` times the tolerance plus the forward solution's own error."""
    rng = np.random.default_rng(seed)
    y0 = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(dtype), structure, is_leaf=_is_leaf)
    rates = jax.tree.map(
        lambda s: rng.uniform(0.2, 2.0, s.shape).astype(dtype), structure, is_leaf=_is_leaf
    )
    tol = PYTREE_TOL[dtype]
    got = _pytree_gradient(y0, rates, tol)
    decay = jax.tree.map(lambda k: np.exp(-k.astype(np.float64) * PYTREE_T1), rates)
    w = jax.tree.map(lambda y: _leaf_weights(y[None]).astype(np.float64), y0)
    want_y0 = jax.tree.map(lambda w, d: w * d, w, decay)
    want_k = jax.tree.map(lambda w, d, y: -PYTREE_T1 * w * d * y, w, decay, y0)
    for grads in got:
        assert all(x.dtype == np.dtype(dtype) for x in jax.tree.leaves(grads))
    assert jax.tree.structure(got[0]) == jax.tree.structure(y0)
    # The forward solution's own relative error (`y0 exp(-k t1)` in closed form): a
    # discretise-then-optimise gradient is as accurate as what it differentiates.
    final = jax.tree.map(lambda y: np.asarray(y[0], np.float64), _pytree_final(y0, rates, tol))
    exact = jax.tree.map(lambda y, d: np.asarray(y, np.float64) * d, y0, decay)
    forward = max(
        np.max(np.abs(y - e) / np.maximum(np.abs(e), tol))
        for y, e in zip(jax.tree.leaves(final), jax.tree.leaves(exact), strict=True)
    )
    unit = tol + forward
    errors = [
        np.max(np.abs(np.asarray(g, np.float64) - r)) / (unit * max(1.0, np.max(np.abs(r))))
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves((want_y0, want_k)), strict=True)
    ]
    assert max(errors) <= DTO_BOUND
