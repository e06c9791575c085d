"""Eager calls: a solve called outside `jax.jit` runs as one compiled program, taken
from a bounded least-recently-used cache (`docs/performance.md`, "Eager calls").

A call is split into a key and its dynamic arrays. The key holds everything the
program depends on statically: the PyTree structures, Python scalars, the shapes and
dtypes of the dynamic arrays, and the values of concrete arrays in the solve's
configuration (times, `SaveAt`, controller, solver, adjoint), which the solve reads
at trace time (a known direction, step count or save grid) as it does under
`jax.jit`. The state (`terms`, `y0`, `args`, `event`) passes its arrays dynamically,
concrete or traced, so a new value reuses the program. A plain Python function
(a vector field, an event condition, a helper it names) is keyed by its code, and
the arrays its closure cells and the globals it names hold are passed dynamically
too: a changed global array is read afresh, and a new closure over new values of
the same shapes (e.g. `lambda t, y, args: -p * y` under `jax.grad`) reuses the
program. An array read any other way (an attribute of a global object) is a
constant of the program, as it is under `jax.jit`.

Under `jax.grad`, `jax.jvp` or `jax.vmap` outside `jax.jit` the program is one JAX
call, which JAX differentiates and batches with its own caches: later calls reuse
the compiled forward and backward programs. Under `jax.jit` (or any staging trace)
the solve is traced inline instead, into the caller's program.
"""

from .cache import (
    DEFAULT_SIZE as DEFAULT_SIZE,
    clear_compiled_cache as clear_compiled_cache,
    compiled_cache_info as compiled_cache_info,
    compiled_cache_size as compiled_cache_size,
)
from .calls import call as call
from .transforms import staging as staging
