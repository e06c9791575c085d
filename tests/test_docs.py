"""The API reference (`docs/api/*.md`) has an entry for every public name, and no other.

A `::: odeckpt.X` line is an mkdocstrings entry, rendered from `X`'s docstring by
`mkdocs build --strict` (run by `.ci/run`), which fails on an entry that does not resolve.
"""

import ast
import pathlib
import re

import odeckpt.schedules
import odeckpt.testing

ROOT = pathlib.Path(__file__).parents[1]
API = ROOT / "docs" / "api"


def _top_level_exports() -> set[str]:
    """The names `odeckpt/__init__.py` re-exports (`from .x import Y as Y`), less modules."""
    tree = ast.parse((ROOT / "odeckpt" / "__init__.py").read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None:
            names.update(alias.asname for alias in node.names if alias.asname == alias.name)
    return names


def public_names() -> set[str]:
    names = {f"odeckpt.{name}" for name in _top_level_exports()}
    names |= {f"odeckpt.schedules.{name}" for name in odeckpt.schedules.__all__}
    names |= {f"odeckpt.testing.{name}" for name in odeckpt.testing.__all__}
    return names


def documented_names() -> list[str]:
    return [
        match.group(1)
        for page in sorted(API.glob("*.md"))
        for match in re.finditer(r"^::: (\S+)\s*$", page.read_text(encoding="utf-8"), re.M)
    ]


def test_public_names_are_found():
    names = public_names()
    assert {"odeckpt.diffeqsolve", "odeckpt.schedules.offline_plan"} <= names
    assert "odeckpt.testing.check_grads" in names
    assert "odeckpt.schedules" not in names


def test_every_public_name_has_an_api_entry():
    missing = sorted(public_names() - set(documented_names()))
    assert not missing, f"add a `::: name` entry to a page of docs/api/ for: {missing}"


def test_api_entries_are_public_names_each_once():
    documented = documented_names()
    assert sorted(set(documented) - public_names()) == []
    assert len(documented) == len(set(documented))
