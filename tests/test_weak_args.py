"""Python scalars in `args` stay weakly typed inside the vector field when the solve is
differentiated (JAX hands them to the adjoints' custom VJPs as typed Python scalars):
an integer multiplies a float64 state under strict promotion, and a Python float keeps
a float32 state float32, as without differentiation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


def _loss(args, adjoint, dtype):
    # `a[1]` (a Python int) and `a[0]` (a Python float) multiply `y` uncast.
    field = lambda t, y, a: -a[0] * a[1] * y
    sol = oc.diffeqsolve(
        field, oc.Tsit5(), 0.0, 1.0, 0.1, jnp.ones(2, dtype), args, adjoint=adjoint, max_steps=16
    )
    assert sol.ys.dtype == dtype
    return jnp.sum(sol.ys)


@pytest.mark.parametrize(
    "adjoint, dtype",
    [
        (oc.CheckpointAdjoint(), jnp.float64),
        (oc.CheckpointAdjoint(), jnp.float32),
        pytest.param(oc.BacksolveAdjoint(), jnp.float64, marks=pytest.mark.slow),
    ],
    ids=["checkpoint-float64", "checkpoint-float32", "backsolve-float64"],
)
def test_python_scalars_in_args_under_strict_promotion(adjoint, dtype):
    with jax.numpy_dtype_promotion("strict"):
        dk, dn = jax.grad(_loss, allow_int=True)((0.5, 3), adjoint, dtype)
    assert dn.dtype == jax.dtypes.float0
    # sum(y(1)) = 2 exp(-3k): d/dk = -6 exp(-3k).
    rtol = 1e-5 if dtype == jnp.float32 else 1e-6
    np.testing.assert_allclose(dk, -6 * np.exp(-1.5), rtol=rtol)
