"""Run diffrax's own ODE tests against odeckpt and write `benchmarks/COMPAT.md`.

    python benchmarks/diffrax_suite.py --diffrax PATH [--reference] [--probe]
        [--warning-check] [--jobs N]
        [--files test_x.py ...] [--out benchmarks/COMPAT.md] [--timeout S]
        [--file-timeout S] [--workdir DIR] [--keep]

PATH is a work tree of diffrax's repository at its v0.7.2 tag (its `test/` folder is not
in the released package), e.g. made with
`git -C <diffrax clone> worktree add /tmp/diffrax-v0.7.2 v0.7.2`. diffrax's test code is
copied to a temporary directory and never enters this repository.

The tests import `diffrax`. In the odeckpt run that name resolves to a generated
*rename-only* package, first on `PYTHONPATH` (this work tree's `odeckpt` next): it
re-exports every public odeckpt name, binds diffrax's names to odeckpt's where only the
name differs (`RENAMES`), and binds the SDE, Brownian-path and CDE names that are out of
scope to one placeholder class (`OUT_OF_SCOPE_NAMES`), so that an ODE test file that
mentions them still imports. No other code. Each test process reports the
`diffrax.__file__` it imported, and the run stops unless it is the generated package.

Steps: (1) collect every test with the real diffrax and decide which are in ODE scope
(`scope_reason`); (2) with `--reference`, run the in-scope tests with the real diffrax
(the denominator "passes with diffrax itself"; stored in COMPAT.md's data block, so a
later run without the flag reuses it); (3) run them against odeckpt; (4) classify each
failure (`classify`, then the hand-written `NOTES`) and write the report. `--probe` adds
a diagnostic run, not part of the measurement, in which every diffrax name odeckpt lacks
is bound to a placeholder class too, so that every file imports and the failures behind
the missing names show. `--warning-check` adds another: the tests that failed only
because a warning diffrax emits was missing rerun with `pytest.warns` not requiring it,
so that the values they compare are compared.

Each test file runs in its own pytest process (as diffrax's `test/__main__.py` does),
`--jobs` of them at a time, under diffrax's conftest unchanged (float64, strict dtype
promotion, rank promotion raising) and its pytest options. This module is also the
pytest plugin (`-p diffrax_suite`) that records each test's outcome and exception.
"""

import argparse
import ast
import concurrent.futures
import datetime
import fnmatch
import importlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "COMPAT.md"

# diffrax name -> odeckpt name, where the two differ only in name.
RENAMES = {"RecursiveCheckpointAdjoint": "CheckpointAdjoint"}

# diffrax's public names for SDEs, Brownian paths and controlled (CDE) terms: bound to a
# placeholder class in the rename module (nothing is an instance of it).
OUT_OF_SCOPE_NAMES = (
    "ALIGN AbstractBrownianIncrement AbstractBrownianPath AbstractFosterLangevinSRK "
    "AbstractItoSolver AbstractSRK AbstractSpaceTimeLevyArea AbstractSpaceTimeTimeLevyArea "
    "AbstractStratonovichSolver BrownianIncrement ControlTerm EulerHeun GeneralShARK "
    "ItoMilstein QUICSORT SEA SPaRK SRA1 ShARK ShOULD SlowRK SpaceTimeLevyArea "
    "SpaceTimeTimeLevyArea StochasticButcherTableau StratonovichMilstein "
    "UnderdampedLangevinDiffusionTerm UnderdampedLangevinDriftTerm UnsafeBrownianPath "
    "VirtualBrownianTree WeaklyDiagonalControlTerm"
).split()

# Whole files out of scope, and why.
OUT_OF_SCOPE_FILES = {
    "test_brownian.py": "SDE: Brownian paths",
    "test_sde1.py": "SDE solvers",
    "test_sde2.py": "SDE solvers",
    "test_underdamped_langevin.py": "SDE: underdamped Langevin",
    "test_typing.py": "diffrax internals (`diffrax._typing`, `diffrax._custom_types`)",
    "test_misc.py": "diffrax internals (`diffrax._misc`)",
}
# A test whose name or parameter ids say it is about SDEs/CDEs.
OUT_OF_SCOPE_ID = re.compile(r"sde|brownian|levy|langevin|\bcde|cde_|control_term|milstein", re.I)

# Hand-written notes on failures, keyed by test id pattern (fnmatch): (category, note).
# They replace the automatic classification, so that a rerun keeps what was found by
# reading the test.
NOTES: dict[str, tuple[str, str]] = {
    "test/test_progress_meter.py::*": (
        "behaviour difference",
        "progress meters print differently: `odeckpt: x%` lines where diffrax's "
        "`TextProgressMeter` prints `0.00%` to `100.00%` at every `minimum_increase`, and "
        "a tqdm bar refreshed at other times than diffrax's (`refresh_steps`)",
    ),
    "test/test_adjoint.py::test_closure_errors": (
        "behaviour difference",
        "odeckpt's `BacksolveAdjoint` differentiates parameters the vector field closes "
        "over; diffrax raises JAX's `CustomVJPException` there, and the test asks for it",
    ),
    "test/test_adjoint.py::test_against": (
        "behaviour difference",
        "the test first asks that `BacksolveAdjoint` refuse gradients through "
        "`SaveAt(steps=True)` and `SaveAt(dense=True)` (diffrax's "
        "`NotImplementedError`); odeckpt's differentiates them, so the test stops "
        "there, before its gradient comparisons. (With diffrax itself the test ran past "
        "the per-test limit on this machine.)",
    ),
    "test/test_adaptive_stepsize_controller.py::test_grad_of_discontinuous_forcing": (
        "behaviour difference",
        "the test compares the gradient with a one-sided finite difference (eps=1e-5) of "
        "the solve at rtol 1e-5; odeckpt's gradient is the closed form's (see "
        "`tests/test_clip.py::test_gradient_with_respect_to_a_discontinuity_in_step_ts`), "
        "and the difference quotient's truncation error (eps/2 times the second "
        "derivative) plus its solve noise put it just outside that tolerance",
    ),
    "test/test_step_to.py::test_step_to_location": (
        "behaviour difference",
        "`StepTo(ts)` not starting at t0, not ending at t1 or not monotonic raises "
        "`ValueError` at trace time, quoting the values, when they are known then (the "
        "run-time check, for traced values, raises `EquinoxRuntimeError`, a "
        "`RuntimeError`); the test expects diffrax's `RuntimeError`, raised at run time",
    ),
    "test/test_saveat_solution.py::test_saveat_solution": (
        "behaviour difference",
        "`SaveAt(ts=...)` outside [t0, t1] raises `ValueError` at trace time, quoting "
        "the values, when they are known then (traced: `EquinoxRuntimeError` at run "
        "time); the test expects diffrax's `RuntimeError`, raised at run time",
    ),
    # `[[]` is a literal `[` in fnmatch's patterns.
    "test/test_saveat_solution.py::test_subsaveat[[]*-adjoint3]": (
        "behaviour difference",
        "odeckpt's `BacksolveAdjoint` differentiates through `SaveAt(fn=...)` and "
        "several `SubSaveAt`s (`tests/test_saveat.py::"
        "test_gradients_through_fn_under_every_adjoint`); diffrax raises "
        "`NotImplementedError` there, and the test asks for it",
    ),
    "test/test_event.py::test_event_backsolve": (
        "behaviour difference",
        "`BacksolveAdjoint` differentiates through events here (the continuous adjoint "
        "starts at the event with its jump term: `tests/test_event_continuous.py`); the "
        "test asks for diffrax's `NotImplementedError`",
    ),
    "test/test_solver.py::test_multiple_tableau_single_step*": (
        "API difference",
        "steps `Dopri5` and a `MultiButcherTableau` solver by hand with diffrax's "
        "`init`/`step` (which odeckpt's solvers have: `tests/test_stepping_protocol.py`) "
        "and compares the whole output, `dense_info` included: diffrax's `dense_info` "
        "holds the stages `k` (the test sums a multi-tableau's `k` over its terms), "
        "odeckpt's the step's dense-output polynomial `coeffs`, so the test stops at "
        '`dense_info["k"]`',
    ),
    "test/test_solver.py::test_sil3*": (
        "API difference",
        "a solver written against diffrax's stepping protocol (which solves here) is "
        "stepped once beside `Sil3` and the two outputs are compared whole: the values "
        "`y1` and `y_error` agree, but `dense_info` (diffrax's stages `k`, odeckpt's "
        "polynomial `coeffs`) and the carried solver state differ in form",
    ),
    "test/test_integrate.py::test_implicit_tol_error": (
        "behaviour difference",
        "odeckpt's implicit solvers have their own Newton tolerances (default "
        "`VeryChord(rtol=1e-8, atol=1e-10)`), so `Kvaerno5()` with `ConstantStepSize` "
        "solves; diffrax takes them from an adaptive controller and raises "
        "`ValueError` without one, which the test asks for",
    ),
    "test/test_very_chord.py::test_very_chord": (
        "API difference",
        "uses `VeryChord` as an `optimistix` root finder (`optx.root_find(fn, "
        "VeryChord(...), x)`); odeckpt's `VeryChord` holds the implicit solvers' Newton "
        "settings (odeckpt does not depend on `optimistix`)",
    ),
}

# Tests that fail only because a warning diffrax emits is not emitted, by the line of
# the test's `pytest.warns`: why odeckpt does not emit it. The `--warning-check` run
# reruns these tests with `pytest.warns` recording instead of requiring, so that the
# values they check are checked.
UNWARNED = {
    "test_integrate.py:111": (
        "the test requires diffrax's warning on a complex solve (`Complex dtype support "
        "in Diffrax is a work in progress and may not yet produce correct results`); "
        "odeckpt supports complex states under every solver, controller, output and "
        "adjoint (`tests/test_complex.py`) and does not warn"
    ),
}

# Messages whose cause is known: (message pattern, category, reason).
MESSAGE_RULES = (
    (r"leaf y0 is complex", "missing feature", "complex-valued states (`y0` refused)"),
    (r"Saving every n-th step is not", "missing feature", "`SaveAt(steps=n)`, n > 1 (refused)"),
    (r"^<RESULTS\.\w+: ", "missing feature", "`RESULTS[member]` (the message lookup)"),
    (
        r"'int' object is not callable",
        "API difference",
        "`solver.order(terms)` is a method in diffrax, an `int` property in odeckpt",
    ),
)

CATEGORIES = (
    "missing feature",
    "API difference",
    "behaviour difference",
    "wrong numbers",
    "to investigate (assertion)",
    "timeout",
    "fails with diffrax too",
)

_DATA = re.compile(r"<!-- reference-data\n(.*?)\n-->", re.S)

# ----------------------------------------------------------------------------------
# The pytest plugin (runs inside each pytest process; reads its settings from env vars)
# ----------------------------------------------------------------------------------


class SuiteTimeout(Exception):
    """A test ran past `--timeout` seconds."""


def _emit(record: dict) -> None:
    with open(os.environ["DIFFRAX_SUITE_EVENTS"], "a") as handle:
        handle.write(json.dumps(record) + "\n")


def _diffrax_names() -> set[str]:
    module = sys.modules.get("diffrax")
    names = [n for n in dir(module) if not n.startswith("_")] if module else []
    return {n for n in names if not isinstance(getattr(module, n), types.ModuleType)}


def _names_in(text: str, bare: set[str], public: set[str]) -> set[str]:
    dotted = set(re.findall(r"\b(?:diffrax|dfx)\.(\w+)", text))
    words = set(re.findall(r"\b[A-Za-z_]\w*\b", text)) & bare
    return (dotted | words) & public


def _item_source(item) -> str:
    import inspect

    try:
        return inspect.getsource(item.function)
    except (OSError, TypeError):
        return ""


def _item_needs(item, source: str, public: set[str]) -> set[str]:
    """The diffrax names a test mentions, in its source or its parameters' reprs."""
    module = getattr(item, "module", None)
    bare = {
        name
        for name, value in vars(module).items()
        if name in public and str(getattr(value, "__module__", "")).startswith("diffrax")
    }
    params = getattr(getattr(item, "callspec", None), "params", {})
    in_params = _names_in("\n".join(repr(v) for v in params.values()), public, public)
    return _names_in(source, bare, public) | in_params


def _item_internals(item, source: str, public: set[str]) -> set[str]:
    """Names the test uses that its module imported from `diffrax._...`."""
    module = getattr(item, "module", None)
    private = {
        name
        for name, value in vars(module).items()
        if name not in public and str(getattr(value, "__module__", "")).startswith("diffrax._")
    }
    return set(re.findall(r"\b[A-Za-z_]\w*\b", source)) & private


def scope_reason(nodeid: str, source: str, needs: set[str], internals: set[str]) -> str | None:
    """Why a test is out of ODE scope, or None when it is in scope."""
    file_name = Path(nodeid.split("::")[0]).name
    if file_name in OUT_OF_SCOPE_FILES:
        return OUT_OF_SCOPE_FILES[file_name]
    if OUT_OF_SCOPE_ID.search(nodeid.split("::", 1)[-1]):
        return "SDE/CDE (test name or parameters)"
    if re.search(r"\bdiffrax\._", source) or internals:
        return "diffrax internals (`diffrax._...` in the test)"
    if needs & set(OUT_OF_SCOPE_NAMES):
        return "SDE/CDE (uses " + ", ".join(sorted(needs & set(OUT_OF_SCOPE_NAMES))) + ")"
    return None


def _scope_items(items) -> None:
    public = _diffrax_names()
    _emit({"kind": "names", "names": sorted(public)})
    for item in items:
        source = _item_source(item)
        needs = _item_needs(item, source, public)
        reason = scope_reason(item.nodeid, source, needs, _item_internals(item, source, public))
        _emit({"kind": "scope", "id": item.nodeid, "out": reason, "needs": sorted(needs)})


def pytest_collection_modifyitems(session, config, items) -> None:
    if os.environ.get("DIFFRAX_SUITE_MODE") == "collect":
        _scope_items(items)
        return
    in_scope = set(json.loads(Path(os.environ["DIFFRAX_SUITE_SCOPE"]).read_text()))
    keep = [item for item in items if item.nodeid in in_scope]
    drop = [item for item in items if item.nodeid not in in_scope]
    for item in drop:
        _emit({"kind": "deselected", "id": item.nodeid})
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_collectreport(report) -> None:
    if report.failed:
        lines = [line[4:] for line in str(report.longrepr).splitlines() if line.startswith("E ")]
        _emit({"kind": "collect_error", "id": report.nodeid, "error": " ".join(lines)[-600:]})


def pytest_configure(config) -> None:
    if os.environ.get("DIFFRAX_SUITE_MODE") == "warncheck":
        pytest.warns = _recording_warns  # pyright: ignore[reportAttributeAccessIssue]


def _recording_warns(*args, **kwargs):
    """`pytest.warns` in the warning-check run: records warnings, requires none."""
    import warnings

    return warnings.catch_warnings(record=True)


def pytest_sessionfinish(session) -> None:
    module = sys.modules.get("diffrax")
    _emit({"kind": "diffrax", "file": getattr(module, "__file__", None)})


def _on_alarm(signum, frame):
    raise SuiteTimeout(f"ran past {os.environ.get('DIFFRAX_SUITE_TIMEOUT')} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    limit = int(os.environ.get("DIFFRAX_SUITE_TIMEOUT", "0"))
    if limit:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)


def _frames(excinfo) -> dict:
    entries = list(excinfo.traceback)
    in_test = [e for e in entries if "/test/" in str(e.path)]
    in_lib = [e for e in entries if "/odeckpt/" in str(e.path)]

    def where(entry):
        return f"{Path(str(entry.path)).name}:{entry.lineno + 1}" if entry else None

    return {
        "test_line": where(in_test[-1] if in_test else None),
        "odeckpt_line": where(in_lib[-1] if in_lib else None),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.when == "call" or report.failed or report.skipped):
        return
    record = {"kind": "test", "id": item.nodeid, "outcome": report.outcome}
    record.update(when=report.when, seconds=round(report.duration, 3))
    if call.excinfo is not None and report.failed:
        record.update(exc=call.excinfo.typename, msg=str(call.excinfo.value)[:800])
        record.update(_frames(call.excinfo))
    _emit(record)


# ----------------------------------------------------------------------------------
# Staging: the copied tests, diffrax's pytest options, the rename module
# ----------------------------------------------------------------------------------


def rename_module_source(missing: tuple[str, ...] = ()) -> str:
    """The generated `diffrax/__init__.py`: name bindings only. With `missing` (the
    `--probe` run only), those names are bound to placeholder classes as well."""
    lines = [
        '"""Rename-only stand-in for diffrax, generated by odeckpt\'s',
        'benchmarks/diffrax_suite.py: odeckpt\'s names under diffrax\'s names."""',
        "",
        "from odeckpt import *  # noqa: F403",
    ]
    lines += [f"from odeckpt import {new} as {old}" for old, new in RENAMES.items()]
    lines += ["", "", "class OutOfScope:", '    """SDE, Brownian-path and CDE names."""', ""]
    # odeckpt's own classes of these names (e.g. the solver markers) take precedence.
    exported = set(vars(importlib.import_module("odeckpt")))
    lines += [f"{name} = OutOfScope" for name in OUT_OF_SCOPE_NAMES if name not in exported]
    if missing:
        lines += ["", "", "class Missing:", '    """diffrax names odeckpt lacks."""', ""]
        lines += ["    def __init__(self, *args, **kwargs):", "        pass", ""]
        lines += [f'{name} = type("{name}", (Missing,), {{}})' for name in missing]
    return "\n".join(lines) + "\n"


def private_imports(test_dir: Path) -> dict[str, set[str]]:
    """`from diffrax._x import name` at module level of the copied test files."""
    found: dict[str, set[str]] = {}
    for path in sorted(test_dir.glob("*.py")):
        if path.name in OUT_OF_SCOPE_FILES:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("diffrax._"):
                found.setdefault(node.module or "", set()).update(a.name for a in node.names)
    return found


def write_rename_package(
    root: Path, test_dir: Path, missing: tuple[str, ...] = ()
) -> dict[str, set[str]]:
    """Write the rename module, and a placeholder module for each private diffrax
    module that an in-scope test file imports at module level (its names bound to the
    placeholder; the tests using them are out of scope)."""
    package = root / "diffrax"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(rename_module_source(missing))
    private = private_imports(test_dir)
    for module, names in private.items():
        parts = module.split(".")[1:]
        folder = package.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for level in range(1, len(parts)):
            init = package.joinpath(*parts[:level], "__init__.py")
            init.touch()
        bindings = "".join(f"{name} = OutOfScope\n" for name in sorted(names))
        text = "from diffrax import OutOfScope\n\n" + bindings
        (folder / f"{parts[-1]}.py").write_text(text)
    return private


def diffrax_ini_options(checkout: Path) -> tuple[str, list[str]]:
    """diffrax's `[tool.pytest.ini_options]`, less the jaxtyping/beartype hook when
    beartype is not installed. Returns the pyproject text and what was left out."""
    options = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["pytest"]
    options = dict(options["ini_options"])
    dropped: list[str] = []
    addopts = options.get("addopts", "").split()
    if not importable("beartype"):
        dropped = [a for a in addopts if a.startswith("--jaxtyping-packages")]
        addopts = [a for a in addopts if a not in dropped]
    options["addopts"] = " ".join(addopts)
    body = "\n".join(f"{key} = {json.dumps(value)}" for key, value in options.items())
    return "[tool.pytest.ini_options]\n" + body + "\n", dropped


def importable(name: str) -> bool:
    result = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True)
    return result.returncode == 0


def stage(checkout: Path, tmp: Path) -> dict:
    """Copy the tests, write the options and the rename package. Returns the setup."""
    run_dir = tmp / "run"
    shutil.copytree(checkout / "test", run_dir / "test", dirs_exist_ok=True)
    pyproject, dropped = diffrax_ini_options(checkout)
    (run_dir / "pyproject.toml").write_text(pyproject)
    plugin_dir = tmp / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    shutil.copy(Path(__file__), plugin_dir / "diffrax_suite.py")
    private = write_rename_package(tmp / "rename", run_dir / "test")
    return {
        "run": run_dir,
        "plugin": plugin_dir,
        "rename": tmp / "rename",
        "probe": tmp / "probe",
        "dropped": dropped,
        "private": private,
    }


# ----------------------------------------------------------------------------------
# Running pytest
# ----------------------------------------------------------------------------------


def child_env(setup: dict, mode: str, events: Path, timeout: int) -> dict:
    env = dict(os.environ)
    paths = [str(setup["plugin"])]
    if mode in ("odeckpt", "probe", "warncheck"):
        paths = [str(setup["probe" if mode == "probe" else "rename"]), str(REPO), *paths]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env.update(PYTHONPATH=os.pathsep.join(paths), DIFFRAX_SUITE_EVENTS=str(events))
    env.update(DIFFRAX_SUITE_MODE=mode, DIFFRAX_SUITE_TIMEOUT=str(timeout))
    env["DIFFRAX_SUITE_SCOPE"] = str(setup["run"].parent / "scope.json")
    return env


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_pytest(setup: dict, mode: str, files: list[str], extra: list[str], limits) -> dict:
    """One pytest process over `files`; returns its events, time and exit status."""
    timeout, file_timeout = limits
    stems = (f.split("::")[0][:-3] for f in files)
    events = setup["run"].parent / f"{mode}-{'-'.join(dict.fromkeys(stems))[:80]}.jsonl"
    done = [e for e in read_events(events) if e["kind"] == "done"]
    if done:  # finished in an earlier run with the same --workdir
        return {"events": read_events(events), **done[0]["result"]}
    events.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", *(f"test/{f}" for f in files), *extra]
    command += ["-p", "diffrax_suite", "-p", "no:cacheprovider", "-q"]
    env = child_env(setup, mode, events, timeout)
    start = time.perf_counter()
    try:
        ran = subprocess.run(
            command, cwd=setup["run"], env=env, capture_output=True, text=True, timeout=file_timeout
        )
        status, log = ran.returncode, ran.stdout + ran.stderr
    except subprocess.TimeoutExpired as error:
        status, log = "killed", f"killed after {file_timeout} s\n{error.stdout or ''}"
    (events.with_suffix(".log")).write_text(str(log))
    result = {"seconds": time.perf_counter() - start, "status": status}
    result["commit"] = setup.get("commit", "?")  # the odeckpt it ran against
    result["timeout"] = timeout
    with open(events, "a") as handle:
        handle.write(json.dumps({"kind": "done", "result": result}) + "\n")
    return {"events": read_events(events), **result}


def collect_scope(setup: dict, files: list[str]) -> dict:
    """Collect with the real diffrax: every test's scope and the diffrax names it uses."""
    result = run_pytest(setup, "collect", files, ["--collect-only"], (0, 1800))
    scope = {e["id"]: e for e in result["events"] if e["kind"] == "scope"}
    names = next((e["names"] for e in result["events"] if e["kind"] == "names"), [])
    errors = [e for e in result["events"] if e["kind"] == "collect_error"]
    if errors or not scope:
        sys.exit(f"collecting with the real diffrax failed: {errors or result['status']}")
    in_scope = sorted(i for i, e in scope.items() if e["out"] is None)
    (setup["run"].parent / "scope.json").write_text(json.dumps(in_scope))
    return {"tests": scope, "names": set(names), "seconds": result["seconds"]}


def run_files(setup: dict, mode: str, files: list[str], args, on_done=None) -> dict[str, dict]:
    """Each file in its own pytest process, `--jobs` at a time; `on_done(file, result)`
    is called as each finishes."""
    limits = (args.timeout, args.file_timeout)
    lock = threading.Lock()

    def one(file_name: str) -> tuple[str, dict]:
        result = run_pytest(setup, mode, [file_name], [], limits)
        check_diffrax_location(setup, mode, result["events"])
        print(f"  {mode} {file_name}: {result['seconds']:.0f} s, status {result['status']}")
        with lock:
            if on_done is not None:
                on_done(file_name, result)
        return file_name, result

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        return dict(pool.map(one, files))


def check_diffrax_location(setup: dict, mode: str, events: list[dict]) -> None:
    """Stops the run if a test process imported the wrong `diffrax`."""
    generated = f"{os.sep}{'probe' if mode == 'probe' else 'rename'}{os.sep}diffrax"
    for event in events:
        location = event.get("file") if event["kind"] == "diffrax" else None
        if location and (mode == "reference") == (generated in location):
            sys.exit(f"the {mode} run imported diffrax from {location}")


def rename_names(setup: dict) -> set[str]:
    """The names the rename module provides; checks `diffrax` resolves to it."""
    env = child_env(setup, "odeckpt", setup["run"].parent / "unused.jsonl", 0)
    code = "import diffrax, json; print(json.dumps([diffrax.__file__, dir(diffrax)]))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=setup["run"].parent,
        check=True,
    )
    location, names = json.loads(done.stdout.splitlines()[-1])
    if not location.startswith(str(setup["rename"])):
        sys.exit(f"`import diffrax` resolved to {location}, not the rename module")
    return {n for n in names if not n.startswith("_")}


# ----------------------------------------------------------------------------------
# Classifying outcomes
# ----------------------------------------------------------------------------------


def _short(text: str, limit: int = 110) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?\b", "#", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(exc: str, msg: str, test_line: str | None, odeckpt_line: str | None):
    """(category, reason) of a failure, from its exception."""
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    missing = re.search(r"module 'diffrax' has no attribute '(\w+)'", msg) or re.search(
        r"cannot import name '(\w+)' from 'diffrax'", msg
    )
    attribute = re.search(r"'(\w+)' object has no attribute '(\w+)'", msg)
    keyword = re.search(r"(\w+)(?:\.__init__)?\(\) got an unexpected keyword argument '(\w+)'", msg)
    if missing:
        return "missing feature", f"`diffrax.{missing[1]}`"
    if exc == "AttributeError" and attribute:
        return "missing feature", f"`{attribute[1]}.{attribute[2]}`"
    if keyword:
        return "API difference", f"`{keyword[1]}(..., {keyword[2]}=...)` not accepted"
    if exc == "SuiteTimeout":
        return "timeout", first
    if exc == "AssertionError":
        return "to investigate (assertion)", f"at {test_line}: {_short(first, 70)}"
    if exc == "Failed" and "DID NOT WARN" in msg:
        default = f"no warning where the test expects one (at {test_line})"
        return "behaviour difference", UNWARNED.get(test_line or "", default)
    if exc == "Failed" and "DID NOT RAISE" in msg:
        return "behaviour difference", f"{_short(first)} (at {test_line})"
    for pattern, category, reason in MESSAGE_RULES:
        if re.search(pattern, msg):
            return category, reason
    where = f" (raised at {odeckpt_line})" if odeckpt_line else ""
    return "behaviour difference", f"{exc}: {_short(first)}{where}"


def classify_collect_error(error: str) -> tuple[str, str]:
    found = re.search(r"(\w+(?:Error|Exception)): (.*)", error)
    exc, msg = (found[1], found[2]) if found else ("Error", error)
    category, reason = classify(exc, msg, None, None)
    return category, f"{reason} (the test file does not import)"


def note_for(test_id: str) -> tuple[str, str] | None:
    for pattern, note in NOTES.items():
        if fnmatch.fnmatch(test_id, pattern):
            return note
    return None


def file_outcomes(
    file_name: str, result: dict, in_scope: list[str], unrun: str = "failed"
) -> dict[str, dict]:
    """Outcome of each in-scope test of one file: passed/skipped/failed, with reason; a
    test the process never reached (it was interrupted) counts as `unrun`."""
    events = result["events"]
    errors = [e for e in events if e["kind"] == "collect_error"]
    tests: dict[str, dict] = {}
    for event in events:
        if event["kind"] == "test" and (event["id"] not in tests or event["outcome"] != "passed"):
            tests[event["id"]] = event
    outcomes = {}
    for test_id in in_scope:
        event = tests.get(test_id)
        if errors:
            outcome = ("failed", *classify_collect_error(errors[0]["error"]))
        elif event is None:
            outcome = (unrun, "behaviour difference", f"not run (process {result['status']})")
        elif event["outcome"] != "failed":
            outcome = (event["outcome"], "", "")
        else:
            args = (event.get("exc", ""), event.get("msg", ""), event.get("test_line"))
            outcome = ("failed", *classify(*args, event.get("odeckpt_line")))
        outcomes[test_id] = dict(zip(("outcome", "category", "reason"), outcome, strict=True))
    return outcomes


def import_time_names(path: Path, public: set[str]) -> set[str]:
    """diffrax names a test file (and `helpers.py`, if it imports it) uses at import."""
    source = path.read_text()
    tree = ast.parse(source)
    bare: set[str] = set()
    chunks: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "diffrax":
            bare.update(alias.asname or alias.name for alias in node.names)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            parts = [*node.decorator_list, node.args, node.returns]
            chunks += [ast.get_source_segment(source, p) or "" for p in parts if p is not None]
        else:
            chunks.append(ast.get_source_segment(source, node) or "")
    names = _names_in("\n".join(chunks), bare, public)
    if "from .helpers import" in source and path.name != "helpers.py":
        names |= import_time_names(path.parent / "helpers.py", public)
    return names


# ----------------------------------------------------------------------------------
# The reference run's data (kept in COMPAT.md) and the report
# ----------------------------------------------------------------------------------


def summarise_reference(results: dict[str, dict], by_file: dict[str, list[str]]) -> dict:
    files = {}
    for file_name, result in results.items():
        outcomes = file_outcomes(file_name, result, by_file[file_name], unrun="not run")
        counts = {
            k: sum(o["outcome"] == k for o in outcomes.values())
            for k in ("passed", "skipped", "failed", "not run")
        }
        not_passing = {
            i: o["outcome"] + (f": {o['reason']}" if o["reason"] else "")
            for i, o in outcomes.items()
            if o["outcome"] != "passed"
        }
        files[file_name] = {
            "in_scope": len(outcomes),
            **counts,
            "seconds": round(result["seconds"]),
            "not_passing": not_passing,
        }
    return files


def save_reference(out: Path, reference: dict) -> None:
    """Stores the reference figures in `out` as they come (a long run keeps them)."""
    block = "<!-- reference-data\n" + json.dumps(reference, indent=0, sort_keys=True) + "\n-->"
    text = out.read_text() if out.exists() else "# diffrax's test suite against odeckpt\n\n"
    found = _DATA.search(text)
    if found:
        text = text[: found.start()] + block + text[found.end() :]
    else:
        text += block + "\n"
    out.write_text(text)


def load_reference(out: Path) -> dict:
    found = _DATA.search(out.read_text()) if out.exists() else None
    return json.loads(found[1]) if found else {"files": {}}


def odeckpt_outcomes(results: dict, by_file: dict, reference: dict) -> dict[str, dict]:
    outcomes: dict[str, dict] = {}
    for file_name, result in results.items():
        ref = reference["files"].get(file_name, {}).get("not_passing", {})
        for test_id, outcome in file_outcomes(file_name, result, by_file[file_name]).items():
            if outcome["outcome"] == "failed" and ref.get(test_id, "").startswith("failed"):
                reason = f"{outcome['reason']}; with diffrax: {ref[test_id]}"
                outcome.update(category="fails with diffrax too", reason=reason)
            ran = outcome["outcome"] == "failed" and "does not import" not in outcome["reason"]
            note = note_for(test_id) if ran else None
            if note:
                outcome.update(category=note[0], reason=note[1])
            outcomes[test_id] = outcome
    return outcomes


def file_of(test_id: str) -> str:
    return Path(test_id.split("::")[0]).name


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def header_lines(ctx: dict) -> list[str]:
    versions = subprocess.run(
        [sys.executable, "-c", "import jax, equinox; print(jax.__version__, equinox.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split() or ["?", "?"]
    return [
        "# diffrax's test suite against odeckpt",
        "",
        "Generated by `python benchmarks/diffrax_suite.py --diffrax PATH "
        f"{' '.join(ctx['argv'])}`; do not edit by hand (reasons written by hand go in",
        "`NOTES` in the script). PATH is a work tree of diffrax's repository at v"
        f"{ctx['diffrax_version']}.",
        "",
        f"- Date: {ctx['date']}; diffrax tests: v{ctx['diffrax_version']}; "
        f'odeckpt commit: {ctx["commit"]} (each file\'s: see "Per file")',
        f"- Python {platform.python_version()}, jax {versions[0]}, equinox {versions[-1]}; "
        f"{platform.platform()}; {os.cpu_count()} CPUs",
        f"- Time, summed over the {ctx['n_files']} files' pytest processes (run "
        f"{ctx['jobs']} at a time, on a shared machine): collecting with diffrax "
        f"{ctx['collect_seconds']:.0f} s; diffrax itself {ctx['reference_seconds']:.0f} s; "
        f"odeckpt {ctx['odeckpt_seconds']:.0f} s"
        + (f"; diagnostic run {ctx['probe_seconds']:.0f} s" if "probe_seconds" in ctx else "")
        + (
            f"; warning check {ctx['warncheck_seconds']:.0f} s"
            if "warncheck_seconds" in ctx
            else ""
        )
        + ".",
        "",
    ]


def summary_lines(ctx: dict, outcomes: dict, reference: dict) -> list[str]:
    ran = {file_of(i) for i in outcomes}
    ref_pass = sum(reference["files"].get(f, {}).get("passed", 0) for f in ran)
    ref_unrun = sum(reference["files"].get(f, {}).get("not run", 0) for f in ran)
    passed = [i for i, o in outcomes.items() if o["outcome"] == "passed"]
    skipped = [i for i, o in outcomes.items() if o["outcome"] == "skipped"]
    files = reference["files"]
    both = [i for i in passed if file_of(i) in files and i not in files[file_of(i)]["not_passing"]]
    total = len(outcomes)
    lines = [
        "## Summary",
        "",
        f"- Tests collected: {ctx['n_collected']}; out of ODE scope: "
        f"{ctx['n_collected'] - ctx['n_scope']}; in scope: {ctx['n_scope']} "
        f"(in the files run: {total}).",
    ]
    missing = sorted(f for f in ran if f not in reference["files"])
    lines.append(
        f"- Pass with diffrax itself: {ref_pass}"
        + (f"; {ref_unrun} not run (the reference run was cut short)" if ref_unrun else "")
        + (f"; not measured for {', '.join(missing)} (`--reference`)" if missing else "")
        + "."
    )
    lines.append(
        f"- Pass with odeckpt through the rename module: **{len(passed)} of {total} "
        f"({_pct(len(passed), total)})**; of those that pass with diffrax: "
        f"{len(both)} of {ref_pass} ({_pct(len(both), ref_pass)}); skipped: "
        f"{len(skipped)}."
    )
    wrong = sum(o["category"] == "wrong numbers" for o in outcomes.values())
    lines += [f"- Failures classified as wrong numbers: {wrong}.", ""]
    return lines


def _limits(ctx: dict) -> str:
    """The per-test limit, or each file's where results reused ran under another."""
    limits = ctx.get("file_timeouts") or {}
    if len(set(limits.values()) | {ctx["timeout"]}) == 1:
        return f"{ctx['timeout']} s"
    other = [f"{f}: {t} s" for f, t in sorted(limits.items()) if t != ctx["timeout"]]
    return f"{ctx['timeout']} s ({'; '.join(other)})"


def setup_lines(ctx: dict) -> list[str]:
    renames = ", ".join(f"`{old} = odeckpt.{new}`" for old, new in RENAMES.items())
    private = "; ".join(f"`{m}`: {', '.join(sorted(n))}" for m, n in ctx["private"].items())
    lines = [
        "## How it runs",
        "",
        "diffrax's `test/` is copied to a temporary directory and run there with its "
        '`conftest.py` unchanged (float64, `jax_numpy_dtype_promotion="strict"`, '
        '`jax_numpy_rank_promotion="raise"`) and its pytest options, each file in its '
        f"own pytest process, a per-test limit of {_limits(ctx)}. `diffrax` is a "
        "generated package first on `PYTHONPATH` (the run checks `diffrax.__file__`), "
        "with name bindings only:",
        "",
        "- `from odeckpt import *`: every public odeckpt name under its own name;",
        f"- renames: {renames};",
        f"- {len(OUT_OF_SCOPE_NAMES)} SDE, Brownian-path and CDE names bound to one "
        "placeholder class `OutOfScope`, so that ODE test files mentioning them import: "
        + ", ".join(OUT_OF_SCOPE_NAMES)
        + ";",
        f"- private modules that ODE test files import at module level, their names bound "
        f"to the placeholder (the tests using them are out of scope): {private or 'none'}.",
        "",
    ]
    if ctx["dropped"]:
        lines += [
            f"Left out of diffrax's pytest options: `{' '.join(ctx['dropped'])}` "
            "(beartype is not installed; it type-checks diffrax's own annotations).",
            "",
        ]
    return lines


def scope_lines(scope: dict) -> list[str]:
    reasons: dict[str, int] = {}
    for entry in scope["tests"].values():
        key = entry["out"] or "in scope"
        reasons[key] = reasons.get(key, 0) + 1
    rows = sorted(reasons.items(), key=lambda kv: -kv[1])
    return [
        "## Scope",
        "",
        "Out of scope (`scope_reason` in the script): whole files on SDEs, Brownian "
        "paths and diffrax internals; tests whose name or parameter ids mention "
        "sde/brownian/levy/langevin/cde/control_term/milstein; tests whose source "
        "mentions `diffrax._...` or a name imported from there; tests that use an SDE/CDE "
        "name (in their source or "
        "their parameters).",
        "",
        *_table(["scope", "tests"], [list(r) for r in rows]),
        "",
    ]


def file_lines(outcomes: dict, reference: dict, seconds: dict, commits: dict) -> list[str]:
    rows = []
    for file_name in sorted({file_of(i) for i in outcomes}):
        mine = [o for i, o in outcomes.items() if file_of(i) == file_name]
        ref = reference["files"].get(file_name, {})
        passed = sum(o["outcome"] == "passed" for o in mine)
        imports = not any("does not import" in o["reason"] for o in mine)
        rows.append(
            [
                f"`{file_name}`",
                len(mine),
                str(ref.get("passed", "?"))
                + (f" ({ref['not run']} not run)" if ref.get("not run") else ""),
                passed,
                sum(o["outcome"] == "failed" for o in mine),
                "yes" if imports else "**no**",
                f"{seconds[file_name]:.0f}",
                ref.get("seconds", "?"),
                commits.get(file_name) or "?",
            ]
        )
    header = [
        "file",
        "in scope",
        "pass (diffrax)",
        "pass (odeckpt)",
        "fail (odeckpt)",
        "imports",
        "odeckpt s",
        "diffrax s",
        "odeckpt commit",
    ]
    note = (
        "The odeckpt commit is the one each file's tests ran against (a file's results "
        "are reused from `--workdir` when it holds them)."
    )
    return ["## Per file", "", note, "", *_table(header, rows), ""]


def reason_table(outcomes: dict) -> list[str]:
    failed = [o for o in outcomes.values() if o["outcome"] == "failed"]
    counts: dict[tuple[str, str], int] = {}
    for o in failed:
        counts[o["category"], o["reason"]] = counts.get((o["category"], o["reason"]), 0) + 1
    rows = [
        [c, r.replace("|", "\\|"), n]
        for (c, r), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return _table(["category", "reason", "tests"], rows)


def reason_lines(outcomes: dict) -> list[str]:
    failed = [o for o in outcomes.values() if o["outcome"] == "failed"]
    by_category = [[c, sum(o["category"] == c for o in failed)] for c in CATEGORIES]
    return [
        "## Failures by category",
        "",
        *_table(["category", "tests"], by_category),
        "",
        "## Failures by reason",
        "",
        *reason_table(outcomes),
        "",
    ]


def missing_lines(outcomes: dict, scope: dict, ctx: dict) -> list[str]:
    missing = ctx["missing"]
    import_names = ctx["import_names"]
    needed: dict[str, int] = {}
    first: dict[str, int] = {}
    for test_id, o in outcomes.items():
        if o["outcome"] != "failed":
            continue
        needs = set(scope["tests"][test_id]["needs"]) | import_names[file_of(test_id)]
        for name in needs & missing:
            needed[name] = needed.get(name, 0) + 1
        for name in re.findall(r"`diffrax\.(\w+)`", o["reason"]):
            first[name] = first.get(name, 0) + 1
    used = sorted((n for n in missing if needed.get(n)), key=lambda n: (-needed[n], n))
    rows = [[f"`{n}`", needed[n], first.get(n, 0)] for n in used]
    unused = ", ".join(f"`{n}`" for n in sorted(missing - set(used))) or "none"
    return [
        "## Missing diffrax names",
        "",
        "Public diffrax names (outside SDE/CDE) that odeckpt does not provide, by the "
        "number of failing in-scope tests that use them (in the test, its parameters, "
        "or at import of its file and `helpers.py`), and the number whose error names "
        "them.",
        "",
        *_table(["name", "failing tests using it", "tests failing on it"], rows),
        "",
        f"Missing, and not seen in a failing test's source, parameters or import-time "
        f"code (a test may still reach them through a helper function): {unused}.",
        "",
    ]


def per_test_lines(outcomes: dict, title: str = "## Each failing test") -> list[str]:
    lines = [title, ""]
    for file_name in sorted({file_of(i) for i in outcomes}):
        failed = {
            i: o
            for i, o in outcomes.items()
            if file_of(i) == file_name and o["outcome"] == "failed"
        }
        reasons = {(o["category"], o["reason"]) for o in failed.values()}
        if not failed:
            continue
        lines += [f"{title[: title.index(' ')]}# `{file_name}` ({len(failed)} failing)", ""]
        if len(reasons) == 1 and "does not import" in next(iter(reasons))[1]:
            category, reason = next(iter(reasons))
            lines += [f"All {len(failed)}: {category}: {reason}.", ""]
            continue
        for test_id, o in sorted(failed.items()):
            name = test_id.split("::", 1)[1]
            lines.append(f"- `{name}`: {o['category']}: {o['reason']}")
        lines.append("")
    return lines


def probe_lines(probe: dict, scope: dict, ctx: dict) -> list[str]:
    """The diagnostic run: what fails besides the missing names."""

    def needs_missing(test_id: str) -> set[str]:
        return set(scope["tests"][test_id]["needs"]) & ctx["missing"]

    free = {i: o for i, o in probe.items() if not needs_missing(i)}
    blocked = {i: o for i, o in probe.items() if needs_missing(i)}
    passed = sum(o["outcome"] == "passed" for o in probe.values())
    free_passed = sum(o["outcome"] == "passed" for o in free.values())
    blocked_passed = sum(o["outcome"] == "passed" for o in blocked.values())
    lines = [
        "## Diagnostic: with the missing names bound to placeholders",
        "",
        "Not the measurement: a second run (`--probe`) whose `diffrax` also binds each "
        "missing name to an empty placeholder class (which takes any arguments), so that "
        "every file imports and the failures behind the missing names show.",
        "",
        f"- Pass: {passed} of {len(probe)} ({_pct(passed, len(probe))}).",
        f"- Tests that use no missing name (in the test or its parameters): "
        f"{len(free)}; pass: {free_passed}.",
        f"- Tests that use a missing name: {len(blocked)}; pass anyway: {blocked_passed}.",
        "",
        "Failures of the tests that use no missing name:",
        "",
    ]
    lines += [*reason_table(free), ""]
    return lines + per_test_lines(free, "### Each of them")


def write_report(
    out: Path,
    ctx: dict,
    scope: dict,
    outcomes: dict,
    reference: dict,
    probe: dict | None,
    checked: dict | None = None,
) -> None:
    lines = header_lines(ctx) + summary_lines(ctx, outcomes, reference) + setup_lines(ctx)
    lines += scope_lines(scope)
    lines += file_lines(outcomes, reference, ctx["file_seconds"], ctx["file_commits"])
    lines += reason_lines(outcomes) + missing_lines(outcomes, scope, ctx)
    lines += per_test_lines(outcomes)
    lines += probe_lines(probe, scope, ctx) if probe else []
    if checked is not None:
        lines += warning_check_lines(checked, outcomes, ctx.get("warncheck_commits", set()))
    out.write_text("\n".join(lines) + "\n")
    save_reference(out, reference)


# ----------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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


def odeckpt_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True
        ).stdout.strip()

    last = git("log", "-1", "--format=%h", "--", "odeckpt")
    dirty = ", with uncommitted changes" if git("status", "--porcelain", "odeckpt") else ""
    return f"{git('rev-parse', '--short', 'HEAD')} (`odeckpt/` as of {last}{dirty})"


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


def unwarned_ids(results: dict) -> dict[str, list[str]]:
    """Per file, the tests that failed only because an expected warning was missing."""
    found: dict[str, list[str]] = {}
    for file_name, result in results.items():
        for event in result["events"]:
            failed = event["kind"] == "test" and event["outcome"] == "failed"
            if failed and event.get("exc") == "Failed" and "DID NOT WARN" in event["msg"]:
                found.setdefault(file_name, []).append(event["id"])
    return found


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


def warning_check_lines(checked: dict, outcomes: dict, commits: set) -> list[str]:
    passed = sum(o["outcome"] == "passed" for o in checked.values())
    total = len(outcomes)
    both = sum(o["outcome"] == "passed" for o in outcomes.values()) + passed
    lines = [
        "## Diagnostic: the tests that fail only for a missing warning",
        "",
        "Not the measurement: the tests that failed because a warning diffrax emits was "
        "not emitted (`pytest.warns` raised `DID NOT WARN`, before the test compares "
        "any value) rerun with `pytest.warns` recording warnings instead of requiring "
        "them (`--warning-check`), so that the values they check are checked.",
        "",
        f"- Rerun: {len(checked)}; pass: {passed} (odeckpt commit: "
        f"{', '.join(sorted(commits)) or '?'}).",
        f"- In-scope tests that pass, counting these: {both} of {total} ({_pct(both, total)}).",
        "",
    ]
    failed = {i: o for i, o in checked.items() if o["outcome"] != "passed"}
    return lines + (per_test_lines(failed, "### Failing in the rerun") if failed else [])


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
