"""The pytest plugin (`-p compat.plugin`) loaded into each of diffrax's test processes.

It reads its settings from environment variables set by `runner.child_env`, and
appends one JSON record per line to `DIFFRAX_SUITE_EVENTS`: the diffrax names and each
test's scope (`DIFFRAX_SUITE_MODE=collect`), each test's outcome and exception, each
collection error, and the `diffrax.__file__` the process imported. Outside the
collecting run it keeps only the in-scope tests listed in `DIFFRAX_SUITE_SCOPE`, and
stops a test after `DIFFRAX_SUITE_TIMEOUT` seconds.
"""

import inspect
import json
import os
import re
import signal
import sys
import types
import warnings
from pathlib import Path

import pytest

from .scope import names_in, scope_reason


class SuiteTimeout(Exception):
    """A test ran past `--timeout` seconds."""


def _emit(record: dict) -> None:
    with open(os.environ["DIFFRAX_SUITE_EVENTS"], "a") as handle:
        handle.write(json.dumps(record) + "\n")


def _diffrax_names() -> set[str]:
    module = sys.modules.get("diffrax")
    names = [n for n in dir(module) if not n.startswith("_")] if module else []
    return {n for n in names if not isinstance(getattr(module, n), types.ModuleType)}


def _item_source(item) -> str:
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
    in_params = names_in("\n".join(repr(v) for v in params.values()), public, public)
    return names_in(source, bare, public) | in_params


def _item_internals(item, source: str, public: set[str]) -> set[str]:
    """Names the test uses that its module imported from `diffrax._...`."""
    module = getattr(item, "module", None)
    private = {
        name
        for name, value in vars(module).items()
        if name not in public and str(getattr(value, "__module__", "")).startswith("diffrax._")
    }
    return set(re.findall(r"\b[A-Za-z_]\w*\b", source)) & private


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
