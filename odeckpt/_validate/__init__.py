"""Every check of `diffeqsolve`'s inputs, and every message `docs/errors.md` lists for them.

The checks run in the order `diffeqsolve` calls them (`check_inputs`, `check_terms`,
`check_times`, `check_vector_field`, `check_values`, `check_autodiff` last), so an
input with several problems reports the first. Each value check is one predicate
`bad(xp, ...)`, evaluated with NumPy on concrete values and `jax.numpy` on traced ones.
Modules: `docs/architecture.md`, layer 9; when each kind of problem raises:
`docs/errors.md`.
"""

from .autodiff import (
    check_autodiff as check_autodiff,
    check_hvp_tangent as check_hvp_tangent,
)
from .controls import check_controls as check_controls, control_spans as control_spans
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
from .values import (
    check_spans_now as check_spans_now,
    check_state_values as check_state_values,
    check_values as check_values,
)
