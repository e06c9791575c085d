"""`adjoint_rms_seminorm`, diffrax's norm for `BacksolveAdjoint`'s backward controller:
gradients against the closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


def _loss(p, norm):
    adjoint = oc.BacksolveAdjoint(
        solver=oc.Tsit5(), stepsize_controller=oc.PIDController(rtol=1e-7, atol=1e-7, norm=norm)
    )
    sol = oc.diffeqsolve(
        lambda t, y, k: -k * y,
        oc.Tsit5(),
        0.0,
        1.0,
        None,
        p[0],
        p[1],
        stepsize_controller=oc.PIDController(rtol=1e-7, atol=1e-7),
        adjoint=adjoint,
        max_steps=64,
    )
    return sol.ys[-1]


@pytest.mark.slow  # compiling the continuous adjoint's adaptive sweep: about 10 s
def test_gradient_against_the_closed_form():
    p = jnp.asarray([2.0, 0.7])
    grad = jax.grad(_loss)(p, oc.adjoint_rms_seminorm)
    # y(1) = y0 exp(-k): d/dy0 = exp(-k), d/dk = -y0 exp(-k).
    np.testing.assert_allclose(grad, [np.exp(-0.7), -2.0 * np.exp(-0.7)], rtol=1e-5)
