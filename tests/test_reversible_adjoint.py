"""`Reversible(solver)` and `ReversibleAdjoint()`: any explicit Runge–Kutta method made
algebraically reversible, and its exact discrete gradient from states reconstructed
backwards in O(1) memory.

References: `CheckpointAdjoint()` through the same `Reversible` solver (the same
discrete solution, its steps stored or recomputed: gradients equal to 1e-10 in
float64), `ForwardMode()`, closed forms (the decay `y0 exp(-k t)`; linear systems by
the matrix exponential and its Fréchet derivative) and XLA's compiled memory analysis.
"""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import odeckpt as oc


def _lotka_volterra(t, y, args):
    prey, predator = y[0], y[1]
    return jnp.stack([args * prey - prey * predator, prey * predator - predator])


def _van_der_pol(t, y, args):  # mu = args = 1
    return jnp.stack([y[1], args * (1 - y[0] ** 2) * y[1] - y[0]])


def _forced_oscillator(t, y, args):  # x'' + 0.1 x' + args x = cos(1.3 t)
    return jnp.stack([y[1], -0.1 * y[1] - args * y[0] + jnp.cos(1.3 * t)])


class _Neural(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return args * self.mlp(jnp.concatenate([y, jnp.atleast_1d(t)]))


_MLP = eqx.nn.MLP(3, 2, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(0))
PROBLEMS = {
    "lotka-volterra": (_lotka_volterra, 1.5, (1.0, 0.5)),
    "van-der-pol": (_van_der_pol, 1.0, (2.0, 0.0)),
    "forced-oscillator": (_forced_oscillator, 2.0, (1.0, 0.0)),
    "neural": (_Neural(_MLP), 1.0, (0.5, -0.3)),
}
"""name: (vector field, args, y0); the neural field's weights are differentiated too."""

CONTROLS = {
    "constant": oc.ConstantStepSize(),
    "pid": oc.PIDController(rtol=1e-6, atol=1e-8),
}
SAVES = {
    "t1": lambda t0, t1: oc.SaveAt(t1=True),
    "ts": lambda t0, t1: oc.SaveAt(
        ts=t0 + (t1 - t0) * jnp.asarray([0.1, 0.45, 0.8], jnp.result_type(t0, t1))
    ),
    "steps-fn": lambda t0, t1: oc.SaveAt(steps=True, fn=lambda t, y, args: jnp.sin(y)),
}


def _loss(problem, adjoint, control, save, t0=0.0, dtype=jnp.float64, coupling=0.999):
    """The solve's outputs, squared and summed, as a function of `(field, y0, args, t0,
    t1)` (the field closes over the neural network's weights)."""
    solver = oc.Reversible(oc.Tsit5(), coupling=coupling)

    def loss(field, y0, args, t0, t1):
        sol = oc.diffeqsolve(
            oc.ODETerm(field),
            solver,
            t0,
            t1,
            (t1 - t0) / 40,
            y0,
            args,
            adjoint=adjoint,
            stepsize_controller=CONTROLS[control],
            saveat=SAVES[save](t0, t1),
            max_steps=256,
        )
        ys = jax.tree.leaves(sol.ys)
        return sum(jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) ** 2) for y in ys)

    return loss


def _inputs(name, t0=0.0, t1=3.0, dtype=jnp.float64):
    field, args, y0 = PROBLEMS[name]
    cast = lambda x: jnp.asarray(x, dtype)
    field = jax.tree.map(lambda x: cast(x) if eqx.is_inexact_array(x) else x, field)
    return field, cast(y0), cast(args), cast(t0), cast(t1)


def _assert_close(got, want, rtol, atol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _gradients(name, adjoint, control, save, t0=0.0, t1=3.0):
    loss = _loss(name, adjoint, control, save)
    return eqx.filter_grad(lambda x: loss(*x))(_inputs(name, t0, t1))


# One case in the default run (constant steps and `SaveAt(t1)` on the neural ODE); every
# combination with `-m slow`. Adaptive steps and `SaveAt(ts)` on Lotka–Volterra:
# test_vmap_and_float32 differentiates that solve.
_DEFAULT = {
    ("neural", "constant", "t1"),
}
CASES = [
    pytest.param(p, c, s, marks=() if (p, c, s) in _DEFAULT else pytest.mark.slow)
    for p in PROBLEMS
    for c in CONTROLS
    for s in SAVES
]


@pytest.mark.parametrize("name, control, save", CASES)
def test_equals_checkpoint_adjoint(name, control, save):
    """Gradients with respect to `y0`, `args`, the network's weights, `t0` and `t1`
    equal `CheckpointAdjoint`'s through the same solver to 1e-10."""
    want = _gradients(name, oc.CheckpointAdjoint(), control, save)
    got = _gradients(name, oc.ReversibleAdjoint(), control, save)
    _assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("control", ["pid", "constant"])
def test_backwards_in_time(control):
    """A solve from t0 = 3 down to t1 = 0: the same agreement."""
    want = _gradients("lotka-volterra", oc.CheckpointAdjoint(), control, "ts", 3.0, 0.0)
    got = _gradients("lotka-volterra", oc.ReversibleAdjoint(), control, "ts", 3.0, 0.0)
    _assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_vmap_and_float32():
    """`jax.grad` of a loss summed over a `jax.vmap` of solves (the batch's `y0`, shared
    traced `args` and `t1`), in float32: float32 gradients, equal to
    `CheckpointAdjoint`'s to float32's round-off."""
    field, y0, args, t0, t1 = _inputs("lotka-volterra", dtype=jnp.float32)
    y0s = jnp.stack([y0, 1.2 * y0])

    def grads(adjoint):
        loss = _loss("lotka-volterra", adjoint, "pid", "ts")
        batched = jax.vmap(loss, (None, 0, None, None, None))
        total = lambda y0s, args, t1: jnp.sum(batched(field, y0s, args, t0, t1))
        return jax.grad(total, (0, 1, 2))(y0s, args, t1)

    got, want = grads(oc.ReversibleAdjoint()), grads(oc.CheckpointAdjoint())
    assert got[0].dtype == jnp.float32 and got[0].shape == (2, 2)
    _assert_close(got, want, rtol=2e-4, atol=1e-5)


@pytest.mark.slow
def test_dense_output_and_forward_mode():
    """Gradients through `Solution.evaluate` (dense output) equal `CheckpointAdjoint`'s;
    `ForwardMode` (`jax.jacfwd`) gives the same derivative with respect to `args`."""

    def loss(adjoint):
        def fn(y0, args):
            sol = oc.diffeqsolve(
                _van_der_pol,
                oc.Reversible(oc.Dopri5()),
                0.0,
                3.0,
                0.1,
                y0,
                args,
                adjoint=adjoint,
                saveat=oc.SaveAt(dense=True),
                stepsize_controller=CONTROLS["pid"],
                max_steps=256,
            )
            return jnp.sum(sol.evaluate(1.234) ** 2) + jnp.sum(sol.evaluate(2.5))

        return fn

    args = (jnp.asarray([2.0, 0.0]), jnp.asarray(1.0))
    want = jax.grad(loss(oc.CheckpointAdjoint()), (0, 1))(*args)
    _assert_close(jax.grad(loss(oc.ReversibleAdjoint()), (0, 1))(*args), want, 1e-10, 1e-10)
    forward = jax.jacfwd(loss(oc.ForwardMode()), 1)(*args)
    np.testing.assert_allclose(forward, want[1], rtol=1e-9)


@pytest.mark.parametrize(
    "base, order",
    [
        pytest.param(oc.Heun, 2, marks=pytest.mark.slow),
        (oc.Bosh3, 3),
        pytest.param(oc.Tsit5, 5, marks=pytest.mark.slow),
    ],
)
def test_order_and_dense_output(base, order):
    """The base method's order on `y' = -y` (error ratio on halving the step), at the
    steps and in the dense output between them."""

    def errors(n):
        sol = oc.diffeqsolve(
            lambda t, y, a: -y,
            oc.Reversible(base()),
            0.0,
            1.0,
            1.0 / n,
            jnp.asarray([1.0]),
            saveat=oc.SaveAt(t1=True, dense=True),
        )
        mid = 0.5 + 0.37 / n
        at_end = abs(float(sol.ys[-1, 0]) - np.exp(-1.0))
        return at_end, abs(float(sol.evaluate(mid)[0]) - np.exp(-mid))

    (e1, d1), (e2, d2) = errors(8), errors(16)
    assert np.log2(e1 / e2) > order - 0.4, (e1, e2)
    assert d2 < 4 * max(e2, 1e-14) or np.log2(d1 / d2) > min(order, 3) - 0.4, (d1, d2)


def test_inverse_step_undoes_the_step():
    """`reverse_step` returns `(y0, z0)` from the step's result to round-off, with
    `z0 != y0` and any coupling, and the monitor's `fed` back to where it started."""
    term = oc.ODETerm(_van_der_pol)
    t0, dt = jnp.asarray(0.3), jnp.asarray(0.2)
    y0, z0 = jnp.asarray([1.0, -0.5]), jnp.asarray([1.01, -0.48])
    for coupling in (0.5, 0.999, 1.0):
        solver = oc.Reversible(oc.Dopri5(), coupling=coupling)
        state0 = solver.init_state(term, t0, z0, None)
        out = solver.attempt(term, t0, dt, y0, state0, jnp.asarray(1.0))
        assert out.state.fed > 0
        y, state = solver.reverse_step(term, t0, dt, out.y1, out.state, jnp.asarray(1.0))
        np.testing.assert_allclose(y, y0, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(state.z, z0, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(state.fed, 0.0, atol=1e-14 * out.state.fed)


@pytest.mark.parametrize("dense", [False, True])
def test_linearised_inverse_is_the_step_and_its_vjp(dense):
    """`linearised_reverse_step` gives `reverse_step`'s `(y0, z0)`, and a step that
    returns `step`'s output from there with `jax.vjp(step)`'s pullback, without
    evaluating it again."""
    term = oc.ODETerm(_van_der_pol)
    t0, dt, mu = jnp.asarray(0.3), jnp.asarray(0.2), jnp.asarray(1.3)
    y0, z0 = jnp.asarray([1.0, -0.5]), jnp.asarray([1.01, -0.48])
    solver = oc.Reversible(oc.Dopri5(), coupling=0.9)
    z0 = solver.init_state(term, t0, z0, None)
    out = solver.attempt(term, t0, dt, y0, z0, mu, dense=dense)
    y, z, known = solver.linearised_reverse_step(term, t0, dt, out.y1, out.state, mu, dense)
    np.testing.assert_allclose(y, y0, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(z.z, z0.z, rtol=1e-14, atol=1e-14)

    def step(step_solver, t0, dt, y0, z0, mu):
        out = step_solver.attempt(term, t0, dt, y0, z0, mu, dense=dense)
        return out.y1, out.y_error, out.state, out.coeffs

    ours, pull = jax.vjp(ft.partial(step, known), t0, dt, y, z, mu)
    theirs, pull_exact = jax.vjp(ft.partial(step, solver), t0, dt, y0, z0, mu)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    leaves, treedef = jax.tree.flatten(ours)
    keys = jr.split(jr.PRNGKey(0), len(leaves))
    ct = treedef.unflatten([jr.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)])
    for a, b in zip(jax.tree.leaves(pull(ct)), jax.tree.leaves(pull_exact(ct)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


def test_backward_pass_evaluates_each_step_once():
    """The inverse's evaluations are the linearisation's too: the gradient evaluates the
    vector field twice per step (forwards, and once backwards), as a checkpointed
    gradient that stores every step does."""
    calls = [0]

    def field(t, y, a):
        jax.debug.callback(lambda: calls.__setitem__(0, calls[0] + 1))
        return -a * y + jnp.sin(t)

    def evaluations(fn, *args):
        fn(*args)  # compile
        calls[0] = 0
        jax.block_until_ready(fn(*args))
        return calls[0]

    def loss(a, adjoint):
        sol = oc.diffeqsolve(
            field,
            oc.Reversible(oc.Tsit5()),
            0.0,
            1.0,
            0.05,
            jnp.ones(3),
            a,
            adjoint=adjoint,
            max_steps=20,
        )
        return jnp.sum(sol.ys**2)

    a = jnp.asarray(0.5)
    forward = evaluations(jax.jit(ft.partial(loss, adjoint=oc.ReversibleAdjoint())), a)
    reversible = evaluations(jax.jit(jax.grad(ft.partial(loss, adjoint=oc.ReversibleAdjoint()))), a)
    stored = evaluations(jax.jit(jax.grad(ft.partial(loss, adjoint=oc.CheckpointAdjoint(20)))), a)
    assert forward > 0
    assert reversible == stored == 2 * forward


def _damped(damping):
    """`y' = A y`, `A = [[0, 1], [-1, -damping]]` (an oscillator with that damping):
    `sum(y(2))` and its gradient with respect to `y0` and the damping in closed form."""
    a = jnp.asarray([[0.0, 1.0], [-1.0, -damping]])
    e = jnp.asarray([[0.0, 0.0], [0.0, -1.0]])  # dA / d damping
    y0, t1 = jnp.asarray([1.0, 0.5]), 2.0
    expm, frechet = jax.scipy.linalg.expm_frechet(a * t1, e * t1)
    return (y0, jnp.asarray(damping)), (expm.T @ jnp.ones(2), jnp.sum(frechet @ y0))


def _damped_outcome(damping, coupling=0.999):
    """`"right"` (within 1e-6 of the closed form, relatively), `"refused"` (the solve or
    its backward pass raised), or the relative error of a finite wrong gradient."""

    def loss(y0, damping):
        field = lambda t, y, d: jnp.stack([y[1], -y[0] - d * y[1]])
        pid = oc.PIDController(rtol=1e-10, atol=1e-12)
        sol = oc.diffeqsolve(
            field,
            oc.Reversible(oc.Tsit5(), coupling=coupling),
            0.0,
            2.0,
            0.01,
            y0,
            damping,
            adjoint=oc.ReversibleAdjoint(),
            max_steps=2048,
            stepsize_controller=pid,
        )
        return jnp.sum(sol.ys)

    inputs, exact = _damped(damping)
    try:
        got = jax.grad(loss, (0, 1))(*inputs)
    except (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError) as error:
        assert "max_steps" in str(error) or "CheckpointAdjoint" in str(error), str(error)
        return "refused"
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(exact), strict=True)
    error = max(float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w))) for g, w in pairs)
    return "right" if error <= 1e-6 else error


@pytest.mark.parametrize(
    "damping, coupling",
    [
        pytest.param(10.0, 0.999, marks=pytest.mark.slow),
        pytest.param(100.0, 0.999, marks=pytest.mark.slow),
        (1000.0, 0.999),
        pytest.param(10.0, 0.5, marks=pytest.mark.slow),
        pytest.param(100.0, 0.5, marks=pytest.mark.slow),
    ],
)
def test_damped_gradient_is_right_or_refused(damping, coupling):
    """Right to 1e-6 (relative) against the closed form, or refused (`throw=True`
    raises: the forward solve, whose error control includes the coupled pair's
    parasitic mode, runs out of steps, or the backward pass finds its reconstruction
    drifted). Never a finite wrong gradient."""
    assert _damped_outcome(damping, coupling) in ("right", "refused")


def test_damping_one_is_right():
    """Weak damping is the method's home ground: there the gradient is returned."""
    assert _damped_outcome(1.0) == "right"


def _temp_bytes(num_steps: int, size: int = 1024) -> int:
    """Compiled temporary memory of the gradient of `num_steps` constant steps."""

    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: jnp.roll(y, 1) - y,
            oc.Reversible(oc.Bosh3()),
            0.0,
            1.0,
            1.0 / num_steps,
            y0,
            max_steps=num_steps,
            adjoint=oc.ReversibleAdjoint(),
        )
        return jnp.sum(sol.ys**2)

    compiled = jax.jit(jax.grad(loss)).lower(jnp.ones(size)).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def test_memory_is_constant_in_the_steps_but_16_bytes_a_step():
    """From 100 to 10000 steps the gradient's temporary memory grows by the two times
    recorded per step (16 bytes in float64) and nothing else: no state per step."""
    small, large = _temp_bytes(100), _temp_bytes(10_000)
    state = 1024 * 8
    assert large - small <= 16 * (10_000 - 100) + state // 2, (small, large)
