"""Run diffrax's own ODE tests against odeckpt and write `tools/compat/COMPAT.md`.

    python -m tools.compat.suite --diffrax PATH [--reference] [--probe]
        [--warning-check] [--jobs N]
        [--files test_x.py ...] [--out tools/compat/COMPAT.md] [--timeout S]
        [--file-timeout S] [--workdir DIR] [--keep]

Run from the repository's root. PATH is a work tree of diffrax's repository at its
v0.7.2 tag (its `test/` folder is not in the released package), e.g. made with
`git -C <diffrax clone> worktree add /tmp/diffrax-v0.7.2 v0.7.2`. diffrax's test code is
copied to a temporary directory and never enters this repository.

The tests import `diffrax`. In the odeckpt run that name resolves to a generated
*rename-only* package (`rename.py`), first on `PYTHONPATH` (this work tree's `odeckpt`
next). Each test process reports the `diffrax.__file__` it imported, and the run stops
unless it is the generated package.

Steps: (1) collect every test with the real diffrax and decide which are in ODE scope
(`scope.scope_reason`); (2) with `--reference`, run the in-scope tests with the real
diffrax (the denominator "passes with diffrax itself"; stored in COMPAT.md's data block,
so a later run without the flag reuses it); (3) run them against odeckpt; (4) classify
each failure (`outcomes.classify`, then the hand-written `notes.toml`) and write the
report (`report.py`). `--probe` adds a diagnostic run, not part of the measurement, in
which every diffrax name odeckpt lacks is bound to a placeholder class too, so that
every file imports and the failures behind the missing names show. `--warning-check`
adds another: the tests that failed only because a warning diffrax emits was missing
rerun with `pytest.warns` not requiring it, so that the values they compare are
compared.

Each test file runs in its own pytest process (as diffrax's `test/__main__.py` does),
`--jobs` of them at a time, under diffrax's conftest unchanged (float64, strict dtype
promotion, rank promotion raising) and its pytest options, with the plugin
`plugin.py` recording each test's outcome and exception (`runner.py`).
"""

import argparse
import datetime
import shutil
import sys
import tempfile
from pathlib import Path

import tomllib

from .markdown import load_reference, save_reference
from .outcomes import file_of, odeckpt_outcomes, summarise_reference, unwarned_ids
from .rename import write_rename_package
from .report import write_report
from .runner import (
    REPO,
    check_diffrax_location,
    collect_scope,
    odeckpt_commit,
    rename_names,
    run_files,
    run_pytest,
    stage,
    tool_versions,
)
from .scope import OUT_OF_SCOPE_NAMES, import_time_names

DEFAULT_OUT = REPO / "tools" / "compat" / "COMPAT.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.compat.suite", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--diffrax", required=True, type=Path, help="diffrax work tree")
    parser.add_argument("--reference", action="store_true", help="also run with diffrax")
    parser.add_argument("--jobs", type=int, default=1, help="test files run at a time")
    parser.add_argument("--files", nargs="*", help="test files to run (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout", type=int, default=1800, help="per-test limit, s")
    parser.add_argument("--file-timeout", type=int, default=7200, help="per-file limit, s")
    parser.add_argument("--probe", action="store_true", help="also the diagnostic run")
    parser.add_argument(
        "--warning-check",
        action="store_true",
        help="also rerun the tests that fail only for a missing warning, not requiring it",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the run's files here and reuse each file's finished results found "
        "here (resumes an interrupted run; empty it after changing odeckpt)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace, setup: dict, ctx: dict) -> None:
    checkout = args.diffrax.resolve()
    every = sorted(p.name for p in (checkout / "test").glob("test_*.py"))
    scope = collect_scope(setup, args.files or every)
    by_file: dict[str, list[str]] = {}
    for test_id, entry in scope["tests"].items():
        if entry["out"] is None:
            by_file.setdefault(file_of(test_id), []).append(test_id)
    files = sorted(by_file)
    reference = load_reference(args.out)
    if args.reference:
        run_reference(args, setup, by_file, reference, ctx)
    stored = [reference["files"].get(f, {}).get("seconds", 0) for f in files]
    ctx.update(provided=rename_names(setup), collect_seconds=scope["seconds"])
    ctx["missing"] = scope["names"] - ctx["provided"] - set(OUT_OF_SCOPE_NAMES)
    results = run_files(setup, "odeckpt", files, args)
    ctx["file_seconds"] = {f: r["seconds"] for f, r in results.items()}
    ctx["file_commits"] = {f: r.get("commit") for f, r in results.items()}
    ctx["file_timeouts"] = {f: r.get("timeout", args.timeout) for f, r in results.items()}
    ctx["import_names"] = {
        f: import_time_names(setup["run"] / "test" / f, scope["names"]) for f in files
    }
    ctx.update(
        n_collected=len(scope["tests"]),
        n_scope=sum(map(len, by_file.values())),
        n_files=len(files),
        reference_seconds=sum(stored),
        odeckpt_seconds=sum(ctx["file_seconds"].values()),
    )
    outcomes = odeckpt_outcomes(results, by_file, reference)
    probe = run_probe(args, setup, ctx, scope, by_file, reference) if args.probe else None
    checked = None
    if args.warning_check:
        checked = run_warning_check(args, setup, ctx, results, reference)
    write_report(args.out, ctx, scope, outcomes, reference, probe, checked)


def run_reference(args, setup: dict, by_file: dict, reference: dict, ctx: dict) -> None:
    """The in-scope tests with diffrax itself; each file's figures saved as it ends."""
    reference.update(date=ctx["date"], diffrax=ctx["diffrax_version"])

    def keep(file_name: str, result: dict) -> None:
        reference["files"].update(summarise_reference({file_name: result}, by_file))
        save_reference(args.out, reference)

    run_files(setup, "reference", sorted(by_file), args, keep)


def run_probe(args, setup: dict, ctx: dict, scope: dict, by_file: dict, reference: dict):
    """The diagnostic run: missing names bound to placeholders, so that files import."""
    ctx["missing"] = scope["names"] - ctx["provided"] - set(OUT_OF_SCOPE_NAMES)
    missing = tuple(sorted(ctx["missing"]))
    write_rename_package(setup["probe"], setup["run"] / "test", missing)
    results = run_files(setup, "probe", sorted(by_file), args)
    ctx["probe_seconds"] = sum(r["seconds"] for r in results.values())
    return odeckpt_outcomes(results, by_file, reference)


def run_warning_check(args, setup: dict, ctx: dict, results: dict, reference: dict):
    """The warning-check run: the tests that failed only for a missing warning, rerun
    with `pytest.warns` recording instead of requiring, so their value checks run."""
    limits = (args.timeout, args.file_timeout)
    checked: dict[str, dict] = {}
    seconds = 0.0
    for file_name, ids in sorted(unwarned_ids(results).items()):
        node_ids = [i.split("/", 1)[1] for i in ids]
        result = run_pytest(setup, "warncheck", node_ids, [], limits)
        check_diffrax_location(setup, "warncheck", result["events"])
        print(f"  warncheck {file_name}: {result['seconds']:.0f} s, status {result['status']}")
        seconds += result["seconds"]
        checked.update(odeckpt_outcomes({file_name: result}, {file_name: ids}, reference))
        ctx.setdefault("warncheck_commits", set()).add(result.get("commit") or "?")
    ctx["warncheck_seconds"] = seconds
    return checked


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    checkout = args.diffrax.resolve()
    if not (checkout / "test" / "conftest.py").exists():
        sys.exit(
            f"--diffrax {checkout}: no test/conftest.py there; pass a work tree of "
            "diffrax's repository at its v0.7.2 tag"
        )
    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    tmp = args.workdir or Path(tempfile.mkdtemp(prefix="diffrax-suite-"))
    tmp.mkdir(parents=True, exist_ok=True)
    setup = stage(checkout, tmp)
    setup["commit"] = odeckpt_commit()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    kept = ["--reference"] if args.reference else []
    kept += ["--probe"] if args.probe else []
    kept += ["--warning-check"] if args.warning_check else []
    kept += [f"--jobs {args.jobs}", f"--timeout {args.timeout}"]
    kept += ["--files", *args.files] if args.files else []
    ctx = {
        "argv": kept,
        "date": date,
        "diffrax_version": project["version"],
        "commit": setup["commit"],
        "jobs": args.jobs,
        "timeout": args.timeout,
        "dropped": setup["dropped"],
        "private": setup["private"],
        "versions": tool_versions(),
    }
    try:
        measure(args, setup, ctx)
    finally:
        if args.keep or args.workdir:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
