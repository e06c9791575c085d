"""Run diffrax's ODE documentation examples with diffrax and with odeckpt, compare.

    python benchmarks/diffrax_examples.py --diffrax PATH [--only NAME ...]
        [--out benchmarks/EXAMPLES.md] [--timeout S] [--keep]

PATH is a work tree of diffrax's repository at its v0.7.2 tag (its `docs/` folder holds
the examples). Each example's code is extracted unchanged: a notebook's code cells in
order, or the ODE `python` blocks of `docs/usage/getting-started.md`. It runs twice, each
time in its own Python process: once with the real diffrax, once with the same
rename-only `diffrax` package that `diffrax_suite.py` generates (`rename_module_source`:
odeckpt's names under diffrax's names, no other code), first on `PYTHONPATH`. The child
process reports the `diffrax.__file__` it imported, and the run stops unless it is the
expected one. matplotlib runs on the Agg backend with `plt.show` a no-op; files an
example writes land in a temporary directory laid out like diffrax's `docs/` (so that
`../imgs/cat.png` resolves).

The long training loops are shortened, identically for both runs, by plain textual
substitutions of their step counts (`Example.shorten`, listed in the report); nothing
else in an example's code changes.

Results compared (`compare`): every number the example prints, in order (timings
removed by `Example.ignore`, a regular expression), and the values of chosen
expressions (`Example.results`: evaluated after the cell given, so that a name a later
cell rebinds is read in time), each within the example's tolerance (`rtol`, `atol`:
numpy's `allclose`), stated in the report with its reason. The report,
`benchmarks/EXAMPLES.md`, says per example whether it runs with diffrax and with
odeckpt, the time of each run, whether the results match, and the reason of any failure,
classified as in `COMPAT.md`.
"""

import argparse
import dataclasses
import datetime
import json
import os
import pickle
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diffrax_suite import REPO, odeckpt_commit, rename_module_source  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "EXAMPLES.md"
TIMING = r"Computation time: [-+.\deE]+|in [-+.\deE]+ seconds"


@dataclasses.dataclass(frozen=True)
class Example:
    """One documentation example: where its code is, how it is shortened, what is
    compared and within which tolerance (and why that tolerance)."""

    name: str
    source: str  # relative to diffrax's docs/
    results: tuple[tuple[int, str], ...] = ()  # (cell index, expression)
    # Shown side by side, not compared: counts that depend on the steps taken.
    reported: tuple[tuple[int, str], ...] = ()
    differs: str = ""  # a known difference, shown with the comparison
    shorten: tuple[tuple[str, str], ...] = ()  # (text, replacement)
    rtol: float = 1e-6
    atol: float = 1e-9
    why_tolerance: str = "float64, the same algorithm: round-off only"
    ignore: str = TIMING
    blocks: tuple[int, ...] = ()  # getting-started.md: which python blocks
    needs: tuple[str, ...] = ()  # modules the example imports beyond the usual


F32 = "float32 (JAX's default): the two libraries' round-off differs at ~1e-7 relative"
TRAINING = (
    "float32 training: round-off differences in the gradients (~1e-7) grow over the "
    "optimiser's steps; the tolerance bounds that growth over the shortened run"
)

_TS = "jnp.arange(0, 5.0, 0.01)"
KALMAN_DATA = (
    "simulate_lti_system(harmonic_oscillator(0.3), jnp.array([1.0, 0.0]), "
    f"{_TS}, std_measurement_noise=1.0)"
)
KALMAN_FILTER = (
    "harmonic_oscillator(0.7), jnp.array([0.0, 0.0]), jnp.diag(jnp.ones((2,))) * 10.0, "
    "jnp.diag(jnp.ones((2,))) * 0.1, jnp.diag(jnp.ones((1,)))"
)

EXAMPLES = (
    Example(
        "getting started",
        "usage/getting-started.md",
        results=((0, "sol.ts"), (0, "sol.ys")),
        blocks=(0,),
        rtol=1e-5,
        atol=1e-7,
        why_tolerance=F32,
    ),
    Example(
        "continuous normalising flow",
        "examples/continuous_normalising_flow.ipynb",
        shorten=(("steps=10000,", "steps=20,"), ("print_every=100,", "print_every=4,")),
        rtol=1e-3,
        atol=1e-5,
        why_tolerance=TRAINING,
        needs=("imageio", "scipy"),
    ),
    Example(
        "coupled ODEs",
        "examples/coupled_odes.ipynb",
        results=((0, "sol.ts"), (0, "sol.ys")),
        rtol=1e-5,
        atol=1e-5,
        why_tolerance=F32 + " (values up to ~1e2)",
    ),
    Example(
        "forcing",
        "examples/forcing.ipynb",
        results=((0, "sol.ys"), (2, "grads")),
        rtol=1e-5,
        atol=1e-6,
        why_tolerance=F32,
    ),
    Example(
        "Hessian",
        "examples/hessian.ipynb",
        results=((0, "run(y0)"),),
        rtol=1e-4,
        atol=1e-6,
        why_tolerance=F32 + "; second derivatives through 1400 steps amplify it",
    ),
    Example(
        "Kalman filter",
        "examples/kalman_filter.ipynb",
        # What `main()` computes and plots, with its default arguments: the simulated
        # system `(xs, ys)` and the filter's estimate `xhats`.
        results=(
            (5, KALMAN_DATA),
            (5, f"KalmanFilter({KALMAN_FILTER})({_TS}, ({KALMAN_DATA})[1])"),
        ),
        rtol=1e-4,
        atol=1e-6,
        why_tolerance=F32 + "; 500 constant Dopri5 steps, and a 2x2 inverse per evaluation",
    ),
    Example(
        "latent ODE",
        "examples/latent_ode.ipynb",
        shorten=(("steps=250,", "steps=30,"),),
        rtol=1e-3,
        atol=1e-4,
        why_tolerance=TRAINING,
    ),
    Example(
        "neural ODE",
        "examples/neural_ode.ipynb",
        results=((6, "jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))"),),
        shorten=(
            ("steps_strategy=(500, 500),", "steps_strategy=(100, 100),"),
            ("print_every=100,", "print_every=20,"),
        ),
        rtol=1e-2,
        atol=1e-2,
        why_tolerance=(
            "the example solves at rtol=1e-3, and the two libraries' adaptive steps "
            "differ at round-off level (the first loss of each phase agrees closely); "
            "the optimiser's 200 steps amplify that: losses to 1e-2 relative, the O(1) "
            "parameters to 1e-2 absolute"
        ),
    ),
    Example(
        "nonlinear heat PDE",
        "examples/nonlinear_heat_pde.ipynb",
        results=((3, "sol.ys.vals"), (6, "sol.ys.vals")),
        rtol=1e-8,
        atol=1e-10,
        why_tolerance="float64 at rtol=atol=1e-10: round-off only",
    ),
    Example(
        "steady state",
        "examples/steady_state.ipynb",
        results=((3, "model.steady_state"),),
        rtol=1e-3,
        atol=1e-6,
        why_tolerance=(
            "the example's own: its steady-state event stops the solve where "
            "|f| <= 1e-3 |y| + 1e-6 (the controller's rtol, atol), so the steady state "
            "is defined to ~1e-3; float32 round-off moves where the event fires"
        ),
    ),
    Example(
        "stiff ODE",
        "examples/stiff_ode.ipynb",
        results=((4, "sol.ys"),),
        reported=((4, "sol.stats['num_steps']"),),
        ignore=TIMING + r"|Took \d+ steps",
        rtol=1e-6,
        atol=1e-6,
        why_tolerance=(
            "100 times the example's rtol and atol (1e-8): these bound each step's "
            "local error, not the global error, which is larger for both libraries "
            "(SaveAt(ts) values between Kvaerno5's long steps come from its dense "
            "output; `tests/test_stiff.py::test_robertson_diffrax_example` holds "
            "odeckpt's within 1e-6 of SciPy's Radau at rtol 1e-12), and the two take "
            "different steps"
        ),
        differs=(
            "Kvaerno5 takes fewer, longer steps here (`num_steps` below), as diffrax "
            "itself did when the example's stored output was made (34 steps); diffrax "
            "0.7.2's Newton iterations, at the controller's tolerances, fail and reject "
            "steps where odeckpt's, with their own tolerances, converge"
        ),
    ),
    Example(
        "symbolic regression",
        "examples/symbolic_regression.ipynb",
        needs=("pysr", "sympy2jax"),
    ),
)

# Notebooks and getting-started blocks out of ODE scope.
OUT_OF_SCOPE = {
    "examples/neural_cde.ipynb": "CDE (controlled differential equation)",
    "examples/neural_sde.ipynb": "SDE",
    "examples/sde_example.ipynb": "SDE",
    "examples/underdamped_langevin_example.ipynb": "SDE",
    "getting started, blocks 2-4": (
        "an SDE (`ControlTerm` with a Brownian path), a fragment (`solver = ...`) and a "
        "CDE (`ControlTerm` on a path)"
    ),
}


# ----------------------------------------------------------------------------------
# Extracting and running
# ----------------------------------------------------------------------------------


def cells(docs: Path, example: Example) -> list[str]:
    path = docs / example.source
    if path.suffix == ".ipynb":
        notebook = json.loads(path.read_text())
        code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    else:
        blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
        code = [blocks[i] for i in example.blocks]
    for old, new in example.shorten:
        joined = "\n".join(code)
        if joined.count(old) != 1:
            raise SystemExit(f"{example.name}: {old!r} occurs {joined.count(old)} times")
        code = [c.replace(old, new) for c in code]
    return code


def magic(code: list[str]) -> str | None:
    """The first IPython magic line (`%run ...`), which plain Python cannot run."""
    for cell in code:
        for line in cell.splitlines():
            if line.strip().startswith(("%", "!")):
                return line.strip()
    return None


def missing_modules(example: Example) -> list[str]:
    missing = []
    for name in example.needs:
        found = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True)
        if found.returncode:
            missing.append(name)
    return missing


def skip_reason(example: Example, code: list[str]) -> str | None:
    """Why the example cannot run here (modules not installed, IPython magic)."""
    missing, line = missing_modules(example), magic(code)
    why = [f"needs {', '.join(missing)} (not installed)"] if missing else []
    why += [f"uses IPython magic `{line}`"] if line else []
    return "not runnable here: " + "; ".join(why) if why else None


def child(spec_path: str) -> None:
    """Run one example's cells in this process (`--child`), then write what it
    printed, its results and its error, if any, to the spec's `out`."""
    spec = json.loads(Path(spec_path).read_text())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.show = lambda *args, **kwargs: None
    namespace: dict = {"__name__": "__main__"}
    report: dict = {"results": [], "error": None, "diffrax_file": None}
    index = 0
    try:
        for index, cell in enumerate(spec["cells"]):
            exec(compile(cell, f"<cell {index}>", "exec"), namespace)
            plt.close("all")
            for at, expression in spec["results"]:
                if at == index:
                    value = eval(expression, namespace)
                    report["results"].append((expression, to_numpy(value)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        report["error"] = {
            "type": type(error).__name__,
            "cell": index,
            "message": str(error).strip()[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    report["diffrax_file"] = getattr(sys.modules.get("diffrax"), "__file__", None)
    sys.stdout.flush()
    Path(spec["out"]).write_bytes(pickle.dumps(report))


def to_numpy(value):
    import jax

    leaves = jax.tree_util.tree_leaves(value)
    return [np.asarray(leaf) for leaf in leaves if hasattr(leaf, "shape") or np.isscalar(leaf)]


def stage(docs: Path, root: Path) -> tuple[Path, Path]:
    """The rename package and a docs-like working folder (`examples/`, `imgs/`)."""
    rename = root / "rename" / "diffrax"
    rename.mkdir(parents=True)
    (rename / "__init__.py").write_text(rename_module_source())
    return rename.parent, docs


def run_one(
    example: Example, mode: str, code: list[str], root: Path, rename: Path, docs: Path, timeout: int
):
    work = root / mode / re.sub(r"\W+", "_", example.name)
    (work / "examples").mkdir(parents=True)
    os.symlink(docs / "imgs", work / "imgs")
    expressions = list(example.results) + list(example.reported)
    spec = {"cells": code, "results": expressions, "out": str(work / "out.pkl")}
    (work / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, MPLBACKEND="Agg")
    paths = [str(rename), str(REPO)] if mode == "odeckpt" else []
    paths += [p for p in [env.get("PYTHONPATH")] if p and mode == "odeckpt"]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        env.pop("PYTHONPATH", None)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(work / "spec.json")]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=work / "examples", env=env, capture_output=True, text=True, timeout=timeout
        )
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else ""
        stderr = ""
    seconds = time.perf_counter() - start
    out = work / "out.pkl"
    if not out.exists():
        error = {
            "type": "Timeout" if seconds >= timeout else "Crash",
            "message": stderr[-2000:],
            "traceback": "",
        }
        report = {"results": [], "error": error, "diffrax_file": None}
    else:
        report = pickle.loads(out.read_bytes())
    expected = str(rename) if mode == "odeckpt" else "site-packages"
    if report["diffrax_file"] and expected not in report["diffrax_file"]:
        raise SystemExit(
            f"{mode} run of {example.name} imported diffrax from {report['diffrax_file']}"
        )
    return {"stdout": stdout, "seconds": seconds, **report}


# ----------------------------------------------------------------------------------
# Comparing and classifying
# ----------------------------------------------------------------------------------

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def printed_numbers(stdout: str, ignore: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(re.sub(ignore, "", stdout))]


def compare(example: Example, ref: dict, ours: dict) -> tuple[bool, str]:
    """Whether odeckpt's results match diffrax's within the example's tolerance, and
    the largest relative difference seen (or what differs)."""
    a = printed_numbers(ref["stdout"], example.ignore)
    b = printed_numbers(ours["stdout"], example.ignore)
    if len(a) != len(b):
        return False, f"printed {len(b)} numbers, diffrax {len(a)}"
    pairs = [(np.asarray(a), np.asarray(b), "printed numbers")]
    n = len(example.results)
    if len(ref["results"]) != len(ours["results"]):
        return False, "results missing"
    for (name, x), (_, y) in zip(ref["results"][:n], ours["results"][:n], strict=True):
        if len(x) != len(y) or any(u.shape != v.shape for u, v in zip(x, y, strict=True)):
            return False, f"`{name}`: structure or shape differs"
        pairs += [(u, v, f"`{name}`") for u, v in zip(x, y, strict=True)]
    shown = [
        f"`{name}`: {_plain(x)} (diffrax {_plain(y)})"
        for (name, y), (_, x) in zip(ref["results"][n:], ours["results"][n:], strict=True)
    ]
    worst, where = 0.0, ""
    for x, y, name in pairs:
        if x.size == 0:
            continue
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        # The difference in units of the tolerance: allclose holds where it is <= 1.
        scaled = np.abs(x - y) / (example.atol + example.rtol * np.abs(x))
        largest = float(np.nanmax(scaled))
        if not np.allclose(y, x, rtol=example.rtol, atol=example.atol, equal_nan=True):
            text = f"{name} outside the tolerance ({largest:.3g} times it)"
            return False, "; ".join([text, *shown])
        if largest >= worst:
            worst, where = largest, name
    count = sum(x.size for x, _, _ in pairs)
    text = f"{count} values; largest difference {worst:.2g} of the tolerance ({where or '-'})"
    return True, "; ".join([text, *shown] + ([example.differs] if example.differs else []))


def _plain(values: list) -> str:
    return ", ".join(str(np.asarray(v).tolist()) for v in values)


# Known causes of a failure under odeckpt: (message pattern, category, reason).
RULES: tuple[tuple[str, str, str], ...] = ()


def classify(error: dict) -> tuple[str, str]:
    text = f"{error['type']}: {error['message']}"
    for pattern, category, reason in RULES:
        if re.search(pattern, text):
            return category, reason
    return "to investigate", _short(text)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------


def row(example: Example, outcome: dict) -> list[str]:
    if "skipped" in outcome:
        return [example.name, "not run", "not run", "-", "-", "-", outcome["skipped"]]
    ref, ours = outcome["diffrax"], outcome["odeckpt"]
    cells = [
        example.name,
        "yes" if not ref["error"] else "no",
        "yes" if not ours["error"] else "no",
    ]
    cells += [f"{ref['seconds']:.0f}", f"{ours['seconds']:.0f}"]
    if ref["error"]:
        why = _short(f"{ref['error']['type']}: {ref['error']['message']}")
        where = f"cell {ref['error'].get('cell')}"
        if not ours["error"] or ours["error"].get("cell") != ref["error"].get("cell"):
            return cells + ["-", f"fails with diffrax (at {where}: {why}), not with odeckpt alike"]
        same, detail = compare(example, ref, ours)
        cells[1] = cells[2] = f"until {where}"
        verdict = "yes" if same else "**no**"
        return cells + [
            verdict,
            f"both stop at {where}, diffrax's own failure ({why}); before it: {detail}",
        ]
    if ours["error"]:
        category, reason = classify(ours["error"])
        return cells + ["-", f"{category}: {reason}"]
    same, detail = compare(example, ref, ours)
    if same:
        return cells + ["yes", detail]
    if example.differs:
        return cells + ["**no**", f"behaviour difference: {example.differs}; {detail}"]
    return cells + ["**no**", f"wrong numbers: {detail}"]


def report(args, outcomes: dict) -> str:
    lines = [
        "# diffrax's ODE documentation examples against odeckpt",
        "",
        f"Generated by `python benchmarks/diffrax_examples.py --diffrax PATH"
        f"{' --only ...' if args.only else ''}`; do not edit by hand. PATH is a work tree "
        "of diffrax's repository at v0.7.2.",
        "",
        f"- Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
        f"odeckpt commit: {odeckpt_commit()}",
        f"- Python {platform.python_version()}, {_versions()}; {platform.platform()}; "
        f"{os.cpu_count()} CPUs (shared with other work: times are indicative)",
        f"- Time: {_run_seconds(outcomes):.0f} s summed over the runs, each in its own "
        "process, one at a time.",
        "",
        "Each example's code runs unchanged (notebook code cells in order), once with "
        "diffrax and once with `import diffrax` resolving to a generated rename-only "
        "package (`diffrax_suite.rename_module_source`: odeckpt's names under diffrax's). "
        "matplotlib: Agg backend, `plt.show` a no-op. Compared: every number printed "
        "(timings removed) and the listed expressions, with numpy's `allclose(rtol, atol)`.",
        "",
        "## Results",
        "",
        "| example | runs with diffrax | runs with odeckpt | diffrax s | odeckpt s "
        "| results match | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    ran = [e for e in EXAMPLES if e.name in outcomes]
    lines += ["| " + " | ".join(row(e, outcomes[e.name])) + " |" for e in ran]
    ok = [e for e in ran if row(e, outcomes[e.name])[5] == "yes"]
    runnable = [e for e in ran if "skipped" not in outcomes[e.name]]
    lines += [
        "",
        f"Match: **{len(ok)} of {len(runnable)}** examples that run here "
        "(with diffrax, at least in part).",
    ]
    lines += ["", "## What is compared, and the tolerance", ""]
    lines += [
        "| example | compared | rtol | atol | why | shortened (same for both runs) |",
        "|---|---|---|---|---|---|",
    ]
    for e in ran:
        compared = ", ".join(["printed numbers"] + [f"`{x}` after cell {i}" for i, x in e.results])
        short = "; ".join(f"`{a}` → `{b}`" for a, b in e.shorten) or "no"
        lines.append(
            f"| {e.name} | {compared} | {e.rtol:g} | {e.atol:g} | {e.why_tolerance} | {short} |"
        )
    lines += ["", "## Out of ODE scope", ""]
    lines += [f"- `{k}`: {v}" for k, v in OUT_OF_SCOPE.items()]
    return "\n".join(lines) + "\n"


def _run_seconds(outcomes: dict) -> float:
    return sum(o[m]["seconds"] for o in outcomes.values() if "skipped" not in o for m in o)


def _versions() -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import jax, equinox, diffrax as d; "
            "print(jax.__version__, equinox.__version__, d.__version__)",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    return "jax {}, equinox {}, diffrax {}".format(*out) if len(out) == 3 else "versions unknown"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--diffrax", type=Path, help="diffrax work tree at v0.7.2")
    parser.add_argument("--only", nargs="*", default=[], help="example names (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="write the report from a kept folder's outcomes.pkl instead of running",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.diffrax is None:
        parser.error("--diffrax PATH is required")
    docs = args.diffrax.resolve() / "docs"
    if args.reuse:
        outcomes = pickle.loads((args.reuse / "outcomes.pkl").read_bytes())
        for example in EXAMPLES:
            why = skip_reason(example, cells(docs, example))
            if (
                example.name not in outcomes
                and why
                and (not args.only or example.name in args.only)
            ):
                outcomes[example.name] = {"skipped": why}
        args.out.write_text(report(args, outcomes))
        return print(f"wrote {args.out} from {args.reuse}")
    root = Path(tempfile.mkdtemp(prefix="diffrax_examples_"))
    rename, docs = stage(docs, root)
    outcomes: dict = {}
    for example in EXAMPLES:
        if args.only and example.name not in args.only:
            continue
        code = cells(docs, example)
        why = skip_reason(example, code)
        if why:
            outcomes[example.name] = {"skipped": why}
            (root / "outcomes.pkl").write_bytes(pickle.dumps(outcomes))
            continue
        outcomes[example.name] = {}
        for mode in ("diffrax", "odeckpt"):
            result = run_one(example, mode, code, root, rename, docs, args.timeout)
            outcomes[example.name][mode] = result
            status = "error: " + result["error"]["type"] if result["error"] else "ok"
            print(f"{example.name} [{mode}]: {status}, {result['seconds']:.0f} s", flush=True)
        print("   ", row(example, outcomes[example.name])[5:], flush=True)
        (root / "outcomes.pkl").write_bytes(pickle.dumps(outcomes))
    args.out.write_text(report(args, outcomes))
    print(f"wrote {args.out}")
    if args.keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
