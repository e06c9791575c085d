"""Vector-field evaluations of a checkpointed gradient per solver, and mixed schedules.

1. Every solver's gradient with `CheckpointAdjoint(checkpoints=c)` over n fixed steps,
   counted by a host callback in the vector field, against the Revolve optimum
   `(n + t(n, c))` times the evaluations of one step (counted in a forward solve).
   Methods that carry no stage restore a checkpoint for free; FSAL methods pay one
   evaluation per restore unless their checkpoints store the first stage (with a
   `memory_budget` that holds it: the "stage stored" rows).
2. The mixed (stage-storing) schedule of `odeckpt.schedules` against state-only Revolve
   in the same memory (plain Python: evaluation counts of the optimal plans).
"""

import functools
import time

import jax
import jax.numpy as jnp
from _common import Section, Table, warn

import odeckpt as oc
from odeckpt import schedules

A = jnp.array([[-1e-3, 1e-2], [-1e-2, -1e-3]])
Y0 = jnp.array([1.0, 0.5])
WITHOUT_STAGE = ("Euler", "Heun", "Midpoint", "Ralston", "Ros3P", "Rodas5P", "Kvaerno3", "Kvaerno5")
FSAL = ("Bosh3", "Tsit5", "Dopri5", "Dopri8")
QUICK_SOLVERS = ("Euler", "Heun", "Ros3P", "Kvaerno3", "Bosh3", "Tsit5")
LONG_SOLVERS = ("Euler", "Heun", "Tsit5")  # also counted at n = 10000 (full mode)


class _Counter:
    calls = 0


def _bump():
    _Counter.calls += 1


def _vf(t, y, a):
    jax.debug.callback(_bump)
    return a @ y


def _count(fn, *args) -> int:
    compiled = jax.jit(fn).lower(*args).compile()
    _Counter.calls = 0
    jax.block_until_ready(compiled(*args))
    jax.effects_barrier()
    return _Counter.calls


def _loss(solver, n: int, adjoint):
    def loss(params):
        y0, a = params
        sol = oc.diffeqsolve(_vf, solver, 0.0, float(n), 1.0, y0, a, adjoint=adjoint, max_steps=n)
        return jnp.sum(jnp.asarray(sol.ys) ** 2)

    return loss


@functools.cache
def per_step(name: str, n: int) -> tuple[float, float]:
    """`(e, e_rev)`: evaluations per step of a forward solve (`init`'s evaluation, if
    any, left out) and per reversed step (a store-every-step gradient less its forward
    pass: one step's evaluation plus those its VJP makes, e.g. an implicit method's)."""
    solver = getattr(oc, name)()
    first = int(solver.carries_first_stage)
    forward = _count(_loss(solver, n, oc.CheckpointAdjoint(checkpoints=8)), (Y0, A))
    store_all = _count(jax.grad(_loss(solver, n, oc.CheckpointAdjoint(checkpoints=n))), (Y0, A))
    return (forward - first) / n, (store_all - forward) / n


def gradient_row(name: str, n: int, c: int, staged: bool) -> list[str]:
    solver = getattr(oc, name)()
    e, e_rev = per_step(name, n)
    budget = 2 * c * (Y0.nbytes + 64) if staged else None
    adjoint = oc.CheckpointAdjoint(checkpoints=c, memory_budget=budget)
    calls = _count(jax.grad(_loss(solver, n, adjoint)), (Y0, A))
    plan = schedules.known_plan(n, c)
    first = int(solver.carries_first_stage)
    planned = first + e * (plan.total - plan.taped) + e_rev * plan.taped
    optimum = schedules.optimal_total(n, c)
    ratio = calls / (optimum * e)
    fsal = solver.carries_first_stage
    kind = "FSAL, stage stored" if staged else ("FSAL, stage rebuilt" if fsal else "no stage")
    met = "" if fsal and not staged else (" (met)" if ratio <= 1.01 else " (**not met**)")
    return [
        name,
        kind,
        str(n),
        str(c),
        f"{e:g}",
        f"{e_rev:g}",
        str(optimum),
        str(calls),
        f"{ratio:.4f}{met}",
        f"{calls / planned:.4f}",
    ]


def gradient_table(quick: bool) -> Table:
    names = QUICK_SOLVERS if quick else WITHOUT_STAGE + FSAL
    sizes = [(1000, c) for c in (4, 8, 32, 128)]
    sizes += [(10000, c) for c in ((32, 128) if quick else (4, 8, 32, 128))]
    rows = []
    for name in names:
        start = time.perf_counter()
        for n, c in sizes:
            if n == 10000 and name not in LONG_SOLVERS:
                continue  # up to 167,517 step evaluations: minutes of host callbacks
            fsal = getattr(oc, name)().carries_first_stage
            for staged in (False, True) if fsal else (False,):
                rows.append(gradient_row(name, n, c, staged))
        print(f"  evaluations: {name} took {time.perf_counter() - start:.0f} s", flush=True)
    columns = [
        "solver",
        "first stage",
        "n",
        "c",
        "evals per step e",
        "evals per reversal",
        "Revolve n + t(n, c)",
        "gradient vf evals",
        "evals / (e (n + t)), target <= 1.01",
        "evals / plan",
    ]
    return Table(columns, rows)


def _savings(n: int, budgets, tau: int) -> str:
    """The range of the mixed schedule's saving over Revolve, e.g. `24.7-33.4%`."""
    saved = [1 - schedules.mixed_total(n, b, tau) / schedules.optimal_total(n, b) for b in budgets]
    return f"{min(saved):.1%}-{max(saved):.1%}"


def mixed_table(n: int, budgets, tape_units) -> Table:
    rows = []
    for budget in budgets:
        revolve = schedules.optimal_total(n, budget)
        row = [str(budget), f"{revolve} ({revolve / n:.2f} n)"]
        for tau in tape_units:
            mixed = schedules.mixed_total(n, budget, tau)
            if mixed > revolve:
                warn(f"mixed schedule above Revolve: n={n}, budget={budget}, tape={tau}")
            row.append(f"{mixed} ({mixed / n:.2f} n, {1 - mixed / revolve:.1%} fewer)")
        rows.append(row)
    columns = [
        "budget (states)",
        "Revolve (states only)",
        *[f"mixed, tape = {tau} states" for tau in tape_units],
    ]
    caption = (
        f"Step evaluations of a gradient over n = {n} steps: optimal plans "
        "(`schedules.optimal_total`, `schedules.mixed_total`), memory in units of one state"
    )
    return Table(columns, rows, caption)


def run(quick: bool) -> Section:
    start = time.perf_counter()
    mixed = mixed_table(1000, (10, 20, 40, 60, 120), (1, 2, 3, 6, 7))
    print(f"  evaluations: mixed table took {time.perf_counter() - start:.0f} s", flush=True)
    table = gradient_table(quick)
    notes = [
        "Gradient of the mean square of y(n) for the 2-D linear ODE y' = A y with "
        "`ConstantStepSize`, dt = 1 over [0, n] (exactly n steps, known before the solve), "
        "`CheckpointAdjoint(checkpoints=c)`; vector-field evaluations counted by a "
        "`jax.debug.callback` in the field. e = evaluations per step of a forward solve "
        "(the Newton iterations of the implicit methods and the Jacobian products of the "
        "Rosenbrock methods counted as they are). The target applies to methods that "
        "carry no stage and to FSAL methods whose checkpoints store their first stage "
        "(`memory_budget` of two states per checkpoint); an FSAL method whose budget does "
        "not hold the stage pays one evaluation per reversed step (the rows 'stage "
        "rebuilt'). 'evals per reversal': a store-every-step gradient's evaluations less "
        "the forward's, per step (an implicit method's VJP solves and linearises its "
        "stages: more than e); 'evals / plan': the count over that of "
        "`schedules.known_plan` with e per advance and the reversal cost per reversed "
        "step (1: no evaluation outside the plan). "
        + ("Quick mode: six solvers." if quick else "")
        + " n = 10000 is counted for Euler, Heun and Tsit5 only "
        + ("(c = 32, 128 in quick mode)." if quick else "(up to 167,517 steps at c = 4)."),
        "Mixed schedules: a tape is what reversing a step needs without evaluating it "
        "again. With a tape the size of a state (tape = 1, the assumption of Maddison's "
        f"mixed schedule) the optimum saves {_savings(1000, (20, 40, 60), 1)} at 20-60 "
        "states (n = 1000); counted in bytes, a Runge–Kutta tape holds its stages (6 "
        "states for Tsit5), and the saving falls to "
        f"{_savings(1000, (20, 40, 60), 6)}. In JAX, reversing a step from its stored stages still "
        "linearises the vector field at each stage (an evaluation inside `jax.vjp`) unless "
        "the tape holds the field's own residuals (for an MLP, its activations: larger "
        "than the state). The mixed schedule is in `odeckpt.schedules` only; "
        "`CheckpointAdjoint` runs state-only plans.",
    ]
    return Section(
        "Evaluations per gradient: restores, first stages and mixed schedules",
        table,
        notes,
        extra_tables=[mixed],
    )
