"""Calls outside `jax.jit`: a solve and its gradient called eagerly, again and again, as
code that does not wrap its training step or parameter sweep in `jax.jit` runs them.

Both libraries compile the solve on the first call and reuse it on later calls with
the same vector field and shapes: diffrax wraps `diffeqsolve` in `eqx.filter_jit`;
odeckpt runs the whole solve as one compiled program from its cache (a forward and a
backward program under `jax.grad`; `docs/performance.md`, "Eager calls"). What
remains per call is building the key and dispatching. The reference for each row is
the same call under `jax.jit` (its floor); the eager call also builds the solver and
controller objects each time, as the code it stands for does.

Problems: the scalar decay `y' = -a y + sin t` on [0, 3] (Tsit5, `PIDController(rtol=
1e-8, atol=1e-8)`, `dt0 = 0.1`, `SaveAt(t1)`), and a neural ODE (an MLP 2-64-64-2 with
tanh, batch 256 as a (256, 2) state, Tsit5, PID rtol 1e-3 atol 1e-6, [0, 1]). Each: the
forward solve, and `jax.grad` of a scalar loss (under `CheckpointAdjoint()` and diffrax's
`RecursiveCheckpointAdjoint()`, the defaults). A new parameter value every call.
"""

import os
import subprocess
import sys
import tempfile
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from _common import Section, Table, interleaved_samples, paired_ratio, seconds_cell

import odeckpt as oc


def _decay(t, y, a):
    return -a * y + jnp.sin(t)


def _decay_problem():
    def solve(lib, a, throw=True):
        pid = lib.PIDController(rtol=1e-8, atol=1e-8)
        term = _decay if lib is oc else dfx.ODETerm(_decay)
        sol = lib.diffeqsolve(
            term,
            lib.Tsit5(),
            0.0,
            3.0,
            0.1,
            jnp.ones(1),
            args=a,
            max_steps=256,
            throw=throw,
            stepsize_controller=pid,
        )
        return sol.ys

    return "decay, 1 state", solve, jnp.asarray(0.5)


class _Field(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return jax.vmap(self.mlp)(y)


def _neural_problem():
    mlp = eqx.nn.MLP(2, 2, 64, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    y0 = jax.random.normal(jax.random.PRNGKey(1), (256, 2))

    def solve(lib, params, throw=True):
        field = _Field(eqx.combine(params, static))
        pid = lib.PIDController(rtol=1e-3, atol=1e-6)
        term = field if lib is oc else dfx.ODETerm(field)
        sol = lib.diffeqsolve(
            term, lib.Tsit5(), 0.0, 1.0, 0.1, y0, stepsize_controller=pid, throw=throw
        )
        return sol.ys

    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    return "neural ODE, MLP 2-64-64-2, batch 256", solve, params


def _calls(solve, lib):
    """`{mode: (eager, jitted)}`: the forward solve and the gradient of a scalar loss."""

    def forward(p):
        return solve(lib, p)

    def loss(p):
        return jnp.sum(solve(lib, p) ** 2)

    grad = jax.grad(loss)
    return {"forward": (forward, jax.jit(forward)), "gradient": (grad, jax.jit(grad))}


def _first_call_seconds(fn, p) -> float:
    jax.clear_caches()
    oc.clear_compiled_cache()
    start = time.perf_counter()
    jax.block_until_ready(fn(p))
    return time.perf_counter() - start


def measure(quick: bool) -> list[list[str]]:
    budget = 3.0 if quick else 15.0
    rows = []
    for name, solve, p in (_decay_problem(), _neural_problem()):
        for mode in ("forward", "gradient"):
            fns, first = {}, {}
            for label, lib in (("odeckpt", oc), ("diffrax", dfx)):
                eager, jitted = _calls(solve, lib)[mode]
                first[label] = _first_call_seconds(eager, p)
                fns[f"{label} eager"], fns[f"{label} jit"] = eager, jitted
            samples = interleaved_samples(fns, (p,), budget)
            median = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
            rows.append(
                [
                    name,
                    mode,
                    seconds_cell(first["odeckpt"]),
                    seconds_cell(first["diffrax"]),
                    seconds_cell(median["odeckpt eager"]),
                    seconds_cell(median["diffrax eager"]),
                    f"{paired_ratio(samples['odeckpt eager'], samples['diffrax eager']):.2f}",
                    f"{paired_ratio(samples['odeckpt eager'], samples['odeckpt jit']):.1f}",
                    f"{paired_ratio(samples['diffrax eager'], samples['diffrax jit']):.1f}",
                ]
            )
    return rows


_PROBLEMS = {"decay": _decay_problem, "neural": _neural_problem}


def _in_new_process(problem: str, mode: str, cache: str, throw: bool) -> float:
    """The first eager call's seconds in a fresh process whose JAX persistent
    compilation cache is `cache` (the two settings of `docs/performance.md`)."""
    here = os.path.abspath(__file__)
    args = [sys.executable, here, "--first-call", problem, mode, cache, str(throw)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def _first_call_in_this_process(problem: str, mode: str, cache: str, throw: str) -> None:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    _, solve, p = _PROBLEMS[problem]()
    throwing = throw == "True"
    eager, _ = _calls(lambda lib, p: solve(lib, p, throwing), oc)[mode]
    start = time.perf_counter()
    jax.block_until_ready(eager(p))
    print(time.perf_counter() - start)


def persistent_rows() -> list[list[str]]:
    """Per problem and call: the first eager call of a new process with an empty
    persistent cache, then of a second process reading the cache the first filled."""
    rows = []
    for problem in _PROBLEMS:
        name = _PROBLEMS[problem]()[0]
        for mode in ("forward", "gradient"):
            cells = []
            for throw in (True, False):
                with tempfile.TemporaryDirectory() as cache:
                    first = _in_new_process(problem, mode, cache, throw)
                    second = _in_new_process(problem, mode, cache, throw)
                cells.append((first, second, second / first))
            (first, second, ratio), (_, _, unchecked) = cells
            verdict = "met" if ratio <= 0.3 else "**not met**"
            rows.append(
                [
                    name,
                    mode,
                    seconds_cell(first),
                    seconds_cell(second),
                    f"{ratio:.2f} (target <= 0.3: {verdict})",
                    f"{unchecked:.2f}",
                ]
            )
    return rows


def run(quick: bool) -> Section:
    table = Table(
        [
            "problem",
            "call",
            "first call: odeckpt",
            "first call: diffrax",
            "later calls: odeckpt",
            "later calls: diffrax",
            "odeckpt / diffrax",
            "odeckpt eager / jit",
            "diffrax eager / jit",
        ],
        measure(quick),
    )
    notes = [
        "First call: wall time of the first eager call after `jax.clear_caches()` (and "
        "`odeckpt.clear_compiled_cache()`) "
        "(tracing and compilation included). Later calls: medians of interleaved samples "
        "of eager calls with the loop already compiled; the ratios are medians of "
        "per-round ratios, against diffrax's eager call and against the library's own "
        "call under `jax.jit`.",
        "diffrax's compiled `diffeqsolve` is keyed on the identity of the vector field, "
        "so an array the field reads from a global keeps the value it had when first "
        "compiled (a later change is silently ignored); odeckpt keys a plain vector field "
        "by its code and passes the arrays its closure and its named globals hold into "
        "the compiled program, so a changed global is read afresh "
        "(`tests/test_reliability.py`, `tests/test_eager.py`).",
    ]
    persistent = Table(
        [
            "problem",
            "call",
            "first call, first process",
            "first call, second process",
            "second / first",
            "second / first, `throw=False`",
        ],
        persistent_rows(),
        caption="JAX's persistent compilation cache: the first eager call of two "
        "processes in turn, the second reading the programs the first compiled",
    )
    notes.append(
        "Persistent cache: each process imports odeckpt, sets "
        "`jax_compilation_cache_dir` (a fresh directory per row) and "
        "`jax_persistent_cache_min_compile_time_secs = 0`, and times its first eager "
        "call; the second process still traces the solve, and loads the compiled "
        "programs instead of compiling them. JAX's persistent cache does not store a "
        "program that holds host callbacks; with the cache on, an eager forward solve "
        "checks its failure on the host, but under eager `jax.grad` the forward program "
        "keeps its `eqx.error_if` check (a host callback) and is compiled again. The last "
        "column repeats the pair with `throw=False`."
    )
    return Section(
        title="Eager calls: a solve and its gradient outside `jax.jit`",
        table=table,
        notes=notes,
        extra_tables=[persistent],
    )


if __name__ == "__main__" and sys.argv[1:2] == ["--first-call"]:
    _first_call_in_this_process(*sys.argv[2:6])
