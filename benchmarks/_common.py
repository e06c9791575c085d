"""Shared helpers for the benchmark sections: timing, compile time, memory, tables.

Importing this module turns on float64, so every section measures in double precision.

Conventions (see `run.py`):
- Time is the median, over many samples, of the wall time of one call of an
  already compiled function, with `jax.block_until_ready` on each result. Samples of
  the functions being compared are taken in alternation in one process, and a ratio
  is the median of the per-round ratios (`paired_ratio`), so that a change in
  machine load hits both alike.
- Compile time is the wall time of `jax.jit(f).lower(*args).compile()` for a freshly
  built `f`, after `jax.clear_caches()`: tracing, lowering to StableHLO and XLA
  compilation, i.e. what the first call of a jitted function costs before it runs
  (the run itself excluded). Clearing the caches matters: a library that wraps its
  solve in an inner `jit` (diffrax's `eqx.filter_jit`) would otherwise reuse the
  inner trace from an earlier measurement and look almost free to trace.
- Memory is XLA's `temp_size_in_bytes` of the compiled function: deterministic.
"""

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)


# ----------------------------------------------------------------------------------
# What a section returns


@dataclasses.dataclass
class Table:
    """A markdown table: column names, rows of cells (already formatted strings)."""

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclasses.dataclass
class Section:
    """One section of RESULTS.md.

    Attributes:
        title: the section heading.
        table: the main table.
        notes: paragraphs printed under the tables (markdown).
        plots: PNG paths relative to `benchmarks/`, e.g. `plots/forward_time.png`.
        extra_tables: further tables, each printed under its caption.
    """

    title: str
    table: Table
    notes: list[str] = dataclasses.field(default_factory=list)
    plots: list[str] = dataclasses.field(default_factory=list)
    extra_tables: list[Table] = dataclasses.field(default_factory=list)


# ----------------------------------------------------------------------------------
# Measuring


def compile_seconds(make_fn: Callable[[], Callable], *args) -> tuple[Callable, float]:
    """Trace + lower + compile a fresh `jax.jit(make_fn())`; returns (compiled, seconds).

    `make_fn` must build a new function object on each call; JAX's caches are
    cleared first, so that no earlier trace or compilation is reused.
    """
    fn = make_fn()
    jax.clear_caches()
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - start


def median_compile_seconds(make_fn: Callable[[], Callable], args, repeats: int):
    """The compiled function and the median of `repeats` fresh compile times."""
    results = [compile_seconds(make_fn, *args) for _ in range(repeats)]
    return results[0][0], statistics.median(seconds for _, seconds in results)


def _seconds_per_call(fn: Callable, args, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / number


def interleaved_samples(
    fns: dict[str, Callable],
    args,
    budget_seconds: float,
    min_sample_seconds: float = 1e-3,
    min_rounds: int = 11,
) -> dict[str, list[float]]:
    """Seconds per call of each compiled function, sampled in interleaved rounds.

    Each function is called once first (warm-up, not timed); a sample is enough
    back-to-back calls to last `min_sample_seconds`. Each round takes one sample of
    every function, the order rotating between rounds, so that sample `i` of every
    function was taken at nearly the same moment; as many rounds as fit in
    `budget_seconds` (at least `min_rounds`). Many short rounds track the load of a
    shared machine more closely than a few long ones.
    """
    names = list(fns)
    for fn in fns.values():
        jax.block_until_ready(fn(*args))
    per_call = {name: _seconds_per_call(fns[name], args, 1) for name in names}
    number = {
        name: max(1, round(min_sample_seconds / max(t, 1e-9))) for name, t in per_call.items()
    }
    per_round = sum(per_call[name] * number[name] for name in names)
    rounds = max(min_rounds, int(budget_seconds / max(per_round, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            samples[name].append(_seconds_per_call(fns[name], args, number[name]))
    return samples


def interleaved_medians(fns: dict[str, Callable], args, budget_seconds: float) -> dict[str, float]:
    """Median seconds per call of each compiled function (see `interleaved_samples`)."""
    samples = interleaved_samples(fns, args, budget_seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def paired_ratio(samples: Sequence[float], reference: Sequence[float]) -> float:
    """Median over rounds of `samples[i] / reference[i]`.

    Samples of one round were taken back to back, so load on a shared machine
    cancels in each quotient: steadier than the quotient of the two medians.
    """
    return statistics.median(a / b for a, b in zip(samples, reference, strict=True))


def temp_bytes(fn: Callable, *args) -> int:
    """XLA's temporary-buffer bytes for `jax.jit(fn)(*args)` (deterministic)."""
    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(analysis.temp_size_in_bytes)


# ----------------------------------------------------------------------------------
# Formatting


def ratio(value: float, reference: float) -> float:
    return value / reference if reference > 0 else float("inf")


def ratio_cell(r: float, target: float, higher_is_better=False) -> str:
    """A ratio against its target, e.g. `0.93 (target <= 1.0: met)`.

    Three decimals when two would hide which side of the target it lies on.
    """
    met = r >= target if higher_is_better else r <= target
    sign = ">=" if higher_is_better else "<="
    digits = 3 if abs(r - target) < 0.005 else 2
    return f"{r:.{digits}f} (target {sign} {target:.1f}: {'met' if met else '**not met**'})"


def seconds_cell(seconds: float) -> str:
    """Seconds with a unit that keeps 3 significant digits."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def bytes_cell(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def markdown_table(table: Table) -> str:
    lines = [
        "| " + " | ".join(table.columns) + " |",
        "|" + "|".join("---" for _ in table.columns) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def warn(message: str) -> None:
    """Print a loud warning on stderr (a benchmark invariant failed)."""
    bar = "!" * 78
    print(f"{bar}\n{message}\n{bar}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------
# Plots

BENCHMARKS = Path(__file__).resolve().parent


def plot_path(name: str) -> tuple[Path, str]:
    """Where a plot goes: `plots/NAME` on CPU, `plots/<backend>/NAME` otherwise.

    Returns the absolute path to save to and the path relative to `benchmarks/`,
    for `Section.plots`.
    """
    backend = jax.default_backend()
    relative = Path("plots") if backend == "cpu" else Path("plots") / backend
    (BENCHMARKS / relative).mkdir(parents=True, exist_ok=True)
    return BENCHMARKS / relative / name, (relative / name).as_posix()


def bar_plot(path, labels: Sequence[str], values: Sequence[float], target: float, title: str):
    """Horizontal bars of ratios with a dashed line at `target`; saved as PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.4 * len(labels) + 1.4))
    colours = ["tab:green" if v <= target else "tab:red" for v in values]
    bars = ax.barh(range(len(labels)), values, color=colours)
    ax.bar_label(bars, fmt="%.2f", padding=3, fontsize=8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.2 * target, 1.15 * max(values)))
    ax.axvline(target, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel(f"ratio odeckpt / diffrax (lower is better; target <= {target:.1f})")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------------------
# The torchdiffeq peer, run in its own environment (see `torch_peer.py`)

TORCH_PYTHON_VARIABLE = "ODECKPT_TORCH_PYTHON"
TORCH_ENV_SETUP = (
    "`python -m venv benchmarks/.torch-env && benchmarks/.torch-env/bin/pip install "
    "torch==2.13.0 torchdiffeq numpy`"
)


def torch_python() -> Path:
    """The Python of the torch environment: `$ODECKPT_TORCH_PYTHON` or the default."""
    import os

    default = BENCHMARKS / ".torch-env" / "bin" / "python"
    return Path(os.environ.get(TORCH_PYTHON_VARIABLE, default))


def run_torch_peer(spec: dict, timeout_seconds: float) -> tuple[dict | None, str]:
    """Run `torch_peer.py` on `spec`; returns (results, "") or (None, why it was not run).

    On a non-CPU JAX backend the peer runs on CUDA, or is skipped if the torch
    environment has no CUDA.
    """
    import json
    import subprocess
    import tempfile

    python = torch_python()
    if not python.exists():
        return None, (
            f"torchdiffeq not measured: no torch environment at `{python}`; create it "
            f"with {TORCH_ENV_SETUP} (or point `${TORCH_PYTHON_VARIABLE}` at a Python "
            "with torch and torchdiffeq) and rerun this section to include it."
        )
    spec = {**spec, "device": "cpu" if jax.default_backend() == "cpu" else "cuda"}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(spec, file)
    try:
        done = subprocess.run(
            [str(python), str(BENCHMARKS / "torch_peer.py"), file.name],
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
        )
    except subprocess.TimeoutExpired:
        return None, f"torchdiffeq not measured: `torch_peer.py` ran past {timeout_seconds:.0f} s."
    finally:
        Path(file.name).unlink()
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return None, f"torchdiffeq not measured: `torch_peer.py` failed ({tail[0][:200]})."
    results = json.loads(done.stdout)
    if "skipped" in results:
        return None, f"torchdiffeq not measured: {results['skipped']}."
    return results, ""


def import_jax_odeint() -> tuple[Callable | None, str]:
    """`jax.experimental.ode.odeint`, or None; and a note if it is missing or deprecated."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from jax.experimental.ode import odeint
        except ImportError as error:
            return None, f"`jax.experimental.ode` not measured: it cannot be imported ({error})."
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    return odeint, "".join(f"`jax.experimental.ode` warns: {w.message}. " for w in deprecations)
