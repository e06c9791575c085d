"""`call`: a solve as one compiled program, from the cache."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.core

from . import transforms
from .cache import CACHE, Entry
from .errors import translating
from .keys import Encoder


def call(fn: Callable, state: tuple, config: tuple, plain: tuple | None = None):
    """`(fn(*state, *config), False)`, compiled: from the cache when a call with the
    same key ran before. `state`'s arrays are the program's inputs; `config`'s concrete
    arrays are part of the key (its traced ones are inputs). With `plain`: where no
    input is traced, `(fn(*state, *plain), True)` instead."""
    encoder = Encoder()
    try:
        state_part = encoder.tree(state, False)
        used = plain is not None and not any(map(_traced, encoder.dynamic))
        chosen = plain if used and plain is not None else config
        config_part = encoder.tree(chosen, True)
        if used and any(map(_traced, encoder.dynamic)):  # a traced configuration
            return call(fn, state, config)
        key = (fn, state_part.key, config_part.key)
        dynamic = encoder.dynamic
        batch = transforms.batch(dynamic)
        if batch is transforms.INLINE:  # `jax.vmap` among other transformations
            return fn(*state, *chosen), used
        mask = None if batch is not None else transforms.reverse_mask(dynamic)
        key += (mask, None if batch is None else batch[1:])
        _ = hash(key)
    except TypeError:  # an unhashable static part (as `eqx.filter_jit` would refuse)
        return fn(*state, *config), False
    entry = CACHE.get(key)
    if entry is None:
        entry = Entry((state_part, config_part))
        entry.program = program = _program(fn, entry)
        CACHE.put(key, entry)
    else:
        program = entry.program
    assert program is not None
    if batch is not None:
        out = transforms.batched(entry, program, dynamic, batch)
    elif mask is not None:
        out = transforms.reverse(entry, program, dynamic, mask)
    else:
        jitted = entry.jitted
        if jitted is None:
            jitted = entry.jitted = jax.jit(program)
        out = translating(jitted, dynamic)
    treedef, static = entry.static_out
    arrays = iter(out)
    return jax.tree.unflatten(treedef, [next(arrays) if x is _ARRAY else x for x in static]), used


def _traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


_ARRAY = object()  # where an output leaf is an array


def _program(fn: Callable, entry: Entry):
    """The traced function of one entry: decode the inputs, solve, and return the
    output's array leaves (its structure and other leaves are recorded on `entry`)."""
    state_key, config_key = entry.parts

    def program(dynamic):
        values = iter(dynamic)
        state = state_key.decode(values)
        config = config_key.decode(values)
        out = fn(*state, *config)
        leaves, treedef = jax.tree.flatten(out)
        entry.static_out = (treedef, [_ARRAY if eqx.is_array(x) else x for x in leaves])
        return [x for x in leaves if eqx.is_array(x)]

    program.__name__ = program.__qualname__ = fn.__name__.lstrip("_")
    return program
