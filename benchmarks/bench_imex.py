"""IMEX on stiff 1-D reaction–diffusion: odeckpt's KenCarp4 and KenCarp5 (reaction
explicit, diffusion implicit) against odeckpt's Kvaerno5 on the unsplit field and diffrax's
KenCarp4, at equal accuracy, forward and gradient, in one process.

Problem: Fisher–KPP, `u_t = D u_xx + u (1 - u)` on `[0, 1]` with zero-flux ends (ghost
points), N = 256 points, `D = 0.1` (the diffusion's stiffness `4 D / dx^2` is 2.6e4),
`u(0, x) = exp(-50 x^2)`, over `[0, 1]`: a front that forms and travels.
Reference: `solve_ivp(method="Radau", rtol=1e-12, atol=1e-14)` with the exact Jacobian.

Equal accuracy: diffrax's KenCarp4 at `rtol = 1e-6` (`atol = 1e-3 rtol`) sets the target,
its max error at `t1` against the reference; each odeckpt solver runs at the loosest
`rtol` of a grid whose error is no larger. The tolerance is an argument of the compiled
solve (traced), so the search compiles each solver once. Times are medians of
interleaved samples of compiled functions, and the ratios are per-round paired ratios
against diffrax's KenCarp4 (the machine may be shared: ratios taken in the same run are
what count). Gradients: `d/dD sum(u(t1)^2)`, through `CheckpointAdjoint()` and diffrax's
default `RecursiveCheckpointAdjoint`.

Jacobian: odeckpt forms the implicit term's Jacobian with N = 256 batched forward-mode
products per step (no linearity assumed) and factorises `I - h gamma J` once per step;
for this linear stencil the products are one batched matrix-free Laplacian. diffrax's
KenCarp4 forms its Jacobian by lineax's materialisation and re-solves each Newton
iteration.
"""

import statistics

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate
from _common import (
    Section,
    Table,
    compile_seconds,
    interleaved_samples,
    paired_ratio,
    seconds_cell,
    warn,
)

import odeckpt as oc

N, D, T1 = 256, 0.1, 1.0
X = np.linspace(0.0, 1.0, N)
DX = float(X[1] - X[0])
U0 = np.exp(-50.0 * X**2)
TARGET_RTOL = 1e-6
GRID = (1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7, 3e-8, 1e-8)
QUICK_GRID = (1e-5, 3e-6, 1e-6, 3e-7, 1e-7)


def laplacian(u):
    left = jnp.concatenate([u[1:2], u[:-1]])
    right = jnp.concatenate([u[1:], u[-2:-1]])
    return (left - 2 * u + right) / DX**2


def reaction(t, u, d):
    return u * (1 - u)


def diffusion(t, u, d):
    return d * laplacian(u)


def unsplit(t, u, d):
    return diffusion(t, u, d) + reaction(t, u, d)


def radau_reference() -> np.ndarray:
    lap = np.diag(-2.0 * np.ones(N)) + np.diag(np.ones(N - 1), 1) + np.diag(np.ones(N - 1), -1)
    lap[0, 1] = lap[-1, -2] = 2.0
    matrix = D * lap / DX**2
    sol = scipy.integrate.solve_ivp(
        lambda t, u: matrix @ u + u * (1 - u),
        (0.0, T1),
        U0,
        method="Radau",
        rtol=1e-12,
        atol=1e-14,
        jac=lambda t, u: matrix + np.diag(1 - 2 * u),
    )
    return sol.y[:, -1]


DIFFRAX_MAX_STEPS = 1000


def _solve(name: str, d, rtol):
    """`(u(t1), accepted steps, rejected steps, t reached)` of one run, `rtol` traced."""
    atol = 1e-3 * rtol
    if name == "diffrax KenCarp4":
        term = dfx.MultiTerm(dfx.ODETerm(reaction), dfx.ODETerm(diffusion))
        sol = dfx.diffeqsolve(
            term,
            dfx.KenCarp4(),
            0.0,
            T1,
            None,
            jnp.asarray(U0),
            d,
            stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
            max_steps=DIFFRAX_MAX_STEPS,
            throw=False,
        )
        stats = sol.stats
        return sol.ys[-1], stats["num_accepted_steps"], stats["num_rejected_steps"], sol.ts[-1]
    if name in IMEX:
        term = oc.MultiTerm(oc.ODETerm(reaction), oc.ODETerm(diffusion))
        solver = IMEX[name]()
    else:
        term, solver = oc.ODETerm(unsplit), oc.Kvaerno5()
    sol = oc.diffeqsolve(
        term,
        solver,
        0.0,
        T1,
        None,
        jnp.asarray(U0),
        d,
        stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
        max_steps=4096,
    )
    stats = sol.stats
    return sol.ys[-1], stats["num_accepted_steps"], stats["num_rejected_steps"], sol.ts[-1]


IMEX = {"odeckpt KenCarp4": oc.KenCarp4, "odeckpt KenCarp5": oc.KenCarp5}
RUNS = (*IMEX, "odeckpt Kvaerno5 (unsplit)", "diffrax KenCarp4")
PEER = "odeckpt Kvaerno5 (unsplit)"
FIRST, REFEREE = "odeckpt KenCarp4", "diffrax KenCarp4"


def _forward(name):
    return lambda d, rtol: _solve(name, d, rtol)


def _gradient(name):
    return jax.grad(lambda d, rtol: jnp.sum(_solve(name, d, rtol)[0] ** 2))


def _outcome(fn, rtol, ref) -> dict:
    u, accepted, rejected, reached = fn(jnp.asarray(D), jnp.asarray(rtol))
    error = float(np.max(np.abs(np.asarray(u) - ref)))
    return {
        "rtol": rtol,
        "error": error,
        "steps": f"{int(accepted)} + {int(rejected)} rejected",
        "reached": float(reached),
    }


def _matched(compiled, ref, grid) -> dict:
    """Per run: the outcome at the rtol used. diffrax's KenCarp4 at rtol 1e-6 sets the
    target error when it reaches `t1`; otherwise odeckpt's KenCarp4 at 1e-6 does."""
    out = {name: _outcome(compiled[name], TARGET_RTOL, ref) for name in (FIRST, REFEREE)}
    finished = out[REFEREE]["reached"] >= T1
    target = out[REFEREE if finished else FIRST]["error"]
    searched = [name for name in RUNS if name != REFEREE and (finished or name != FIRST)]
    for name in searched:
        for rtol in grid:
            out[name] = _outcome(compiled[name], rtol, ref)
            print(f"  imex: {name} {out[name]}", flush=True)
            if out[name]["error"] <= target:
                break
        if out[name]["error"] > target:
            warn(f"{name} did not reach the target accuracy {target:.3g} on the grid")
    print(f"  imex: {REFEREE} {out[REFEREE]}", flush=True)
    return out


def _timed(fns: dict, outcomes: dict, budget: float) -> tuple[dict, dict]:
    """Median seconds per call and paired ratios against Kvaerno5 (unsplit)."""
    calls = {
        name: (lambda d, f=fn, r=jnp.asarray(outcomes[name]["rtol"]): f(d, r))
        for name, fn in fns.items()
    }
    samples = interleaved_samples(calls, (jnp.asarray(D),), budget_seconds=budget)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    ratios = {name: paired_ratio(samples[name], samples[PEER]) for name in fns}
    return medians, ratios


def run(quick: bool) -> Section:
    ref = radau_reference()
    d, r = jnp.asarray(D), jnp.asarray(TARGET_RTOL)
    forward, gradient, compile_s = {}, {}, {}
    for name in RUNS:
        forward[name], compile_s[name] = compile_seconds(lambda name=name: _forward(name), d, r)
        print(f"  imex: compiled {name} ({compile_s[name]:.1f} s forward)", flush=True)
    outcomes = _matched(forward, ref, QUICK_GRID if quick else GRID)
    finished = outcomes[REFEREE]["reached"] >= T1
    timed = RUNS if finished else tuple(name for name in RUNS if name != REFEREE)
    for name in timed:
        gradient[name], _ = compile_seconds(lambda name=name: _gradient(name), d, r)
    budget = 2.0 if quick else 6.0
    seconds, ratios = _timed({n: forward[n] for n in timed}, outcomes, budget)
    grad_seconds, grad_ratios = _timed({n: gradient[n] for n in timed}, outcomes, budget)
    rows = []
    for name in RUNS:
        o = outcomes[name]
        if name not in timed:
            rows.append(
                [
                    name,
                    f"{o['rtol']:g}",
                    f"did not finish: t = {o['reached']:.2g} after {DIFFRAX_MAX_STEPS} steps",
                    o["steps"],
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    f"{compile_s[name]:.1f} s",
                ]
            )
            continue
        grad = float(gradient[name](d, jnp.asarray(o["rtol"])))
        rows.append(
            [
                name,
                f"{o['rtol']:g}",
                f"{o['error']:.2e}",
                o["steps"],
                seconds_cell(seconds[name]),
                f"{ratios[name]:.2f}",
                seconds_cell(grad_seconds[name]),
                f"{grad_ratios[name]:.2f}",
                f"{grad:.6g}",
                f"{compile_s[name]:.1f} s",
            ]
        )
    columns = [
        "run",
        "rtol",
        "max error vs Radau",
        "steps",
        "forward",
        "/ Kvaerno5",
        "gradient",
        "/ Kvaerno5",
        "d sum(u^2) / dD",
        "compile (forward)",
    ]
    table = Table(columns, rows, caption="Fisher–KPP, N = 256, D = 0.1, t in [0, 1]")
    notes = [
        "At equal accuracy against SciPy's Radau (rtol 1e-12): the error of diffrax's "
        "KenCarp4 at rtol 1e-6 sets the target when it reaches t1, else odeckpt's "
        "KenCarp4's at 1e-6; each other odeckpt run (KenCarp5, Kvaerno5 on the unsplit "
        "field) uses the loosest rtol of the "
        f"grid {', '.join(f'{g:g}' for g in (QUICK_GRID if quick else GRID))} that matches "
        "it. Times are medians of interleaved samples after compilation; ratios are paired "
        "per round in the same run (the machine is shared: the ratios are what count, not "
        "the absolute times). Gradient: `CheckpointAdjoint()` (and diffrax's "
        "`RecursiveCheckpointAdjoint` where it finishes).",
        "diffrax 0.7.2's KenCarp4 (default settings, `dt0=None`) does not finish this "
        "problem: it rejects most of its steps from the start and stalls near t = 1e-4 "
        "(the same at N = 32 and N = 128, with `dt0=1e-3`, and with tighter Newton "
        "tolerances `VeryChord(rtol=1e-8, atol=1e-10)`), so its time is not comparable.",
    ]
    return Section("IMEX: reaction–diffusion (KenCarp4, KenCarp5)", table, notes)
