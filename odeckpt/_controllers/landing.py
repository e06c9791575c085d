"""How the last step lands on t1: the floor 100 ulp below t1, beyond which a step ends
at t1 instead, and the rule that stretches a step to end there."""

from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_ULPS = 100
"""How far below t1 (in ulp) a step's end counts as reaching it."""


@overload
def t1_floor(t1: jax.Array) -> jax.Array: ...
@overload
def t1_floor(t1: np.ndarray | np.generic) -> np.ndarray: ...
def t1_floor(t1):
    """`t1` less 100 ulp: a step ending beyond it ends at t1 instead.

    On a concrete NumPy scalar it stages no JAX operation (the trace-time step count
    uses it); on a JAX scalar it is not differentiated. The same bit arithmetic in both,
    so both give the same value."""
    if isinstance(t1, np.ndarray | np.generic):
        view = lambda x, dtype: x.view(dtype)
        return _floor(np, np.asarray(t1), view, view)
    bitcast = lax.bitcast_convert_type
    return _floor(jnp, lax.stop_gradient(t1), bitcast, bitcast)


def _floor(xp, t1, to_bits, from_bits):
    itype = {2: xp.int16, 4: xp.int32, 8: xp.int64}[t1.dtype.itemsize]
    bits = to_bits(t1, itype)
    # Floats of one sign are ordered like their bit patterns: step 100 ulp towards -inf.
    down = from_bits(xp.where(t1 > 0, bits - _ULPS, bits + _ULPS), t1.dtype)
    below_zero = -_ULPS * xp.finfo(t1.dtype).smallest_subnormal
    return xp.where(t1 == 0, below_zero, down).astype(t1.dtype)


def stretched_to_end(t, t_next, t1, t1_floor):
    """Whether a step from t to t_next is made to end at t1 instead: it ends past t1,
    or within ~100 ulp of it (past `t1_floor`) and what it would leave is under half
    the step. The second condition matters only where 100 ulp is itself a step or more
    (times far from zero in float32): there it keeps steps from merging into one."""
    return (t_next > t1_floor) & (t1 - t_next <= 0.5 * (t_next - t))
