"""Each test's outcome from a pytest process's events, and why a failure failed.

A failure is classified from its exception (`classify`), then replaced by a
hand-written note where one matches (`notes.toml`); a failure that also fails with
diffrax itself is counted as such.
"""

import re
from pathlib import Path

from .notes import Notes, load_notes


def file_of(test_id: str) -> str:
    return Path(test_id.split("::")[0]).name


def short(text: str, limit: int = 110) -> str:
    """`text` on one line, numbers replaced by `#` (so that alike failures group)."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?\b", "#", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(
    exc: str,
    msg: str,
    test_line: str | None,
    odeckpt_line: str | None,
    notes: Notes | None = None,
) -> tuple[str, str]:
    """(category, reason) of a failure, from its exception."""
    notes = notes or load_notes()
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
        return "to investigate (assertion)", f"at {test_line}: {short(first, 70)}"
    if exc == "Failed" and "DID NOT WARN" in msg:
        default = f"no warning where the test expects one (at {test_line})"
        return "behaviour difference", notes.unwarned.get(test_line or "", default)
    if exc == "Failed" and "DID NOT RAISE" in msg:
        return "behaviour difference", f"{short(first)} (at {test_line})"
    for pattern, category, reason in notes.messages:
        if re.search(pattern, msg):
            return category, reason
    where = f" (raised at {odeckpt_line})" if odeckpt_line else ""
    return "behaviour difference", f"{exc}: {short(first)}{where}"


def classify_collect_error(error: str, notes: Notes | None = None) -> tuple[str, str]:
    found = re.search(r"(\w+(?:Error|Exception)): (.*)", error)
    exc, msg = (found[1], found[2]) if found else ("Error", error)
    category, reason = classify(exc, msg, None, None, notes)
    return category, f"{reason} (the test file does not import)"


def file_outcomes(
    result: dict, in_scope: list[str], unrun: str = "failed", notes: Notes | None = None
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
            outcome = ("failed", *classify_collect_error(errors[0]["error"], notes))
        elif event is None:
            outcome = (unrun, "behaviour difference", f"not run (process {result['status']})")
        elif event["outcome"] != "failed":
            outcome = (event["outcome"], "", "")
        else:
            args = (event.get("exc", ""), event.get("msg", ""), event.get("test_line"))
            outcome = ("failed", *classify(*args, event.get("odeckpt_line"), notes))
        outcomes[test_id] = dict(zip(("outcome", "category", "reason"), outcome, strict=True))
    return outcomes


def odeckpt_outcomes(
    results: dict, by_file: dict, reference: dict, notes: Notes | None = None
) -> dict[str, dict]:
    """Each in-scope test's outcome with odeckpt, against diffrax's (`reference`), with
    the hand-written notes applied to the failures of tests that ran."""
    notes = notes or load_notes()
    outcomes: dict[str, dict] = {}
    for file_name, result in results.items():
        ref = reference["files"].get(file_name, {}).get("not_passing", {})
        for test_id, outcome in file_outcomes(result, by_file[file_name], notes=notes).items():
            if outcome["outcome"] == "failed" and ref.get(test_id, "").startswith("failed"):
                reason = f"{outcome['reason']}; with diffrax: {ref[test_id]}"
                outcome.update(category="fails with diffrax too", reason=reason)
            ran = outcome["outcome"] == "failed" and "does not import" not in outcome["reason"]
            note = notes.for_test(test_id) if ran else None
            if note:
                outcome.update(category=note[0], reason=note[1])
            outcomes[test_id] = outcome
    return outcomes


def summarise_reference(results: dict[str, dict], by_file: dict[str, list[str]]) -> dict:
    """Per file, the counts of diffrax's own run and the tests that did not pass."""
    files = {}
    for file_name, result in results.items():
        outcomes = file_outcomes(result, by_file[file_name], unrun="not run")
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


def unwarned_ids(results: dict) -> dict[str, list[str]]:
    """Per file, the tests that failed only because an expected warning was missing."""
    found: dict[str, list[str]] = {}
    for file_name, result in results.items():
        for event in result["events"]:
            failed = event["kind"] == "test" and event["outcome"] == "failed"
            if failed and event.get("exc") == "Failed" and "DID NOT WARN" in event["msg"]:
                found.setdefault(file_name, []).append(event["id"])
    return found
