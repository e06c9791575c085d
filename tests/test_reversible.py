"""`BacksolveAdjoint()` of a reversible solver (`ReversibleHeun`): the forward states
reconstructed backwards with the solver's inverse step, the discrete adjoint of each
step at them. The gradient is `CheckpointAdjoint`'s (the same discretised solve, every
step stored) to round-off, with O(1) states in memory.

References: `CheckpointAdjoint()` through the same solver, `jax.jacfwd` (`ForwardMode`),
and XLA's compiled memory analysis.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import odeckpt as oc


def _lotka_volterra(t, y, args):
    prey, predator = y[0], y[1]
    return jnp.stack([args * prey - prey * predator, prey * predator - predator + 0.1 * jnp.sin(t)])


Y0 = np.array([1.0, 0.5])
CONTROLS = {"constant": oc.ConstantStepSize(), "pid": oc.PIDController(rtol=1e-4, atol=1e-6)}


def _loss(adjoint, controller, t0, saveat, dtype=jnp.float64):
    """A loss of every kind of output, as a function of `(y0, args, t1)`."""

    def loss(y0, args, t1):
        sol = oc.diffeqsolve(
            _lotka_volterra,
            oc.ReversibleHeun(),
            t0,
            t1,
            (t1 - t0) / 50,
            y0,
            args,
            adjoint=adjoint,
            saveat=saveat(t0, t1),
            stepsize_controller=controller,
            max_steps=512,
        )
        ys = jax.tree.leaves(sol.ys)
        return sum(jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) ** 2) for y in ys)

    return loss


SAVES = {
    "t1": lambda t0, t1: oc.SaveAt(t1=True),
    "ts": lambda t0, t1: oc.SaveAt(ts=jnp.linspace(t0, t1, 6)[1:-1]),
    "steps-fn": lambda t0, t1: oc.SaveAt(steps=True, fn=lambda t, y, args: jnp.sin(y)),
}
# The default run: adaptive steps here, constant steps in the neural ODE's test.
CASES = [
    pytest.param("constant", 0.0, 3.0, "t1", marks=pytest.mark.slow),
    ("pid", 0.0, 3.0, "ts"),
    pytest.param("constant", 3.0, 0.0, "ts", marks=pytest.mark.slow),
    pytest.param("pid", 3.0, 0.0, "steps-fn", marks=pytest.mark.slow),
    pytest.param("pid", 0.0, 3.0, "steps-fn", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("control, t0, t1, save", CASES)
def test_equals_checkpoint_adjoint_on_lotka_volterra(control, t0, t1, save):
    """Gradients with respect to `y0`, `args` and `t1` agree to 1e-10."""
    args = (jnp.asarray(Y0), jnp.asarray(1.5), jnp.asarray(t1))
    want = jax.grad(_loss(oc.CheckpointAdjoint(), CONTROLS[control], t0, SAVES[save]), (0, 1, 2))(
        *args
    )
    got = jax.grad(_loss(oc.BacksolveAdjoint(), CONTROLS[control], t0, SAVES[save]), (0, 1, 2))(
        *args
    )
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


class _NeuralField(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return self.mlp(jnp.concatenate([y, jnp.atleast_1d(t)]))


def _neural_loss(adjoint, controller):
    def loss(field, y0):
        sol = oc.diffeqsolve(
            oc.ODETerm(field),
            oc.ReversibleHeun(),
            0.0,
            2.0,
            0.05,
            y0,
            adjoint=adjoint,
            stepsize_controller=controller,
            max_steps=256,
            saveat=oc.SaveAt(ts=jnp.linspace(0.0, 2.0, 5)),
        )
        return jnp.sum(sol.ys**2)

    return loss


@pytest.mark.parametrize("control", ["constant", pytest.param("pid", marks=pytest.mark.slow)])
def test_equals_checkpoint_adjoint_on_a_neural_ode(control):
    """Gradients with respect to the network's weights (closed over by the vector
    field) and `y0` agree to 1e-10."""
    mlp = eqx.nn.MLP(4, 3, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(0))
    field = _NeuralField(mlp)  # float64: the tests run with x64 enabled
    y0 = jnp.asarray([0.5, -0.3, 0.2])
    loss = lambda adjoint: lambda both: _neural_loss(adjoint, CONTROLS[control])(*both)
    want = eqx.filter_grad(loss(oc.CheckpointAdjoint()))((field, y0))
    got = eqx.filter_grad(loss(oc.BacksolveAdjoint()))((field, y0))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_vmap_and_float32():
    """Under `jax.vmap`, and in float32 (to float32's round-off of CheckpointAdjoint's)."""
    loss = lambda adjoint, dtype: _loss(adjoint, CONTROLS["constant"], 0.0, SAVES["t1"], dtype)
    y0s = jnp.asarray(np.stack([Y0, 1.3 * Y0]), jnp.float32)
    args = (jnp.float32(1.5), jnp.float32(3.0))
    grad = lambda adjoint: jax.vmap(jax.grad(loss(adjoint, jnp.float32)), (0, None, None))
    got = grad(oc.BacksolveAdjoint())(y0s, *args)
    want = grad(oc.CheckpointAdjoint())(y0s, *args)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-4)


H = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])  # Hermitian


def _complex_field(t, y, args):
    """The Schrödinger equation with a nonlinear phase (not holomorphic)."""
    linear = jnp.asarray(-1j * H, y.dtype) @ y * args.astype(y.dtype)
    return linear + 0.1j * (jnp.abs(y) ** 2).astype(y.dtype) * y


def test_complex_state():
    """A real loss of a complex state: gradients with respect to the complex `y0` (JAX's
    convention) and the real `args` agree with CheckpointAdjoint's to 1e-10."""

    def loss(adjoint):
        def fn(y0, args):
            sol = oc.diffeqsolve(
                _complex_field,
                oc.ReversibleHeun(),
                0.0,
                2.0,
                0.02,
                y0,
                args,
                adjoint=adjoint,
                saveat=oc.SaveAt(ts=jnp.linspace(0.0, 2.0, 4)),
                max_steps=128,
            )
            return jnp.sum(jnp.abs(sol.ys) ** 2 * jnp.arange(1.0, 3.0)[None, :]) + jnp.sum(
                sol.ys.real
            )

        return jax.grad(fn, (0, 1))

    args = (jnp.asarray([1.0 + 0.2j, 0.5j]), jnp.asarray(0.7))
    got, want = loss(oc.BacksolveAdjoint())(*args), loss(oc.CheckpointAdjoint())(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_strict_promotion_gives_standard_results_bit_for_bit():
    loss = _loss(oc.BacksolveAdjoint(), CONTROLS["pid"], 3.0, SAVES["ts"], jnp.float32)
    args = (jnp.asarray(Y0, jnp.float32), jnp.float32(1.5), jnp.float32(0.0))
    with jax.numpy_dtype_promotion("standard"):
        expected = jax.value_and_grad(loss, (0, 1, 2))(*args)
    with jax.numpy_dtype_promotion("strict"):
        got = jax.value_and_grad(loss, (0, 1, 2))(*args)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype == jnp.float32
        np.testing.assert_array_equal(g, e)


def test_drifted_reconstruction_gives_nan_without_throw():
    """On a damped mode the inverse steps amplify round-off (here the reconstructed `y0`
    is off by O(1)): the gradient is NaN with `throw=False` (the error with `throw=True`
    is in `tests/test_bad_inputs.py`)."""

    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: -5.0 * y,
            oc.ReversibleHeun(),
            0.0,
            5.0,
            0.01,
            y0,
            adjoint=oc.BacksolveAdjoint(),
            throw=False,
            max_steps=600,
        )
        return sol.ys.sum()

    assert np.all(np.isnan(jax.grad(loss)(jnp.asarray(Y0))))


def _temp_bytes(adjoint, num_steps: int, size: int = 4096) -> int:
    """Compiled temporary memory of the gradient of a solve of `num_steps` steps."""

    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: jnp.roll(y, 1) - y,
            oc.ReversibleHeun(),
            0.0,
            1.0,
            1.0 / num_steps,
            y0,
            max_steps=num_steps,
            adjoint=adjoint,
        )
        return sol.ys.sum()

    compiled = jax.jit(jax.grad(loss)).lower(jnp.ones(size)).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_memory_is_a_few_states_plus_scalars_per_step():
    """From 100 to 1000 steps the gradient's temporary memory grows by the per-step
    scalars only (measured: 26 KiB, less than one state of 32 KiB, where storing every
    step grows by 900 states), and stays at a few states (measured: 14; the step's own
    linearisation holds most of them)."""
    state = 4096 * 8
    small, large = (_temp_bytes(oc.BacksolveAdjoint(), n) for n in (100, 1000))
    assert large - small < state, (small, large)
    assert small < 16 * state, small
