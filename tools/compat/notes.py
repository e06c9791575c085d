"""The hand-written notes on failures (`notes.toml`): loaded and checked.

`notes.toml` is data: what was found by reading a failing test, so that a rerun of the
harness keeps it. Loading checks every entry (known keys, a known category, patterns
that compile, no pattern twice) and raises `ValueError` naming the entry.
"""

import dataclasses
import fnmatch
import functools
import re
from pathlib import Path
from typing import NamedTuple

import tomllib

NOTES_FILE = Path(__file__).resolve().parent / "notes.toml"

CATEGORIES = (
    "missing feature",
    "API difference",
    "behaviour difference",
    "wrong numbers",
    "to investigate (assertion)",
    "timeout",
    "fails with diffrax too",
)


class FailureNote(NamedTuple):
    """Replaces the automatic classification of the tests whose id matches `test`."""

    test: str  # an fnmatch pattern over test ids; `[[]` is a literal `[`
    category: str
    note: str


class MessageRule(NamedTuple):
    """A failure whose message matches `pattern` has a known cause."""

    pattern: str  # a regular expression, searched in the exception's message
    category: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Notes:
    failures: tuple[FailureNote, ...]
    unwarned: dict[str, str]  # "test_file.py:line" of a `pytest.warns` -> why no warning
    messages: tuple[MessageRule, ...]

    def for_test(self, test_id: str) -> tuple[str, str] | None:
        """(category, note) of the first failure note whose pattern matches."""
        for entry in self.failures:
            if fnmatch.fnmatch(test_id, entry.test):
                return entry.category, entry.note
        return None


_KEYS = {
    "failure": FailureNote._fields,
    "unwarned": ("at", "reason"),
    "message": MessageRule._fields,
}


def _check_entry(kind: str, index: int, entry: dict) -> None:
    where = f"[[{kind}]] #{index + 1}"
    if set(entry) != set(_KEYS[kind]):
        raise ValueError(f"{where}: keys {sorted(entry)}; expected {list(_KEYS[kind])}")
    if not all(isinstance(value, str) and value.strip() for value in entry.values()):
        raise ValueError(f"{where}: every value must be a non-empty string; got {entry}")
    if "category" in entry and entry["category"] not in CATEGORIES:
        raise ValueError(f"{where}: category {entry['category']!r} is not one of {CATEGORIES}")
    if kind == "failure" and "::" not in entry["test"]:
        raise ValueError(f"{where}: test {entry['test']!r} is not a `file::test` pattern")
    if kind == "unwarned" and not re.fullmatch(r"test_\w+\.py:\d+", entry["at"]):
        raise ValueError(f"{where}: at {entry['at']!r} is not `test_file.py:line`")
    if kind == "message":
        try:
            re.compile(entry["pattern"])
        except re.error as error:
            raise ValueError(f"{where}: pattern {entry['pattern']!r}: {error}") from None


def parse_notes(text: str) -> Notes:
    """Notes from the text of a `notes.toml`, checked."""
    data = tomllib.loads(text)
    unknown = set(data) - set(_KEYS)
    if unknown:
        raise ValueError(f"unknown tables {sorted(unknown)}; expected {sorted(_KEYS)}")
    for kind in _KEYS:
        for index, entry in enumerate(data.get(kind, [])):
            _check_entry(kind, index, entry)
    for kind, key in (("failure", "test"), ("unwarned", "at"), ("message", "pattern")):
        seen = [entry[key] for entry in data.get(kind, [])]
        twice = sorted({value for value in seen if seen.count(value) > 1})
        if twice:
            raise ValueError(f"[[{kind}]]: {key} given twice: {twice}")
    return Notes(
        failures=tuple(FailureNote(**entry) for entry in data.get("failure", [])),
        unwarned={entry["at"]: entry["reason"] for entry in data.get("unwarned", [])},
        messages=tuple(MessageRule(**entry) for entry in data.get("message", [])),
    )


@functools.cache
def load_notes(path: Path = NOTES_FILE) -> Notes:
    """The notes in `path` (by default the harness's `notes.toml`)."""
    try:
        return parse_notes(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
