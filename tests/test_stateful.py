"""Solvers that carry state `init` cannot rebuild (`LeapfrogMidpoint`, `ReversibleHeun`):
convergence orders, diffrax's values step for step, `ReversibleHeun`'s algebraic
inverse, checkpoints that store the solver state (gradients independent of the
checkpoint count), every adjoint, `jax.vmap`, float32, complex and PyTree states, both
time directions and strict promotion.

References: closed forms (`expm` for linear problems, `tests/helpers.py`), diffrax
0.7.2's own implementation of both methods, `jax.jacfwd` of the same discrete solve.
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HARMONIC, LINEAR_SYSTEM, TANGENT, exact, reference

import odeckpt as oc
from odeckpt._solvers import STATEFUL

SOLVERS = {cls.__name__: cls for cls in STATEFUL}
ORDERS = {"LeapfrogMidpoint": 2, "ReversibleHeun": 2}  # hard-coded: not read from the class
PEERS = {"LeapfrogMidpoint": dfx.LeapfrogMidpoint, "ReversibleHeun": dfx.ReversibleHeun}
PID = oc.PIDController(rtol=1e-4, atol=1e-6)


def _lotka_volterra(t, y, args):
    """Lotka–Volterra with a time-dependent forcing (so `t` matters)."""
    prey, predator = y[0], y[1]
    return jnp.stack([args * prey - prey * predator, prey * predator - predator + 0.1 * jnp.sin(t)])


LV_Y0 = np.array([1.0, 0.5])


def _one_solver(default):
    """Each solver, `slow` but for `default` (the other runs the same path by default)."""
    return [n if n == default else pytest.param(n, marks=pytest.mark.slow) for n in SOLVERS]


# the harmonic oscillator: slow; the tangent problem measures each solver's order
@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize(
    "problem", [TANGENT, pytest.param(HARMONIC, marks=pytest.mark.slow)], ids=lambda p: p.name
)
def test_convergence_order(name, problem):
    num_steps = [100, 200, 400, 800]
    span = problem.t1 - problem.t0

    @jax.jit
    def final(dt0):
        sol = oc.diffeqsolve(
            problem.vector_field,
            SOLVERS[name](),
            problem.t0,
            problem.t1,
            dt0,
            jnp.asarray(problem.y0),
            problem.args,
            max_steps=801,
        )
        return sol.ys[-1]

    ys = np.stack([np.asarray(final(span / n)) for n in num_steps])
    errors = np.abs(ys - reference(problem, [problem.t1])).max(axis=-1)
    assert np.all(errors > 1e-12), errors
    slope = np.polyfit(np.log(span / np.asarray(num_steps)), np.log(errors), 1)[0]
    assert abs(slope - ORDERS[name]) <= 0.3, (slope, errors)


def _slow(*values):
    return pytest.param(*values, marks=pytest.mark.slow)


DIFFRAX_CASES = [
    ("LeapfrogMidpoint", "constant", 0.0, 3.0),
    _slow("LeapfrogMidpoint", "constant", 3.0, 0.0),
    _slow("ReversibleHeun", "constant", 0.0, 3.0),
    ("ReversibleHeun", "pid", 3.0, 0.0),
]


@pytest.mark.parametrize("name, control, t0, t1", DIFFRAX_CASES)
def test_matches_diffrax_step_for_step(name, control, t0, t1):
    """The same values at the save times (dense output included) and the same steps."""
    ts = np.linspace(t0, t1, 8)
    dt0 = 0.05 if t1 > t0 else -0.05
    ours = oc.diffeqsolve(
        _lotka_volterra,
        SOLVERS[name](),
        t0,
        t1,
        dt0,
        jnp.asarray(LV_Y0),
        1.5,
        saveat=oc.SaveAt(ts=ts),
        max_steps=4096,
        stepsize_controller=PID if control == "pid" else oc.ConstantStepSize(),
    )
    theirs = dfx.diffeqsolve(
        dfx.ODETerm(_lotka_volterra),
        PEERS[name](),
        t0,
        t1,
        dt0,
        jnp.asarray(LV_Y0),
        1.5,
        saveat=dfx.SaveAt(ts=ts),
        max_steps=4096,
        stepsize_controller=dfx.PIDController(rtol=1e-4, atol=1e-6)
        if control == "pid"
        else dfx.ConstantStepSize(),
    )
    np.testing.assert_allclose(ours.ys, theirs.ys, rtol=1e-12, atol=1e-13)
    assert int(ours.stats["num_steps"]) == int(theirs.stats["num_steps"])


def _forward_then_back(y0, num_steps: int, dt: float):
    """The state after `num_steps` steps of `ReversibleHeun`, and the initial state
    reconstructed from it by as many `reverse_step`s."""
    solver, term = oc.ReversibleHeun(), oc.ODETerm(_lotka_volterra)
    times = jnp.arange(num_steps, dtype=float) * dt

    def forward(carry, t0):
        y, state = carry
        out = solver.attempt(term, t0, jnp.asarray(dt), y, state, 1.5, dense=False)
        return (out.y1, out.state), None

    def backward(carry, t0):
        y, state = carry
        return solver.reverse_step(term, t0, jnp.asarray(dt), y, state, 1.5), None

    start = (y0, solver.init_state(term, times[0], y0, 1.5))
    end, _ = jax.lax.scan(forward, start, times)
    back, _ = jax.lax.scan(backward, end, times, reverse=True)
    return start, end, back


def test_reversible_heun_reverse_step_reconstructs_the_initial_state():
    """From the final `(y, yhat, vf)`, 1000 inverse steps give `(y0, yhat0, vf0)` to
    round-off (the state itself moved by O(1))."""
    start, end, back = _forward_then_back(jnp.asarray(LV_Y0), 1000, 0.01)
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(end[0], LV_Y0, strict=True))
    assert moved > 0.1
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(start), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def _loss(solver, adjoint, controller, t0=0.0, t1=3.0, dtype=jnp.float64):
    ts = jnp.linspace(t0, t1, 5, dtype=dtype)
    dt0 = (t1 - t0) / 60

    def loss(y0, args):
        sol = oc.diffeqsolve(
            _lotka_volterra,
            solver,
            t0,
            t1,
            dt0,
            y0,
            args,
            adjoint=adjoint,
            saveat=oc.SaveAt(ts=ts),
            stepsize_controller=controller,
            max_steps=512,
        )
        return jnp.sum(sol.ys**2)

    return loss


CONTROLS = {"constant": oc.ConstantStepSize(), "pid": PID}
CHECKPOINT_CASES = [
    _slow("LeapfrogMidpoint", "constant", 0.0, 3.0),
    _slow("LeapfrogMidpoint", "constant", 3.0, 0.0),
    _slow("ReversibleHeun", "constant", 0.0, 3.0),
    ("ReversibleHeun", "pid", 3.0, 0.0),
]


@pytest.mark.parametrize("name, control, t0, t1", CHECKPOINT_CASES)
def test_checkpoints_store_the_solver_state(name, control, t0, t1):
    """A replayed step restarts from the stored solver state: the gradient does not
    depend on the number of checkpoints, and equals forward mode's (the same discrete
    solve differentiated forwards)."""
    y0, solver, controller = jnp.asarray(LV_Y0), SOLVERS[name](), CONTROLS[control]
    every = jax.grad(_loss(solver, oc.CheckpointAdjoint(), controller, t0, t1), (0, 1))(y0, 1.5)
    three = jax.grad(
        _loss(solver, oc.CheckpointAdjoint(checkpoints=3), controller, t0, t1), (0, 1)
    )(y0, 1.5)
    forward = jax.jacfwd(_loss(solver, oc.ForwardMode(), controller, t0, t1), (0, 1))(y0, 1.5)
    for a, b, c in zip(
        jax.tree.leaves(every), jax.tree.leaves(three), jax.tree.leaves(forward), strict=True
    ):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c, a, rtol=1e-10, atol=1e-10)


CONTINUOUS = {
    "backsolve": oc.BacksolveAdjoint(solver=oc.Tsit5()),
    "interpolating": oc.InterpolatingAdjoint(solver=oc.Tsit5()),
    "interpolating-checkpoints": oc.InterpolatingAdjoint(solver=oc.Tsit5(), checkpoints=4),
}


def _linear_loss(solver, adjoint, num_steps: int):
    problem = LINEAR_SYSTEM
    dt0 = (problem.t1 - problem.t0) / num_steps

    def loss(y0, matrix):
        sol = oc.diffeqsolve(
            problem.vector_field,
            solver,
            problem.t0,
            problem.t1,
            dt0,
            y0,
            matrix,
            adjoint=adjoint,
            max_steps=num_steps,
        )
        return jnp.sum(sol.ys[-1] ** 2)

    return loss


def _exact_linear_grad():
    problem = LINEAR_SYSTEM
    loss = lambda y0, a: jnp.sum(exact(problem, problem.t1, y0, a) ** 2)
    return jax.grad(loss, (0, 1))(jnp.asarray(problem.y0), jnp.asarray(problem.args))


CONTINUOUS_CASES = [
    _slow("LeapfrogMidpoint", "backsolve"),
    _slow("LeapfrogMidpoint", "interpolating"),
    _slow("LeapfrogMidpoint", "interpolating-checkpoints"),
    _slow("ReversibleHeun", "backsolve"),
    _slow("ReversibleHeun", "interpolating"),
    ("ReversibleHeun", "interpolating-checkpoints"),
]


@pytest.mark.parametrize("name, adjoint", CONTINUOUS_CASES)
def test_continuous_adjoints_against_the_exact_gradient(name, adjoint):
    """The continuous adjoints (backward pass with Tsit5) give the gradient of the exact
    solution to within the forward solve's own O(h^2) error, as the discrete one does."""
    problem, solver = LINEAR_SYSTEM, SOLVERS[name]()
    y0, matrix = jnp.asarray(problem.y0), jnp.asarray(problem.args)
    got = jax.grad(_linear_loss(solver, CONTINUOUS[adjoint], 300), (0, 1))(y0, matrix)
    discrete = jax.grad(_linear_loss(solver, oc.CheckpointAdjoint(), 300), (0, 1))(y0, matrix)
    for g, d, e in zip(
        jax.tree.leaves(got),
        jax.tree.leaves(discrete),
        jax.tree.leaves(_exact_linear_grad()),
        strict=True,
    ):
        scale = float(jnp.max(jnp.abs(e)))
        assert float(jnp.max(jnp.abs(g - e))) <= 1e-2 * scale
        assert float(jnp.max(jnp.abs(d - e))) <= 1e-2 * scale


def _value(loss, differentiate: bool):
    """`loss` itself, or its value and gradient in `y0` (the slow, compiled-twice case)."""
    return jax.value_and_grad(loss) if differentiate else loss


# The solve alone in the default run; its gradient (a larger compilation) is slow.
DIFFERENTIATE = [
    pytest.param(False, id="solve"),
    pytest.param(True, id="grad", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("differentiate", DIFFERENTIATE)
@pytest.mark.parametrize("name", _one_solver("LeapfrogMidpoint"))
def test_vmap(name, differentiate):
    loss = _loss(SOLVERS[name](), oc.CheckpointAdjoint(checkpoints=3), oc.ConstantStepSize())
    fn = _value(loss, differentiate)
    y0s = jnp.stack([jnp.asarray(LV_Y0), 1.3 * jnp.asarray(LV_Y0)])
    batched = jax.vmap(fn, in_axes=(0, None))(y0s, 1.5)
    for i in range(2):
        one = fn(y0s[i], 1.5)
        for b, o in zip(jax.tree.leaves(batched), jax.tree.leaves(one), strict=True):
            np.testing.assert_allclose(b[i], o, rtol=1e-12)


@pytest.mark.parametrize("differentiate", DIFFERENTIATE)
@pytest.mark.parametrize("name", _one_solver("ReversibleHeun"))
def test_float32(name, differentiate):
    """float32 in, float32 out (solution and gradient), within float32's reach of the
    float64 values."""
    adjoint, controller = oc.CheckpointAdjoint(checkpoints=3), oc.ConstantStepSize()
    loss32 = _loss(SOLVERS[name](), adjoint, controller, dtype=jnp.float32)
    loss64 = _loss(SOLVERS[name](), adjoint, controller)
    got = _value(loss32, differentiate)(jnp.asarray(LV_Y0, jnp.float32), jnp.float32(1.5))
    want = _value(loss64, differentiate)(jnp.asarray(LV_Y0), 1.5)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3)


H = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])  # Hermitian


def _schrodinger(t, y, args):
    return jnp.asarray(-1j * H, y.dtype) @ y


@pytest.mark.parametrize("name", _one_solver("LeapfrogMidpoint"))
def test_complex_state_against_the_closed_form(name):
    import scipy.linalg

    y0 = np.array([1.0 + 0.2j, 0.5j])
    sol = oc.diffeqsolve(_schrodinger, SOLVERS[name](), 0.0, 1.0, 0.01, jnp.asarray(y0), None)
    assert sol.ys.dtype == jnp.complex128
    error = np.max(np.abs(np.asarray(sol.ys[-1]) - scipy.linalg.expm(-1j * H) @ y0))
    assert error <= 1e-3, error


@pytest.mark.parametrize("name", _one_solver("ReversibleHeun"))
def test_pytree_state_matches_the_array_state(name):
    def field(t, y, args):
        prey, predator = _lotka_volterra(t, jnp.stack([y["prey"], y["predator"]]), args)
        return {"prey": prey, "predator": predator}

    y0 = {"prey": jnp.asarray(LV_Y0[0]), "predator": jnp.asarray(LV_Y0[1])}
    tree = oc.diffeqsolve(field, SOLVERS[name](), 0.0, 3.0, 0.05, y0, 1.5)
    flat = oc.diffeqsolve(_lotka_volterra, SOLVERS[name](), 0.0, 3.0, 0.05, jnp.asarray(LV_Y0), 1.5)
    np.testing.assert_allclose(tree.ys["prey"][-1], flat.ys[-1, 0], rtol=1e-14)
    np.testing.assert_allclose(tree.ys["predator"][-1], flat.ys[-1, 1], rtol=1e-14)


@pytest.mark.parametrize("differentiate", DIFFERENTIATE)
@pytest.mark.parametrize("name", _one_solver("LeapfrogMidpoint"))
def test_strict_promotion_gives_standard_results_bit_for_bit(name, differentiate):
    loss = _loss(
        SOLVERS[name](),
        oc.CheckpointAdjoint(checkpoints=3),
        oc.ConstantStepSize(),
        3.0,
        0.0,
        jnp.float32,
    )
    fn = _value(loss, differentiate)
    args = (jnp.asarray(LV_Y0, jnp.float32), jnp.asarray(1.5, jnp.float32))
    with jax.numpy_dtype_promotion("standard"):
        expected = fn(*args)
    with jax.numpy_dtype_promotion("strict"):
        got = fn(*args)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
