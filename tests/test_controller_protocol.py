"""diffrax's controller protocol (`init`, `adapt_step_size`), driven by hand: the
decisions are those `diffeqsolve` makes (its own step times are the reference), steps
land on `step_ts`, stop just before `jump_ts` and restart just after them."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


def _field(t, y, args):
    return -y * jnp.cos(t)


def test_a_hand_driven_loop_takes_diffeqsolves_steps():
    term, solver = oc.ODETerm(_field), oc.Tsit5()
    controller = oc.PIDController(rtol=1e-6, atol=1e-6)
    t1, y0 = 3.0, jnp.asarray([1.0, 2.0])
    sol = oc.diffeqsolve(
        term,
        solver,
        0.0,
        t1,
        0.1,
        y0,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=controller,
        max_steps=64,
    )
    expected = np.asarray(sol.ts)[np.isfinite(sol.ts)]

    order = solver.error_order(term)
    tn, state = controller.init(term, 0.0, t1, y0, 0.1, None, solver.func, order)
    t, y, k, accepted = jnp.asarray(0.0), y0, solver.init_state(term, 0.0, y0, None), []
    step = jax.jit(lambda t, dt, y, k: solver.attempt(term, t, dt, y, k, None))
    while t < t1:
        tn = jnp.minimum(tn, t1)
        out = step(t, tn - t, y, k)
        keep, t_next0, tn, _, state, _ = controller.adapt_step_size(
            t, tn, y, out.y1, None, out.y_error, order, state
        )
        if keep:
            y, k = out.y1, out.state
            accepted.append(float(t_next0))
        t = t_next0
    np.testing.assert_allclose(accepted, expected, rtol=1e-12)
    np.testing.assert_allclose(y, sol.ys[len(expected) - 1], rtol=1e-12)


def test_clip_wrappers_land_stop_and_restart():
    pid = oc.PIDController(rtol=0.0, atol=1.0)  # zero error: each step 10x the last
    inner = oc.ClipStepSizeController(pid, jump_ts=[4.0], step_ts=[30.0])
    outer = oc.ClipStepSizeController(inner, step_ts=[1.5])
    _, state = outer.init(
        oc.ODETerm(_field), 0.0, 50.0, 0.0, 0.5, None, lambda terms, t, y, args: -y, 5
    )

    def adapt(t0, t1, state):
        return outer.adapt_step_size(t0, t1, 0.0, 0.0, None, 0.0, 5, state)

    keep, t0, t1, jumped, state, _ = adapt(0.0, 0.5, state)
    assert keep and (t0, t1, bool(jumped)) == (0.5, 1.5, False)  # lands on step_ts
    _, t0, t1, jumped, state, _ = adapt(t0, t1, state)
    assert t0 == 1.5 and t1 == np.nextafter(4.0, 0.0) and not jumped  # stops before 4
    _, t0, t1, jumped, state, _ = adapt(t0, t1, state)
    assert t0 == np.nextafter(4.0, 5.0) and jumped  # restarts after it
    assert t1 == pytest.approx(29.0, rel=1e-15)  # 10x the last step (2.5) from t0


@pytest.mark.parametrize("y_error", [0.0, 3.0, np.inf])
def test_decisions_carry_no_gradient_and_no_nan(y_error):
    controller = oc.ClipStepSizeController(oc.PIDController(rtol=1e-4, atol=1e-4), step_ts=[0.5])
    term = oc.ODETerm(_field)
    _, state = controller.init(term, 0.0, 1.0, jnp.asarray(1.0), 0.1, None, oc.Tsit5().func, 5)

    @eqx.filter_grad
    def loss(ys):
        y0, y1, err = ys
        _, t0, t1, _, new, _ = controller.adapt_step_size(0.0, 0.1, y0, y1, None, err, 5, state)
        leaves = [jnp.sum(x).astype(t0.dtype) for x in jax.tree.leaves(new)]
        return t0 + t1 + sum(leaves)

    grads = loss((jnp.asarray(1.0), jnp.asarray(2.0), jnp.asarray(y_error)))
    assert all(float(g) == 0.0 for g in grads)
