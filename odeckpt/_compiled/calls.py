"""`call`: a solve as one compiled program, from the cache."""

from collections.abc import Callable

import equinox as eqx
import jax

from . import transforms
from .cache import CACHE, Entry
from .errors import translating
from .keys import Encoder


def call(fn: Callable, state: tuple, config: tuple):
    """`fn(*state, *config)`, compiled: from the cache when a call with the same key
    ran before. `state`'s arrays are the program's inputs; `config`'s concrete arrays
    are part of the key (its traced ones are inputs)."""
    encoder = Encoder()
    try:
        parts = (encoder.tree(state, False), encoder.tree(config, True))
        key = (fn, parts[0].key, parts[1].key)
        dynamic = encoder.dynamic
        batch = transforms.batch(dynamic)
        if batch is transforms.INLINE:  # `jax.vmap` among other transformations
            return fn(*state, *config)
        mask = None if batch is not None else transforms.reverse_mask(dynamic)
        key += (mask, None if batch is None else batch[1:])
        _ = hash(key)
    except TypeError:  # an unhashable static part (as `eqx.filter_jit` would refuse)
        return fn(*state, *config)
    entry = CACHE.get(key)
    if entry is None:
        entry = Entry(parts)
        CACHE.put(key, entry)
    program = _program(fn, entry)
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
    return jax.tree.unflatten(treedef, [next(arrays) if x is _ARRAY else x for x in static])


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
