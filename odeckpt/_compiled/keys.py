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


class _Slot:
    """A dynamic array in a key: its shape, dtype and weak type."""

    __slots__ = ("aval", "_hash")

    def __init__(self, aval):
        self.aval = aval
        self._hash = hash(aval)

    def __eq__(self, other):
        return type(other) is _Slot and self.aval == other.aval

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        return next(dynamic)


class _Value:
    """A concrete configuration array in a key, compared by value. It stands for
    itself when the program is traced (a NumPy array is copied first)."""

    __slots__ = ("array", "key", "_hash")

    def __init__(self, x):
        host = np.asarray(x)
        self.array = np.array(host) if isinstance(x, np.ndarray | np.generic) else x
        weak = bool(jax.typeof(x).weak_type)
        self.key = (type(x), host.dtype.str, host.shape, weak, host.tobytes())
        self._hash = hash(self.key)

    def __eq__(self, other):
        return type(other) is _Value and self.key == other.key

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        return self.array


class _Scalar:
    """A Python scalar, compared by type and exact value (NaN equals NaN; 0.0 and
    -0.0 differ)."""

    __slots__ = ("value", "key", "_hash")

    def __init__(self, value):
        self.value = value
        plain = value == value and value != 0  # (NaN and signed zeros by their text)
        self.key = (type(value), value if plain else repr(value))
        self._hash = hash(self.key)

    def __eq__(self, other):
        return type(other) is _Scalar and self.key == other.key

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        return self.value


class _Same:
    """A leaf compared by identity (unhashable, or a mutable object): it stands for
    itself. The key holds it, so its identity is not reused while the key lives."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is _Same and self.value is other.value

    def __hash__(self):
        return id(self.value)

    def decode(self, dynamic):
        return self.value


class _Equal:
    """A hashable leaf compared by equality (a string, a dtype, an enum, a static
    object): it stands for itself."""

    __slots__ = ("value", "_hash")

    def __init__(self, value):
        self.value = value
        self._hash = hash((type(value), value))

    def __eq__(self, other):
        return (
            type(other) is _Equal
            and type(self.value) is type(other.value)
            and (self.value is other.value or self.value == other.value)
        )

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        return self.value


class _Tree:
    """A PyTree in a key: its structure and its leaves' keys."""

    __slots__ = ("treedef", "leaves", "_hash")

    def __init__(self, treedef, leaves: tuple):
        self.treedef, self.leaves = treedef, leaves
        self._hash = hash((treedef, leaves))

    def __eq__(self, other):
        return (
            type(other) is _Tree and self.treedef == other.treedef and self.leaves == other.leaves
        )

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        return jax.tree.unflatten(self.treedef, [leaf.decode(dynamic) for leaf in self.leaves])


_EMPTY = object()  # an empty closure cell


class _Function:
    """A plain Python function in a key: its code, and the keys of its defaults, of
    its closure cells' contents and of the globals its code names. Decoded, it is the
    same code over the decoded values (so the arrays among them are the program's
    inputs)."""

    __slots__ = ("function", "parts", "_hash")

    def __init__(self, function, parts: tuple):
        self.function, self.parts = function, parts
        self._hash = hash((function.__code__, parts))

    def __eq__(self, other):
        return (
            type(other) is _Function
            and self.function.__code__ is other.function.__code__
            and self.function.__globals__ is other.function.__globals__
            and self.parts == other.parts
        )

    def __hash__(self):
        return self._hash

    def decode(self, dynamic):
        f = self.function
        defaults, kwdefaults, cells, names = (part.decode(dynamic) for part in self.parts)
        namespace = dict(f.__globals__)
        namespace.update(names)
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


class Encoder:
    """Builds a key, collecting the dynamic arrays in order."""

    def __init__(self):
        self.dynamic: list = []
        self.path: set[int] = set()  # functions being opened (for cycles)

    def tree(self, tree, by_value: bool, depth: int = 0) -> _Tree:
        leaves, treedef = jax.tree.flatten(tree)
        return _Tree(treedef, tuple(self.leaf(x, by_value, depth) for x in leaves))

    def values(self, values, by_value: bool, depth: int) -> _Tree:
        """A tuple or dict of the values a function reads: each a PyTree, except a
        mutable container (list, dict) without arrays, which stands for itself (a
        callback may append to it)."""
        if values is None:
            return self.tree(None, by_value, depth)
        items = values.items() if isinstance(values, dict) else enumerate(values)
        kept = {k: _Kept(v) if _mutable_without_arrays(v) else v for k, v in items}
        if not isinstance(values, dict):
            kept = tuple(kept[i] for i in range(len(values)))
        return self.tree(kept, by_value, depth)

    def leaf(self, x, by_value: bool, depth: int):
        if type(x) is _Kept:
            return _Same(x.value)
        if isinstance(x, jax.Array | np.ndarray | np.generic):
            if by_value and not isinstance(x, jax.core.Tracer):
                return _Value(x)
            self.dynamic.append(x)
            aval = jax.typeof(x)
            return _Slot((aval.shape, aval.dtype, aval.weak_type))
        if isinstance(x, bool | int | float | complex):
            return _Scalar(x)
        if isinstance(x, types.FunctionType) and depth < _MAX_DEPTH and _opens(x):
            if id(x) not in self.path:
                return self.function(x, by_value, depth)
        if isinstance(x, types.MethodType):
            return _Tree(_METHOD, (self.leaf(x.__func__, by_value, depth), _Same(x.__self__)))
        if isinstance(x, ft.partial):
            parts = (x.func, x.args, x.keywords)
            return _Tree(
                _PARTIAL,
                (self.leaf(x.func, by_value, depth),) + (self.tree(parts[1:], by_value, depth),),
            )
        try:
            _ = hash(x)
        except TypeError:
            return _Same(x)
        if (
            isinstance(x, types.FunctionType | types.ModuleType | type)
            or type(x).__eq__ is object.__eq__
        ):
            return _Same(x)
        return _Equal(x)

    def function(self, f: types.FunctionType, by_value: bool, depth: int) -> _Function:
        self.path.add(id(f))
        try:
            namespace = f.__globals__
            names = {n: namespace[n] for n in _global_names(f.__code__) if n in namespace}
            cells = []
            for cell in f.__closure__ or ():
                try:
                    cells.append(cell.cell_contents)
                except ValueError:
                    cells.append(_EMPTY)
            parts = (
                self.values(f.__defaults__, by_value, depth + 1),
                self.values(f.__kwdefaults__, by_value, depth + 1),
                self.values(tuple(cells), by_value, depth + 1),
                self.values(names, by_value, depth + 1),
            )
        finally:
            self.path.discard(id(f))
        return _Function(f, parts)


class _Kept:
    """A value that stands for itself in a key (wrapped so that it is a PyTree leaf)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _mutable_without_arrays(value) -> bool:
    if not isinstance(value, list | dict):
        return False
    leaves = jax.tree.leaves(value)
    return not any(isinstance(x, jax.Array | np.ndarray | np.generic) for x in leaves)


class _Rebuilt:
    """Decodes `(func, (args, keywords))` and `(method, self)` pairs."""

    def __init__(self, kind: str):
        self.kind = kind

    def __eq__(self, other):
        return type(other) is _Rebuilt and self.kind == other.kind

    def __hash__(self):
        return hash(self.kind)


_METHOD, _PARTIAL = _Rebuilt("method"), _Rebuilt("partial")


def _decode_tree(self: _Tree, dynamic):
    if self.treedef is _METHOD:
        func, owner = (leaf.decode(dynamic) for leaf in self.leaves)
        return types.MethodType(func, owner)
    if self.treedef is _PARTIAL:
        func = self.leaves[0].decode(dynamic)
        args, keywords = self.leaves[1].decode(dynamic)
        return ft.partial(func, *args, **keywords)
    return jax.tree.unflatten(self.treedef, [leaf.decode(dynamic) for leaf in self.leaves])


_Tree.decode = _decode_tree  # (the pairs above are `_Tree`s with a marker structure)
