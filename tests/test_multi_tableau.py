"""`MultiButcherTableau`: a user's additive Runge–Kutta method, diffrax's way.

Reference: `y' = -a y + cos(t)` as `MultiTerm(ODETerm(-a y), ODETerm(cos t))`, whose
solution is `y(t) = (y0 - a / (1 + a^2)) exp(-a t) + (a cos t + sin t) / (1 + a^2)`.
"""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc


class _DoubleDopri5(oc.AbstractRungeKutta):
    tableau: ClassVar = oc.MultiButcherTableau(oc.Dopri5.tableau, oc.Dopri5.tableau)
    calculate_jacobian: ClassVar = oc.CalculateJacobian.never

    def order(self, terms):
        return 5


class _TwoHeun(oc.AbstractRungeKutta):  # not FSAL, no error estimate
    tableau: ClassVar = oc.MultiButcherTableau(oc.Heun.tableau, oc.Heun.tableau)
    calculate_jacobian: ClassVar = oc.CalculateJacobian.never

    def order(self, terms):
        return 2


def _terms():
    return oc.MultiTerm(oc.ODETerm(lambda t, y, a: -a * y), oc.ODETerm(lambda t, y, a: jnp.cos(t)))


def _exact(a, y0, t):
    return (y0 - a / (1 + a**2)) * jnp.exp(-a * t) + (a * jnp.cos(t) + jnp.sin(t)) / (1 + a**2)


def _solve(solver, a, y0, controller, dt0=0.1, t1=2.0):
    return oc.diffeqsolve(
        _terms(), solver, 0.0, t1, dt0, y0, args=a, stepsize_controller=controller
    ).ys[0]


@pytest.mark.parametrize("t1", [2.0, -2.0], ids=["forward", "backward"])
def test_additive_dopri5_equals_the_closed_form_and_dopri5(t1):
    a, y0 = jnp.asarray(0.8), jnp.asarray([1.0, -0.5])
    pid = oc.PIDController(rtol=1e-9, atol=1e-9)
    dt0 = 0.1 if t1 > 0 else -0.1
    solve = lambda a, solver: _solve(solver, a, y0, pid, dt0, t1)
    np.testing.assert_allclose(solve(a, _DoubleDopri5()), _exact(a, y0, t1), rtol=1e-7)
    # One tableau for every term: Dopri5 on the summed field, to round-off.
    np.testing.assert_allclose(solve(a, _DoubleDopri5()), solve(a, oc.Dopri5()), rtol=1e-12)
    grad = jax.grad(lambda a: jnp.sum(solve(a, _DoubleDopri5())))(a)
    np.testing.assert_allclose(grad, jax.grad(lambda a: jnp.sum(_exact(a, y0, t1)))(a), rtol=1e-6)


def test_non_fsal_pair_converges_at_second_order():
    a, y0 = 0.8, jnp.asarray(1.0)
    steps = oc.ConstantStepSize()
    errors = [
        abs(float(_solve(_TwoHeun(), a, y0, steps, dt0=h)) - float(_exact(a, 1.0, 2.0)))
        for h in (0.1, 0.05)
    ]
    assert 3.6 < errors[0] / errors[1] < 4.4


def test_bad_tableaux_and_terms():
    with pytest.raises(ValueError, match="same number of stages; got \\[7, 4\\]"):
        oc.MultiButcherTableau(oc.Dopri5.tableau, oc.Bosh3.tableau)
    with pytest.raises(ValueError, match="at most one tableau may be implicit"):
        oc.MultiButcherTableau(oc.Kvaerno3.tableau, oc.Kvaerno3.tableau)
    with pytest.raises(TypeError, match="takes Runge–Kutta tableaux"):
        oc.MultiButcherTableau(oc.Dopri5.tableau, 3.0)
    with pytest.raises(ValueError, match="takes one term, not a tuple of 2"):
        oc.diffeqsolve(tuple(_terms().terms), _DoubleDopri5(), 0.0, 1.0, 0.1, 1.0, args=1.0)
    with pytest.raises(ValueError, match="of 2 tableaux takes `MultiTerm\\(...\\)` of 2 terms"):
        oc.diffeqsolve(oc.ODETerm(lambda t, y, a: -y), _DoubleDopri5(), 0.0, 1.0, 0.1, 1.0)

    class Imex(oc.AbstractRungeKutta):
        tableau = oc.MultiButcherTableau(oc.Bosh3.tableau, oc.Kvaerno3.tableau)
        calculate_jacobian = oc.CalculateJacobian.second_stage

        def order(self, terms):
            return 2

    with pytest.raises(ValueError, match="with an implicit tableau is not supported"):
        oc.diffeqsolve(_terms(), Imex(), 0.0, 1.0, 0.1, 1.0, args=1.0)
