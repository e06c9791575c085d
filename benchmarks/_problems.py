"""ODE test problems shared by the benchmark sections.

Each `Problem` is a vector field `f(t, y, args)` on a 1-D array state, integrated from
`t = 0` to `t1`, with the same `args` in every library.
"""

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp


def lotka_volterra(t, y, args):
    alpha, beta, gamma, delta = args
    prey, predator = y[0], y[1]
    return jnp.stack(
        [alpha * prey - beta * prey * predator, -gamma * predator + delta * prey * predator]
    )


def van_der_pol(t, y, mu):
    x, v = y[0], y[1]
    return jnp.stack([v, mu * (1 - x**2) * v - x])


def damped_oscillator(t, y, damping):
    """x'' + damping x' + x = 0: stiff for large damping (eigenvalues ~ -1/c, -c)."""
    x, v = y[0], y[1]
    return jnp.stack([v, -x - damping * v])


def arenstorf(t, y, mu):
    """The restricted three-body problem; the orbit closes after one period."""
    x, z, vx, vz = y[0], y[1], y[2], y[3]
    nu = 1 - mu
    d1 = ((x + mu) ** 2 + z**2) ** 1.5
    d2 = ((x - nu) ** 2 + z**2) ** 1.5
    ax = x + 2 * vz - nu * (x + mu) / d1 - mu * (x - nu) / d2
    az = z - 2 * vx - nu * z / d1 - mu * z / d2
    return jnp.stack([vx, vz, ax, az])


@dataclasses.dataclass(frozen=True)
class Problem:
    """`dy/dt = vf(t, y, args)` from `y(0) = y0` over `[0, t1]`; `name` labels tables."""

    name: str
    vf: Callable
    y0: tuple[float, ...]
    t1: float
    args: object


PROBLEMS = {
    "lotka_volterra": Problem(
        "Lotka–Volterra", lotka_volterra, (1.0, 1.0), 20.0, (1.5, 1.0, 3.0, 1.0)
    ),
    "van_der_pol": Problem("Van der Pol (mu=1)", van_der_pol, (2.0, 0.0), 20.0, 1.0),
    "damped": Problem("damped oscillator (c=1000)", damped_oscillator, (1.0, 0.0), 10.0, 1000.0),
    "arenstorf": Problem(
        "Arenstorf orbit",
        arenstorf,
        (0.994, 0.0, 0.0, -2.00158510637908252240537862224),
        17.0652165601579625588917206249,
        0.012277471,
    ),
}
