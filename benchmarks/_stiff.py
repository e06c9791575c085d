"""Stiff test problems, their scipy references, and solves in odeckpt and diffrax.

References are `scipy.integrate.solve_ivp(method="Radau", rtol=1e-12)` with the
vector fields and Jacobians written in NumPy (no JAX in the reference path). The
Robertson gradient reference integrates the forward-sensitivity system
`S' = J S + df/dk` alongside the state.
"""

import functools
from collections.abc import Callable

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

import odeckpt as oc

ROBERTSON_K = (0.04, 3e7, 1e4)
ROBERTSON_Y0 = (1.0, 0.0, 0.0)
ROBERTSON_W = np.array([1.0, 1e4, 1.0])  # loss weights: every component counts


def robertson(t, y, k):
    """Robertson's chemical kinetics; `k` the three rate constants."""
    return jnp.stack(
        [
            -k[0] * y[0] + k[2] * y[1] * y[2],
            k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
            k[1] * y[1] ** 2,
        ]
    )


def van_der_pol(t, y, mu):
    return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


def damped(t, y, c):
    """x'' + c x' + x = 0 (eigenvalues about -1/c and -c)."""
    return jnp.stack([y[1], -y[0] - c * y[1]])


# ----------------------------------------------------------------------------------
# NumPy references


def _rober_np(y, k):
    return np.array(
        [
            -k[0] * y[0] + k[2] * y[1] * y[2],
            k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
            k[1] * y[1] ** 2,
        ]
    )


def _rober_jac_np(y, k):
    return np.array(
        [
            [-k[0], k[2] * y[2], k[2] * y[1]],
            [k[0], -2 * k[1] * y[1] - k[2] * y[2], -k[2] * y[1]],
            [0.0, 2 * k[1] * y[1], 0.0],
        ]
    )


def _rober_dk_np(y):
    return np.array(
        [[-y[0], 0.0, y[1] * y[2]], [y[0], -(y[1] ** 2), -y[1] * y[2]], [0.0, y[1] ** 2, 0.0]]
    )


# d J[i, m] / d y[l]: constant (the field is quadratic).
_DJ = np.zeros((3, 3, 3))
_DJ[0, 1, 2] = _DJ[0, 2, 1] = ROBERTSON_K[2]
_DJ[1, 1, 1], _DJ[1, 1, 2], _DJ[1, 2, 1] = -2 * ROBERTSON_K[1], -ROBERTSON_K[2], -ROBERTSON_K[2]
_DJ[2, 1, 1] = 2 * ROBERTSON_K[1]


def _sensitivity_field(t, z):
    y, s = z[:3], z[3:].reshape(3, 3)
    jac = _rober_jac_np(y, ROBERTSON_K)
    return np.concatenate([_rober_np(y, ROBERTSON_K), (jac @ s + _rober_dk_np(y)).ravel()])


def _sensitivity_jacobian(t, z):
    y, s = z[:3], z[3:].reshape(3, 3)
    jac = _rober_jac_np(y, ROBERTSON_K)
    dfk = np.zeros((3, 3, 3))  # d (df/dk)[i, j] / d y[l]
    dfk[0, 2, 1], dfk[0, 2, 2] = y[2], y[1]
    dfk[1, 0, 0], dfk[1, 1, 1], dfk[1, 2, 1], dfk[1, 2, 2] = 1.0, -2 * y[1], -y[2], -y[1]
    dfk[0, 0, 0], dfk[2, 1, 1] = -1.0, 2 * y[1]
    ds_dy = np.einsum("iml,mj->ijl", _DJ, s) + dfk  # d (J S + df/dk)[i, j] / d y[l]
    out = np.zeros((12, 12))
    out[:3, :3] = jac
    out[3:, :3] = ds_dy.reshape(9, 3)
    out[3:, 3:] = np.kron(jac, np.eye(3))
    return out


def _radau(field, jac, y0, t1):
    sol = scipy.integrate.solve_ivp(
        field, (0.0, t1), y0, method="Radau", rtol=1e-12, atol=1e-20, jac=jac
    )
    if not sol.success:
        raise RuntimeError(f"Radau reference failed: {sol.message}")
    return sol.y[:, -1]


@functools.cache
def robertson_reference(t1: float) -> tuple[np.ndarray, np.ndarray]:
    """`(y(t1), dy(t1)/dk)` from the forward-sensitivity system, Radau rtol=1e-12."""
    z = _radau(_sensitivity_field, _sensitivity_jacobian, np.r_[ROBERTSON_Y0, np.zeros(9)], t1)
    return z[:3], z[3:].reshape(3, 3)


@functools.cache
def van_der_pol_reference(mu: float, t1: float) -> np.ndarray:
    field = lambda t, y: np.array([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])
    jac = lambda t, y: np.array([[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1, mu * (1 - y[0] ** 2)]])
    sol = scipy.integrate.solve_ivp(
        field, (0.0, t1), [2.0, 0.0], method="Radau", rtol=1e-12, atol=1e-12, jac=jac
    )
    return sol.y[:, -1]


def damped_reference(c: float, t1: float) -> np.ndarray:
    return np.asarray(jax.scipy.linalg.expm(t1 * jnp.array([[0.0, 1.0], [-1.0, -c]])))[:, 0]


# ----------------------------------------------------------------------------------
# Solves: `make(...)` returns `fn(args) -> (y(t1), accepted, rejected)`


def make_odeckpt(vf, solver, y0, t1, rtol, atol, max_steps) -> Callable:
    def solve(args):
        sol = oc.diffeqsolve(
            vf,
            solver,
            0.0,
            t1,
            None,
            jnp.asarray(y0),
            args,
            stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
            max_steps=max_steps,
        )
        return sol.ys[0], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    return solve


def make_diffrax(vf, solver, y0, t1, rtol, atol, max_steps) -> Callable:
    def solve(args):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(vf),
            solver,
            0.0,
            t1,
            None,
            jnp.asarray(y0),
            args,
            stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
            max_steps=max_steps,
        )
        return sol.ys[0], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    return solve


MAKERS = {"odeckpt": make_odeckpt, "diffrax": make_diffrax}


def gradient_of(make: Callable, weights) -> Callable:
    """`args -> d(weights . y(t1))/d args` of a solve built by `make_*`."""
    return jax.grad(lambda args: make(args)[0] @ jnp.asarray(weights))
