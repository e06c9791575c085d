"""Reverse mode through `ForwardMode()`: `jax.grad`, `jax.vjp` and `jax.jacrev` by
forward sensitivities (`docs/adjoints.md`, "ForwardMode under `jax.grad`").

The reference is `CheckpointAdjoint()`'s gradient through the same solver: both are
the derivative of the same discrete solution, so they agree to rounding (and, for the
Newton-based solvers, to the stage iterations' tolerance, which `CheckpointAdjoint`
differentiates at the converged stages): relative error at most `REL`. Van der Pol's
gradient is also checked against central differences of the solve.

The default run holds an explicit and an implicit solver, `jax.vmap`, an event, a
compiled solve under `jax.grad`, the memory bound and the refusals; `-m slow` runs
every solver family, `SaveAt` form, dtype and time direction.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

REL = 1e-8
Y0 = np.asarray([2.0, 0.0])
ARGS = np.asarray([0.8, 1.3])  # (mu, omega^2)
T1 = 3.0
TS = np.linspace(0.3, T1, 7)


def _vdp(t, y, args):
    mu, w2 = args
    return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - w2 * y[0]])


def _split(t, y, args):
    """Van der Pol as explicit + implicit parts (for IMEX)."""
    return (
        lambda t, y, a: jnp.stack([y[1], -a[1] * y[0]]),
        lambda t, y, a: jnp.stack([jnp.zeros_like(y[0]), a[0] * (1 - y[0] ** 2) * y[1]]),
    )


SOLVERS = {
    "Tsit5": oc.Tsit5,
    "Dopri8": oc.Dopri8,
    "Rodas5P": oc.Rodas5P,
    "Kvaerno5": oc.Kvaerno5,
    "ImplicitEuler": oc.ImplicitEuler,
    "RadauIIA5": oc.RadauIIA5,
    "KenCarp4": oc.KenCarp4,
    "Reversible": lambda: oc.Reversible(oc.Tsit5()),
    "LeapfrogMidpoint": oc.LeapfrogMidpoint,
}
FIXED_STEP = ("LeapfrogMidpoint",)
SAVEATS = {
    "t1": lambda sign: oc.SaveAt(t1=True),
    "ts": lambda sign: oc.SaveAt(ts=jnp.asarray(sign * TS)),
    "steps": lambda sign: oc.SaveAt(steps=True),
    "dense": lambda sign: oc.SaveAt(t1=True, dense=True),
}


def _terms(solver_name):
    if solver_name == "KenCarp4":
        explicit, implicit = _split(None, None, None)
        return oc.MultiTerm(oc.ODETerm(explicit), oc.ODETerm(implicit))
    return oc.ODETerm(_vdp)


def _loss(solver_name, adjoint, save="ts", sign=1.0, dtype=jnp.float64, event=None):
    fixed = solver_name in FIXED_STEP
    tol = 1e-4 if dtype == jnp.float32 else 1e-9
    tol = 1e-5 if solver_name == "ImplicitEuler" else tol  # first order

    def loss(y0, args):
        sol = oc.diffeqsolve(
            _terms(solver_name),
            SOLVERS[solver_name](),
            0.0,
            sign * T1,
            sign * (0.01 if fixed else 0.05),
            y0,
            args,
            saveat=SAVEATS[save](sign),
            stepsize_controller=oc.ConstantStepSize()
            if fixed
            else oc.PIDController(rtol=tol, atol=tol),
            adjoint=adjoint,
            max_steps=4096,
            event=event,
        )
        ys = jnp.where(jnp.isfinite(sol.ys), sol.ys, 0.0)
        weights = jnp.broadcast_to(jnp.arange(1, ys.shape[-1] + 1, dtype=ys.dtype), ys.shape)
        value = jnp.sum(ys * weights) + jnp.sum(ys**2)
        if save == "dense":
            value = value + jnp.sum(sol.evaluate(sign * 0.7 * T1) ** 2)
        return value

    return loss


def _inputs(dtype=jnp.float64):
    return jnp.asarray(Y0, dtype), jnp.asarray(ARGS, dtype)


def _assert_close(got, want, rel=REL):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert np.all(np.isfinite(g))
        err = np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-300)
        assert err <= rel, f"relative error {err:.2e}"


def _check(solver_name, save="ts", sign=1.0, dtype=jnp.float64, event=None, rel=REL):
    grad = jax.jit(jax.grad(_loss(solver_name, oc.ForwardMode(), save, sign, dtype, event), (0, 1)))
    ref = jax.jit(
        jax.grad(_loss(solver_name, oc.CheckpointAdjoint(), save, sign, dtype, event), (0, 1))
    )
    _assert_close(grad(*_inputs(dtype)), ref(*_inputs(dtype)), rel)


# Kvaerno5 by default; Tsit5 is slow, its gradient checked against CheckpointAdjoint's by
# test_compiled_solve_and_eager_calls and test_under_vmap
@pytest.mark.parametrize(
    "solver", [s if s == "Kvaerno5" else pytest.param(s, marks=pytest.mark.slow) for s in SOLVERS]
)
def test_gradient_is_the_checkpointed_one(solver):
    _check(solver)


def test_gradient_against_central_differences():
    """Independent of both adjoints: central differences of the solve."""
    loss = _loss("Tsit5", oc.ForwardMode(), "t1")
    y0, args = _inputs()
    grad = jax.jit(jax.grad(loss, 1))(y0, args)
    h = 1e-5
    fd = [
        (loss(y0, args + h * e) - loss(y0, args - h * e)) / (2 * h) for e in np.eye(args.shape[0])
    ]
    np.testing.assert_allclose(grad, np.asarray(fd), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("save", list(SAVEATS))
@pytest.mark.parametrize("solver", ["Tsit5", "Rodas5P", "Kvaerno5"])
def test_every_saveat(solver, save):
    _check(solver, save)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["Tsit5", "Rodas5P", "Kvaerno5"])
def test_backwards_in_time(solver):
    _check(solver, sign=-1.0)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["Tsit5", "Rodas5P"])
def test_float32(solver):
    _check(solver, dtype=jnp.float32, rel=1e-4)


def test_under_vmap():
    """`jax.vmap` of `jax.grad` and `jax.grad` of `jax.vmap`: each element's gradient."""
    loss = _loss("Tsit5", oc.ForwardMode())
    y0, args = _inputs()
    batch = jnp.stack([args, 1.2 * args])
    per = jax.jit(jax.vmap(jax.grad(loss, 1), (None, 0)))(y0, batch)
    summed = jax.jit(jax.grad(lambda a: jnp.sum(jax.vmap(loss, (None, 0))(y0, a))))(batch)
    ref = jax.jit(jax.grad(_loss("Tsit5", oc.CheckpointAdjoint()), 1))
    for i in range(2):
        _assert_close(per[i], ref(y0, batch[i]))
        _assert_close(summed[i], ref(y0, batch[i]))


def test_with_an_event():
    """A terminating event: the event time's dependence on the inputs is carried."""
    event = oc.Event(lambda t, y, args, **kw: y[0] + 1.0)
    _check("Tsit5", save="t1", event=event)


def test_compiled_solve_and_eager_calls():
    """`jax.grad` of a `jax.jit`-compiled loss (the tangent is traced into a program
    that is transposed later), `jax.vjp` and `jax.jacrev`, eagerly."""
    loss = _loss("Tsit5", oc.ForwardMode())
    y0, args = _inputs()
    ref = jax.jit(jax.grad(_loss("Tsit5", oc.CheckpointAdjoint()), 1))(y0, args)
    _assert_close(jax.grad(jax.jit(loss), 1)(y0, args), ref)
    _assert_close(jax.grad(loss, 1)(y0, args), ref)
    _, vjp = jax.vjp(lambda a: loss(y0, a), args)
    _assert_close(vjp(1.0)[0], ref)
    _assert_close(jax.jacrev(loss, 1)(y0, args), ref)


def test_only_the_differentiated_inputs_carry_tangents():
    """`max_tangents` counts the scalars `jax.grad` differentiates (here 2 of 4), and
    refuses more, naming what works."""
    y0, args = _inputs()
    loss = _loss("Tsit5", oc.ForwardMode(max_tangents=2))
    _ = jax.grad(loss, 1)(y0, args)
    with pytest.raises(ValueError, match=r"differentiates 4 scalars.*CheckpointAdjoint\(\)"):
        jax.grad(loss, (0, 1))(y0, args)


def test_complex_state():
    """A complex state: each complex scalar is two real directions."""
    lam = jnp.asarray(-0.3 + 2.0j)

    def loss(y0, adjoint):
        sol = oc.diffeqsolve(
            oc.ODETerm(lambda t, y, a: a * y),
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            y0,
            lam,
            stepsize_controller=oc.PIDController(rtol=1e-10, atol=1e-10),
            adjoint=adjoint,
        )
        return jnp.sum(jnp.abs(sol.ys) ** 2 + jnp.real(sol.ys))

    y0 = jnp.asarray([1.0 + 0.5j, -0.2j])
    got = jax.grad(loss)(y0, oc.ForwardMode())
    want = jax.grad(loss)(y0, oc.CheckpointAdjoint())
    _assert_close(got, want)


def test_memory_does_not_grow_with_the_steps():
    """Forward sensitivities hold no per-step record: the compiled gradient's memory is
    the same for 10 and 10000 steps' worth of `max_steps`."""

    def temp_bytes(max_steps):
        def loss(args):
            sol = oc.diffeqsolve(
                oc.ODETerm(_vdp),
                oc.Tsit5(),
                0.0,
                T1,
                0.05,
                jnp.asarray(Y0),
                args,
                stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-6),
                adjoint=oc.ForwardMode(),
                max_steps=max_steps,
            )
            return jnp.sum(sol.ys)

        compiled = jax.jit(jax.grad(loss)).lower(jnp.asarray(ARGS)).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    assert temp_bytes(10_000) == temp_bytes(10)


def test_forward_mode_under_jit_runs_one_loop():
    """`jax.jit` around `jax.jvp` (where the JVP rule cannot tell forward from reverse
    mode) evaluates primal and tangent in one loop, as JAX's forward mode does: the
    compiled program holds one `while`, and `jax.grad` of the compiled function still
    gives the gradient."""
    loss = _loss("Tsit5", oc.ForwardMode(), "t1")
    y0, args = _inputs()
    jvp = jax.jit(lambda a, v: jax.jvp(lambda a: loss(y0, a), (a,), (v,))[1])
    text = jvp.lower(args, args).as_text()
    assert text.count("stablehlo.while") == 1
    ref = jax.jit(jax.grad(_loss("Tsit5", oc.CheckpointAdjoint(), "t1"), 1))(y0, args)
    _assert_close(jvp(args, jnp.asarray([1.0, 0.0])), ref[0])
    _assert_close(jax.grad(jax.jit(loss), 1)(y0, args), ref)


def test_max_tangents_bounds_reverse_mode_only():
    """Forward mode carries the tangents it is given, however many inputs they perturb:
    `max_tangents` refuses only a reverse pass (here `jax.grad` of the compiled loss,
    whose tangent is transposed later), not `jax.jvp` under `jax.jit`."""
    loss = _loss("Tsit5", oc.ForwardMode(max_tangents=1), "t1")
    y0, args = _inputs()
    jvp = jax.jit(lambda a, v: jax.jvp(lambda a: loss(y0, a), (a,), (v,))[1])
    ref = jax.jit(jax.grad(_loss("Tsit5", oc.CheckpointAdjoint(), "t1"), 1))(y0, args)
    _assert_close(jvp(args, jnp.asarray([0.0, 1.0])), ref[1])
    with pytest.raises(ValueError, match=r"differentiates 2 scalars"):
        jax.grad(jax.jit(loss), 1)(y0, args)
