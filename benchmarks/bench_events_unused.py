"""Events cost nothing when unused: a solve without `event=` against the same solve in
odeckpt as it was before events were added.

Three versions of odeckpt run in one process, each imported from its own source tree
(`git archive` of a commit into a temporary directory; the running one is the package
this process imports):

- *before*: the first parent of the commit that added `odeckpt/_event.py` on the
  first-parent history (main just before events were merged);
- *events merged*: that commit (the events work alone on top of *before*);
- *current*: odeckpt as imported here, with everything merged since.

Each version's solves are compiled while it is the `odeckpt` in `sys.modules` (a
compiled executable keeps no reference to the Python package), then the modules are
swapped back, and every compiled program is timed in the same interleaved rounds:
the ratios are medians of per-round ratios, so the load of a shared machine cancels.
Besides time, the optimised HLO of each program is compared between versions (text
without its source-location metadata): identical HLO runs the same machine code,
whatever the timing noise says.

Problems (no event anywhere): the ballistic fall `h' = v, v' = -g` from `h0 = 10` to
the fixed `t1 = 1.4` (Tsit5, `PIDController(rtol=1e-8, atol=1e-8)`); a coupled decay of
4096 states (`bench_hvp`'s, 100 fixed Tsit5 steps). Each: the forward solve, and the
gradient of a scalar loss under `CheckpointAdjoint()` (the default) and, for the
ballistic fall, `InterpolatingAdjoint()`.
"""

import collections
import contextlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
from _common import Section, Table, interleaved_samples, paired_ratio, seconds_cell

REPO = Path(__file__).resolve().parents[1]
G, T1_FALL = 9.81, 1.4
STATE_SIZE, STEPS = 4096, 100


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True).stdout


def _revisions() -> dict[str, str]:
    """`{"before": sha, "events merged": sha}` from the history of `odeckpt/_event.py`."""
    added = _git("log", "--first-parent", "--diff-filter=A", "--format=%H", "--",
                 "odeckpt/_event.py").decode().split()  # fmt: skip
    if not added:
        raise RuntimeError("no commit adds odeckpt/_event.py on the first-parent history")
    merged = added[-1]
    before = _git("rev-parse", f"{merged}^1").decode().strip()
    return {"before": before, "events merged": merged}


def _export(revision: str, into: Path) -> Path:
    """The `odeckpt` package of `revision`, extracted under `into`; returns `into`."""
    with tarfile.open(
        fileobj=io.BytesIO(_git("archive", "--format=tar", revision, "odeckpt"))
    ) as tar:
        tar.extractall(into, filter="data")
    return into


def _odeckpt_modules() -> dict:
    return {
        name: m
        for name, m in sys.modules.items()
        if name == "odeckpt" or name.startswith("odeckpt.")
    }


@contextlib.contextmanager
def _imported_from(root: Path | None):
    """`odeckpt` imported from `root` (`None`: the one this process imports) for the
    duration of the block; the modules in place before are restored after it."""
    saved = _odeckpt_modules()
    if root is None:
        yield __import__("odeckpt")
        return
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        yield __import__("odeckpt")
    finally:
        sys.path.remove(str(root))
        for name in _odeckpt_modules():
            del sys.modules[name]
        sys.modules.update(saved)


def _ballistic(t, y, g):
    return jnp.stack([y[1], -g + 0 * y[1]])


def _coupled_decay(t, y, args):
    decay, coupling = args
    return -decay * y + coupling * (jnp.roll(y, 1) - y)


def _programs(oc) -> dict[str, tuple]:
    """`{row: (fn, argument)}` for one version of odeckpt, `oc`."""

    def fall(adjoint):
        def solve(h0):
            controller = oc.PIDController(rtol=1e-8, atol=1e-8)
            sol = oc.diffeqsolve(_ballistic, oc.Tsit5(), 0.0, T1_FALL, 0.01,
                                 jnp.stack([h0, 0.0 * h0]), G, adjoint=adjoint,
                                 stepsize_controller=controller)  # fmt: skip
            return sol.ys[0, 0] + sol.ys[0, 1]

        return solve

    def decay(y0):
        sol = oc.diffeqsolve(_coupled_decay, oc.Tsit5(), 0.0, 1.0, 1.0 / STEPS, y0,
                             (jnp.asarray(0.5), jnp.asarray(2.0)), max_steps=STEPS)  # fmt: skip
        return jnp.mean(sol.ys**2)

    h0, y0 = jnp.asarray(10.0), jnp.cos(jnp.arange(STATE_SIZE) * 0.01)
    return {
        "ballistic, forward": (fall(oc.CheckpointAdjoint()), h0),
        "ballistic, gradient (CheckpointAdjoint)": (jax.grad(fall(oc.CheckpointAdjoint())), h0),
        "ballistic, gradient (InterpolatingAdjoint)": (
            jax.grad(fall(oc.InterpolatingAdjoint())),
            h0,
        ),
        "4096 states, forward": (decay, y0),
        "4096 states, gradient (CheckpointAdjoint)": (jax.grad(decay), y0),
    }


_METADATA = re.compile(r",? ?metadata=\{[^}]*\}")
_DEBUG_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _hlo(compiled) -> str:
    """Optimised HLO text without source locations: the instructions' `metadata` and
    the module's tables of files, functions and stack frames they index."""
    kept, skipping = [], False
    for line in compiled.as_text().splitlines():
        if line in _DEBUG_TABLES:
            skipping = True
        elif skipping and not line.strip():
            skipping = False
        elif not skipping:
            kept.append(_METADATA.sub("", line))
    return "\n".join(kept)


_NAME = re.compile(r"%?\b[A-Za-z_][\w\-]*\.\d+\b")  # an instruction's or computation's name
_CALLEE = re.compile(
    r"(?:calls|to_apply|condition|body)=%([\w.\-]+)|branch_computations=\{([^}]*)\}"
)
_OPCODE = re.compile(r"=\s*\S+\s+([a-z][\w\-]*)\(")


def _computations(hlo: str) -> dict[str, str]:
    """The HLO module's computations by name (the entry one under `ENTRY`)."""
    out = {}
    for block in hlo.split("\n\n"):
        head = block.strip().split(" ", 2)
        if head[0] == "ENTRY":
            out["ENTRY"] = block.strip()
        elif head[0].startswith("%"):
            out[head[0][1:]] = block.strip()
    return out


def _loop_text(hlo: str) -> str:
    """The computations the module's while loops run (bodies, conditions and what they
    call, in the order they are referenced), names renumbered by first appearance: equal
    for two programs whose loops are the same code, whatever XLA named things."""
    computations, order = _computations(hlo), []

    def visit(name):
        if name in order or name not in computations:
            return
        order.append(name)
        for called, branches in _CALLEE.findall(computations[name]):
            for callee in [called] if called else re.findall(r"%([\w.\-]+)", branches):
                visit(callee)

    for match in re.finditer(
        r"condition=%([\w.\-]+), body=%([\w.\-]+)", computations.get("ENTRY", "")
    ):
        visit(match.group(1))
        visit(match.group(2))
    seen: dict[str, str] = {}
    renamed = lambda m: seen.setdefault(m.group(0), f"v{len(seen)}")  # noqa: E731
    return _NAME.sub(renamed, "\n\n".join(computations[name] for name in order))


def _instructions(hlo: str) -> int:
    return len(_OPCODE.findall(hlo))


def _added(hlo: str, reference: str) -> str:
    """The instructions `hlo` has beyond `reference`'s, by opcode (e.g. `+1 compare`)."""
    more = collections.Counter(_OPCODE.findall(hlo))
    more.subtract(collections.Counter(_OPCODE.findall(reference)))
    cells = [f"{n:+d} {op}" for op, n in sorted(more.items()) if n]
    return ", ".join(cells) or "none"


def _compiled_versions(roots: dict[str, Path | None]) -> dict[str, dict]:
    """Per version, per row: `(compiled, argument, hlo)`."""
    out = {}
    for version, root in roots.items():
        with _imported_from(root) as oc:
            rows = {}
            for row, (fn, arg) in _programs(oc).items():
                compiled = jax.jit(fn).lower(arg).compile()
                rows[row] = (compiled, arg, _hlo(compiled))
            out[version] = rows
    return out


def run(quick: bool) -> Section:
    budget = 6.0 if quick else 15.0
    revisions = _revisions()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {v: _export(sha, Path(tmp) / v.replace(" ", "_")) for v, sha in revisions.items()}
        versions = _compiled_versions({**roots, "current": None})
    table_rows = []
    for row in versions["current"]:
        arg = versions["current"][row][1]
        fns = {version: rows[row][0] for version, rows in versions.items()}
        samples = interleaved_samples(fns, (arg,), budget)
        median = {name: sorted(s)[len(s) // 2] for name, s in samples.items()}
        hlo = {version: rows[row][2] for version, rows in versions.items()}
        loop = {version: _loop_text(text) for version, text in hlo.items()}
        sizes = " / ".join(str(_instructions(hlo[v])) for v in versions)
        same = lambda v: "yes" if loop["before"] and loop[v] == loop["before"] else "no"  # noqa: B023, E731
        table_rows.append([
            row, seconds_cell(median["before"]), seconds_cell(median["current"]),
            f"{paired_ratio(samples['current'], samples['before']):.3f}",
            f"{paired_ratio(samples['events merged'], samples['before']):.3f}",
            sizes, _added(hlo["events merged"], hlo["before"]),
            same("events merged"), same("current"),
        ])  # fmt: skip
    columns = ["solve without `event=`", "before events", "current", "current / before",
               "events merged / before", "HLO instructions (before / merged / current)",
               "instructions events added", "loop HLO: merged = before",
               "loop HLO: current = before"]  # fmt: skip
    notes = [
        f"_before_ is odeckpt at `{revisions['before'][:7]}` (main before events were "
        f"merged), _merged_ at `{revisions['events merged'][:7]}` (the merge that added "
        "them), _current_ the package this run imports (with everything merged since). "
        "Each version is imported from its own source tree in one process, its programs "
        "compiled, and all timed in the same interleaved rounds; the ratios are medians "
        "of per-round ratios (within a few percent of 1 is noise on a shared machine).",
        "The HLO columns read XLA's optimised HLO of each program: its instruction count "
        "per version, the instructions the events merge added (by opcode), and whether "
        "the computations the while loops run (bodies, conditions and everything they "
        "call; names renumbered, source locations removed) are the same text as "
        "_before_'s: the same loop is the same machine code per step. A solve without "
        "`event=` traces no event code in its loop (`Problem.event is None` skips it at "
        "trace time); what the merge added runs once, after the loop (the result check "
        "that counts `RESULTS.event_occurred` as a success).",
    ]
    return Section("Events: a solve without `event=`", Table(columns, table_rows), notes)
