"""How much of diffrax's own tests and documentation examples run on odeckpt.

Two commands, run from the repository's root with a work tree of diffrax's repository
at v0.7.2 (`PATH`):

    python -m tools.compat.suite --diffrax PATH --warning-check   # writes COMPAT.md
    python -m tools.compat.examples --diffrax PATH                # writes EXAMPLES.md

Both put odeckpt behind a generated rename-only `diffrax` package. One job per module:

- `scope.py`: which of diffrax's tests are in ODE scope; `rename.py`: the generated
  package; `plugin.py`: the pytest plugin inside each test process; `runner.py`: the
  staged copy and the pytest processes; `outcomes.py`: each test's outcome and the
  classification of failures; `notes.py` loads and checks `notes.toml`, the notes
  written by hand on failures; `markdown.py`, `report.py`, `failures.py`: COMPAT.md;
  `suite.py`: the command.
- `example_specs.py`: the examples, what is compared and within which tolerance;
  `example_child.py`: one run of an example; `example_compare.py`: the comparison;
  `example_report.py`: EXAMPLES.md; `examples.py`: the command.

Apart from `plugin.py` (pytest) and the examples' modules (numpy), the modules import
only the standard library at the top: a test process imports the plugin from a copy of
this folder, and `example_child.py` runs as a script of its own.
"""
