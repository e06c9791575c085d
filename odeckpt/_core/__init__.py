"""The bottom layer: types, result codes, and PyTree/array utilities that every other
subpackage uses. Imports nothing from the rest of odeckpt.

Its modules (`custom_types`, `results`, `closure`, `columns`, `concrete`, `batching`, `pack`,
`promotion`, `tracing`, `tree`) are described in `docs/architecture.md`, layer 1.
"""

from .batching import (
    any_in_batch as any_in_batch,
    batch_cond as batch_cond,
    batch_size as batch_size,
    batched_like as batched_like,
    min_in_batch as min_in_batch,
)
from .closure import ClosureConverted as ClosureConverted, closure_convert as closure_convert
from .columns import (
    by_columns as by_columns,
    direction_count as direction_count,
    forward_jvp as forward_jvp,
)
from .concrete import concrete as concrete
from .custom_types import Args as Args, RealScalarLike as RealScalarLike, Y as Y
from .pack import Packed as Packed, pack as pack, unpack as unpack
from .promotion import (
    promoted as promoted,
    promoted_dtype as promoted_dtype,
    real_dtype as real_dtype,
)
from .results import (
    RESULTS as RESULTS,
    HostCheck as HostCheck,
    failure_index as failure_index,
    host_check as host_check,
    is_event as is_event,
    is_okay as is_okay,
    is_successful as is_successful,
    raise_if_failed as raise_if_failed,
)
from .tracing import (
    linearised as linearised,
    refuse_linearising as refuse_linearising,
)
from .tree import (
    all_finite as all_finite,
    as_arrays as as_arrays,
    from_real_view as from_real_view,
    is_complex as is_complex,
    largest_magnitude as largest_magnitude,
    materialize as materialize,
    nbytes as nbytes,
    real_view as real_view,
    row as row,
    set_row as set_row,
    tree_add as tree_add,
    tree_zeros_like as tree_zeros_like,
    zero_rows as zero_rows,
    zero_tangent as zero_tangent,
)
