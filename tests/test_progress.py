"""Progress meters report from inside the compiled loop and cost nothing when off."""

import jax
import jax.numpy as jnp
import pytest

import odeckpt as oc


def _solve(meter, y0):
    return oc.diffeqsolve(lambda t, y, a: -y, oc.Tsit5(), 0.0, 5.0, 0.01, y0,
                          throw=False, progress_meter=meter).ys  # fmt: skip


def test_text_meter_prints_increasing_percentages_under_jit(capfd):
    meter = oc.TextProgressMeter(refresh_steps=50, minimum_increase=0.2)
    jax.block_until_ready(jax.jit(lambda y: _solve(meter, y))(jnp.ones(2)))
    lines = [line for line in capfd.readouterr().out.splitlines() if line.startswith("odeckpt")]
    percents = [float(line.split()[-1].rstrip("%")) for line in lines]
    assert percents[-1] == 100.0
    assert len(percents) >= 3
    assert percents == sorted(percents)


def test_meter_off_compiles_no_callback():
    text = jax.jit(lambda y: _solve(None, y)).lower(jnp.ones(2)).as_text()
    assert "callback" not in text


def test_tqdm_meter_works_with_gradients(capfd):
    def loss(y0):
        sol = oc.diffeqsolve(lambda t, y, a: -y, oc.Tsit5(), 0.0, 5.0, 0.01, y0,
                             adjoint=oc.CheckpointAdjoint(4),
                             progress_meter=oc.TqdmProgressMeter())  # fmt: skip
        return sol.ys.sum()

    grad = jax.grad(loss)(jnp.ones(2))
    assert jnp.allclose(grad, jnp.exp(-5.0))
    assert "100%" in capfd.readouterr().err


def test_bad_meter_is_rejected():
    with pytest.raises(TypeError, match="progress_meter"):
        _solve("text", jnp.ones(2))
