"""The failure sections of COMPAT.md: by category, by reason, by missing diffrax name,
each failing test, and the two diagnostic runs (`--probe`, `--warning-check`)."""

import re

from .markdown import pct, table
from .notes import CATEGORIES
from .outcomes import file_of


def reason_table(outcomes: dict) -> list[str]:
    failed = [o for o in outcomes.values() if o["outcome"] == "failed"]
    counts: dict[tuple[str, str], int] = {}
    for o in failed:
        counts[o["category"], o["reason"]] = counts.get((o["category"], o["reason"]), 0) + 1
    rows = [
        [c, r.replace("|", "\\|"), n]
        for (c, r), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return table(["category", "reason", "tests"], rows)


def reason_lines(outcomes: dict) -> list[str]:
    failed = [o for o in outcomes.values() if o["outcome"] == "failed"]
    by_category = [[c, sum(o["category"] == c for o in failed)] for c in CATEGORIES]
    return [
        "## Failures by category",
        "",
        *table(["category", "tests"], by_category),
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
        "Public diffrax names (outside SDEs) that odeckpt does not provide, by the "
        "number of failing in-scope tests that use them (in the test, its parameters, "
        "or at import of its file and `helpers.py`), and the number whose error names "
        "them.",
        "",
        *table(["name", "failing tests using it", "tests failing on it"], rows),
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
        f"- Pass: {passed} of {len(probe)} ({pct(passed, len(probe))}).",
        f"- Tests that use no missing name (in the test or its parameters): "
        f"{len(free)}; pass: {free_passed}.",
        f"- Tests that use a missing name: {len(blocked)}; pass anyway: {blocked_passed}.",
        "",
        "Failures of the tests that use no missing name:",
        "",
    ]
    lines += [*reason_table(free), ""]
    return lines + per_test_lines(free, "### Each of them")


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
        f"- In-scope tests that pass, counting these: {both} of {total} ({pct(both, total)}).",
        "",
    ]
    failed = {i: o for i, o in checked.items() if o["outcome"] != "passed"}
    return lines + (per_test_lines(failed, "### Failing in the rerun") if failed else [])
