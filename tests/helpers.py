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
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.flatten_util
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg

import odeckpt as oc


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


def _mlp_weights(seed: int = 0, width: int = 16):
    rng = np.random.default_rng(seed)
    w1 = 1.5 * rng.normal(size=(width, 2))
    b1 = 0.5 * rng.normal(size=width)
    w2 = 1.5 * rng.normal(size=(2, width)) / np.sqrt(width)
    b2 = 0.1 * rng.normal(size=2)
    return (w1, b1, w2, b2)


def _mlp(t, y, params):
    w1, b1, w2, b2 = params
    return w2 @ jnp.tanh(w1 @ y + b1) + b2 - 0.1 * y


MLP = ODEProblem(
    name="mlp",
    vector_field=_mlp,
    y0=np.array([1.0, -0.5]),
    args=_mlp_weights(),
    t0=0.0,
    t1=5.0,
)
"""A fixed-weight neural vector field, 2-16-2 with tanh, plus a weak decay `-y / 10`
(weights drawn once from `numpy.random.default_rng(0)`; `args = (w1, b1, w2, b2)`).
Over `[0, 5]` most of its tanh units leave their linear range."""


LINEAR = (DECAY, LINEAR_SYSTEM, HARMONIC, DAMPED)
CLOSED_FORM = (*LINEAR, TANGENT)
NONLINEAR = (LOTKA_VOLTERRA, VAN_DER_POL, ARENSTORF, FORCED, MLP)
PROBLEMS = (*CLOSED_FORM, *NONLINEAR)


def problem_ids(problems) -> list[str]:
    return [p.name for p in problems]


# ----------------------------------------------------------------------------------
# Gradient references: sensitivities dy(t)/dy0 and dy(t)/dargs, independent of odeckpt


@dataclasses.dataclass(frozen=True)
class Sensitivities:
    """`y(ts)` and its derivatives, from an independent reference.

    Attributes:
        ys: `(m, n)`, the solution at the `m` requested times.
        dy0: `(m, n, n)`, `dy(t_k)/dy0`.
        dargs: `(m, n, p)`, `dy(t_k)/dp` for `p` the raveled floating `args` (`p = 0`
            when `args` is `None`).
        unravel: maps a `(p,)` vector back to a PyTree like `args`.
    """

    ys: np.ndarray
    dy0: np.ndarray
    dargs: np.ndarray
    unravel: Callable

    def gradient(self, weights) -> tuple[np.ndarray, Any]:
        """`(dL/dy0, dL/dargs)` of `L = sum(weights * y(ts))`, weights of shape `(m, n)`."""
        weights = np.asarray(weights)
        g_y0 = np.einsum("ki,kij->j", weights, self.dy0)
        g_args = np.einsum("ki,kip->p", weights, self.dargs)
        return g_y0, jax.tree.map(np.asarray, self.unravel(jnp.asarray(g_args)))


def flat_args(problem: ODEProblem) -> tuple[np.ndarray, Callable]:
    """`args` raveled to a float64 vector (empty for `None`), and its inverse."""
    if not jax.tree.leaves(problem.args):  # ravel_pytree would give float32 for nothing
        return np.zeros(0), lambda q: problem.args
    flat, unravel = jax.flatten_util.ravel_pytree(
        jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), problem.args)
    )
    return np.asarray(flat), unravel


def time_derivative(problem: ODEProblem, t: float) -> np.ndarray:
    """`dy(t)/dt = f(t, y(t), args)`: the derivative of `y(t1)` with respect to `t1`."""
    (y,) = reference(problem, [t])
    return np.asarray(problem.vector_field(t, jnp.asarray(y), problem.args))


@functools.cache
def sensitivities(problem: ODEProblem, ts: tuple[float, ...]) -> Sensitivities:
    """`y(ts)`, `dy(ts)/dy0`, `dy(ts)/dargs` (cached per problem and times).

    Linear problems: `y = expm(tA) y0`, so `dy/dy0 = expm(tA)` and
    `dy/dp = L(tA, t dA/dp) y0` with `L` the Fréchet derivative of `expm` (by Van
    Loan's block-triangular matrix exponential). Other closed forms: `jax.jacfwd` of the formula.
    Nonlinear problems: the forward-sensitivity system `y' = f`,
    `(dy/dy0)' = f_y dy/dy0`, `(dy/dp)' = f_y dy/dp + f_p` solved by
    `solve_ivp(DOP853, rtol=atol=1e-12)`, Jacobians by `jax.jacfwd`.
    """
    times = np.asarray(ts, dtype=np.float64)
    if problem.linear:
        return _linear_sensitivities(problem, times)
    if problem.closed_form is not None:
        return _closed_form_sensitivities(problem, times)
    return forward_sensitivities(problem, times)


def expm_stack(x: np.ndarray) -> np.ndarray:
    """`expm` of each matrix in a stack `(..., d, d)`: scaling and squaring with a
    degree-18 Taylor polynomial (truncation < 1e-25 at norm 1/4), in NumPy.

    For many small matrices `scipy.linalg.expm` is ~100x slower once JAX's threads
    are running (its own BLAS threads contend with them); this is matmuls only.
    """
    norm = float(np.max(np.sum(np.abs(x), axis=-2), initial=0.0))
    squarings = max(0, int(np.ceil(np.log2(norm / 0.25)))) if norm > 0 else 0
    x = x / 2.0**squarings
    term = np.broadcast_to(np.eye(x.shape[-1]), x.shape)
    result = term.copy()
    for k in range(1, 19):
        term = term @ x / k
        result = result + term
    for _ in range(squarings):
        result = result @ result
    return result


def _linear_sensitivities(problem: ODEProblem, ts: np.ndarray) -> Sensitivities:
    """Van Loan's block form of the Fréchet derivative `L(tA, t dA/dp_j)` of `expm`.

    `s_j = dy/dp_j` solves `s_j' = A s_j + (dA/dp_j) y`, `s_j(0) = 0`, so
    `[s_1, ..., s_p, y](t) = expm(t M) [0, ..., 0, y0]` with `M` block upper
    triangular: `A` on the diagonal, `dA/dp_j` in the last block column. One matrix
    exponential per time gives `y`, every `dy/dp_j` and (bottom-right) `dy/dy0`.
    """
    p, unravel = flat_args(problem)
    a = np.asarray(problem.matrix(unravel(jnp.asarray(p))))
    da = np.asarray(jax.jacfwd(lambda q: problem.matrix(unravel(q)))(jnp.asarray(p)))
    n, m = a.shape[0], p.size
    big = np.kron(np.eye(m + 1), a)
    for j in range(m):
        big[j * n : (j + 1) * n, m * n :] = da[:, :, j]
    phi = expm_stack((ts - problem.t0)[:, None, None] * big)  # one per time
    dy0 = phi[:, m * n :, m * n :]
    columns = phi[:, : m * n, m * n :] @ problem.y0  # (len(ts), m n): s_1, ..., s_m
    dargs = columns.reshape(ts.size, m, n).transpose(0, 2, 1)
    return Sensitivities(dy0 @ problem.y0, dy0, dargs, unravel)


def _closed_form_sensitivities(problem: ODEProblem, ts: np.ndarray) -> Sensitivities:
    p, unravel = flat_args(problem)

    def solution(y0, q):
        return exact(problem, jnp.asarray(ts), y0, unravel(q))

    y0, q = jnp.asarray(problem.y0), jnp.asarray(p)
    dy0, dargs = jax.jacfwd(solution, argnums=(0, 1))(y0, q)
    return Sensitivities(np.asarray(solution(y0, q)), np.asarray(dy0), np.asarray(dargs), unravel)


@functools.cache
def _augmented_field(problem: ODEProblem) -> Callable:
    """The forward-sensitivity system on `z = [y, vec(dy/dy0), vec(dy/dp)]`, as a
    NumPy function `(t, z) -> dz/dt` (compiled once per problem)."""
    q, unravel = flat_args(problem)
    n, p = problem.y0.size, q.size

    def field(t, z, q):
        y = z[:n]
        s_y0 = z[n : n + n * n].reshape(n, n)
        s_p = z[n + n * n :].reshape(n, p)
        f = lambda y, q: problem.vector_field(t, y, unravel(q))
        f_y, f_p = jax.jacfwd(f, argnums=(0, 1))(y, q)
        return jnp.concatenate([f(y, q), (f_y @ s_y0).reshape(-1), (f_y @ s_p + f_p).reshape(-1)])

    compiled, q_jax = jax.jit(field), jnp.asarray(q)
    return lambda t, z: np.asarray(compiled(t, z, q_jax))


@functools.cache
def solved_sensitivities(
    problem: ODEProblem, ts: tuple[float, ...], method: str, tol: float
) -> Sensitivities:
    """The forward-sensitivity system solved by `solve_ivp(method)` with steps chosen
    by the error of `y` alone, at `rtol = atol = tol` (cached).

    The sensitivities ride along uncontrolled, as they do when a solve is
    differentiated: this is what the tolerance buys for the gradient with that method.
    (`atol = inf` takes them out of the error norm; `rtol` and `y`'s `atol` are scaled
    by `sqrt(n / N)` so that SciPy's RMS norm over all `N` components equals the RMS
    norm over `y`'s `n`.)
    """
    return forward_sensitivities(problem, np.asarray(ts, dtype=np.float64), method, tol, True)


def forward_sensitivities(
    problem: ODEProblem,
    ts: np.ndarray,
    method: str = "DOP853",
    tol: float = 1e-12,
    control_y_only: bool = False,
) -> Sensitivities:
    """The forward-sensitivity system solved by `solve_ivp(method, rtol=atol=tol)` (with
    error control on every component unless `control_y_only`), uncached."""
    q, unravel = flat_args(problem)
    n, p = problem.y0.size, q.size
    field = _augmented_field(problem)
    z0 = np.concatenate([problem.y0, np.eye(n).reshape(-1), np.zeros(n * p)])
    rtol, atol = tol, np.full(z0.size, tol)
    if control_y_only:
        rtol = tol * np.sqrt(n / z0.size)
        atol[:n], atol[n:] = rtol, np.inf
    span = (problem.t0, float(np.max(ts)))
    if span[1] == span[0]:
        zs = np.tile(z0, (ts.size, 1))
    else:
        sol = scipy.integrate.solve_ivp(
            field,
            span,
            z0,
            method=method,
            t_eval=ts,
            rtol=rtol,
            atol=atol,
        )
        if not sol.success:
            raise RuntimeError(f"sensitivity reference for {problem.name}: {sol.message}")
        zs = sol.y.T
    m = ts.size
    return Sensitivities(
        zs[:, :n],
        zs[:, n : n + n * n].reshape(m, n, n),
        zs[:, n + n * n :].reshape(m, n, p),
        unravel,
    )


# The adjoints every gradient matrix runs, by the names the test ids use.
ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint_3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
    "forward_mode": oc.ForwardMode(),
}


def sampled_matrix(fast: set[tuple[str, ...]], **axes) -> list:
    """The product of `axes` (name -> case names) as pytest params with ids `a-b-c`:
    the combinations in `fast` run by default, the rest are marked `slow`."""
    return [
        pytest.param(*case, id="-".join(case), marks=() if case in fast else pytest.mark.slow)
        for case in itertools.product(*axes.values())
    ]
