"""Every check of `diffeqsolve`'s inputs, and every message `docs/errors.md` lists for
them (besides those raised where an object is built, e.g. `SaveAt(ts=...)`).

Structural problems raise at trace time. Value problems raise at trace time too when
the value is known then (a `ValueError` that quotes the values), and otherwise at run
time through `eqx.error_if` (an `EquinoxRuntimeError`; `JaxRuntimeError` under plain
`jax.jit`) with a short message. Each value check is one predicate `bad(xp, ...)`,
evaluated with NumPy on concrete values and with `jax.numpy` on traced ones.

The checks run in the order `diffeqsolve` calls them: `check_inputs`, `check_terms`,
`check_times`,
`check_vector_field`, `check_values`; an input with several problems reports the first.

- `structure`: the structural checks (types, shapes, dtypes, which options go together).
- `values`: the value checks and their predicates.
- `autodiff`: which autodiff modes go through the adjoint (`check_autodiff`, last;
  `check_reverse_mode` on the loop's output; `check_hvp_tangent` for `odeckpt.hvp`;
  `tangent_guards`: the identities whose tangents carry those refusals).
"""

from .autodiff import (
    check_autodiff as check_autodiff,
    check_hvp_tangent as check_hvp_tangent,
    check_reverse_mode as check_reverse_mode,
)
from .predicates import known_direction as known_direction
from .structure import (
    check_event as check_event,
    check_inputs as check_inputs,
    check_save_fns as check_save_fns,
    check_term_parts as check_term_parts,
    check_terms as check_terms,
    check_times as check_times,
    check_vector_field as check_vector_field,
    event_from_discrete as event_from_discrete,
    floating_state as floating_state,
)
from .values import check_values as check_values
