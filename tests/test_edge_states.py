"""States with nothing to integrate: `y0=None`, empty PyTrees (`{}`, `()`) and
zero-size leaves (`(0,)`, `(3, 0)`), alone or beside a normal leaf.

What diffrax 0.7.2 does, and odeckpt with it: the solve steps through time as usual
(`ts` is saved; `ys` has the structure of `y0`, `None` for `y0=None`, zero-size rows for
zero-size leaves). The RMS norm of no elements is 0, so an adaptive controller accepts
every step and grows it by `factormax`. A zero-size leaf beside a normal one changes
nothing about the normal one's steps. Gradients with respect to `args` flow through
the rest of the solve (here, nothing but the loss's own use of them).
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ADJOINTS, sampled_matrix

import odeckpt as oc
from odeckpt._controllers import rms_norm

STATES = {
    "None": None,
    "dict": {},
    "tuple": (),
    "zero": np.zeros((0,)),
    "zero_3x0": np.zeros((3, 0)),
}
TS = np.linspace(0.0, 1.0, 3)
PID = oc.PIDController(rtol=1e-6, atol=1e-8)


def decay(t, y, args):
    return jax.tree.map(lambda x: -args * x, y)


def _shapes(tree):
    return jax.tree.map(np.shape, tree)


@pytest.mark.parametrize("y0", STATES.values(), ids=STATES.keys())
def test_rms_norm_of_nothing_is_zero(y0):
    assert float(rms_norm(y0)) == 0.0


def test_rms_norm_ignores_zero_size_leaves():
    assert float(rms_norm((jnp.zeros((0,)), jnp.asarray([3.0, 4.0])))) == pytest.approx(
        np.sqrt(12.5), rel=1e-15
    )


DIFFRAX = ["None", "dict", "zero", "zero_3x0"]
CONTROLLERS = {
    "constant": (oc.ConstantStepSize(), dfx.ConstantStepSize(), 0.1),
    "pid": (PID, dfx.PIDController(rtol=1e-6, atol=1e-8), 0.1),
}


# By default each state under PID (whose steps the norm of nothing decides) and one
# under constant steps; the other constant-step cases and the (3, 0) leaf (a bigger
# case of the (0,) one) are slow.
DIFFRAX_DEFAULT = {"None-pid", "dict-pid", "zero-pid", "dict-constant"}


# diffrax 0.7.2 refuses `y0=()` ("Only arrays can be treated as buffers"); odeckpt
# solves it like `{}` (`test_empty_tuple`).
@pytest.mark.parametrize(
    "y0, controller, reference, dt0",
    [
        pytest.param(
            STATES[state],
            *CONTROLLERS[control],
            id=f"{state}-{control}",
            marks=() if f"{state}-{control}" in DIFFRAX_DEFAULT else pytest.mark.slow,
        )
        for control in CONTROLLERS
        for state in DIFFRAX
    ],
)
def test_outputs_and_steps_match_diffrax(y0, controller, reference, dt0):
    y0 = jax.tree.map(jnp.asarray, y0)
    saveat = dict(ts=TS, dense=True)
    sol = oc.diffeqsolve(
        decay,
        oc.Tsit5(),
        0.0,
        1.0,
        dt0,
        y0,
        1.0,
        saveat=oc.SaveAt(**saveat),
        stepsize_controller=controller,
        max_steps=64,
    )
    ref = dfx.diffeqsolve(
        dfx.ODETerm(decay),
        dfx.Tsit5(),
        0.0,
        1.0,
        dt0,
        y0,
        1.0,
        saveat=dfx.SaveAt(**saveat),
        stepsize_controller=reference,
    )
    assert sol.result == oc.RESULTS.successful
    np.testing.assert_array_equal(sol.ts, TS)
    assert jax.tree.structure(sol.ys) == jax.tree.structure(ref.ys)
    assert _shapes(sol.ys) == _shapes(ref.ys)
    assert _shapes(sol.evaluate(0.5)) == _shapes(ref.evaluate(0.5))
    assert int(sol.stats["num_steps"]) == int(ref.stats["num_steps"])


def test_empty_tuple():
    sol = oc.diffeqsolve(
        decay,
        oc.Tsit5(),
        0.0,
        1.0,
        0.1,
        (),
        1.0,
        saveat=oc.SaveAt(ts=TS, dense=True),
        stepsize_controller=PID,
    )
    assert sol.ys == () and sol.evaluate(0.5) == ()
    np.testing.assert_array_equal(sol.ts, TS)
    assert int(sol.stats["num_steps"]) == 2  # 0.1, then 10x: clipped to land on t1


SOLVERS = [oc.Tsit5(), pytest.param(oc.Kvaerno5(), marks=pytest.mark.slow), oc.Rodas5P()]


@pytest.mark.parametrize("solver", SOLVERS, ids=["Tsit5", "Kvaerno5", "Rodas5P"])
# the (3, 0) leaf: slow, a bigger case of the (0,) one
@pytest.mark.parametrize(
    "shape", [(0,), pytest.param((3, 0), marks=pytest.mark.slow)], ids=["0", "3x0"]
)
def test_zero_size_leaf_leaves_the_other_steps_alone(shape, solver):
    y = jnp.asarray([1.0, 0.5])
    solve = lambda y0: oc.diffeqsolve(
        decay,
        solver,
        0.0,
        2.0,
        None,
        y0,
        1.0,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=PID,
        max_steps=64,
    )
    alone, mixed = solve(y), solve({"empty": jnp.zeros(shape), "y": y})
    assert int(mixed.stats["num_steps"]) == int(alone.stats["num_steps"])
    np.testing.assert_array_equal(mixed.ts, alone.ts)
    np.testing.assert_array_equal(mixed.ys["y"], alone.ys)
    n = int(alone.stats["num_accepted_steps"])
    # The global error of rtol = 1e-6 steps (Kvaerno5: 2e-6).
    np.testing.assert_allclose(mixed.ys["y"][n - 1], y * np.exp(-2.0), rtol=1e-5)


def test_first_step_heuristic_of_an_empty_state():
    # No elements: every norm of the heuristic is 0, so the first step is 1e-6 (as in
    # Hairer–Nørsett–Wanner's rule and diffrax's), then grows by factormax.
    sol = oc.diffeqsolve(
        decay,
        oc.Tsit5(),
        0.0,
        1.0,
        None,
        None,
        1.0,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=PID,
        max_steps=16,
    )
    np.testing.assert_allclose(
        sol.ts[:7], [1e-6, 1.1e-5, 1.11e-4, 1.111e-3, 1.1111e-2, 0.111111, 1.0], rtol=1e-12
    )


SAVEATS = {
    "t0-t1": oc.SaveAt(t0=True, t1=True),
    "ts": oc.SaveAt(ts=TS),
    "steps": oc.SaveAt(steps=True),
}
EDGE = {"None": None, "zero": np.zeros((0,)), "mixed": (np.zeros((3, 0)), np.array([1.0, 0.5]))}


def _loss(y0, adjoint, saveat, controller):
    def loss(a):
        sol = oc.diffeqsolve(
            decay,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            y0,
            a,
            saveat=saveat,
            stepsize_controller=controller,
            adjoint=adjoint,
            max_steps=64,
        )
        ys = [jnp.where(jnp.isfinite(x), x, 0.0) for x in jax.tree.leaves(sol.ys)]
        return a**2 + sum(jnp.sum(x) for x in ys)

    return loss


def _expected_grad(y0, saveat, a):
    """`d/da (a^2 + sum y(t_k))` for `y = y0 exp(-a t)` at the save times."""
    y = np.sum([np.sum(x) for x in jax.tree.leaves(y0)])
    times = (
        np.array([0.0, 1.0])
        if saveat.subs.t0
        else TS
        if saveat.subs.ts is not None
        else np.arange(1, 11) / 10
    )
    return 2 * a + np.sum(-times * y * np.exp(-a * times))


FAST_GRADS = {
    ("None", "checkpoint", "ts"),
    ("zero", "interpolating", "steps"),
    ("mixed", "checkpoint_3", "t0-t1"),
    ("mixed", "forward_mode", "ts"),
}
GRAD_CASES = sampled_matrix(FAST_GRADS, y0=EDGE, adjoint=ADJOINTS, saveat=SAVEATS)


@pytest.mark.parametrize("y0, adjoint, saveat", GRAD_CASES)
def test_gradient_with_respect_to_args(y0, adjoint, saveat):
    y0, adjoint, saveat = jax.tree.map(jnp.asarray, EDGE[y0]), ADJOINTS[adjoint], SAVEATS[saveat]
    loss = _loss(y0, adjoint, saveat, oc.ConstantStepSize())
    diff = jax.jacfwd if adjoint is ADJOINTS["forward_mode"] else jax.grad
    grad = diff(loss)(jnp.asarray(0.7))
    np.testing.assert_allclose(grad, _expected_grad(y0, saveat, 0.7), rtol=1e-5)


@pytest.mark.parametrize("adjoint", ["checkpoint", "interpolating"])
def test_vmap_of_gradient_without_state(adjoint):
    # Under vmap `args` is traced, so its run-time value check has no state to
    # thread onto: it is carried by the result instead.
    loss = _loss(None, ADJOINTS[adjoint], SAVEATS["ts"], PID)
    grads = jax.vmap(jax.grad(loss))(jnp.asarray([0.7, 0.8]))
    np.testing.assert_allclose(grads, [1.4, 1.6], rtol=1e-15)


def test_nan_args_without_state_raise_at_run_time():
    solve = jax.jit(lambda a: oc.diffeqsolve(decay, oc.Tsit5(), 0.0, 1.0, 0.1, None, a).ts)
    with pytest.raises(Exception, match="`args` has NaN or inf values"):
        solve(jnp.asarray(jnp.nan))
