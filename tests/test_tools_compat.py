"""The diffrax compatibility harness (`tools/compat`), without running diffrax's tests:
the rename package, the scope rules, the notes data, the classification of failures,
and the reports written from small made-up results."""

import sys
import types

import numpy as np
import pytest

from tools.compat import example_compare, example_report, markdown, notes, rename, scope
from tools.compat.example_specs import EXAMPLES, Example
from tools.compat.outcomes import classify, file_outcomes, odeckpt_outcomes
from tools.compat.report import write_report

# ----------------------------------------------------------------------------------
# The rename package


@pytest.fixture
def fake_odeckpt(monkeypatch):
    """A stand-in `odeckpt` (two names, one of them an out-of-scope diffrax name)."""
    module = types.ModuleType("odeckpt")
    module.__dict__.update(
        CheckpointAdjoint=type("CheckpointAdjoint", (), {}),
        ShARK=type("ShARK", (), {}),
        __all__=["CheckpointAdjoint", "ShARK"],
    )
    monkeypatch.setitem(sys.modules, "odeckpt", module)
    return module


def test_rename_module_binds_names_only(fake_odeckpt):
    source = rename.rename_module_source(("Missing1",), exported=vars(fake_odeckpt))
    namespace: dict = {}
    exec(compile(source, "diffrax/__init__.py", "exec"), namespace)
    assert namespace["RecursiveCheckpointAdjoint"] is fake_odeckpt.CheckpointAdjoint
    assert namespace["CheckpointAdjoint"] is fake_odeckpt.CheckpointAdjoint
    # odeckpt's own class of an out-of-scope name wins over the placeholder.
    assert namespace["ShARK"] is fake_odeckpt.ShARK
    assert namespace["VirtualBrownianTree"] is namespace["OutOfScope"]
    assert issubclass(namespace["Missing1"], namespace["Missing"])
    namespace["Missing1"](1, key=2)  # takes any arguments
    without_probe = rename.rename_module_source(exported=vars(fake_odeckpt))
    assert "Missing" not in without_probe


def test_rename_package_binds_private_imports_of_in_scope_files(tmp_path):
    tests = tmp_path / "test"
    tests.mkdir()
    (tests / "test_a.py").write_text(
        "import diffrax\n"
        "from diffrax._misc import is_tuple_of_ints\n"
        "from diffrax._step_size_controller.clip import _find_idx_with_hint, _x\n"
        "def test_a():\n    from diffrax._inside import not_module_level\n"
    )
    (tests / "test_sde1.py").write_text("from diffrax._sde import out_of_scope\n")
    private = rename.write_rename_package(tmp_path / "rename", tests, exported=())
    assert private == {
        "diffrax._misc": {"is_tuple_of_ints"},
        "diffrax._step_size_controller.clip": {"_find_idx_with_hint", "_x"},
    }
    package = tmp_path / "rename" / "diffrax"
    assert (package / "_misc.py").read_text() == (
        "from diffrax import OutOfScope\n\nis_tuple_of_ints = OutOfScope\n"
    )
    assert (package / "_step_size_controller" / "__init__.py").exists()
    clip = (package / "_step_size_controller" / "clip.py").read_text()
    assert "_find_idx_with_hint = OutOfScope\n_x = OutOfScope\n" in clip
    assert "from odeckpt import *" in (package / "__init__.py").read_text()


# ----------------------------------------------------------------------------------
# Scope


@pytest.mark.parametrize(
    "nodeid, source, needs, expected",
    [
        ("test/test_sde1.py::test_x", "", set(), "SDE solvers"),
        ("test/test_integrate.py::test_x[sde-1]", "", set(), "SDE (test name or parameters)"),
        ("test/test_integrate.py::test_x", "diffrax._misc.f()", set(), "diffrax internals"),
        (
            "test/test_integrate.py::test_x",
            "",
            {"ControlTerm", "VirtualBrownianTree"},
            "SDE (uses Vir",
        ),
        ("test/test_term.py::test_control_term", "", {"ControlTerm", "AbstractPath"}, None),
        ("test/test_integrate.py::test_x[Tsit5]", "diffrax.Tsit5()", {"Tsit5"}, None),
    ],
)
def test_scope_reason(nodeid, source, needs, expected):
    reason = scope.scope_reason(nodeid, source, needs, set())
    assert (reason is None) == (expected is None)
    assert (reason or "").startswith(expected or "")


def test_names_in_reads_dotted_and_imported_names():
    text = "diffrax.Tsit5(); dfx.SaveAt(); Euler; Kvaerno5; diffrax.NotPublic"
    public = {"Tsit5", "SaveAt", "Euler", "Kvaerno5"}
    assert scope.names_in(text, {"Euler"}, public) == {"Tsit5", "SaveAt", "Euler"}


# ----------------------------------------------------------------------------------
# The notes written by hand, and the classification of failures


def test_shipped_notes_load_and_match_their_tests():
    loaded = notes.load_notes()
    assert loaded.failures and loaded.unwarned and loaded.messages
    assert loaded.for_test("test/test_adjoint.py::test_closure_errors") == (
        "behaviour difference",
        loaded.failures[1].note,
    )
    # `[[]` is a literal `[` in the fnmatch pattern.
    assert loaded.for_test("test/test_saveat_solution.py::test_subsaveat[x-adjoint3]")
    assert loaded.for_test("test/test_saveat_solution.py::test_subsaveat[x-adjoint2]") is None


@pytest.mark.parametrize(
    "text, match",
    [
        ('[[failure]]\ntest = "t.py::x"\ncategory = "fine"\nnote = "n"\n', "category 'fine'"),
        ('[[failure]]\ntest = "t.py::x"\ncategory = "timeout"\n', r"keys \['category', 'test'\]"),
        ('[[failure]]\ntest = "t.py"\ncategory = "timeout"\nnote = "n"\n', "not a `file::test`"),
        ('[[unwarned]]\nat = "t.py"\nreason = "r"\n', "not `test_file.py:line`"),
        ('[[message]]\npattern = "("\ncategory = "timeout"\nreason = "r"\n', "pattern '\\('"),
        ('[[note]]\ntest = "x"\n', r"unknown tables \['note'\]"),
        ('[[unwarned]]\nat = "test_a.py:1"\nreason = "r"\n' * 2, "at given twice"),
    ],
)
def test_invalid_notes_are_refused(text, match):
    with pytest.raises(ValueError, match=match):
        notes.parse_notes(text)


NOTES = notes.parse_notes(
    '[[failure]]\ntest = "test/test_a.py::test_noted"\ncategory = "API difference"\n'
    'note = "read by hand"\n'
    '[[unwarned]]\nat = "test_a.py:7"\nreason = "odeckpt does not warn"\n'
    '[[message]]\npattern = "^known"\ncategory = "missing feature"\nreason = "a known cause"\n'
)


MISSING = "module 'diffrax' has no attribute 'Foo'"
KEYWORD = "Tsit5.__init__() got an unexpected keyword argument 'x'"


@pytest.mark.parametrize(
    "exc, msg, expected",
    [
        ("AttributeError", MISSING, ("missing feature", "`diffrax.Foo`")),
        ("TypeError", KEYWORD, ("API difference", "`Tsit5(..., x=...)` not accepted")),
        ("Failed", "DID NOT WARN", ("behaviour difference", "odeckpt does not warn")),
        ("ValueError", "known cause 3", ("missing feature", "a known cause")),
        ("ValueError", "new at step 12", ("behaviour difference", "ValueError: new at step #")),
    ],
)
def test_classify(exc, msg, expected):
    assert classify(exc, msg, "test_a.py:7", None, NOTES) == expected


# ----------------------------------------------------------------------------------
# The reports, from a tiny made-up run


def _events(*tests):
    return [{"kind": "test", "id": i, "outcome": o, "exc": e, "msg": m} for i, o, e, m in tests]


def test_outcomes_apply_notes_and_the_reference():
    result = {"status": 1, "seconds": 3.0}
    result["events"] = _events(
        ("test/test_a.py::test_ok", "passed", "", ""),
        ("test/test_a.py::test_noted", "failed", "ValueError", "x"),
        ("test/test_a.py::test_also_diffrax", "failed", "ValueError", "y"),
    )
    in_scope = [e["id"] for e in result["events"]] + ["test/test_a.py::test_unreached"]
    reference = {"files": {"test_a.py": {"not_passing": {in_scope[2]: "failed: y"}}}}
    got = odeckpt_outcomes({"test_a.py": result}, {"test_a.py": in_scope}, reference, NOTES)
    assert [o["outcome"] for o in got.values()] == ["passed", "failed", "failed", "failed"]
    assert got[in_scope[1]]["reason"] == "read by hand"
    assert got[in_scope[2]]["category"] == "fails with diffrax too"
    assert got[in_scope[3]]["reason"] == "not run (process 1)"
    unrun = file_outcomes(result, in_scope, unrun="not run", notes=NOTES)
    assert unrun[in_scope[3]]["outcome"] == "not run"


def test_report_is_written_and_keeps_the_reference_data(tmp_path):
    ids = ["test/test_a.py::test_ok", "test/test_a.py::test_bad"]
    tests = {i: {"out": None, "needs": ["Tsit5"]} for i in ids}
    tests["test/test_a.py::test_sde"] = {"out": "SDE solvers", "needs": []}
    scope_data = {"tests": tests, "names": {"Tsit5"}}
    outcomes = {
        ids[0]: {"outcome": "passed", "category": "", "reason": ""},
        ids[1]: {"outcome": "failed", "category": "API difference", "reason": "a | b"},
    }
    reference = {"files": {"test_a.py": {"passed": 2, "not_passing": {}, "seconds": 9}}}
    ctx = {
        "argv": ["--jobs 1"],
        "date": "2026-01-01 00:00 UTC",
        "diffrax_version": "0.7.2",
        "commit": "abc1234",
        "jobs": 1,
        "timeout": 600,
        "dropped": [],
        "private": {},
        "versions": ["0.1", "0.2"],
        "n_files": 1,
        "collect_seconds": 1.0,
        "reference_seconds": 9,
        "odeckpt_seconds": 3.0,
        "n_collected": 3,
        "n_scope": 2,
        "file_seconds": {"test_a.py": 3.0},
        "file_commits": {"test_a.py": "abc1234"},
        "missing": {"Foo"},
        "import_names": {"test_a.py": set()},
    }
    out = tmp_path / "COMPAT.md"
    write_report(out, ctx, scope_data, outcomes, reference, probe=None)
    text = out.read_text()
    assert text.startswith("# diffrax's test suite against odeckpt\n")
    assert "`python -m tools.compat.suite --diffrax PATH --jobs 1`" in text
    assert "**1 of 2 (50.0%)**; of those that pass with diffrax: 1 of 2 (50.0%)" in text
    assert "| API difference | a \\| b | 1 |" in text
    assert "- `test_bad`: API difference: a | b" in text
    assert markdown.load_reference(out) == reference
    # A second write replaces the data block instead of adding one.
    markdown.save_reference(out, {"files": {}})
    assert out.read_text().count("<!-- reference-data") == 1
    assert markdown.load_reference(out) == {"files": {}}


def test_example_comparison_and_row():
    example = Example("tiny", "examples/tiny.ipynb", results=((0, "x"),), rtol=1e-3, atol=0.0)
    ref = {"stdout": "loss 1.0 in 2.5 seconds\n", "results": [("x", [np.ones(3)])], "error": None}
    close = {"stdout": "loss 1.0005 in 9 seconds\n", "results": [("x", [np.ones(3)])]}
    far = {"stdout": "loss 1.1 in 9 seconds\n", "results": [("x", [np.ones(3)])]}
    same, detail = example_compare.compare(example, ref, close)
    assert same and detail.startswith("4 values; largest difference 0.5 of the tolerance")
    same, detail = example_compare.compare(example, ref, far)
    assert not same and "printed numbers outside the tolerance" in detail
    ours = {**far, "error": None, "seconds": 3.0}
    outcome = {"diffrax": {**ref, "seconds": 2.0}, "odeckpt": ours}
    cells = example_report.row(example, outcome)
    assert cells[:6] == ["tiny", "yes", "yes", "2", "3", "**no**"]
    assert cells[6].startswith("wrong numbers: ")


def test_example_specs_are_unique_and_shorten_nothing_twice():
    names = [e.name for e in EXAMPLES]
    assert len(set(names)) == len(names)
    for example in EXAMPLES:
        assert all(old != new for old, new in example.shorten)
        assert example.rtol > 0 and example.atol >= 0
