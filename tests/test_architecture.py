"""The package's layout as a contract (see `docs/architecture.md`).

- Layers: a module imports only from its own unit or from lower layers.
- Interfaces: across units, imports go through a subpackage's `__init__` and never name
  a private (`_`-prefixed) object.
- Abstract bases declare what subclasses provide: they cannot be instantiated, and a
  subclass that leaves an abstract method out cannot be either.
- The core asks objects, never their concrete type: no `isinstance` against a concrete
  odeckpt class, no `hasattr`/`getattr` probing for an attribute by name.
- Modules stay small, coefficient tables excepted.
"""

import ast
import inspect
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

PACKAGE = pathlib.Path(oc.__file__).parent

LAYERS = (
    ("schedules", "_core", "_compiled"),
    ("_terms", "_saveat", "_progress", "_interpolation"),
    ("_control",),
    ("_solvers",),
    ("_controllers",),
    ("_event",),
    ("_checkpointing",),
    ("_integrator",),
    ("_saved_rows",),
    ("_solution",),
    ("_adjoints",),
    ("_validate",),
    ("_solve", "_hvp"),
    ("__init__",),
    ("testing",),
)
"""Units (a top-level module or subpackage of `odeckpt`), lowest layer first."""

LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}

TABLES = {
    "_solvers/explicit/dopri8.py",
    "_solvers/imex/ark_tableaux.py",
    "_solvers/stiff/esdirk_tableaux.py",
    "_solvers/stiff/radau_tableaux.py",
    "_solvers/stiff/rosenbrock_tableaux.py",
}
"""Modules that are mostly coefficient tables, allowed past `MAX_LINES`: a method
family's tableaux stay in one module however many methods it has."""

SOLVERS_TOP = {"__init__", "base", "dense", "diffrax_protocol", "half"}
"""The modules at the top of `_solvers/`: the protocol, and what every kind of solver
uses (dense output) or wraps (`HalfSolver`)."""

SOLVER_FOLDERS = {
    "runge_kutta": "diffrax's Runge–Kutta classes, tableaux, order conditions",
    "explicit": "explicit methods, one module each",
    "multistep": "methods whose state carries past points",
    "stiff": "Rosenbrock, ESDIRK, Radau and implicit Euler, each beside its tableaux",
    "imex": "the IMEX additive Runge–Kutta methods",
    "reversible": "algebraically reversible solvers",
    "root_finder": "Newton iterations and the implicit solvers' settings",
    "linear": "linear algebra: dense now, Krylov solvers and preconditioners next",
}
"""The concepts `_solvers/` is sorted by: a module's folder says what it is."""

MAX_LINES = 400


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: pathlib.Path) -> str:
    parts = ["odeckpt", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(dotted: str) -> str:
    parts = dotted.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: pathlib.Path):
    """`(line, target module, imported names)` of each import of an odeckpt module."""
    here = _dotted(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "odeckpt":
                    yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "odeckpt":
                continue
            names = tuple(a.name for a in node.names)
            if target == "odeckpt" and all(n in LAYER for n in names):
                for name in names:  # `from odeckpt import schedules`: the unit itself
                    yield node.lineno, f"odeckpt.{name}", ()
            else:
                yield node.lineno, target, names


def _cross_unit_imports():
    for path in _modules():
        here = _unit(_dotted(path))
        for line, target, names in _imports(path):
            if _unit(target) != here:
                yield f"{path.relative_to(PACKAGE)}:{line}", here, target, names


def test_every_unit_has_a_layer():
    units = {_unit(_dotted(p)) for p in _modules()}
    assert units == set(LAYER), f"add new units to LAYERS: {sorted(units ^ set(LAYER))}"


def test_imports_point_down_the_layers():
    upward = [
        f"{where}: {here} (layer {LAYER[here]}) imports {target} (layer {LAYER[_unit(target)]})"
        for where, here, target, _ in _cross_unit_imports()
        if LAYER[_unit(target)] >= LAYER[here]
    ]
    assert not upward, "\n".join(upward)


def test_imports_across_units_go_through_interfaces():
    """`from odeckpt._solvers import X`, never `from odeckpt._solvers.base import X`, and
    never a private name. (Imports of a whole module, `from odeckpt import _solve`,
    would bypass the interface too.)"""
    bad = []
    for where, _, target, names in _cross_unit_imports():
        if target.count(".") > 1:
            bad.append(f"{where}: imports from {target}, inside its unit's interface")
        if target == "odeckpt" and any(n.startswith("_") for n in names):
            bad.append(f"{where}: imports modules {names} from odeckpt itself")
        private = [n for n in names if n.startswith("_")]
        if private and target != "odeckpt":
            bad.append(f"{where}: imports private {private} from {target}")
    assert not bad, "\n".join(bad)


def test_modules_stay_small():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
        and str(p.relative_to(PACKAGE)) not in TABLES
    }
    assert not long, f"split these modules along their seams: {long}"


def test_coefficient_tables_exist():
    missing = [name for name in TABLES if not (PACKAGE / name).is_file()]
    assert not missing, f"TABLES names modules that do not exist: {missing}"


def test_solvers_are_sorted_by_concept():
    """`_solvers/` holds the protocol at its top and one folder per concept, each named
    in `docs/architecture.md` (its layer table and where to add a solver)."""
    solvers = PACKAGE / "_solvers"
    top = {p.stem for p in solvers.glob("*.py")}
    folders = {p.name for p in solvers.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert top == SOLVERS_TOP, f"place these modules in a concept's folder: {top - SOLVERS_TOP}"
    assert folders == set(SOLVER_FOLDERS), f"name the new folders: {folders ^ set(SOLVER_FOLDERS)}"
    assert all((solvers / folder / "__init__.py").is_file() for folder in folders)
    architecture = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    undocumented = [f for f in sorted(folders) if f"`{f}/`" not in architecture]
    assert not undocumented, f"docs/architecture.md does not place {undocumented}"


def _abstract_vars(cls) -> bool:
    """Whether `cls` declares an `eqx.AbstractVar` or `eqx.AbstractClassVar`."""
    return bool(getattr(cls, "__abstractvars__", ()) or getattr(cls, "__abstractclassvars__", ()))


def _abstract_bases():
    import odeckpt._adjoints as adjoints
    import odeckpt._controllers as controllers
    import odeckpt._solvers as solvers

    found = {}
    for namespace in (oc, adjoints, controllers, solvers):
        for name, obj in vars(namespace).items():
            if inspect.isclass(obj) and name.startswith("Abstract"):
                found[name] = obj
    return sorted(found.items())


@pytest.mark.parametrize("name, cls", _abstract_bases(), ids=lambda x: getattr(x, "__name__", x))
def test_abstract_bases_declare_what_subclasses_provide(name, cls):
    declared = inspect.isabstract(cls) or _abstract_vars(cls)
    assert declared, f"{name} declares no abstract method or AbstractVar"

    class Incomplete(cls):  # implements nothing
        pass

    with pytest.raises(TypeError):
        Incomplete()


def test_no_not_implemented_stubs():
    stubs = [
        f"{p.relative_to(PACKAGE)}:{node.lineno}"
        for p in _modules()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Raise)
        and "NotImplementedError" in ast.unparse(node.exc or ast.Constant(None))
    ]
    assert not stubs, f"declare these with abc.abstractmethod: {stubs}"


def _concrete_classes() -> set[str]:
    names = set()
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.lstrip("_").startswith("Abstract"):
                names.add(node.name)
    return names


def test_no_type_switches_on_concrete_classes():
    """The core asks an object what it can do (`controller.replayable`,
    `controller.tolerances`), never which class it is: a user's own controller, solver
    or adjoint then gets the same treatment as the built-in ones."""
    concrete = _concrete_classes()
    bad = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            where = f"{p.relative_to(PACKAGE)}:{node.lineno}"
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                named |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if named & concrete:
                    bad.append(f"{where}: {ast.unparse(node)}")
            if node.func.id in ("hasattr", "getattr") and len(node.args) >= 2:
                attr = node.args[1]
                if isinstance(attr, ast.Constant) and attr.value not in ("shape", "dtype"):
                    bad.append(f"{where}: {ast.unparse(node)}")
    assert not bad, "\n".join(bad)


def test_concrete_classes_are_final():
    """Every concrete Module of the public API has no subclass in the package."""
    classes = [c for c in vars(oc).values() if inspect.isclass(c) and issubclass(c, eqx.Module)]
    for cls in classes:
        if inspect.isabstract(cls) or _abstract_vars(cls):
            continue
        subclasses = [s.__name__ for s in cls.__subclasses__() if s.__module__[:7] == "odeckpt"]
        assert not subclasses, f"{cls.__name__} is concrete and subclassed by {subclasses}"


class _GeometricSteps(oc.AbstractLoopController):
    """A controller written outside the package: steps growing by `factor` from `dt0`."""

    factor: float = 1.5

    def first_step(self, solver, term, t0, y0, dt0, args):
        return dt0

    def decide(self, t0, dt, y0, y1, y_error, error_order, state):
        result = jnp.asarray(oc.RESULTS.successful)
        return oc.Decision(jnp.asarray(True), dt * self.factor, state, result)


def _geometric_times(t0, t1, dt0, factor):
    times, dt = [t0], dt0
    while abs(times[-1] - t0) < abs(t1 - t0) - 1e-12:
        times.append(times[-1] + dt if abs(times[-1] + dt - t0) < abs(t1 - t0) else t1)
        dt *= factor
    return np.asarray(times)


@pytest.mark.parametrize(
    "t0, t1, adjoint",
    [
        (0.0, 2.0, oc.CheckpointAdjoint(checkpoints=3)),
        pytest.param(0.0, 2.0, oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
        pytest.param(2.0, 0.0, oc.CheckpointAdjoint(checkpoints=3), marks=pytest.mark.slow),
        pytest.param(2.0, 0.0, oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
    ],
)
def test_a_users_controller_needs_no_edit_in_the_core(t0, t1, adjoint):
    """Solves and differentiates (checkpointed and continuous) like `StepTo` on the same
    times, in both directions."""
    dt0 = 0.05 if t1 > t0 else -0.05
    times = _geometric_times(t0, t1, dt0, 1.5)
    ts = np.linspace(t0, t1, 5)[1:-1]

    def loss(k, controller, adjoint, dt0):
        sol = oc.diffeqsolve(
            lambda t, y, k: -k * y + jnp.sin(t),
            oc.Tsit5(),
            t0,
            t1,
            dt0,
            jnp.array([1.0, 2.0]),
            k,
            saveat=oc.SaveAt(ts=ts, t1=True),
            stepsize_controller=controller,
            adjoint=adjoint,
        )
        return jnp.sum(sol.ys**2), sol.stats["num_steps"]

    (value, steps), grad = jax.value_and_grad(loss, has_aux=True)(
        0.7, _GeometricSteps(), adjoint, dt0
    )
    (ref, ref_steps), ref_grad = jax.value_and_grad(loss, has_aux=True)(
        0.7, oc.StepTo(times), adjoint, None
    )
    assert steps == ref_steps == len(times) - 1
    np.testing.assert_allclose(value, ref, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10)


TRACED_TWINS = {"_checkpointing/plan.py"}
"""The traced online schedule mirrors `schedules/` name for name, on purpose: it is
tested against it decision for decision (`tests/test_schedule_jax.py`)."""


def _top_level_names(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def test_one_meaning_per_name():
    """No two modules define a top-level function or class of the same name (two
    `_advance`s that do different things, or the same helper twice)."""
    where: dict[str, list[str]] = {}
    for p in _modules():
        name = str(p.relative_to(PACKAGE))
        if name in TRACED_TWINS:
            continue
        for defined in _top_level_names(p):
            where.setdefault(defined, []).append(name)
    clashes = {name: files for name, files in where.items() if len(files) > 1}
    assert not clashes, clashes


class _Normalised(ast.NodeTransformer):
    """A function with its arguments and local names renamed in order of appearance."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node):
        node.arg, node.annotation = self._rename(node.arg), None
        return node

    def visit_Name(self, node):
        if node.id in self.names or isinstance(node.ctx, ast.Store):
            node.id = self._rename(node.id)
        return node


def _body_shape(fn: ast.FunctionDef) -> tuple[str, int]:
    """The function's arguments and body (docstring dropped) with its own names
    normalised, and the body's size in AST nodes."""
    fn = ast.parse(ast.unparse(fn)).body[0]
    assert isinstance(fn, ast.FunctionDef)
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    size = sum(1 for stmt in body for _ in ast.walk(stmt))
    normalise = _Normalised()
    args = normalise.visit(fn.args)
    body = [normalise.visit(stmt) for stmt in body]
    return ast.dump(args) + "".join(ast.dump(stmt) for stmt in body), size


def test_no_twin_helpers():
    """No function repeats another's code under another name (`_store`/`_put`,
    `_materialize`/`_materialise`): a rule lives in one place."""
    seen: dict[str, list[str]] = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef):
                shape, size = _body_shape(node)
                if size >= 12:  # a few nodes (`return self.x`) repeat harmlessly
                    where = f"{p.relative_to(PACKAGE)}:{node.lineno} {node.name}"
                    seen.setdefault(shape, []).append(where)
    twins = [places for places in seen.values() if len(places) > 1]
    assert not twins, twins


def test_the_pipeline_validates_nothing_itself():
    """Every input check and its message live in `_validate/` (and the records'
    own `__check_init__`): `diffeqsolve`'s module raises nothing."""
    tree = ast.parse((PACKAGE / "_solve.py").read_text())
    raises = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Raise)]
    assert not raises, f"_solve.py raises at lines {raises}; move the check to _validate/"


def test_integrator_flags_are_keyword_only():
    from odeckpt._integrator import Integrator, SaveLayout

    saves = (SaveLayout(num_ts=3, steps=0, saves_y=True),)
    with pytest.raises(TypeError):
        Integrator(oc.Tsit5(), 16, saves, False)  # pyright: ignore
    Integrator(oc.Tsit5(), max_steps=16, saves=saves, save_dense=False)
