"""Shared test problems: ODEs with closed-form solutions or high-accuracy references.

Every problem is a frozen `ODEProblem` record naming its vector field `f(t, y, args)`,
initial state, arguments and interval. Linear problems `dy/dt = A(args) y` carry
`matrix`, so their solution (and every derivative of it) is available in closed form
through `jax.scipy.linalg.expm`; a few others carry their own closed form. The rest
are compared against `scipy.integrate.solve_ivp(method="DOP853", rtol=atol=1e-12)`.

Use:
    `exact(problem, t)`        the closed form at time(s) `t`, a differentiable JAX function
                               of `y0` and `args` (pass them to differentiate);
    `reference(problem, ts)`   closed form where there is one, else the cached scipy
                               reference, as a NumPy array of shape `(len(ts), n)`;
    `PROBLEMS`, `LINEAR`, `CLOSED_FORM`, `NONLINEAR`: registries for parametrisation.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import scipy.integrate
import scipy.linalg


@dataclasses.dataclass(frozen=True, eq=False)
class ODEProblem:
    """An initial value problem `dy/dt = vector_field(t, y, args)`, `y(t0) = y0`.

    Attributes:
        name: a short id (used as pytest id).
        vector_field: `f(t, y, args)`, written with `jax.numpy`.
        y0: the initial state (a 1-D float64 NumPy array).
        args: passed to `vector_field` (NumPy arrays / floats).
        t0, t1: the default interval.
        matrix: for linear autonomous problems, `A(args)` with `f(t, y, args) = A y`.
        closed_form: `(t, y0, args) -> y(t)` (scalar `t`), when one is known other
            than `expm`.
    """

    name: str
    vector_field: Callable
    y0: np.ndarray
    args: Any
    t0: float
    t1: float
    matrix: Callable | None = None
    closed_form: Callable | None = None

    @property
    def linear(self) -> bool:
        """`True` when `f(t, y, args) = matrix(args) @ y`."""
        return self.matrix is not None

    @property
    def has_closed_form(self) -> bool:
        return self.linear or self.closed_form is not None

    def __repr__(self) -> str:
        return f"ODEProblem({self.name})"


def exact(problem: ODEProblem, t, y0=None, args=None):
    """The closed-form `y(t)` (shape `(n,)`, or `(len(t), n)` for 1-D `t`).

    Differentiable in `t`, `y0` and `args` with JAX. Raises `ValueError` for problems
    without a closed form.
    """
    y0 = jnp.asarray(problem.y0 if y0 is None else y0)
    args = problem.args if args is None else args
    t = jnp.asarray(t)
    if t.ndim == 1:
        return jax.vmap(lambda s: exact(problem, s, y0, args))(t)
    if problem.closed_form is not None:
        return problem.closed_form(t - problem.t0, y0, args)
    if problem.matrix is not None:
        return jsl.expm(problem.matrix(args) * (t - problem.t0)) @ y0
    raise ValueError(f"{problem.name} has no closed form; use `reference`.")


def reference(problem: ODEProblem, ts) -> np.ndarray:
    """`y(ts)` as a float64 NumPy array of shape `(len(ts), n)`."""
    ts = tuple(float(t) for t in np.atleast_1d(np.asarray(ts, dtype=np.float64)))
    if problem.closed_form is not None:
        return np.asarray(exact(problem, np.asarray(ts)))
    if problem.linear:  # NumPy's expm: `jax.scipy.linalg.expm` takes seconds to compile
        a = np.asarray(problem.matrix(problem.args))
        return np.stack([scipy.linalg.expm(a * (t - problem.t0)) @ problem.y0 for t in ts])
    return scipy_reference(problem, ts)


@functools.cache
def scipy_reference(problem: ODEProblem, ts: tuple[float, ...]) -> np.ndarray:
    """`solve_ivp(DOP853, rtol=atol=1e-12)` from `problem.t0` to `ts` (cached)."""
    fn = jax.jit(problem.vector_field)
    args = jax.tree.map(jnp.asarray, problem.args)

    def rhs(t, y):
        return np.asarray(fn(t, y, args))

    span = (problem.t0, max(ts, key=lambda t: abs(t - problem.t0)))
    if span[1] == span[0]:
        return np.tile(problem.y0, (len(ts), 1))
    sol = scipy.integrate.solve_ivp(
        rhs, span, problem.y0, method="DOP853", t_eval=ts, rtol=1e-12, atol=1e-12
    )
    if not sol.success:
        raise RuntimeError(f"scipy reference for {problem.name} failed: {sol.message}")
    return sol.y.T


# ----------------------------------------------------------------------------------
# Linear problems (closed form by the matrix exponential)


def _linear_field(matrix):
    return lambda t, y, args: matrix(args) @ y


def _decay_matrix(k):
    return -jnp.asarray(k) * jnp.eye(2)


def _decay_solution(t, y0, k):
    return y0 * jnp.exp(-jnp.asarray(k) * t)


DECAY = ODEProblem(
    name="decay",
    vector_field=lambda t, y, k: -k * y,
    y0=np.array([1.0, 2.0]),
    args=0.7,
    t0=0.0,
    t1=2.0,
    matrix=_decay_matrix,
    closed_form=_decay_solution,
)
"""`dy/dt = -k y`, `y(t) = y0 exp(-k t)`."""


def _system_matrix(a):
    return jnp.asarray(a)


LINEAR_SYSTEM = ODEProblem(
    name="linear_system",
    vector_field=_linear_field(_system_matrix),
    y0=np.array([1.0, -0.5, 0.25]),
    args=np.array([[-0.5, 1.0, 0.0], [-1.0, -0.5, 0.2], [0.1, 0.0, -1.5]]),
    t0=0.0,
    t1=3.0,
    matrix=_system_matrix,
)
"""A 3x3 non-normal stable system `dy/dt = A y` (`args = A`)."""


def _harmonic_matrix(omega):
    omega = jnp.asarray(omega)
    return jnp.array([[0.0, 1.0], [-(omega**2), 0.0]])


def _harmonic_solution(t, y0, omega):
    x0, v0 = y0[0], y0[1]
    c, s = jnp.cos(omega * t), jnp.sin(omega * t)
    return jnp.stack([x0 * c + v0 / omega * s, -x0 * omega * s + v0 * c])


HARMONIC = ODEProblem(
    name="harmonic",
    vector_field=lambda t, y, w: jnp.stack([y[1], -(w**2) * y[0]]),
    y0=np.array([1.0, 0.0]),
    args=2.0,
    t0=0.0,
    t1=10.0,
    matrix=_harmonic_matrix,
    closed_form=_harmonic_solution,
)
"""`x'' = -w^2 x`, `y = (x, x')`: rotation in phase space (5 periods over [0, 10])."""


def _damped_matrix(args):
    omega, zeta = args
    return jnp.array([[0.0, 1.0], [-(omega**2), -2.0 * zeta * omega]])


DAMPED = ODEProblem(
    name="damped",
    vector_field=_linear_field(_damped_matrix),
    y0=np.array([1.0, 0.0]),
    args=(3.0, 0.1),
    t0=0.0,
    t1=10.0,
    matrix=_damped_matrix,
)
"""Underdamped oscillator `x'' + 2 zeta w x' + w^2 x = 0` (`args = (w, zeta)`)."""


# ----------------------------------------------------------------------------------
# A nonlinear problem with a closed form


def _tan_solution(t, y0, args):
    del args
    phase = jnp.arctan(y0[0])
    return jnp.stack([jnp.tan(t + phase), y0[1] * jnp.cos(phase) / jnp.cos(t + phase)])


TANGENT = ODEProblem(
    name="tangent",
    vector_field=lambda t, y, args: jnp.stack([1.0 + y[0] ** 2, y[0] * y[1]]),
    y0=np.array([0.0, 1.0]),
    args=None,
    t0=0.0,
    t1=1.4,
    closed_form=_tan_solution,
)
"""`x' = 1 + x^2, u' = x u`: `x = tan(t + c)`, `u = u0 cos(c) / cos(t + c)`, `c = atan x0`.

From `(0, 1)`: `x = tan t`, `u = sec t`, which blow up at pi/2. Nonlinear with a closed
form and large high derivatives near `t1`: the global error of every solver stays far
above round-off for moderate step sizes (used for convergence orders up to 8).
"""


# ----------------------------------------------------------------------------------
# Nonlinear problems (scipy reference)


def _lotka_volterra(t, y, args):
    alpha, beta, gamma, delta = args
    prey, predator = y[0], y[1]
    return jnp.stack(
        [alpha * prey - beta * prey * predator, delta * prey * predator - gamma * predator]
    )


LOTKA_VOLTERRA = ODEProblem(
    name="lotka_volterra",
    vector_field=_lotka_volterra,
    y0=np.array([1.0, 1.0]),
    args=(1.5, 1.0, 3.0, 1.0),
    t0=0.0,
    t1=10.0,
)


def _van_der_pol(t, y, mu):
    return jnp.stack([y[1], mu * (1.0 - y[0] ** 2) * y[1] - y[0]])


VAN_DER_POL = ODEProblem(
    name="van_der_pol",
    vector_field=_van_der_pol,
    y0=np.array([2.0, 0.0]),
    args=1.0,
    t0=0.0,
    t1=10.0,
)
"""Van der Pol oscillator with `mu = 1`."""


def _arenstorf(t, y, mu):
    x, v, u, w = y[0], y[1], y[2], y[3]  # position (x, v), velocity (u, w)
    nu = 1.0 - mu
    d1 = ((x + mu) ** 2 + v**2) ** 1.5
    d2 = ((x - nu) ** 2 + v**2) ** 1.5
    ax = x + 2.0 * w - nu * (x + mu) / d1 - mu * (x - nu) / d2
    av = v - 2.0 * u - nu * v / d1 - mu * v / d2
    return jnp.stack([u, w, ax, av])


ARENSTORF_PERIOD = 17.0652165601579625588917206249

ARENSTORF = ODEProblem(
    name="arenstorf",
    vector_field=_arenstorf,
    y0=np.array([0.994, 0.0, 0.0, -2.00158510637908252240537862224]),
    args=0.012277471,
    t0=0.0,
    t1=ARENSTORF_PERIOD,
)
"""Arenstorf's periodic orbit of the restricted three-body problem (one period;
Hairer, Nørsett & Wanner, Solving ODEs I, II.0). `y = (x, v, x', v')`."""


def _forced(t, y, args):
    omega, damping, force, drive = args
    x, v = y[0], y[1]
    return jnp.stack([v, -(omega**2) * x - damping * v - x**3 + force * jnp.cos(drive * t)])


FORCED = ODEProblem(
    name="forced",
    vector_field=_forced,
    y0=np.array([0.5, 0.0]),
    args=(1.0, 0.2, 0.8, 1.3),
    t0=0.0,
    t1=8.0,
)
"""A damped, periodically forced Duffing oscillator: time-dependent and nonlinear."""


LINEAR = (DECAY, LINEAR_SYSTEM, HARMONIC, DAMPED)
CLOSED_FORM = (*LINEAR, TANGENT)
NONLINEAR = (LOTKA_VOLTERRA, VAN_DER_POL, ARENSTORF, FORCED)
PROBLEMS = (*CLOSED_FORM, *NONLINEAR)


def problem_ids(problems) -> list[str]:
    return [p.name for p in problems]
