"""`Reversible(Tsit5())` and `ReversibleAdjoint()` on a family of problems: how often the
forward solve stops (its parasitic mode grew), how often the backward pass refuses the
gradient, and how far a returned gradient is from `CheckpointAdjoint`'s through the same
solver (the refusal's false negatives: returned, yet further than `gradient_tol`).

The family is `tests/reversible_family.py`: damped linear systems, Van der Pol, Lorenz
and neural ODEs with random weights, horizons 1-100, constant steps and
`PIDController(rtol=1e-6, atol=1e-8)`; `draws` problems per horizon (4 in full mode:
224 cases per configuration; 1 in quick mode). Configurations: the defaults in float64
and float32 (float64 only in quick mode); the forward monitor off
(`max_amplification=None`: the backward pass alone refuses); and the couplings 0.5,
0.9, 0.99 and 0.999 (float64, one problem per horizon: 56 cases each).
"""

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from _common import Section, Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import reversible_family as family  # noqa: E402


def _outcomes(draws, dtype, **options) -> dict:
    """(kind, controller) -> `family.Outcome`."""
    out = {}
    for kind in family.KINDS:
        for adaptive in (False, True):
            out[kind.name, adaptive] = family.evaluate(kind, adaptive, draws, dtype, **options)
            print(f"  reversible_safety: {kind.name}, adaptive={adaptive}, {options}", flush=True)
    return out


def _row(label: str, outcomes: list, tol: float) -> list[str]:
    stopped = np.concatenate([o.stopped for o in outcomes])
    refused = np.concatenate([o.refused for o in outcomes])
    error = np.concatenate([o.error for o in outcomes])
    returned = ~stopped & ~refused
    worst = f"{np.max(error[returned]):.1e}" if returned.any() else ""
    wrong = int(np.sum(returned & ~(error <= tol)))
    row = [
        label,
        str(stopped.size),
        str(int(stopped.sum())),
        str(int(refused.sum())),
        str(int(returned.sum())),
        worst,
        str(wrong),
    ]
    return row


COLUMNS = [
    "problems",
    "cases",
    "forward stopped",
    "gradient refused",
    "returned",
    "largest error returned",
    "returned beyond tolerance",
]


def _table(results: dict, tol: float) -> list[list[str]]:
    rows = []
    for kind in family.KINDS:
        keys = [(kind.name, False), (kind.name, True)]
        rows.append(_row(kind.name, [results[k] for k in keys], tol))
    rows.append(_row("all", list(results.values()), tol))
    return rows


def run(quick: bool) -> Section:
    draws = 1 if quick else 4
    tables = []
    dtypes = (
        ((jnp.float64, "float64"),)
        if quick
        else ((jnp.float64, "float64"), (jnp.float32, "float32"))
    )
    for dtype, name in dtypes:
        tol = family.tolerance(dtype)
        rows = _table(_outcomes(draws, dtype), tol)
        caption = f"Defaults, {name}: `gradient_tol` = {tol:.1e}."
        tables.append(Table(COLUMNS, rows, caption=caption))
    tol = family.tolerance(jnp.float64)
    alone = _outcomes(draws, jnp.float64, max_amplification=None)
    caption = "Forward monitor off (`max_amplification=None`), float64: the backward pass alone."
    tables.append(Table(COLUMNS, _table(alone, tol), caption=caption))
    coupling_rows = []
    for coupling in (0.5, 0.9, 0.99, 0.999):
        results = _outcomes(1, jnp.float64, coupling=coupling)
        coupling_rows.append([f"{coupling}", *_row("", list(results.values()), tol)[1:]])
    coupling_table = Table(
        ["coupling", *COLUMNS[1:]],
        coupling_rows,
        caption="The coupling, float64, one problem per kind, controller and horizon.",
    )
    return Section(
        title="Reversible solvers: never a silently wrong solution or gradient",
        table=tables[0],
        extra_tables=[*tables[1:], coupling_table],
        notes=[
            "A case counts as returned when the forward solve succeeded and the gradient "
            "came back finite; its error is the max-norm distance from "
            "`CheckpointAdjoint()`'s gradient through the same solver, relative to that "
            "gradient's largest entry. \"Returned beyond tolerance\" counts the refusal's "
            "false negatives; it must be 0."
        ],
    )
