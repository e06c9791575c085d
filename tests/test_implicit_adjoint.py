"""`ImplicitAdjoint`: a steady state's derivative by the implicit function theorem.

Reference: the steady state of `y' = c - k y - 0.1 y^3` (per component) is the root
`y*` of `c - k y - 0.1 y^3`, found here with SciPy's `brentq`; differentiating the
root, `dy*/dc = 1 / (k + 0.3 y*^2)` and `dy*/dk = -y* / (k + 0.3 y*^2)`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import odeckpt as oc

K, C, Y0 = 2.0, np.array([1.0, -3.0]), np.array([0.5, 0.5])


def _field(t, y, args):
    k, c = args
    return c - k * y - 0.1 * y**3


def _steady(k, c, y0, adjoint=None):
    sol = oc.diffeqsolve(
        _field,
        oc.Tsit5(),
        0.0,
        jnp.inf,
        None,
        y0,
        args=(k, c),
        max_steps=None,
        stepsize_controller=oc.PIDController(rtol=1e-10, atol=1e-10),
        event=oc.Event(oc.steady_state_event()),
        adjoint=oc.ImplicitAdjoint() if adjoint is None else adjoint,
    )
    return sol.ys[0]


def _reference():
    def root(c):
        return scipy.optimize.brentq(lambda y: c - K * y - 0.1 * y**3, -10, 10, xtol=1e-15)

    roots = np.array([root(c) for c in C])
    slope = K + 0.3 * roots**2
    return roots, -roots / slope, 1 / slope


def test_steady_state_and_its_derivatives_equal_the_roots():
    roots, d_dk, d_dc = _reference()
    k, c, y0 = jnp.asarray(K), jnp.asarray(C), jnp.asarray(Y0)
    np.testing.assert_allclose(_steady(k, c, y0), roots, rtol=1e-7)
    jac_k, jac_c, jac_y0 = jax.jacrev(_steady, argnums=(0, 1, 2))(k, c, y0)
    np.testing.assert_allclose(jac_k, d_dk, rtol=1e-7)
    np.testing.assert_allclose(jac_c, np.diag(d_dc), rtol=1e-7, atol=1e-12)
    assert np.all(jac_y0 == 0)  # a steady state does not depend on where it started
    tangent = jax.jvp(lambda c: _steady(k, c, y0), (c,), (jnp.ones(2),))[1]
    np.testing.assert_allclose(tangent, d_dc, rtol=1e-7)


@pytest.mark.slow
def test_parameters_held_by_the_vector_field_under_vmap():
    """Gradients reach arrays the vector field closes over; batched over `c`."""
    roots, _, d_dc = _reference()

    def steady(c):
        return oc.diffeqsolve(
            lambda t, y, args: c - K * y - 0.1 * y**3,
            oc.Tsit5(),
            0.0,
            jnp.inf,
            None,
            0.5,
            max_steps=None,
            stepsize_controller=oc.PIDController(rtol=1e-10, atol=1e-10),
            event=oc.Event(oc.steady_state_event()),
            adjoint=oc.ImplicitAdjoint(),
        ).ys[0]

    cs = jnp.asarray(C)
    np.testing.assert_allclose(jax.vmap(steady)(cs), roots, rtol=1e-7)
    np.testing.assert_allclose(jax.vmap(jax.grad(steady))(cs), d_dc, rtol=1e-7)


def test_refuses_outputs_other_than_the_final_state():
    with pytest.raises(ValueError, match="differentiates the final"):
        oc.diffeqsolve(
            _field,
            oc.Tsit5(),
            0.0,
            1.0,
            0.1,
            jnp.asarray(Y0),
            args=(K, C),
            saveat=oc.SaveAt(ts=[0.5]),
            adjoint=oc.ImplicitAdjoint(),
        )
