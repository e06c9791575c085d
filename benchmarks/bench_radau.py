"""RadauIIA5 against Kvaerno5 and Rodas5P at tight tolerances, in one process.

1. Robertson over [0, 1e5] (`atol = 1e-4 rtol`) and Van der Pol (mu = 1000) over
   [0, 3000] (`atol = rtol`) at rtol 1e-8 and 1e-10: accepted and rejected steps,
   vector-field calls (counted by a callback in the field; a Jacobian's `n` batched
   forward-mode products count as one call), Jacobians and factorisations per
   attempted step (from each method's algorithm, not counted), the error against
   `solve_ivp(Radau, rtol=1e-12)` divided by the requested tolerance, and the median
   wall time of the compiled solve. The implicit solvers get Newton tolerances 1e-3
   times the controller's.
2. Matched accuracy: the error of each method at its own tolerance differs (Radau's
   estimate is of order 3, so at a given rtol it is typically far more accurate), so
   RadauIIA5 is also run on a grid of tolerances (1, 2 and 5 times each power of ten
   from 1e-3 to 1e-10, the same grid for every peer) and the loosest one whose error
   is no larger than the peer's is reported with its steps.
3. The gradient d(w . y(1e5))/dk of Robertson through `CheckpointAdjoint()` against
   the forward-sensitivity reference, relative to the rtol (target within 10 x rtol).
4. The linear algebra of one Newton step by `n`: the whole `3n x 3n` system against
   the real and complex `n x n` ones (where `RadauIIA5` switches).

The machine is shared: only ratios within one run mean anything; step counts and
errors do not depend on the load.
"""

import dataclasses
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from _common import Section, Table, interleaved_samples, paired_ratio, seconds_cell
from _stiff import (
    ROBERTSON_K,
    ROBERTSON_W,
    ROBERTSON_Y0,
    robertson,
    van_der_pol,
    van_der_pol_reference,
)
from bench_stiff import robertson_ref

import odeckpt as oc
from odeckpt._solvers.stiff import radau as rd, radau_tableaux as rt

NEWTON_FACTOR = 1e-3  # Newton tolerances relative to the controller's
# Three points a decade (1, 2, 5): one Radau run for every peer and tolerance.
GRID = (1e-3,) + tuple(float(f"{m}e-{k}") for k in range(4, 11) for m in (5, 2, 1))


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str
    field: object
    y0: tuple
    t1: float
    args: object
    atol_ratio: float  # atol = atol_ratio * rtol
    max_steps: int


ROBERTSON = Problem("Robertson [0, 1e5]", robertson, ROBERTSON_Y0, 1e5, ROBERTSON_K, 1e-4, 16384)
VDP = Problem("Van der Pol mu=1000 [0, 3000]", van_der_pol, (2.0, 0.0), 3000.0, 1000.0, 1.0, 65536)


def make_solver(name: str, rtol: float, atol: float):
    if name == "Rodas5P":
        return oc.Rodas5P()
    cls = {"RadauIIA5": oc.RadauIIA5, "Kvaerno5": oc.Kvaerno5}[name]
    return cls(rtol=NEWTON_FACTOR * rtol, atol=NEWTON_FACTOR * atol)


# Jacobians and factorisations per attempted step, from each method's algorithm (Radau:
# the real and complex systems, or for n <= 2 the whole matrix and the error filter; a
# Kvaerno5 stage whose iteration fails refreshes its Jacobian: lower bounds).
ALGEBRA = {"RadauIIA5": "1 / 2", "Kvaerno5": ">= 1 / >= 1", "Rodas5P": "1 / 1"}


def solve_fn(problem: Problem, name: str, rtol: float, counter=None):
    atol = problem.atol_ratio * rtol
    solver = make_solver(name, rtol, atol)

    def field(t, y, args):
        if counter is not None:
            jax.debug.callback(counter, t)
        return problem.field(t, y, args)

    def solve(args):
        sol = oc.diffeqsolve(
            field,
            solver,
            0.0,
            problem.t1,
            None,
            jnp.asarray(problem.y0),
            args,
            stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
            max_steps=problem.max_steps,
        )
        return sol.ys[0], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    return solve


def scaled_error(problem: Problem, y, ref, rtol) -> float:
    atol = problem.atol_ratio * rtol
    return float(np.max(np.abs(np.asarray(y) - ref) / (atol + rtol * np.abs(ref))))


@dataclasses.dataclass
class Run:
    accepted: int
    rejected: int
    calls: int
    error: float  # |y - ref| / (atol + rtol |ref|)
    abs_error: float  # max |y - ref| / max(|ref|, atol): for matching accuracy
    seconds: float | None = None


def measure(problem: Problem, name: str, rtol: float, ref) -> Run:
    calls = [0]

    def count(_):
        calls[0] += 1

    y, accepted, rejected = jax.jit(solve_fn(problem, name, rtol, count))(jnp.asarray(problem.args))
    jax.effects_barrier()
    atol = problem.atol_ratio * rtol
    err = float(np.max(np.abs(np.asarray(y) - ref) / np.maximum(np.abs(ref), atol)))
    return Run(int(accepted), int(rejected), calls[0], scaled_error(problem, y, ref, rtol), err)


def time_solvers(problem: Problem, rtol: float, names, quick: bool) -> dict[str, float]:
    args = jnp.asarray(problem.args)
    fns = {name: jax.jit(lambda a, n=name: solve_fn(problem, n, rtol)(a)[0]) for name in names}
    samples = interleaved_samples(fns, (args,), 1.0 if quick else 3.0, min_rounds=3)
    return {name: statistics.median(values) for name, values in samples.items()}


def grid_runs(problem: Problem, ref) -> list[tuple[float, int, float]]:
    """RadauIIA5 at every tolerance of `GRID`, in one `vmap`ped solve (Newton
    tolerances fixed at 1e-13 and 1e-17, below every grid point):
    `(rtol, attempted steps, rel. error)`."""

    def solve(rtol):
        sol = oc.diffeqsolve(
            problem.field,
            oc.RadauIIA5(rtol=1e-13, atol=1e-17),
            0.0,
            problem.t1,
            None,
            jnp.asarray(problem.y0),
            jnp.asarray(problem.args),
            max_steps=problem.max_steps,
            stepsize_controller=oc.PIDController(rtol=rtol, atol=problem.atol_ratio * rtol),
        )
        return sol.ys[0], sol.stats["num_accepted_steps"] + sol.stats["num_rejected_steps"]

    ys, steps = jax.jit(jax.vmap(solve))(jnp.asarray(GRID))
    out = []
    for rtol, y, n in zip(GRID, np.asarray(ys), np.asarray(steps), strict=True):
        floor = problem.atol_ratio * rtol
        out.append((rtol, int(n), float(np.max(np.abs(y - ref) / np.maximum(np.abs(ref), floor)))))
    return out


def matched(grid, target: float) -> tuple[float, int] | None:
    """The loosest grid tolerance whose error is at most `target`, with its steps."""
    for rtol, steps, error in grid:
        if error <= target:
            return rtol, steps
    return None


def problem_rows(problem: Problem, ref, rtols, quick: bool):
    names = ("RadauIIA5", "Kvaerno5", "Rodas5P")
    rows, matches, grid = [], [], grid_runs(problem, ref)
    for rtol in rtols:
        runs = {name: measure(problem, name, rtol, ref) for name in names}
        for name, seconds in time_solvers(problem, rtol, names, quick).items():
            runs[name].seconds = seconds
        for name, run in runs.items():
            rows.append(
                [
                    problem.name,
                    f"{rtol:.0e}",
                    name,
                    f"{run.accepted} / {run.rejected}",
                    str(run.calls),
                    ALGEBRA[name],
                    f"{run.error:.2g}",
                    f"{run.abs_error:.2g}",
                    seconds_cell(run.seconds or 0.0),
                ]
            )
            print(f"  radau: {problem.name} {rtol:.0e} {name} {run}", flush=True)
        for peer in ("Kvaerno5", "Rodas5P"):
            found = matched(grid, runs[peer].abs_error)
            peer_steps = runs[peer].accepted + runs[peer].rejected
            cells = ["—", "—", "—"]
            if found is not None:
                cells = [f"{found[0]:.0e}", str(found[1]), f"{found[1] / peer_steps:.2f}"]
            matches.append(
                [
                    problem.name,
                    f"{rtol:.0e}",
                    peer,
                    f"{peer_steps} ({runs[peer].abs_error:.1e})",
                    *cells,
                ]
            )
    return rows, matches


def linear_algebra_rows(quick: bool):
    """Per step: factorise the Newton matrices and apply 3 Newton increments, whole
    (`3n x 3n`) against split (real + complex `n x n`), by `n`."""
    tab, h, rows = rt.RADAU_IIA5, jnp.asarray(0.01), []
    for n in (2, 3, 5, 8) if quick else (2, 3, 4, 5, 8, 16, 24):
        key1, key2 = jax.random.split(jax.random.key(n))
        jac = -jax.random.normal(key1, (n, n)) - n * jnp.eye(n)
        fields = jax.random.normal(key2, (3, n))

        def per_step(jac, fields, whole):
            system = rd.newton_system(tab, jac, h, whole=whole)
            z = jnp.zeros_like(fields)
            for _ in range(3):
                z = z + rd.newton_increment(tab, system, h, fields, z)
            return z

        fns = {
            "whole": jax.jit(lambda j, f: per_step(j, f, True)),
            "split": jax.jit(lambda j, f: per_step(j, f, False)),
        }
        samples = interleaved_samples(fns, (jac, fields), 0.5 if quick else 1.0)
        ratio = paired_ratio(samples["whole"], samples["split"])
        chosen = "whole" if 3 * n <= rd.PLAIN_UNKNOWNS else "split"
        whole, split = (seconds_cell(statistics.median(samples[k])) for k in ("whole", "split"))
        rows.append([str(n), whole, split, f"{ratio:.2f}", chosen])
        print(f"  radau: linear algebra n={n} whole/split {ratio:.2f}", flush=True)
    return rows


def gradient_rows(rtols, quick: bool):
    _, dy_dk = robertson_ref(quick)
    expected = ROBERTSON_W @ dy_dk
    rows = []
    for rtol in rtols:
        for name in ("RadauIIA5", "Kvaerno5", "Rodas5P"):
            solve = solve_fn(ROBERTSON, name, rtol)
            grad = jax.jit(jax.grad(lambda k, s=solve: s(k)[0] @ jnp.asarray(ROBERTSON_W)))
            got = np.asarray(grad(jnp.asarray(ROBERTSON_K)))
            worst = float(np.max(np.abs(got - expected) / np.abs(expected))) / rtol
            verdict = "met" if worst <= 10 else "**not met**"
            rows.append([name, f"{rtol:.0e}", f"{worst:.2g}", verdict])
            print(f"  radau: gradient {name} {rtol:.0e} {worst:.3g} x rtol", flush=True)
    return rows


NOTES = [
    "Steps are attempted steps (accepted + rejected). Errors are against "
    "`solve_ivp(Radau, rtol=1e-12)`; 'error / tol' is max |y - ref| / (atol + rtol |ref|), "
    "'rel. error' max |y - ref| / max(|ref|, atol). Like SciPy's `Radau` (and unlike "
    "RADAU5, which maps rtol to 0.1 rtol^(2/3)), the controller's tolerance applies to "
    "RadauIIA5's order-3 error estimate, so it is typically more accurate than asked; "
    "the matched-accuracy table compares steps at equal error, on a grid of RadauIIA5 "
    "tolerances with three points a decade (1, 2, 5 x 10^-k, from 1e-3 to 1e-10) and "
    "Newton tolerances 1e-13 (relative) and 1e-17 (absolute) at every point.",
    "Wall times are medians of interleaved samples on a shared machine: compare them "
    "within one problem and tolerance only.",
]


def run(quick: bool) -> Section:
    rtols = (1e-8,) if quick else (1e-8, 1e-10)
    rows, matches = [], []
    for problem, ref in (
        (ROBERTSON, robertson_ref(quick)[0]),
        (VDP, van_der_pol_reference(1000.0, 3000.0)),
    ):
        got, found = problem_rows(problem, np.asarray(ref), rtols, quick)
        rows += got
        matches += found
    gradients = gradient_rows(rtols, quick)
    algebra = linear_algebra_rows(quick)
    return Section(
        title="RadauIIA5 against Kvaerno5 and Rodas5P",
        table=Table(
            [
                "problem",
                "rtol",
                "solver",
                "steps acc / rej",
                "f calls",
                "Jacobians / LUs per step",
                "error / tol",
                "rel. error",
                "time",
            ],
            rows,
        ),
        notes=NOTES,
        extra_tables=[
            Table(
                [
                    "problem",
                    "rtol",
                    "peer",
                    "peer steps (rel. error)",
                    "Radau rtol",
                    "Radau steps",
                    "Radau / peer steps",
                ],
                matches,
                "Matched accuracy: RadauIIA5 at the loosest tolerance reaching the peer's error",
            ),
            Table(
                ["solver", "rtol", "gradient error / rtol", "<= 10"],
                gradients,
                "Robertson gradients through CheckpointAdjoint() against forward sensitivities",
            ),
            Table(
                ["n", "whole 3n x 3n", "split n x n", "whole / split", "RadauIIA5 uses"],
                algebra,
                "Newton linear algebra per step (factorise, 3 increments)",
            ),
        ],
    )
