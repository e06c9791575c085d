"""Test configuration: float64 everywhere and no implicit rank promotion.

`ODECKPT_DTYPE_PROMOTION=strict` runs the suite under JAX's strict dtype promotion
(`jax_numpy_dtype_promotion="strict"`); the default is JAX's standard promotion.

Every program XLA's CPU backend compiles keeps its code mapped (about three memory
maps per kernel) for as long as JAX caches it. odeckpt's eager programs are bounded
by `odeckpt.compiled_cache_size()`, but JAX's own caches of the tests' `jax.jit`
programs (thousands of entries) are not: a worker compiles thousands of programs, and
past the kernel's limit on a process's maps (`vm.max_map_count`, 65530 by default) the
next compilation crashes the worker. So the caches are cleared whenever a test leaves
the worker with more than `MAX_MAPS` maps.
"""

import gc
import os
import pathlib

# The tests compile thousands of small programs and run most of them a few times, so
# compiling is most of their time: XLA's CPU backend at optimisation level 0 compiles
# them about 30% faster. The benchmarks, and users, run at XLA's default level.
_FAST_COMPILE = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

import jax  # noqa: E402  (after XLA_FLAGS: JAX reads them when its backend starts)
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update(
    "jax_numpy_dtype_promotion", os.environ.get("ODECKPT_DTYPE_PROMOTION", "standard")
)

MAX_MAPS = 20_000
_MAPS = pathlib.Path("/proc/self/maps")


def _maps() -> int:
    """The process's memory maps (0 where `/proc` does not say)."""
    try:
        with _MAPS.open() as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    yield
    if _maps() > MAX_MAPS:
        jax.clear_caches()
        gc.collect()
