"""Progress meters report from inside the compiled loop, print what diffrax's print, and
cost nothing when off."""

import re

import jax
import jax.numpy as jnp
import pytest

import odeckpt as oc

# diffrax's `TextProgressMeter(minimum_increase=0.0999)` on 300 equal steps prints a
# line every 30 steps: 0.00%, 10.00%, ..., 100.00%.
TENTHS = "".join(f"{10 * k}.00%\n" for k in range(11))


def _decay(t0, meter, dt0=0.01):
    sol = oc.diffeqsolve(
        lambda t, y, a: -0.2 * y, oc.Dopri5(), t0, 5.0, dt0, jnp.ones(()), progress_meter=meter
    )
    return sol.ys


RUNS = {
    "plain": lambda solve: solve(2.0),
    "jit": lambda solve: jax.jit(solve)(2.0),
    "vmap": lambda solve: jax.vmap(solve)(jnp.arange(3.0)),
    "jit-vmap": lambda solve: jax.jit(jax.vmap(solve))(jnp.arange(3.0)),
}


@pytest.mark.parametrize("run", RUNS)
def test_text_meter_prints_diffrax_lines(run, capfd):
    meter = oc.TextProgressMeter(minimum_increase=0.0999)
    _ = capfd.readouterr()
    jax.block_until_ready(RUNS[run](lambda t0: _decay(t0, meter)))
    jax.effects_barrier()
    assert capfd.readouterr().out == TENTHS


def test_text_meter_under_grad_prints_once(capfd):
    def loss(p):
        sol = oc.diffeqsolve(
            lambda t, y, a: -y,
            oc.Dopri5(),
            0.0,
            1.0,
            0.1,
            p * jnp.ones(2),
            progress_meter=oc.TextProgressMeter(),
        )
        return sol.ys[-1, 0]

    _ = capfd.readouterr()
    grad = jax.grad(loss)(jnp.asarray(1.0))
    jax.effects_barrier()
    assert jnp.allclose(grad, jnp.exp(-1.0), rtol=1e-5)
    assert capfd.readouterr().out == TENTHS


@pytest.mark.parametrize("run", ["jit", "vmap"])
def test_tqdm_meter_draws_diffrax_bar(run, capfd):
    _ = capfd.readouterr()
    meter = oc.TqdmProgressMeter(refresh_steps=5)
    jax.block_until_ready(RUNS[run](lambda t0: _decay(t0, meter)))
    jax.effects_barrier()
    raw = capfd.readouterr().err
    err = raw.strip()
    assert re.match(r"0\.00%\|\s+\|", err.split("\r")[0] or err.split("\r")[1])
    assert re.match(r"100\.00%\|█+\|", err.rsplit("\r", 1)[1])
    # One line, drawn when opened, every 5 of the (slowest element's) 300 or 500 steps,
    # and when closed: the 62 and 102 redraws diffrax's test expects.
    assert raw.count("\r") == (62 if run == "jit" else 102)
    assert raw.count("\n") == 1


def test_tqdm_meter_works_with_gradients(capfd):
    def loss(y0):
        sol = oc.diffeqsolve(
            lambda t, y, a: -y,
            oc.Tsit5(),
            0.0,
            5.0,
            0.01,
            y0,
            adjoint=oc.CheckpointAdjoint(4),
            progress_meter=oc.TqdmProgressMeter(),
        )
        return sol.ys.sum()

    grad = jax.grad(loss)(jnp.ones(2))
    assert jnp.allclose(grad, jnp.exp(-5.0))
    assert "100.00%" in capfd.readouterr().err


@pytest.mark.parametrize("meter", [None, oc.NoProgressMeter()])
def test_meter_off_compiles_no_callback(meter):
    def solve(y0):
        return oc.diffeqsolve(
            lambda t, y, a: -y, oc.Tsit5(), 0.0, 5.0, 0.01, y0, throw=False, progress_meter=meter
        ).ys

    assert "callback" not in jax.jit(solve).lower(jnp.ones(2)).as_text()


def test_bad_meter_is_rejected():
    with pytest.raises(TypeError, match="progress_meter"):
        _decay(2.0, "text")
