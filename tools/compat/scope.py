"""Which of diffrax's tests are in ODE scope, and which diffrax names a test uses.

Standard library only: the pytest plugin imports this module inside each test process.
"""

import ast
import re
from pathlib import Path

# diffrax name -> odeckpt name, where the two differ only in name.
RENAMES = {"RecursiveCheckpointAdjoint": "CheckpointAdjoint"}

# diffrax's public names for SDEs and Brownian paths: bound to a placeholder class in the
# rename module (nothing is an instance of it). `ControlTerm` and
# `WeaklyDiagonalControlTerm` are odeckpt's: a controlled term on a deterministic path is
# in scope, one driven by a Brownian path is out through the path's name.
OUT_OF_SCOPE_NAMES = (
    "ALIGN AbstractBrownianIncrement AbstractBrownianPath AbstractFosterLangevinSRK "
    "AbstractItoSolver AbstractSRK AbstractSpaceTimeLevyArea AbstractSpaceTimeTimeLevyArea "
    "AbstractStratonovichSolver BrownianIncrement EulerHeun GeneralShARK "
    "ItoMilstein QUICSORT SEA SPaRK SRA1 ShARK ShOULD SlowRK SpaceTimeLevyArea "
    "SpaceTimeTimeLevyArea StochasticButcherTableau StratonovichMilstein "
    "UnderdampedLangevinDiffusionTerm UnderdampedLangevinDriftTerm UnsafeBrownianPath "
    "VirtualBrownianTree"
).split()

# Whole files out of scope, and why.
OUT_OF_SCOPE_FILES = {
    "test_brownian.py": "SDE: Brownian paths",
    "test_sde1.py": "SDE solvers",
    "test_sde2.py": "SDE solvers",
    "test_underdamped_langevin.py": "SDE: underdamped Langevin",
    "test_typing.py": "diffrax internals (`diffrax._typing`, `diffrax._custom_types`)",
    "test_misc.py": "diffrax internals (`diffrax._misc`)",
}
# A test whose name or parameter ids say it is about SDEs.
OUT_OF_SCOPE_ID = re.compile(r"sde|brownian|levy|langevin|milstein", re.I)


def scope_reason(nodeid: str, source: str, needs: set[str], internals: set[str]) -> str | None:
    """Why a test is out of ODE scope, or None when it is in scope."""
    file_name = Path(nodeid.split("::")[0]).name
    if file_name in OUT_OF_SCOPE_FILES:
        return OUT_OF_SCOPE_FILES[file_name]
    if OUT_OF_SCOPE_ID.search(nodeid.split("::", 1)[-1]):
        return "SDE (test name or parameters)"
    if re.search(r"\bdiffrax\._", source) or internals:
        return "diffrax internals (`diffrax._...` in the test)"
    if needs & set(OUT_OF_SCOPE_NAMES):
        return "SDE (uses " + ", ".join(sorted(needs & set(OUT_OF_SCOPE_NAMES))) + ")"
    return None


def names_in(text: str, bare: set[str], public: set[str]) -> set[str]:
    """The public diffrax names `text` mentions: as `diffrax.X` / `dfx.X`, or bare where
    the name is in `bare` (imported with `from diffrax import X`)."""
    dotted = set(re.findall(r"\b(?:diffrax|dfx)\.(\w+)", text))
    words = set(re.findall(r"\b[A-Za-z_]\w*\b", text)) & bare
    return (dotted | words) & public


def import_time_names(path: Path, public: set[str]) -> set[str]:
    """diffrax names a test file (and `helpers.py`, if it imports it) uses at import."""
    source = path.read_text()
    tree = ast.parse(source)
    bare: set[str] = set()
    chunks: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "diffrax":
            bare.update(alias.asname or alias.name for alias in node.names)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            parts = [*node.decorator_list, node.args, node.returns]
            chunks += [ast.get_source_segment(source, p) or "" for p in parts if p is not None]
        else:
            chunks.append(ast.get_source_segment(source, node) or "")
    names = names_in("\n".join(chunks), bare, public)
    if "from .helpers import" in source and path.name != "helpers.py":
        names |= import_time_names(path.parent / "helpers.py", public)
    return names
