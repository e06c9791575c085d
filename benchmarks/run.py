"""Run the benchmark sections and write the results file.

    python benchmarks/run.py [--quick] [--only SECTION ...]

Each section is a module `bench_<name>.py` next to this file exposing
`run(quick: bool) -> Section` (see `_common.Section`). Results go to
`benchmarks/RESULTS.md` on CPU and `benchmarks/RESULTS-<backend>.md` on other
backends (e.g. `RESULTS-gpu.md`); plots under `benchmarks/plots/`. Running a subset of
sections replaces only those sections in the results file and keeps the others, each
section stating when and in which mode it was measured.

Full mode must finish within `FULL_LIMIT_SECONDS` on an idle 2-core CPU;
`FULL_BUDGET_SECONDS` gives each section its share, and the header of the results file
records how long the last run took, in which mode, and the sum of the sections' own
times.
"""

import argparse
import datetime
import importlib
import importlib.metadata
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path

import jax
from _common import Section, markdown_table  # importing _common turns on float64

BENCHMARKS = Path(__file__).resolve().parent

# Section name -> module. Sections whose module does not exist yet are skipped.
REGISTRY = {
    "forward": "bench_forward",
    "gradient": "bench_gradient",
    "memory": "bench_memory",
    "damped": "bench_damped",
    "neural_ode": "bench_neural_ode",
    "stiff": "bench_stiff",
    "radau": "bench_radau",
    "imex": "bench_imex",
    "xla_cpu": "bench_xla_cpu",
    "reversible": "bench_reversible",
    "events": "bench_events",
    "evaluations": "bench_evaluations",
    "floor": "bench_floor",
    "reversible_adjoint": "bench_reversible_adjoint",
    "reversible_safety": "bench_reversible_safety",
    "hvp": "bench_hvp",
    "eager": "bench_eager",
    "large_stiff": "bench_large_stiff",
    "stiff_gradients": "bench_stiff_gradients",
}

# Full mode's time limit on an idle 2-core CPU, and each section's share of it in seconds
# (the shares, memory's aside, add up to the limit; the solver sections radau, imex,
# reversible and events raised it from 25 minutes, reversible_adjoint, evaluations and
# floor from 44, reversible_safety from 55). "memory" costs almost nothing in a run of
# every section (the gradient section has already measured it for its plot): its share
# applies to `--only memory` and is not counted. A section that runs past its share is
# reported on the console; trim its repeats, sampling budgets or largest sizes, not the
# rows quick mode has. Measured
# 2026-11-30, each section alone while another user's jobs kept the load average at 2-6:
# forward 108 s, gradient 635 s, damped 388 s, neural_ode 289 s, stiff 304 s; 1724 s
# (29 min) in all (memory: 120 s alone; xla_cpu, added later: about 50 s). Added
# 2026-12-01, each measured once at load average 6-13, mostly compilation: radau
# 676-855 s, imex 377 s, reversible 112 s, events about 120 s. Added 2026-12-02:
# reversible_adjoint (1091 s in quick mode at load average 14); evaluations (about 70
# gradients compiled, a few seconds each idle); floor (four gradients compiled twice,
# timed and counted, 20 s of samples per problem). Added 2026-12-07: reversible_safety
# (731 s at load average 1.6: 72 vmapped gradients compiled, with their references);
# large_stiff (grids to 256 x 256 and SciPy's BDF on them: 2382 s in full mode, 384 s in
# quick mode, at load average 1.7-3.8). Added 2026-12-07: stiff_gradients (six
# gradients and forward solves compiled per problem, 40 s of samples each).
FULL_LIMIT_SECONDS = 116 * 60
FULL_BUDGET_SECONDS = {
    "forward": 180,
    "gradient": 480,
    "memory": 120,
    "damped": 300,
    "neural_ode": 240,
    "stiff": 300,
    "radau": 360,
    "imex": 150,
    "xla_cpu": 120,
    "reversible": 90,
    "events": 120,
    "evaluations": 300,
    "floor": 120,
    "reversible_adjoint": 300,
    "reversible_safety": 780,
    "hvp": 120,
    "eager": 120,
    "large_stiff": 2400,
    "stiff_gradients": 960,
}

_BLOCK = re.compile(r"<!-- section:(\w+) -->\n.*?<!-- /section:\1 -->\n", re.S)
_STAMP = re.compile(r"_Measured \S+ in (quick|full) mode, (\d+) s,")


def available_sections() -> list[str]:
    return [name for name, module in REGISTRY.items() if (BENCHMARKS / f"{module}.py").exists()]


def results_path() -> Path:
    backend = jax.default_backend()
    return BENCHMARKS / ("RESULTS.md" if backend == "cpu" else f"RESULTS-{backend}.md")


# ----------------------------------------------------------------------------------
# The header


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


def _load() -> str:
    """The 1-minute load average: above the CPU count, absolute times are inflated."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def run_line(quick: bool, done: list[str], planned: list[str], seconds: float) -> str:
    """The header's account of the last run: mode, sections, total wall time."""
    mode = "quick" if quick else "full"
    every = set(planned) == set(available_sections())
    which = "all sections" if every else "sections " + ", ".join(planned)
    status = "" if done == planned else f" (so far: {len(done)} of {len(planned)} sections done)"
    limit = (
        f"; full mode's limit is {FULL_LIMIT_SECONDS // 60} min on an idle 2-core CPU"
        if not quick
        else ""
    )
    return f"- Last run: {mode} mode, {which}, {_minutes(seconds)}{status}{limit}"


def stamps_line(blocks: dict[str, str]) -> str:
    """The sum of the per-section times stamped in `blocks`, and their modes."""
    found = {name: _STAMP.search(block) for name, block in blocks.items()}
    timed = {name: m for name, m in found.items() if m}
    total = sum(int(m.group(2)) for m in timed.values())
    full = [name for name, m in timed.items() if m.group(1) == "full"]
    modes = (
        "all in full mode"
        if len(full) == len(timed)
        else f"{len(full)} of {len(timed)} in full mode"
    )
    return f"- Sum of the {len(timed)} section times stamped below: {_minutes(total)} ({modes})"


def header(run: str = "", stamps: str = "") -> str:
    devices = jax.devices()
    versions = ", ".join(
        f"{p} {_version(p)}" for p in ("jax", "jaxlib", "equinox", "diffrax", "odeckpt")
    )
    return "\n".join(
        [
            "# odeckpt benchmarks",
            "",
            "Generated by `python benchmarks/run.py`; do not edit by hand. Times are ratios "
            "against diffrax measured in the same process (see each section).",
            "",
            f"- Date of the last run: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
            f"- Machine: {platform.platform()}; CPU: {_cpu_model()}; "
            f"{_usable_cpus()} usable of {os.cpu_count()} CPUs; load average at the end of "
            f"the run {_load()}",
            f"- JAX backend: {jax.default_backend()}; {len(devices)} x "
            f"{devices[0].device_kind}; float64 on",
            f"- Versions: Python {platform.python_version()}, {versions}",
            *filter(None, [run, stamps]),
            "",
        ]
    )


# ----------------------------------------------------------------------------------
# Sections


def render(name: str, section: Section, stamp: str) -> str:
    parts = [f"<!-- section:{name} -->", f"## {section.title}", "", f"_{stamp}_", ""]
    parts += [markdown_table(section.table), ""]
    for table in section.extra_tables:
        parts += [f"**{table.caption}**" if table.caption else "", "", markdown_table(table), ""]
    for note in section.notes:
        parts += [note, ""]
    parts += [f"![{Path(p).stem}]({p})\n" for p in section.plots]
    parts.append(f"<!-- /section:{name} -->")
    return "\n".join(parts) + "\n"


def run_section(name: str, quick: bool) -> str:
    print(f"[{name}] running ({'quick' if quick else 'full'})", flush=True)
    start = time.perf_counter()
    try:
        section = importlib.import_module(REGISTRY[name]).run(quick)
    except Exception:  # a broken section must not lose the others' results
        traceback.print_exc()
        return (
            f"<!-- section:{name} -->\n## {name}\n\n**failed**: see the console.\n"
            f"<!-- /section:{name} -->\n"
        )
    seconds = time.perf_counter() - start
    stamp = (
        f"Measured {datetime.date.today()} in {'quick' if quick else 'full'} mode, "
        f"{seconds:.0f} s, on {jax.default_backend()}, load average {_load()} at the end."
    )
    print(f"[{name}] done in {seconds:.0f} s", flush=True)
    budget = FULL_BUDGET_SECONDS.get(name)
    if not quick and budget and seconds > budget:
        print(
            f"[{name}] over its full-mode budget of {budget} s (load average {_load()})",
            flush=True,
        )
    return render(name, section, stamp)


def previous_blocks(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {m.group(1): m.group(0) for m in _BLOCK.finditer(path.read_text())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SECTION",
        choices=list(REGISTRY),
        help=f"sections to run (default: every one present of {list(REGISTRY)})",
    )
    options = parser.parse_args(argv)
    present = available_sections()
    missing = [s for s in options.only or [] if s not in present]
    if missing:
        parser.error(f"no module yet for section(s) {missing}; present: {present}")
    path = results_path()
    names = options.only or present
    failed = False
    start = time.perf_counter()
    for i, name in enumerate(names):
        block = run_section(name, options.quick)
        failed |= "**failed**" in block
        # Re-read the file before each write: sections measured by another run in the
        # meantime are kept, and a later crash keeps this section's result.
        blocks = previous_blocks(path)
        blocks[name] = block
        body = "\n".join(blocks[name] for name in REGISTRY if name in blocks)
        seconds = time.perf_counter() - start
        run = run_line(options.quick, names[: i + 1], names, seconds)
        path.write_text(header(run, stamps_line(blocks)) + "\n" + body)
        print(f"wrote {path}", flush=True)
    total = time.perf_counter() - start
    print(f"[run] {len(names)} section(s) in {_minutes(total)}", flush=True)
    if not options.quick and set(names) == set(present) and total > FULL_LIMIT_SECONDS:
        print(f"[run] full mode ran past its limit of {FULL_LIMIT_SECONDS} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
