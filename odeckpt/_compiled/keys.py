"""A call's key and dynamic arrays: what a compiled program depends on statically, and
the arrays it takes as inputs (`_compiled`'s docstring says which are which)."""

import functools as ft
import types

import jax
import jax.core
import numpy as np

# Functions of these packages are keyed by identity, not opened: their globals are
# libraries, not a user's values.
_LIBRARIES = frozenset(
    "jax jaxlib numpy scipy equinox lineax optimistix diffrax odeckpt optax "
    "functools builtins math operator".split()
)
_MAX_DEPTH = 4  # helper functions opened below a vector field


# Each part of a key has `key`, a plain tuple (compared and hashed by Python's own
# tuple code, so a lookup costs little), and `decode`, which rebuilds the value it
# stands for when the program is traced. A part compared by identity keeps its object,
# so the identity is not reused while the cache holds the part.


class _Slot:
    """A dynamic array: its shape, dtype and weak type."""

    __slots__ = ("key",)

    def __init__(self, aval):
        self.key = ("array", aval.shape, aval.dtype, aval.weak_type)

    def decode(self, dynamic):
        return next(dynamic)


class _Value:
    """A concrete configuration array, compared by value. It stands for itself when
    the program is traced (a NumPy array is copied first)."""

    __slots__ = ("array", "key")

    def __init__(self, x):
        host = np.asarray(x)
        self.array = np.array(host) if isinstance(x, np.ndarray | np.generic) else x
        weak = bool(jax.typeof(x).weak_type)
        self.key = ("value", type(x), host.dtype.str, host.shape, weak, host.tobytes())

    def decode(self, dynamic):
        return self.array


class _Scalar:
    """A Python number, compared by type and exact value (NaN equals NaN; 0.0 and
    -0.0 differ)."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        plain = value == value and value != 0  # (NaN and signed zeros by their text)
        self.key = ("number", type(value), value if plain else repr(value))

    def decode(self, dynamic):
        return self.value


class _Same:
    """A leaf compared by identity (unhashable, or a mutable object)."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        self.key = ("same", id(value))

    def decode(self, dynamic):
        return self.value


class _Equal:
    """A hashable leaf compared by equality (a string, a dtype, an enum, a static
    object)."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        self.key = ("equal", type(value), value)

    def decode(self, dynamic):
        return self.value


class _Tree:
    """A PyTree: its structure and its leaves' parts (or a marker structure and the
    parts of a bound method or a `functools.partial`)."""

    __slots__ = ("treedef", "leaves", "key")

    def __init__(self, treedef, leaves: tuple):
        self.treedef, self.leaves = treedef, leaves
        self.key = ("tree", treedef, tuple([leaf.key for leaf in leaves]))

    def decode(self, dynamic):
        if self.treedef == "method":
            func, owner = (leaf.decode(dynamic) for leaf in self.leaves)
            return types.MethodType(func, owner)
        if self.treedef == "partial":
            func = self.leaves[0].decode(dynamic)
            args, keywords = self.leaves[1].decode(dynamic)
            return ft.partial(func, *args, **keywords)
        return jax.tree.unflatten(self.treedef, [leaf.decode(dynamic) for leaf in self.leaves])


_EMPTY = object()  # an empty closure cell


class _Function:
    """A plain Python function: its code, and the parts of its defaults, of its
    closure cells' contents and of the globals its code names. Decoded, it is the same
    code over the decoded values (so the arrays among them are the program's inputs)."""

    __slots__ = ("function", "parts", "key")

    def __init__(self, function, parts: tuple):
        self.function, self.parts = function, parts
        defaults, kwdefaults, cells, names = parts
        self.key = (
            "function",
            function.__code__,
            id(function.__globals__),
            defaults.key,
            kwdefaults.key,
            tuple([cell.key for cell in cells]),
            tuple([(name, value.key) for name, value in names]),
        )

    def decode(self, dynamic):
        f = self.function
        defaults, kwdefaults, cells, names = self.parts
        defaults, kwdefaults = defaults.decode(dynamic), kwdefaults.decode(dynamic)
        cells = tuple(cell.decode(dynamic) for cell in cells)
        namespace = dict(f.__globals__)
        namespace.update((name, value.decode(dynamic)) for name, value in names)
        closure = None
        if f.__closure__ is not None:
            closure = tuple(
                types.CellType() if value is _EMPTY else types.CellType(value) for value in cells
            )
        g = types.FunctionType(f.__code__, namespace, f.__name__, defaults, closure)
        g.__kwdefaults__ = kwdefaults
        g.__dict__.update(f.__dict__)
        g.__qualname__, g.__module__, g.__doc__ = f.__qualname__, f.__module__, f.__doc__
        return g


@ft.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """The names `code` (and the code nested in it: lambdas, comprehensions) may read
    as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(_global_names(const))
    return tuple(sorted(names))


def _opens(f) -> bool:
    module = f.__module__ or ""
    return module.partition(".")[0] not in _LIBRARIES


_SCALARS = frozenset((bool, int, float, complex))
_ARRAYS = (jax.Array, np.ndarray, np.generic)
# What a function names that stands for itself: modules, classes, built-in functions.
_ITSELF = (types.ModuleType, type, types.BuiltinFunctionType)


class Encoder:
    """Builds a key, collecting the dynamic arrays in order."""

    def __init__(self):
        self.dynamic: list = []
        self.path: set[int] = set()  # functions being opened (for cycles)

    def tree(self, tree, by_value: bool, depth: int = 0) -> _Tree:
        leaves, treedef = jax.tree.flatten(tree)
        return _Tree(treedef, tuple([self.leaf(x, by_value, depth) for x in leaves]))

    def value(self, value, by_value: bool, depth: int):
        """One value a function reads (a default, a closure cell, a global): a PyTree,
        except what stands for itself: a module, a class, a built-in function, and a
        mutable container (list, dict) without arrays (a callback may append to it)."""
        if isinstance(value, _ITSELF) or value is _EMPTY:
            return _Same(value)
        if isinstance(value, list | dict) and not any(
            isinstance(x, _ARRAYS) for x in jax.tree.leaves(value)
        ):
            return _Same(value)
        return self.tree(value, by_value, depth)

    def leaf(self, x, by_value: bool, depth: int):
        kind = type(x)
        if kind in _SCALARS:
            return _number(kind, x) if x == x and x != 0 else _Scalar(x)
        if isinstance(x, _ARRAYS):
            if by_value and not isinstance(x, jax.core.Tracer):
                return _Value(x)
            self.dynamic.append(x)
            aval = jax.typeof(x)
            return _Slot(aval)
        if kind is types.FunctionType and depth < _MAX_DEPTH and _opens(x):
            if id(x) not in self.path:
                return self.function(x, by_value, depth)
        if kind is types.MethodType:
            return _Tree("method", (self.leaf(x.__func__, by_value, depth), _Same(x.__self__)))
        if kind is ft.partial:
            parts = (x.args, x.keywords)
            return _Tree(
                "partial",
                (self.leaf(x.func, by_value, depth), self.tree(parts, by_value, depth)),
            )
        if isinstance(x, _SCALARS_ABC):  # a subclass of a Python number
            return _Scalar(x)
        try:
            _ = hash(x)
        except TypeError:
            return _Same(x)
        if isinstance(x, (types.FunctionType, *_ITSELF)) or kind.__eq__ is object.__eq__:
            return _Same(x)
        return _Equal(x)

    def function(self, f: types.FunctionType, by_value: bool, depth: int) -> "_Function":
        self.path.add(id(f))
        depth += 1
        try:
            namespace = f.__globals__
            names = tuple(
                (n, self.value(namespace[n], by_value, depth))
                for n in _global_names(f.__code__)
                if n in namespace
            )
            cells = tuple(
                self.value(_contents(cell), by_value, depth) for cell in f.__closure__ or ()
            )
            defaults, kw = (
                _NONE if values is None else self.tree(values, by_value, depth)
                for values in (f.__defaults__, f.__kwdefaults__)
            )
        finally:
            self.path.discard(id(f))
        return _Function(f, (defaults, kw, cells, names))


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY


_SCALARS_ABC = bool | int | float | complex


@ft.lru_cache(maxsize=1024)
def _number(kind: type, value) -> _Scalar:
    """The part of a Python number (not NaN, not zero), shared between calls."""
    return _Scalar(value)


_NONE = _Same(None)
