"""What a checkpoint restore costs: nothing for a method that carries no stage, one
evaluation for an FSAL method unless the checkpoint stores its first stage
(`AbstractSolver.carries_first_stage`, `CheckpointAdjoint`'s budget rule)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc
from odeckpt import schedules

A = jnp.array([[-1e-3, 1e-2], [-1e-2, -1e-3]])
Y0 = jnp.array([1.0, 0.5])


def _counted_gradient(solver, n, adjoint):
    """Vector-field evaluations of one gradient of n fixed unit steps, and the gradient."""
    calls = []

    def vf(t, y, a):
        jax.debug.callback(lambda: calls.append(None))
        return a @ y

    def loss(params):
        y0, a = params
        sol = oc.diffeqsolve(vf, solver, 0.0, float(n), 1.0, y0, a, adjoint=adjoint, max_steps=n)
        return jnp.sum(jnp.asarray(sol.ys) ** 2)

    grad = jax.jit(jax.grad(loss)).lower((Y0, A)).compile()
    out = jax.block_until_ready(grad((Y0, A)))
    jax.effects_barrier()
    return len(calls), out


def _slow(*values):
    return pytest.param(*values, marks=pytest.mark.slow)


@pytest.mark.parametrize(
    ("solver", "c"),
    [
        (oc.Heun(), 4),
        _slow(oc.Euler(), 32),
        _slow(oc.Euler(), 4),
        _slow(oc.Euler(), 8),
        _slow(oc.Heun(), 8),
        _slow(oc.Heun(), 32),
        _slow(oc.Midpoint(), 8),
        _slow(oc.Ralston(), 32),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, eqx.Module) else str(x),
)
def test_methods_without_a_carried_stage_restore_for_free(solver, c):
    """n = 1000 fixed steps: exactly `e` evaluations per step of the known-step plan
    (forward pass included), none per restore: within 1.01x of the Revolve optimum
    `e (n + t(n, c))`."""
    n, e = 1000, solver.evals_per_step
    assert not solver.carries_first_stage
    calls, _ = _counted_gradient(solver, n, oc.CheckpointAdjoint(checkpoints=c))
    assert calls == e * schedules.known_plan(n, c).total
    assert calls <= 1.01 * e * schedules.optimal_total(n, c) + 1


@pytest.mark.parametrize("solver", [oc.Bosh3(), _slow(oc.Tsit5())], ids=lambda s: type(s).__name__)
def test_a_stored_first_stage_removes_the_restore_evaluations(solver):
    """An FSAL method pays one evaluation per restore (the first stage, rebuilt by
    `init`) unless the budget holds checkpoints with the stage; the gradient is the
    same either way."""
    n, c, e = 60, 4, solver.evals_per_step
    plan = schedules.known_plan(n, c)
    restores = sum(isinstance(a, schedules.Restore) for a in plan.actions)
    plain, grad = _counted_gradient(solver, n, oc.CheckpointAdjoint(checkpoints=c))
    assert solver.carries_first_stage and plain == 1 + e * plan.total + restores
    staged = oc.CheckpointAdjoint(checkpoints=c, memory_budget=c * 2 * (Y0.nbytes + 64))
    calls, grad_staged = _counted_gradient(solver, n, staged)
    assert calls == 1 + e * plan.total
    np.testing.assert_allclose(grad_staged[0], grad[0], rtol=1e-14, atol=0)
    np.testing.assert_allclose(grad_staged[1], grad[1], rtol=1e-14, atol=0)


def _rule(adjoint, y0, max_steps, expected, solver=None):
    """`(checkpoints without the stage, checkpoints with it or None)` for a solve."""
    from odeckpt._controllers import UniformSteps
    from odeckpt._integrator import Integrator, Problem

    integrator = Integrator(solver or oc.Tsit5(), max_steps=max_steps, saves=(), save_dense=False)

    def init(y0):
        steps = UniformSteps(jnp.asarray(0.0), jnp.asarray(1.0), jnp.asarray(10, jnp.int32))
        problem = Problem(
            oc.ODETerm(lambda t, y, a: -y), None, steps, jnp.asarray(1.0), jnp.asarray(1.0), ()
        )
        return integrator.init(problem, jnp.asarray(0.0), y0, jnp.asarray(0.1))

    state0 = eqx.filter_eval_shape(init, y0)
    c = adjoint.num_checkpoints(integrator, state0, max_steps)
    return c, adjoint.first_stage_checkpoints(integrator, state0, max_steps, expected, c)


def test_budget_rule_stores_the_stage_where_it_does_fewer_evaluations():
    y0 = jnp.zeros(4096)  # 32 KiB a state
    # The default budget holds 90 checkpoints (the useful count) with their stages.
    assert _rule(oc.CheckpointAdjoint(), y0, 4096, None) == (90, 90)
    # 40 states' worth: 40 without the stage or 20 with it; at n = 1000 steps,
    # 6 (n + t(n, 40)) + n < 6 (n + t(n, 20)): the stage is not stored.
    budget = 40 * (y0.nbytes + 64)
    n = 1000
    c, staged = _rule(oc.CheckpointAdjoint(memory_budget=budget), y0, 4096, n)
    assert c == 40 and staged is None
    assert 6 * schedules.optimal_total(n, 40) + n < 6 * schedules.optimal_total(n, 20)
    # A method that carries no stage has nothing to store.
    assert _rule(oc.CheckpointAdjoint(), y0, 4096, None, oc.Heun()) == (90, None)
    # With an explicit count, only an explicit budget that holds the stages stores them.
    assert _rule(oc.CheckpointAdjoint(checkpoints=8), y0, 4096, None) == (8, None)
    big = oc.CheckpointAdjoint(checkpoints=8, memory_budget=2**20)
    assert _rule(big, y0, 4096, None) == (8, 8)
