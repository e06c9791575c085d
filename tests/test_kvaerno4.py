"""`Kvaerno4` beyond the stiff-solver matrix of `test_stiff.py` (where its order,
Prothero–Robinson order, Radau comparisons, gradients against forward sensitivities,
replays, `vmap`, float32 and PyTree states are tested, and its tableau's order
conditions, dense output and L-stability): backwards in time, and gradients of the
discrete solve against finite differences in both autodiff modes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_stiff import LINEAR_A, fitted_order, linear_forced, manufactured

import odeckpt as oc
import odeckpt.testing

SOLVER = oc.Kvaerno4(rtol=1e-13, atol=1e-14)  # Newton far below what FD can see


def test_order_four_backwards_in_time():
    """From `t0 = 2` back to `t1 = 0` with constant steps, towards the exact solution."""
    num_steps = np.array([16, 23, 32, 45])

    def solve(dt0):
        return oc.diffeqsolve(
            linear_forced,
            SOLVER,
            2.0,
            0.0,
            dt0,
            manufactured(2.0),
            jnp.asarray(LINEAR_A),
            max_steps=64,
        ).ys[0]

    ys = np.asarray(jax.jit(jax.vmap(solve))(-2.0 / jnp.asarray(num_steps, float)))
    errors = np.max(np.abs(ys - np.asarray(manufactured(0.0))), axis=1)
    assert abs(fitted_order(2.0 / num_steps, errors) - 4) < 0.3


@pytest.mark.parametrize(
    "adjoint, ad",
    [
        (oc.CheckpointAdjoint(checkpoints=2), "reverse"),
        pytest.param(oc.ForwardMode(), "forward", marks=pytest.mark.slow),
    ],
    ids=["checkpoint", "forward"],
)
def test_gradient_of_the_discrete_solve_against_finite_differences(adjoint, ad):
    """`atol` 1e-9: the loss hardly depends on `A` (the forcing cancels it at the exact
    solution), so its derivatives are ~1e-5 with FD noise ~5e-10."""

    def loss(y0, a):
        sol = oc.diffeqsolve(
            linear_forced,
            SOLVER,
            0.0,
            1.0,
            0.1,
            y0,
            a,
            adjoint=adjoint,
            saveat=oc.SaveAt(ts=jnp.array([0.35, 1.0])),
        )
        return jnp.sum(sol.ys**2)

    argnums = (0,) if ad == "reverse" else (0, 1)  # `A` in the slow forward-mode case
    odeckpt.testing.assert_grads_close(
        loss, manufactured(0.0), jnp.asarray(LINEAR_A), argnums=argnums, ad=ad, rtol=1e-7, atol=1e-9
    )
