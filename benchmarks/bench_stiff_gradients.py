"""Stiff gradients: forward solve and gradient time of each implicit solver under
`CheckpointAdjoint(checkpoints=16)`, `ForwardMode()` (reverse mode by forward
sensitivities) and `InterpolatingAdjoint()` (the adjoint ODE integrated by the same
implicit solver), against diffsol-jax's BDF (diffsol's compiled BDF called from JAX,
`jax.grad` served by forward sensitivities), in one process.

Problems:
- Robertson's kinetics over [0, 1e5], rtol = 1e-8, atol = 1e-12; the loss is
  `w . y(1e5)` (`w = (1, 1e4, 1)`), differentiated with respect to the three rate
  constants.
- HIRES (Hairer & Wanner's "High Irradiance RESponse", 8 states) over [0, 321.8122],
  rtol = 1e-8, atol = 1e-10, written with its 12 rate constants as parameters (as
  SciMLBenchmarks does); the loss is `sum(y(321.8122)^2)`, differentiated with
  respect to the 12 constants.
- The 1-D Brusselator on M interior points of [0, 1] (N = 2M states; M = 32: 64
  states), `u' = A + u^2 v - (B + 1) u + alpha u_xx`, `v' = B u - u^2 v + alpha v_xx`,
  u = 1, v = 3 at both ends, u(0) = 1 + sin(2 pi x), v(0) = 3, over [0, 10], rtol =
  1e-6, atol = 1e-8; the loss is `sum(u(10)^2 + v(10)^2)`, differentiated with respect
  to the three parameters (A, B, alpha) = (1, 3, 0.02).

Times are medians of interleaved samples of the compiled functions (`jax.jit`, the
parameters as input); "gradient / forward" divides a solver's gradient time by its own
forward time. Memory: XLA's `temp_size_in_bytes` of the compiled gradient.
"bound": for `CheckpointAdjoint(16)`, the gradient time the checkpointed reversal may
take, in forward solves: `E/n + 2`, with n the steps attempted and `E = n + t(n, 16)`
the step evaluations of the Revolve schedule (`odeckpt.schedules.optimal_total`).
"difference": the relative difference (2-norm) of a gradient from the same solver's
`CheckpointAdjoint(16)` gradient (diffsol-jax's: from `Rodas5P`'s). diffsol-jax
(`pip install diffsol-jax`) is optional: its rows are skipped without it; it takes a
right-hand side written with scalar operations, which it lowers to DiffSL (the
Brusselator is written component by component for it).
"""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
from _common import Section, Table, bytes_cell, interleaved_medians, seconds_cell, temp_bytes
from _stiff import ROBERTSON_K, ROBERTSON_W, ROBERTSON_Y0, robertson

import odeckpt as oc
from odeckpt.schedules import optimal_total

BRUSSELATOR_P = np.asarray([1.0, 3.0, 0.02])
HIRES_P = np.asarray([1.71, 0.43, 8.32, 0.0007, 8.75, 10.03, 0.035, 1.12, 1.745, 280.0, 0.69, 1.81])
HIRES_Y0 = np.asarray([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0057])
CHECKPOINTS = 16
CHECKPOINTED = f"CheckpointAdjoint({CHECKPOINTS})"
SOLVERS = {"Rodas5P": oc.Rodas5P, "Kvaerno5": oc.Kvaerno5, "RadauIIA5": oc.RadauIIA5}
ADJOINTS = {
    CHECKPOINTED: oc.CheckpointAdjoint(checkpoints=CHECKPOINTS),
    "ForwardMode()": oc.ForwardMode(),
    "InterpolatingAdjoint()": oc.InterpolatingAdjoint(),
}


def hires(t, y, p):
    """HIRES with its rate constants `p` (12) as parameters."""
    return jnp.stack(hires_scalar(t, y, p))


def hires_scalar(t, y, p):
    """HIRES as a tuple of scalar expressions (also diffsol-jax's lowering)."""
    u1, u2, u3, u4, u5, u6, u7, u8 = (y[i] for i in range(8))
    reaction = p[9] * u6 * u8
    return (
        -p[0] * u1 + p[1] * u2 + p[2] * u3 + p[3],
        p[0] * u1 - p[4] * u2,
        -p[5] * u3 + p[1] * u4 + p[6] * u5,
        p[2] * u2 + p[0] * u3 - p[7] * u4,
        -p[8] * u5 + p[1] * u6 + p[1] * u7,
        -reaction + p[10] * u4 + p[0] * u5 - p[1] * u6 + p[10] * u7,
        reaction - p[11] * u7,
        -reaction + p[11] * u7,
    )


def brusselator(m):
    dx2 = (1.0 / (m + 1)) ** 2

    def field(t, y, p):
        a, b, alpha = p[0], p[1], p[2]
        u, v = y[:m], y[m:]
        up = jnp.concatenate([jnp.ones(1, y.dtype), u, jnp.ones(1, y.dtype)])
        vp = jnp.concatenate([3 * jnp.ones(1, y.dtype), v, 3 * jnp.ones(1, y.dtype)])
        uxx = (up[2:] - 2 * u + up[:-2]) / dx2
        vxx = (vp[2:] - 2 * v + vp[:-2]) / dx2
        uuv = u * u * v
        return jnp.concatenate([a + uuv - (b + 1) * u + alpha * uxx, b * u - uuv + alpha * vxx])

    return field


def brusselator_scalar(m):
    """The same field as a tuple of scalar expressions (for diffsol-jax's lowering)."""
    dx2 = (1.0 / (m + 1)) ** 2

    def field(t, y, p):
        a, b, alpha = p[0], p[1], p[2]
        u = [y[i] for i in range(m)]
        v = [y[m + i] for i in range(m)]
        out_u, out_v = [], []
        for i in range(m):
            ul = u[i - 1] if i > 0 else 1.0
            ur = u[i + 1] if i < m - 1 else 1.0
            vl = v[i - 1] if i > 0 else 3.0
            vr = v[i + 1] if i < m - 1 else 3.0
            uuv = u[i] * u[i] * v[i]
            out_u.append(a + uuv - (b + 1) * u[i] + alpha * (ul - 2 * u[i] + ur) / dx2)
            out_v.append(b * u[i] - uuv + alpha * (vl - 2 * v[i] + vr) / dx2)
        return tuple(out_u + out_v)

    return field


def brusselator_y0(m):
    x = np.arange(1, m + 1) / (m + 1)
    return np.concatenate([1 + np.sin(2 * np.pi * x), 3 * np.ones(m)])


class Problem:
    def __init__(self, name, field, scalar_field, y0, t1, params, weights, rtol, atol):
        self.name, self.field, self.scalar_field = name, field, scalar_field
        self.y0, self.t1, self.params, self.weights = y0, t1, params, weights
        self.rtol, self.atol = rtol, atol

    def loss(self, y):
        if self.weights is None:
            return jnp.sum(y**2)
        return jnp.dot(jnp.asarray(self.weights), y)


def problems(quick: bool) -> list[Problem]:
    rober = Problem(
        "Robertson [0, 1e5]",
        robertson,
        _rober_scalar,
        np.asarray(ROBERTSON_Y0),
        1e5,
        np.asarray(ROBERTSON_K),
        ROBERTSON_W,
        1e-8,
        1e-12,
    )
    hires_problem = Problem(
        "HIRES [0, 321.8122]",
        hires,
        hires_scalar,
        HIRES_Y0,
        321.8122,
        HIRES_P,
        None,
        1e-8,
        1e-10,
    )
    m = 8 if quick else 32
    bruss = Problem(
        f"Brusselator 1-D, {2 * m} states [0, 10]",
        brusselator(m),
        brusselator_scalar(m),
        brusselator_y0(m),
        10.0,
        BRUSSELATOR_P,
        None,
        1e-6,
        1e-8,
    )
    return [rober, hires_problem, bruss]


def _rober_scalar(t, y, k):
    """`robertson` as a tuple of scalar expressions (for diffsol-jax's lowering)."""
    return (
        -k[0] * y[0] + k[2] * y[1] * y[2],
        k[0] * y[0] - k[1] * y[1] * y[1] - k[2] * y[1] * y[2],
        k[1] * y[1] * y[1],
    )


def odeckpt_fns(problem: Problem, solver, adjoint):
    def final(params):
        sol = oc.diffeqsolve(
            oc.ODETerm(problem.field),
            solver,
            0.0,
            problem.t1,
            None,
            jnp.asarray(problem.y0),
            params,
            stepsize_controller=oc.PIDController(rtol=problem.rtol, atol=problem.atol),
            adjoint=adjoint,
            max_steps=100_000,
        )
        return sol.ys[-1], (sol.stats["num_accepted_steps"], sol.stats["num_steps"])

    forward = jax.jit(lambda p: problem.loss(final(p)[0]))
    gradient = jax.jit(jax.grad(lambda p: problem.loss(final(p)[0])))
    accepted, attempted = jax.jit(lambda p: final(p)[1])(jnp.asarray(problem.params))
    return forward, gradient, (int(accepted), int(attempted))


def diffsol_fns(problem: Problem):
    if importlib.util.find_spec("diffsol_jax") is None:
        return None
    from diffsol_jax import ODEProblem  # noqa: PLC0415  (optional peer)

    ode = ODEProblem(
        problem.scalar_field, y0=jnp.asarray(problem.y0), params=jnp.asarray(problem.params)
    )
    t_eval = jnp.asarray([0.0, problem.t1])

    def final(params):
        _, ys = ode.solve(params, t_eval, rtol=problem.rtol, atol=problem.atol)
        return ys[-1]

    forward = jax.jit(lambda p: problem.loss(final(p)))
    gradient = jax.jit(jax.grad(lambda p: problem.loss(final(p))))
    return forward, gradient


def _bound(attempted: int) -> str:
    """`E/n + 2` forward solves (see the module's docstring)."""
    return f"{optimal_total(attempted, CHECKPOINTS) / attempted + 2:.1f}"


def _relative(g, ref) -> float:
    g, ref = np.asarray(g), np.asarray(ref)
    return float(np.linalg.norm(g - ref) / max(float(np.linalg.norm(ref)), 1e-300))


def problem_rows(problem: Problem, quick: bool) -> list[list[str]]:
    params = jnp.asarray(problem.params)
    fns, steps, memory = {}, {}, {}
    peer = diffsol_fns(problem)
    if peer is not None:
        fns["diffsol-jax BDF", "forward"], fns["diffsol-jax BDF", "jax.grad"] = peer
    for solver_name, solver in SOLVERS.items():
        for adjoint_name, adjoint in ADJOINTS.items():
            forward, gradient, n = odeckpt_fns(problem, solver(), adjoint)
            fns[solver_name, "forward"] = forward
            fns[solver_name, adjoint_name] = gradient
            steps[solver_name] = n
            memory[solver_name, adjoint_name] = temp_bytes(gradient, params)
    grads = {key: np.asarray(fn(params)) for key, fn in fns.items() if key[1] != "forward"}
    first = next(iter(SOLVERS))

    def reference(solver_name):  # the same solver's checkpointed gradient
        return grads[solver_name if solver_name in SOLVERS else first, CHECKPOINTED]

    named = {f"{a} | {b}": fn for (a, b), fn in fns.items()}
    times = interleaved_medians(named, (params,), 6.0 if quick else 40.0)
    rows = []
    for (solver_name, mode), grad in grads.items():
        forward = times[f"{solver_name} | forward"]
        seconds = times[f"{solver_name} | {mode}"]
        rows.append(
            [
                problem.name,
                solver_name,
                mode,
                str(steps[solver_name][0]) if solver_name in steps else "—",
                seconds_cell(forward),
                seconds_cell(seconds),
                f"{seconds / forward:.1f}",
                _bound(steps[solver_name][1]) if mode == CHECKPOINTED else "—",
                bytes_cell(memory[solver_name, mode]) if (solver_name, mode) in memory else "—",
                f"{_relative(grad, reference(solver_name)):.1e}",
            ]
        )
    return rows


COLUMNS = [
    "problem",
    "solver",
    "gradient by",
    "steps",
    "forward",
    "gradient",
    "gradient / forward",
    "bound",
    "gradient memory",
    "difference",
]


def run(quick: bool) -> Section:
    rows = [row for problem in problems(quick) for row in problem_rows(problem, quick)]
    have_peer = importlib.util.find_spec("diffsol_jax") is not None
    notes = [
        "Figures from `python benchmarks/run.py --only stiff_gradients` on CPU."
        + ("" if have_peer else " diffsol-jax was not installed: its rows are missing."),
        "`ForwardMode()` under `jax.grad` carries a tangent per rate constant through the "
        "solve (forward sensitivities, as diffsol-jax does), in memory that does not grow "
        "with the steps; `CheckpointAdjoint(16)` reverses each step from 16 checkpoints; "
        "`InterpolatingAdjoint()` solves the adjoint ODE backwards with the same implicit "
        "solver on the forward step times (split where the adjoint needs it), reading `y` "
        "from the forward dense output (the continuous gradient: it differs from the "
        "discrete one by about the solve's tolerance).",
    ]
    return Section(
        title="Stiff gradients: checkpointed and forward-sensitivity gradients",
        table=Table(COLUMNS, rows),
        notes=notes,
    )
