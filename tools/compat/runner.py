"""Running diffrax's tests: the staged copy, one pytest process per test file.

`stage` copies diffrax's `test/` folder and its pytest options to a temporary
directory, writes the rename package, and copies this package beside them for the
plugin. Each pytest process runs with the plugin (`compat.plugin`), its settings in
environment variables, and writes its events to a JSON-lines file; a file whose
process finished in an earlier run with the same work directory is not run again.
"""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import tomllib

from .rename import write_rename_package

REPO = Path(__file__).resolve().parents[2]


def tool_versions() -> list[str]:
    """jax's and equinox's versions, as the test processes import them."""
    code = "import jax, equinox; print(jax.__version__, equinox.__version__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stdout.split() or ["?", "?"]


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
    # A copy of this package, importable as `compat` (the plugin is `compat.plugin`),
    # without this repository on the test processes' path.
    shutil.rmtree(plugin_dir / "compat", ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.md")
    shutil.copytree(Path(__file__).resolve().parent, plugin_dir / "compat", ignore=ignore)
    private = write_rename_package(tmp / "rename", run_dir / "test")
    return {
        "run": run_dir,
        "plugin": plugin_dir,
        "rename": tmp / "rename",
        "probe": tmp / "probe",
        "dropped": dropped,
        "private": private,
    }


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
    command += ["-p", "compat.plugin", "-p", "no:cacheprovider", "-q"]
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


def odeckpt_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True
        ).stdout.strip()

    last = git("log", "-1", "--format=%h", "--", "odeckpt")
    dirty = ", with uncommitted changes" if git("status", "--porcelain", "odeckpt") else ""
    return f"{git('rev-parse', '--short', 'HEAD')} (`odeckpt/` as of {last}{dirty})"
