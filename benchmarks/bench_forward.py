"""Forward solves against diffrax: same problems, solvers, tolerances and first step.

For each (problem, solver) both libraries solve under `jax.jit` as a function of `y0`
returning `sol.ys` (at `t1`) and the accepted/rejected step counts. The step counts
must agree (the same method and controller take the same steps); times are medians
of interleaved samples after compilation; compile time is trace + lower + compile of
a fresh function.
"""

import dataclasses
import statistics
from collections.abc import Callable

import diffrax as dfx
import jax
import jax.numpy as jnp
from _common import (
    Section,
    Table,
    bar_plot,
    interleaved_samples,
    median_compile_seconds,
    paired_ratio,
    plot_path,
    ratio,
    ratio_cell,
    seconds_cell,
    warn,
)
from _problems import PROBLEMS, Problem
from bench_gradient import rd_params, reaction_diffusion

import odeckpt as oc

RTOL, ATOL, DT0, MAX_STEPS = 1e-6, 1e-8, 0.01, 16384
BATCH = 64


SOLVERS = {
    "Tsit5": (oc.Tsit5, dfx.Tsit5),
    "Dopri5": (oc.Dopri5, dfx.Dopri5),
    "Dopri8": (oc.Dopri8, dfx.Dopri8),
    "Bosh3": (oc.Bosh3, dfx.Bosh3),
}

FULL_CASES = [(p, s) for p in PROBLEMS for s in ("Tsit5", "Dopri5", "Dopri8")]
FULL_CASES.append(("van_der_pol", "Bosh3"))
QUICK_CASES = [(p, "Tsit5") for p in PROBLEMS] + [
    ("van_der_pol", "Dopri5"),
    ("arenstorf", "Dopri8"),
    ("van_der_pol", "Bosh3"),
]


# ----------------------------------------------------------------------------------
# The two solves, built fresh on each call (see `_common.compile_seconds`)


def make_odeckpt(problem: Problem, solver: str) -> Callable:
    controller = oc.PIDController(rtol=RTOL, atol=ATOL)
    args = jax.tree.map(jnp.asarray, problem.args)

    def solve(y0):
        sol = oc.diffeqsolve(
            oc.ODETerm(problem.vf),
            SOLVERS[solver][0](),
            0.0,
            problem.t1,
            DT0,
            y0,
            args,
            stepsize_controller=controller,
            max_steps=MAX_STEPS,
        )
        return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    return solve


def make_diffrax(problem: Problem, solver: str) -> Callable:
    controller = dfx.PIDController(rtol=RTOL, atol=ATOL)
    args = jax.tree.map(jnp.asarray, problem.args)

    def solve(y0):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(problem.vf),
            SOLVERS[solver][1](),
            0.0,
            problem.t1,
            DT0,
            y0,
            args,
            stepsize_controller=controller,
            max_steps=MAX_STEPS,
        )
        return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    return solve


# Fixed steps on a large elementwise system: the 4096-point reaction-diffusion problem of
# the gradient section, Tsit5 with ConstantStepSize (every stage read only by later
# stages and the update: see the fusion note in `odeckpt._integrator.Integrator.step`).
FIXED_T1, FIXED_DT = 0.05, 1e-5


def make_fixed(lib) -> Callable:
    def make(problem, solver) -> Callable:
        m = oc if lib == "odeckpt" else dfx
        args = rd_params()[1]

        def solve(y0):
            sol = m.diffeqsolve(
                m.ODETerm(reaction_diffusion),
                m.Tsit5(),
                0.0,
                FIXED_T1,
                FIXED_DT,
                y0,
                args,
                stepsize_controller=m.ConstantStepSize(),
                max_steps=10000,
            )
            return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

        return solve

    return make


def batched(make: Callable) -> Callable:
    """`make` with the solve vmapped over a leading axis of initial conditions."""
    return lambda problem, solver: jax.vmap(make(problem, solver))


MAKERS = {"odeckpt": make_odeckpt, "diffrax": make_diffrax}


# ----------------------------------------------------------------------------------
# Measuring one case


@dataclasses.dataclass
class Measured:
    problem: str
    solver: str
    steps: dict[str, tuple[int, int]]  # library -> (accepted, rejected)
    seconds: dict[str, float]  # median per call
    compile_seconds: dict[str, float]
    time_ratio: float  # odeckpt / diffrax, median of paired samples
    max_abs_diff: float

    @property
    def label(self) -> str:
        return f"{self.problem} · {self.solver}"

    @property
    def compile_ratio(self) -> float:
        return ratio(self.compile_seconds["odeckpt"], self.compile_seconds["diffrax"])

    @property
    def steps_equal(self) -> bool:
        return len(set(self.steps.values())) == 1


def _steps(out) -> tuple[int, int]:
    _, accepted, rejected = out
    return int(jnp.sum(accepted)), int(jnp.sum(rejected))


def measure(problem, solver, y0, makers, quick: bool, flip=False, title=None) -> Measured:
    """Compile (in reversed order if `flip`), check step counts, then time interleaved."""
    title = title or problem.name
    names = list(makers)[::-1] if flip else list(makers)
    compiled, compile_times = {}, {}
    for name in names:
        compiled[name], compile_times[name] = median_compile_seconds(
            lambda name=name: makers[name](problem, solver), (y0,), 1 if quick else 3
        )
    outs = {name: compiled[name](y0) for name in makers}
    steps = {name: _steps(out) for name, out in outs.items()}
    if len(set(steps.values())) != 1:
        warn(f"STEP COUNT MISMATCH on {title} · {solver}: {steps} (accepted, rejected)")
    ys = [out[0] for out in outs.values()]
    diff = float(jnp.max(jnp.abs(ys[0] - ys[1])))
    samples = interleaved_samples(compiled, (y0,), budget_seconds=1.0 if quick else 2.0)
    seconds = {name: statistics.median(values) for name, values in samples.items()}
    time_ratio = paired_ratio(samples["odeckpt"], samples["diffrax"])
    return Measured(title, solver, steps, seconds, compile_times, time_ratio, diff)


def _warm_up():
    """One small solve per library, so one-time setup is not charged to the first case."""
    problem = PROBLEMS["van_der_pol"]
    y0 = jnp.asarray(problem.y0)
    for make in MAKERS.values():
        jax.block_until_ready(jax.jit(make(problem, "Tsit5"))(y0))


# ----------------------------------------------------------------------------------
# Formatting


def _steps_cell(m: Measured, name: str) -> str:
    accepted, rejected = m.steps[name]
    return f"{accepted} / {rejected}" + ("" if m.steps_equal else " **MISMATCH**")


def _row(m: Measured) -> list[str]:
    return [
        m.problem,
        m.solver,
        _steps_cell(m, "odeckpt"),
        _steps_cell(m, "diffrax"),
        seconds_cell(m.seconds["odeckpt"]),
        seconds_cell(m.seconds["diffrax"]),
        ratio_cell(m.time_ratio, 1.0),
        seconds_cell(m.compile_seconds["odeckpt"]),
        seconds_cell(m.compile_seconds["diffrax"]),
        ratio_cell(m.compile_ratio, 1.0),
        f"{m.max_abs_diff:.1e}",
    ]


COLUMNS = [
    "problem",
    "solver",
    "odeckpt steps acc / rej",
    "diffrax steps acc / rej",
    "odeckpt time",
    "diffrax time",
    "time ratio",
    "odeckpt compile",
    "diffrax compile",
    "compile ratio",
    "max abs diff of ys",
]


def _summary(results: list[Measured]) -> str:
    n = len(results)
    equal = sum(m.steps_equal for m in results)
    fast = sum(m.time_ratio <= 1.0 for m in results)
    quick_compile = sum(m.compile_ratio <= 1.0 for m in results)
    return (
        f"Summary: equal step counts on {equal}/{n}; time ratio <= 1.0 on {fast}/{n}; "
        f"compile ratio <= 1.0 on {quick_compile}/{n}."
    )


def _plots(results: list[Measured]) -> list[str]:
    labels = [m.label for m in results]
    paths = []
    for key, what in (("time", "time per solve"), ("compile", "compile time")):
        values = [getattr(m, f"{key}_ratio") for m in results]
        path, relative = plot_path(f"forward_{key}.png")
        bar_plot(path, labels, values, 1.0, f"Forward solve: {what}, odeckpt / diffrax")
        paths.append(relative)
    return paths


# ----------------------------------------------------------------------------------
# The section


def _method_note(quick: bool) -> str:
    return (
        f"Both libraries: `PIDController(rtol={RTOL:g}, atol={ATOL:g})`, explicit "
        f"`dt0={DT0}`, `max_steps={MAX_STEPS}`, default adjoint, `SaveAt(t1=True)`, "
        "`throw=True` (the default; its host callback costs each library about 0.1 ms "
        "per call on CPU); each solve is `jax.jit` of `y0 -> (sol.ys, accepted steps, "
        "rejected steps)`. Time: median seconds per call after compilation, the two "
        "libraries sampled in alternation in one process; the time ratio is the median "
        "of the per-round ratios, which cancels most of the load of a shared machine "
        "(the absolute medians do not: compare ratios, not times, across runs). "
        "Compile: trace + lower + XLA compile of a fresh function after "
        "`jax.clear_caches()` (`jax.jit(f).lower(y0).compile()`), median of "
        f"{1 if quick else 3}. Targets: time ratio and compile ratio <= 1.0."
    )


def _batched_y0(problem: Problem) -> jax.Array:
    scale = 1.0 + 0.5 * jnp.linspace(-1.0, 1.0, BATCH)
    return scale[:, None] * jnp.asarray(problem.y0)[None, :]


def run(quick: bool) -> Section:
    _warm_up()
    results = []
    for i, (key, solver) in enumerate(QUICK_CASES if quick else FULL_CASES):
        problem = PROBLEMS[key]
        y0 = jnp.asarray(problem.y0)
        results.append(measure(problem, solver, y0, MAKERS, quick, flip=i % 2 == 1))
        print(f"  forward: {results[-1].label} done", flush=True)
    problem = PROBLEMS["lotka_volterra"]
    batch = measure(
        problem,
        "Tsit5",
        _batched_y0(problem),
        {name: batched(make) for name, make in MAKERS.items()},
        quick,
        title=f"{problem.name}, vmap over {BATCH} initial conditions",
    )
    fixed = measure(
        problem,
        "Tsit5",
        rd_params()[0],
        {name: make_fixed(name) for name in MAKERS},
        quick,
        title=f"reaction-diffusion, 4096 points, ConstantStepSize(), dt0={FIXED_DT:g}, "
        f"[0, {FIXED_T1:g}]",
    )
    print("  forward: fixed steps done", flush=True)
    notes = [
        _summary(results),
        _method_note(quick),
        f"Batched: `jax.vmap` over {BATCH} initial conditions (y0 scaled by 0.5 ... 1.5); "
        "steps are summed over the batch.",
    ]
    return Section(
        title="Forward solves against diffrax",
        table=Table(COLUMNS, [_row(m) for m in results]),
        notes=notes,
        plots=_plots(results + [batch]),
        extra_tables=[
            Table(COLUMNS, [_row(batch)], caption="Batched forward solve"),
            Table(COLUMNS, [_row(fixed)], caption="Fixed steps, large elementwise system"),
        ],
    )
