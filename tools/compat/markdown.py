"""Markdown pieces of the reports, and the reference run's data kept inside COMPAT.md.

The reference run (the in-scope tests with diffrax itself, hours long) is stored as a
JSON block in an HTML comment at the end of the report, so that a later run without
`--reference` reuses it, and so that an interrupted reference run keeps each file's
figures as it ends.
"""

import json
import re
from pathlib import Path

_DATA = re.compile(r"<!-- reference-data\n(.*?)\n-->", re.S)


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


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
