"""Tests for the continuous adjoints: `BacksolveAdjoint` and `InterpolatingAdjoint`.

Gradients are checked against closed forms (linear systems, through the Fréchet
derivative of the matrix exponential, in NumPy/SciPy so that no JAX `expm` has to be
compiled) and against `CheckpointAdjoint` on nonlinear problems. Every distinct
configuration costs a compilation of several seconds, so the fast tests keep one case
per adjoint and problem class; the full tables are `@pytest.mark.slow`.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import LOTKA_VOLTERRA, VAN_DER_POL

import odeckpt as oc

RTOL, ATOL = 1e-6, 1e-8
TS = np.linspace(0.0, 10.0, 13)[1:]  # 12 output times in (0, 10]
CONTROLLER = oc.PIDController(rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------
# Linear systems: loss = sum_k 1^T expm(A t_k) y0, gradients in closed form


def oscillator(damping: float) -> tuple[np.ndarray, np.ndarray]:
    """x'' + damping x' + x = 0 as (A, y0)."""
    return np.array([[0.0, 1.0], [-1.0, -damping]]), np.array([1.0, 0.0])


def diagonal_decay() -> tuple[np.ndarray, np.ndarray]:
    """dy/dt = -diag(1, 10, 100, 1000) y."""
    return -np.diag([1.0, 10.0, 100.0, 1000.0]), np.ones(4)


def closed_form_gradient(a: np.ndarray, y0: np.ndarray, ts=TS):
    """d/dA and d/dy0 of sum_k 1^T expm(A t_k) y0.

    d/dA (w^T expm(tA) y0) = t L(t A^T, w y0^T), with L the Fréchet derivative of expm.
    """
    w = np.ones_like(y0)
    grad_a, grad_y0 = np.zeros_like(a), np.zeros_like(y0)
    for t in ts:
        _, frechet = scipy.linalg.expm_frechet(t * a.T, np.outer(w, y0))
        grad_a += t * frechet
        grad_y0 += scipy.linalg.expm(t * a).T @ w
    return grad_a, grad_y0


def linear_loss(a, y0, adjoint, throw=True, ts=TS):
    sol = oc.diffeqsolve(
        lambda t, y, a: a @ y,
        oc.Tsit5(),
        0.0,
        10.0,
        None,
        y0,
        a,
        saveat=oc.SaveAt(ts=jnp.asarray(ts)),
        stepsize_controller=CONTROLLER,
        adjoint=adjoint,
        throw=throw,
    )
    return jnp.sum(sol.ys)


# Module-level so that one configuration compiles once for every test that uses it.
_linear_gradient = jax.jit(jax.grad(linear_loss, argnums=(0, 1)), static_argnums=(2, 3))


def linear_gradient(a, y0, adjoint, throw=True):
    return _linear_gradient(jnp.asarray(a), jnp.asarray(y0), adjoint, throw)


def relative_error(got, want) -> float:
    got = np.concatenate([np.ravel(x) for x in jax.tree.leaves(got)])
    want = np.concatenate([np.ravel(x) for x in jax.tree.leaves(want)])
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


ADJOINTS = {
    "interpolating": oc.InterpolatingAdjoint(),
    "backsolve": oc.BacksolveAdjoint(),
}


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_linear_closed_form(adjoint):
    a, y0 = oscillator(damping=1.0)
    got = linear_gradient(a, y0, adjoint)
    assert relative_error(got, closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_damped_closed_form(adjoint):
    """A stiff oscillator: y is anchored (backsolve) or interpolated, never trusted
    backwards over more than one step; the forward grid's stiff steps are halved where
    an output's cotangent excites the adjoint's fast mode."""
    a, y0 = oscillator(damping=100.0)
    got = linear_gradient(a, y0, adjoint)
    assert relative_error(got, closed_form_gradient(a, y0)) <= 1e-5


def test_stiff_steps_of_the_forward_grid_are_split():
    """On the diagonal decay the forward steps sit at Tsit5's stability limit for the
    rate-1000 mode; taken whole, they leave ~1e-4 of error after each output's jump."""
    a, y0 = diagonal_decay()
    got = linear_gradient(a, y0, oc.InterpolatingAdjoint())
    assert relative_error(got, closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_stiff_mode_the_forward_solution_never_excites(adjoint):
    """y' = -diag(1, 1000) y from y0 = (1, 0): the fast mode stays exactly 0, so the
    forward steps are sized by the slow mode alone (h * 1000 in the hundreds, far past
    Tsit5's stability limit), while every output's cotangent excites the adjoint's fast
    mode. Those steps are split as often as the stiffness estimate asks."""
    a, y0 = -np.diag([1.0, 1000.0]), np.array([1.0, 0.0])
    got = linear_gradient(a, y0, adjoint)
    assert relative_error(got, closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.parametrize("solver", [oc.Rodas5P(), oc.Kvaerno5()], ids=["rodas5p", "kvaerno5"])
def test_explicit_adjoint_after_an_implicit_forward_solve(solver):
    """A stiff forced decay y' = -k (y - a sin t), k = 1000, solved implicitly: the
    forward steps are hundreds of times Tsit5's stability limit, and the adjoint steps
    with Tsit5 on that grid."""
    ts = jnp.asarray([0.5, 1.0, 2.0, 3.0])

    def loss(p, exact=False):
        k, amp = p
        if exact:
            decay = jnp.exp(-k * ts)
            forced = amp * k / (k**2 + 1) * (k * jnp.sin(ts) - jnp.cos(ts) + decay)
            return jnp.sum(decay + forced)
        sol = oc.diffeqsolve(
            lambda t, y, p: -p[0] * (y - p[1] * jnp.sin(t)),
            solver,
            0.0,
            3.0,
            None,
            jnp.asarray(1.0),
            p,
            saveat=oc.SaveAt(ts=ts),
            stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-8),
            adjoint=oc.InterpolatingAdjoint(solver=oc.Tsit5()),
            max_steps=4096,
        )
        return jnp.sum(sol.ys)

    p = (jnp.asarray(1000.0), jnp.asarray(1.0))
    got, want = jax.grad(loss)(p), jax.grad(loss)(p, exact=True)
    assert relative_error(got, want) <= 1e-5


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_nonfinite_adjoint_is_reported_not_returned(adjoint):
    """d/dk of sqrt(k) at k = 0 is inf: the adjoint's gradient is not finite."""

    def loss(k, throw):
        sol = oc.diffeqsolve(
            lambda t, y, k: -jnp.sqrt(k) * y,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            jnp.asarray([1.0]),
            k,
            adjoint=adjoint,
            throw=throw,
        )
        return jnp.sum(sol.ys)

    with pytest.raises(eqx.EquinoxRuntimeError, match="adjoint ODE's solution became non-finite"):
        jax.block_until_ready(jax.grad(loss)(jnp.asarray(0.0), True))
    assert np.isnan(jax.grad(loss)(jnp.asarray(0.0), False))


def test_replayed_checkpoints_give_the_stored_gradient():
    """Checkpoints change cost, never values: re-solving between them reproduces y."""
    a, y0 = oscillator(damping=1.0)
    stored = linear_gradient(a, y0, oc.InterpolatingAdjoint())
    replayed = linear_gradient(a, y0, oc.InterpolatingAdjoint(checkpoints=3))
    assert relative_error(replayed, stored) <= 1e-12


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_float32_pytree_state(adjoint):
    """y a dict of float32 arrays, args a float32 vector: y = y0 exp(-k t) per leaf."""

    def loss(y0, k):
        sol = oc.diffeqsolve(
            lambda t, y, k: {"u": -k * y["u"], "w": -2 * k * y["w"]},
            oc.Tsit5(),
            0.0,
            2.0,
            None,
            y0,
            k,
            saveat=oc.SaveAt(ts=jnp.asarray(ts)),
            stepsize_controller=oc.PIDController(rtol=1e-5, atol=1e-6),
            adjoint=adjoint,
        )
        return jnp.sum(sol.ys["u"]) + jnp.sum(sol.ys["w"])

    ts = np.array([0.5, 1.0, 2.0], np.float32)
    k = np.array([0.5, 1.0, 3.0])
    y0 = {"u": jnp.ones(3, jnp.float32), "w": jnp.full(3, 2.0, jnp.float32)}
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, jnp.asarray(k, jnp.float32))
    decay_u, decay_w = np.exp(-np.outer(ts, k)), np.exp(-2 * np.outer(ts, k))
    want = (
        {"u": decay_u.sum(0), "w": decay_w.sum(0)},
        -(ts @ decay_u) - 2 * 2.0 * (ts @ decay_w),
    )
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(got))
    assert relative_error(got, want) <= 1e-4


# ----------------------------------------------------------------------------------
# Divergence of the backward reconstruction


def test_backsolve_divergence_raises():
    """One anchor over [0, 10] on a damping-100 oscillator: y blows up backwards."""
    a, y0 = oscillator(damping=100.0)
    adjoint = oc.BacksolveAdjoint(checkpoints=1)
    with pytest.raises(Exception, match="InterpolatingAdjoint.*CheckpointAdjoint"):
        jax.block_until_ready(linear_gradient(a, y0, adjoint))


def test_backsolve_divergence_gives_nan_without_throw():
    a, y0 = oscillator(damping=100.0)
    got = linear_gradient(a, y0, oc.BacksolveAdjoint(checkpoints=1), throw=False)
    assert all(np.all(np.isnan(x)) for x in got)


# ----------------------------------------------------------------------------------
# Nonlinear problems: agreement with the discrete adjoint


def _problem_loss(y0, args, problem, adjoint):
    ts = jnp.linspace(problem.t0, problem.t1, 13)[1:]
    sol = oc.diffeqsolve(
        problem.vector_field,
        oc.Tsit5(),
        problem.t0,
        problem.t1,
        None,
        y0,
        args,
        saveat=oc.SaveAt(ts=ts, t1=True),
        stepsize_controller=CONTROLLER,
        adjoint=adjoint,
    )
    return jnp.sum(sol.ys)


_problem_grad = jax.jit(jax.grad(_problem_loss, argnums=(0, 1)), static_argnums=(2, 3))


def _problem_gradient(problem, adjoint):
    args = jax.tree.map(jnp.asarray, problem.args)
    return _problem_grad(jnp.asarray(problem.y0), args, problem, adjoint)


# Both adjoints are approximations of the exact gradient at the solver's accuracy, as
# is CheckpointAdjoint's (the exact gradient of the numerical solution): measured
# differences are 1-10 rtol (benchmarks/bench_damped.py). 20 rtol leaves a margin.
AGREEMENT = 20 * RTOL


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_lotka_volterra_agrees_with_checkpoint(adjoint):
    want = _problem_gradient(LOTKA_VOLTERRA, oc.CheckpointAdjoint())
    got = _problem_gradient(LOTKA_VOLTERRA, adjoint)
    assert relative_error(got, want) <= AGREEMENT


@functools.cache
def _neural_gradient(adjoint):
    mlp = eqx.nn.MLP(2, 2, 16, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    y0s = jax.random.normal(jax.random.PRNGKey(1), (8, 2))

    @eqx.filter_jit
    @eqx.filter_grad
    def grad(mlp):
        def one(y0):
            sol = oc.diffeqsolve(
                lambda t, y, args: mlp(y),
                oc.Tsit5(),
                0.0,
                1.0,
                None,
                y0,
                saveat=oc.SaveAt(ts=jnp.linspace(0.25, 1.0, 4)),
                stepsize_controller=CONTROLLER,
                adjoint=adjoint,
            )
            return jnp.sum(sol.ys**2)

        return jnp.mean(jax.vmap(one)(y0s))

    return eqx.filter(grad(mlp), eqx.is_inexact_array)


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_neural_ode_vmap_agrees_with_checkpoint(adjoint):
    """Parameters closed over by the vector field (an equinox module), batched."""
    got = _neural_gradient(adjoint)
    assert relative_error(got, _neural_gradient(oc.CheckpointAdjoint())) <= AGREEMENT


# ----------------------------------------------------------------------------------
# Unsupported combinations


def _oscillator_solve(adjoint, t0=0.0, t1=5.0, ts=(1.0, 2.0), damping=1.0, **kwargs):
    a = jnp.array([[0.0, 1.0], [-1.0, -damping]])
    return oc.diffeqsolve(
        lambda t, y, a: a @ y,
        oc.Tsit5(),
        t0,
        t1,
        None,
        jnp.array([1.0, 0.0]),
        a,
        saveat=kwargs.pop("saveat", oc.SaveAt(ts=jnp.asarray(ts))),
        stepsize_controller=CONTROLLER,
        adjoint=adjoint,
        **kwargs,
    )


@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
@pytest.mark.parametrize("which", ["t0", "t1", "ts"])
def test_time_gradients_are_refused(adjoint, which):
    def loss(t):
        times = {"t0": dict(t0=t - 1.0), "t1": dict(t1=t + 3.0), "ts": dict(ts=(1.0, t))}
        return jnp.sum(_oscillator_solve(adjoint, **times[which]).ys)

    with pytest.raises(ValueError, match=r"`t0`, `t1` or `SaveAt\(ts=...\)`.*CheckpointAdjoint"):
        jax.grad(loss)(1.5)


def test_dense_output_gradient_is_refused():
    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, args: -y,
            oc.Tsit5(),
            0.0,
            1.0,
            None,
            y0,
            saveat=oc.SaveAt(dense=True),
            stepsize_controller=CONTROLLER,
            adjoint=oc.InterpolatingAdjoint(),
        )
        return jnp.sum(sol.evaluate(0.5))

    with pytest.raises(ValueError, match=r"SaveAt\(dense=True\).*CheckpointAdjoint"):
        jax.grad(loss)(jnp.ones(2))


def test_unbounded_loop_is_refused():
    with pytest.raises(ValueError, match="needs a bounded loop"):
        _oscillator_solve(oc.BacksolveAdjoint(), max_steps=None)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: oc.BacksolveAdjoint(checkpoints=0), "positive integer"),
        (lambda: oc.InterpolatingAdjoint(checkpoints=1.5), "positive integer"),
        (
            lambda: oc.InterpolatingAdjoint(stepsize_controller=oc.ConstantStepSize()),
            "must be an adaptive controller",
        ),
        (lambda: oc.BacksolveAdjoint(solver="Tsit5"), "must be a Runge–Kutta solver"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ----------------------------------------------------------------------------------
# The full tables (slow)

CASES = {
    "damping1": oscillator(1.0),
    "damping10": oscillator(10.0),
    "damping100": oscillator(100.0),
    "damping1000": oscillator(1000.0),
    "diagonal": diagonal_decay(),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.keys())
def test_interpolating_adaptive_on_damped_cases(case):
    a, y0 = CASES[case]
    adjoint = oc.InterpolatingAdjoint(stepsize_controller=CONTROLLER)
    assert relative_error(linear_gradient(a, y0, adjoint), closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.keys())
def test_interpolating_forward_grid_on_damped_cases(case):
    a, y0 = CASES[case]
    got = linear_gradient(a, y0, oc.InterpolatingAdjoint())
    assert relative_error(got, closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.keys())
@pytest.mark.parametrize("checkpoints", [None, 1], ids=["anchored", "one-anchor"])
def test_backsolve_is_right_or_says_so(case, checkpoints):
    a, y0 = CASES[case]
    got = linear_gradient(a, y0, oc.BacksolveAdjoint(checkpoints=checkpoints), throw=False)
    flagged = all(np.all(np.isnan(x)) for x in got)
    assert flagged or relative_error(got, closed_form_gradient(a, y0)) <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("seminorm", [True, False])
def test_backsolve_adaptive(seminorm):
    a, y0 = oscillator(damping=10.0)
    adjoint = oc.BacksolveAdjoint(stepsize_controller=CONTROLLER, seminorm=seminorm)
    assert relative_error(linear_gradient(a, y0, adjoint), closed_form_gradient(a, y0)) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_van_der_pol_agrees_with_checkpoint(adjoint):
    want = _problem_gradient(VAN_DER_POL, oc.CheckpointAdjoint())
    got = _problem_gradient(VAN_DER_POL, adjoint)
    assert relative_error(got, want) <= AGREEMENT


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", ADJOINTS.values(), ids=ADJOINTS.keys())
def test_saveat_steps_and_t1(adjoint):
    """Cotangents of every accepted step's output jump `a` at that step."""

    def loss(a, adjoint):
        sol = _oscillator_solve(adjoint, saveat=oc.SaveAt(steps=True, t1=True), damping=a)
        return jnp.sum(jnp.where(jnp.isfinite(sol.ys), sol.ys, 0.0) ** 2)

    grad = jax.grad(loss)
    assert relative_error(grad(2.0, adjoint), grad(2.0, oc.CheckpointAdjoint())) <= AGREEMENT
