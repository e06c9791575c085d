"""`ODETerm` broadcasts a vector field's result to `y` and casts it to `y`'s dtype
where nothing is lost, as diffrax does: `y' = c` for a constant `c` has the closed form
`y(t) = y0 + c t`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


@pytest.mark.parametrize("dtype", [pytest.param(jnp.float32, marks=pytest.mark.slow), jnp.float64])
@pytest.mark.parametrize(
    "rate", [1.5, 2, np.float32(0.5), "row"], ids=["float", "int", "f32", "row"]
)
def test_scalars_integers_and_rows_broadcast(rate, dtype):
    y0 = jnp.ones((3, 2), dtype)
    rate = jnp.array([1.0, -1.0], dtype) if rate == "row" else rate
    sol = oc.diffeqsolve(lambda t, y, args: rate, oc.Euler(), 0.0, 2.0, 0.5, y0)
    assert sol.ys.dtype == dtype and sol.ys.shape == (1, 3, 2)
    np.testing.assert_allclose(
        sol.ys[0], 1.0 + 2.0 * np.broadcast_to(np.asarray(rate), (3, 2)), rtol=1e-6
    )


def test_pytree_and_complex_state_and_gradient():
    """A leaf of a PyTree state given as a scalar; a real result for a complex `y`; the
    gradient flows through the broadcast."""

    def solve(c):
        y0 = {"a": jnp.zeros(2), "z": jnp.ones(2, jnp.complex128)}
        field = lambda t, y, args: {"a": args, "z": -y["z"].real}
        sol = oc.diffeqsolve(field, oc.Tsit5(), 0.0, 1.0, 0.1, y0, args=c)
        return sol.ys

    ys = solve(0.7)
    np.testing.assert_allclose(ys["a"][0], [0.7, 0.7], rtol=1e-12)
    np.testing.assert_allclose(ys["z"][0], np.exp(-1.0) * np.ones(2), rtol=1e-6)
    assert ys["z"].dtype == jnp.complex128
    np.testing.assert_allclose(jax.grad(lambda c: jnp.sum(solve(c)["a"]))(0.7), 2.0, rtol=1e-12)
