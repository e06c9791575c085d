"""The cache of compiled eager solves: least recently used first out, its size set by
`compiled_cache_size` or `ODECKPT_COMPILED_CACHE_SIZE`."""

import collections
import os
import threading
from collections.abc import Callable

import numpy as np

DEFAULT_SIZE = 64
_ENVIRONMENT = "ODECKPT_COMPILED_CACHE_SIZE"


class Entry:
    """One cached program: the key's parts, the traced function, the jitted one, for a
    reverse-mode call its forward and backward programs (built on first use), and the
    static part of its output (recorded when it is traced)."""

    __slots__ = ("parts", "program", "jitted", "forward", "backward", "static_out")

    def __init__(self, parts: tuple):
        self.parts = parts  # the key's parts: they decode the inputs, and hold its objects
        self.program: Callable | None = None  # the traced function (`calls._program`)
        self.jitted: Callable | None = None
        self.forward: Callable | None = None
        self.backward: Callable | None = None
        self.static_out: tuple = ()


class _Cache:
    """Compiled programs by key, least recently used first out."""

    def __init__(self, size: int):
        self.size = size
        self.entries: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
                self.hits += 1
            return entry

    def put(self, key, entry):
        with self.lock:
            self.misses += 1
            if self.size <= 0:
                return
            self.entries[key] = entry
            self.entries.move_to_end(key)
            while len(self.entries) > self.size:
                _ = self.entries.popitem(last=False)

    def resize(self, size: int):
        with self.lock:
            self.size = size
            while len(self.entries) > max(size, 0):
                _ = self.entries.popitem(last=False)


def _initial_size() -> int:
    value = os.environ.get(_ENVIRONMENT)
    if value is None:
        return DEFAULT_SIZE
    try:
        size = int(value)
    except ValueError:
        raise ValueError(
            f"{_ENVIRONMENT} must be a non-negative integer (programs kept); got {value!r}."
        ) from None
    if size < 0:
        raise ValueError(f"{_ENVIRONMENT} must be a non-negative integer; got {size}.")
    return size


CACHE = _Cache(_initial_size())


def compiled_cache_size(size: int | None = None) -> int:
    """The number of compiled solves kept for eager calls; with `size`, set it first.

    Each distinct eager solve (a new vector field, option, shape or dtype) compiles a
    program, kept in a least-recently-used cache of this many entries (default 64, or
    the environment variable `ODECKPT_COMPILED_CACHE_SIZE`). A program holds its
    machine code (on CPU about three memory maps per XLA kernel) and, once
    differentiated, its forward and backward programs. `0` keeps none: every eager
    call compiles afresh. Shrinking the cache drops the least recently used programs at once.

    Returns:
        The size in force (after setting it).
    """
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise ValueError(f"`compiled_cache_size(size)` takes an integer >= 0; got {size!r}.")
        CACHE.resize(int(size))
    return CACHE.size


def clear_compiled_cache() -> None:
    """Drop every compiled eager solve (`compiled_cache_size` bounds them anyway)."""
    with CACHE.lock:
        CACHE.entries.clear()


def compiled_cache_info() -> dict:
    """`{"size", "entries", "hits", "misses"}` of the eager-call cache."""
    with CACHE.lock:
        return dict(
            size=CACHE.size, entries=len(CACHE.entries), hits=CACHE.hits, misses=CACHE.misses
        )
