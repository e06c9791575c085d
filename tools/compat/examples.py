"""Run diffrax's ODE documentation examples with diffrax and with odeckpt, compare.

    python -m tools.compat.examples --diffrax PATH [--only NAME ...]
        [--out tools/compat/EXAMPLES.md] [--timeout S] [--keep] [--reuse DIR]

Run from the repository's root. PATH is a work tree of diffrax's repository at its
v0.7.2 tag (its `docs/` folder holds the examples). Each example's code
(`example_specs.py`) is extracted unchanged: a notebook's code cells in order, or the
ODE `python` blocks of `docs/usage/getting-started.md`. It runs twice, each time in its
own Python process (`example_child.py`): once with the real diffrax, once with the same
rename-only `diffrax` package that the test-suite run uses (`rename.py`: odeckpt's names
under diffrax's names, no other code), first on `PYTHONPATH`. The child process reports
the `diffrax.__file__` it imported, and the run stops unless it is the expected one.
matplotlib runs on the Agg backend with `plt.show` a no-op; files an example writes land
in a temporary directory laid out like diffrax's `docs/` (so that `../imgs/cat.png`
resolves).

The long training loops are shortened, identically for both runs, by plain textual
substitutions of their step counts (`Example.shorten`, listed in the report); nothing
else in an example's code changes.

Results compared (`example_compare.compare`): every number the example prints, in order
(timings removed by `Example.ignore`, a regular expression), and the values of chosen
expressions (`Example.results`: evaluated after the cell given, so that a name a later
cell rebinds is read in time), each within the example's tolerance (`rtol`, `atol`:
numpy's `allclose`), stated in the report with its reason. The report,
`tools/compat/EXAMPLES.md` (`example_report.py`), says per example whether it runs with
diffrax and with odeckpt, the time of each run, whether the results match, and the
reason of any failure, classified as in `COMPAT.md`.
"""

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .example_report import report, row
from .example_specs import EXAMPLES, Example
from .rename import rename_module_source
from .runner import REPO

DEFAULT_OUT = REPO / "tools" / "compat" / "EXAMPLES.md"
CHILD = Path(__file__).resolve().parent / "example_child.py"


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
    # -P: the child's folder (this package) stays off its `sys.path`.
    command = [sys.executable, "-P", str(CHILD), str(work / "spec.json")]
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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.compat.examples",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    args = parser.parse_args(argv)
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
