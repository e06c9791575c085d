"""Strict dtype promotion (`jax_numpy_dtype_promotion="strict"`): the solves and
gradients below (explicit and stiff solvers, every controller and adjoint, float32 and
float64, both time directions) run under it, and give bit for bit what standard
promotion gives.

Each case is one function of no arguments, run once under each promotion mode (as
its own trace, since the mode is read at trace time)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc
import odeckpt._checkpointing.checkpointed as checkpointed
from odeckpt.testing import check_grads

_Y0 = np.array([1.0, 0.5])
_ARGS = np.array(0.7)
_PID = oc.PIDController(rtol=1e-4, atol=1e-6)


def _field(t, y, args):
    return -args * y + 0.1 * jnp.sin(t).astype(y.dtype)


def _solve(
    y0,
    args,
    solver=None,
    controller=_PID,
    adjoint=None,
    saveat=None,
    t0=0.0,
    t1=1.0,
    dt0=0.1,
    **kwargs,
):
    return oc.diffeqsolve(
        oc.ODETerm(_field),
        oc.Tsit5() if solver is None else solver,
        t0,
        t1,
        dt0,
        y0,
        args,
        saveat=oc.SaveAt(t1=True) if saveat is None else saveat,
        stepsize_controller=controller,
        adjoint=oc.CheckpointAdjoint(checkpoints=3) if adjoint is None else adjoint,
        max_steps=64,
        **kwargs,
    )


def _loss(y0, args, **kwargs):
    sol = _solve(y0, args, **kwargs)
    value = jnp.sum(sol.ys**2)
    saveat = kwargs.get("saveat")
    if saveat is not None and saveat.dense:
        value = value + jnp.sum(sol.evaluate(0.45 if kwargs.get("t1", 1.0) > 0.5 else 0.55) ** 2)
    return value


def _grad(dtype=jnp.float64, **kwargs):
    y0, args = jnp.asarray(_Y0, dtype), jnp.asarray(_ARGS, dtype)
    return lambda: jax.value_and_grad(_loss, argnums=(0, 1))(y0, args, **kwargs)


_TS = np.linspace(0.0, 1.0, 4)
CASES = {
    # solvers: explicit without an error estimate, explicit of high order, stiff
    "euler-constant": _grad(solver=oc.Euler(), controller=oc.ConstantStepSize()),
    "heun-constant": _grad(solver=oc.Heun(), controller=oc.ConstantStepSize()),
    "dopri8-pid": _grad(solver=oc.Dopri8()),
    "kvaerno5-pid": _grad(solver=oc.Kvaerno5()),
    "kvaerno4-pid": _grad(solver=oc.Kvaerno4()),
    "implicit_euler-pid": _grad(solver=oc.ImplicitEuler()),
    "rodas5p-pid": _grad(solver=oc.Rodas5P()),
    # controllers
    "step_to": _grad(controller=oc.StepTo(np.linspace(0.0, 1.0, 6)), dt0=None),
    "pid-dt0_none": _grad(dt0=None),
    "pid-pcoeff-f32": _grad(
        jnp.float32,
        controller=oc.PIDController(rtol=1e-4, atol=1e-6, pcoeff=0.2, icoeff=0.3, dcoeff=0.1),
    ),
    # adjoints and outputs
    "checkpoint-ts": _grad(adjoint=oc.CheckpointAdjoint(), saveat=oc.SaveAt(ts=_TS)),
    "checkpoint_3-steps": _grad(saveat=oc.SaveAt(steps=True)),
    "checkpoint_3-t0_t1-reversed": _grad(
        saveat=oc.SaveAt(t0=True, t1=True), t0=1.0, t1=0.0, dt0=-0.1
    ),
    "interpolating-ts": _grad(adjoint=oc.InterpolatingAdjoint(), saveat=oc.SaveAt(ts=_TS)),
    "interpolating-ts-reversed": _grad(
        adjoint=oc.InterpolatingAdjoint(), saveat=oc.SaveAt(ts=_TS[::-1]), t0=1.0, t1=0.0, dt0=-0.1
    ),
    "backsolve-t0_t1": _grad(adjoint=oc.BacksolveAdjoint(), saveat=oc.SaveAt(t0=True, t1=True)),
    # float32 states, with float64 times too
    "checkpoint_3-f32": _grad(jnp.float32, saveat=oc.SaveAt(ts=_TS)),
}
_F64_TIMES = dict(t0=jnp.asarray(0.0), t1=jnp.asarray(1.0), dt0=jnp.asarray(0.1))
for _name, _adjoint in {
    "checkpoint": oc.CheckpointAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
    "backsolve": oc.BacksolveAdjoint(),
}.items():
    CASES[f"{_name}-f32-f64_times"] = _grad(jnp.float32, adjoint=_adjoint, **_F64_TIMES)
CASES["dense"] = _grad(saveat=oc.SaveAt(dense=True, t1=True))
CASES["f32-dense"] = _grad(jnp.float32, saveat=oc.SaveAt(dense=True, t1=True))
CASES["f32-rodas5p"] = _grad(jnp.float32, solver=oc.Rodas5P())
CASES["forward_mode-jvp"] = lambda: jax.jvp(
    lambda y0: _solve(y0, _ARGS, adjoint=oc.ForwardMode(), saveat=oc.SaveAt(ts=_TS)).ys,
    (jnp.asarray(_Y0),),
    (jnp.ones(2),),
)
CASES["vmap"] = lambda: jax.vmap(jax.grad(_loss), in_axes=(0, None))(
    jnp.stack([_Y0, 2 * _Y0]), jnp.asarray(_ARGS)
)
CASES["grad_t1"] = lambda: jax.grad(lambda t1: _loss(_Y0, _ARGS, t1=t1))(1.0)
CASES["grad_t0"] = lambda: jax.grad(
    lambda t0: _loss(
        _Y0, _ARGS, controller=oc.ConstantStepSize(), saveat=oc.SaveAt(steps=True), t0=t0
    )
)(0.1)
CASES["grad_ts"] = lambda: jax.grad(lambda ts: _loss(_Y0, _ARGS, saveat=oc.SaveAt(ts=ts)))(_TS)
CASES["throw_false"] = lambda: jax.grad(
    lambda y0: jnp.sum(_solve(y0, _ARGS, throw=False, t1=100.0).ys)
)(jnp.asarray(_Y0))
CASES["progress_meter"] = lambda: (
    _solve(_Y0, _ARGS, progress_meter=oc.TextProgressMeter(minimum_increase=0.5)).ys
)
CASES["check_grads"] = lambda: jnp.asarray(
    check_grads(_loss, jnp.asarray(_Y0), jnp.asarray(_ARGS), argnums=(0, 1)).value
)


def _traced_schedule(controller):
    """The online schedule planned in the traced loop (`plan.py`), not in a table."""

    def run():
        old = checkpointed._TABLE_LIMIT
        checkpointed._TABLE_LIMIT = 0
        try:
            return _grad(controller=controller, saveat=oc.SaveAt(ts=_TS))()
        finally:
            checkpointed._TABLE_LIMIT = old

    return run


CASES["traced_schedule-constant"] = _traced_schedule(oc.ConstantStepSize())
CASES["traced_schedule-pid"] = _traced_schedule(_PID)


# The default run keeps these (each compiles twice); the rest are marked slow. Among
# them: pid-pcoeff-f32 (the PID update and float32 states run in
# backsolve-f32-f64_times) and euler-constant (constant steps without an error estimate
# and a checkpointed gradient under strict promotion: test_partitioned.py's and
# test_implicit_euler.py's test_strict_promotion_with_complex64_and_float32).
_QUICK = {
    "checkpoint_3-t0_t1-reversed",
    "interpolating-ts",
    "backsolve-f32-f64_times",
    "f32-rodas5p",
    "forward_mode-jvp",
    "progress_meter",
}


@pytest.mark.parametrize(
    "name", [n if n in _QUICK else pytest.param(n, marks=pytest.mark.slow) for n in CASES]
)
def test_strict_promotion_gives_standard_results_bit_for_bit(name):
    with jax.numpy_dtype_promotion("standard"):
        expected = CASES[name]()
    with jax.numpy_dtype_promotion("strict"):
        got = CASES[name]()
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_strict_promotion_without_jit():
    """Outside `jit` (`jax.disable_jit()`, as diffrax's `test_no_jit`) JAX converts the
    `RESULTS` codes the library compares with: they must stay weakly typed."""
    controller = oc.PIDController(rtol=1e-5, atol=1e-5)
    with jax.numpy_dtype_promotion("strict"), jax.disable_jit():
        sol = oc.diffeqsolve(
            lambda t, y, a: -y,
            oc.Kvaerno4(),
            0,
            0.5,
            1e-2,
            jnp.ones(1),
            stepsize_controller=controller,
        )
        assert sol.result == oc.RESULTS.successful
    np.testing.assert_allclose(sol.ys[-1], np.exp(-0.5), rtol=1e-4)
