"""Events: what an `Event` adds to a solve's forward time, against diffrax's.

The ballistic fall `h' = v, v' = -g` from `h0 = 10` (Tsit5, `PIDController(rtol=1e-8,
atol=1e-8)`, `dt0 = 0.01`), ended where `h` crosses zero (t* = 1.43). Measured in one
process, interleaved (ratios of samples taken back to back, so machine load cancels):

- odeckpt with `Event(h)` from t0 = 0 to t1 = inf, against odeckpt without an event
  solving to the known t* (the same steps but the last): the cost of locating the event
  (target: at most 1.3x).
- diffrax with `Event(h, optimistix.Newton(1e-8, 1e-8))` the same way, its own ratio,
  and odeckpt with its event against diffrax with its event.
- the gradient of `t* + v(t*)` (with the event; `v(t*)` alone without, t* being
  fixed there) with respect to h0, under each library's default reverse mode.

A solve without `event=` traces no event code in its loop (`Problem.event is None`
skips it at trace time; `docs/events.md` gives its cost against odeckpt from before
events, as measured when they were merged).
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import optimistix as optx
from _common import (
    Section,
    Table,
    compile_seconds,
    interleaved_samples,
    paired_ratio,
    ratio_cell,
    seconds_cell,
)

import odeckpt as oc

G = 9.81
H0 = jnp.asarray(10.0)
T_STAR = float(jnp.sqrt(2 * H0 / G))
RTOL = ATOL = 1e-8


def _field(t, y, g):
    return jnp.stack([y[1], -g + 0 * y[1]])


def _height(t, y, args, **kwargs):
    return y[0]


def _ours(event: bool):
    def solve(h0):
        t1, extra = (jnp.inf, {"event": oc.Event(_height)}) if event else (T_STAR, {})
        sol = oc.diffeqsolve(
            _field,
            oc.Tsit5(),
            0.0,
            t1,
            0.01,
            jnp.stack([h0, 0.0 * h0]),
            G,
            stepsize_controller=oc.PIDController(rtol=RTOL, atol=ATOL),
            **extra,
        )
        return sol.ts[0] + sol.ys[0, 1]  # the end time and the velocity there

    return solve


def _theirs(event: bool):
    def solve(h0):
        t1, extra = (T_STAR, {})
        if event:
            root = optx.Newton(1e-8, 1e-8, optx.rms_norm)
            t1, extra = jnp.inf, {"event": dfx.Event(_height, root)}
        sol = dfx.diffeqsolve(
            dfx.ODETerm(_field),
            dfx.Tsit5(),
            0.0,
            t1,
            0.01,
            jnp.stack([h0, 0.0 * h0]),
            G,
            stepsize_controller=dfx.PIDController(rtol=RTOL, atol=ATOL),
            **extra,
        )
        return sol.ts[0] + sol.ys[0, 1]  # the end time and the velocity there

    return solve


def _compiled(make, grad: bool):
    fn = (lambda: jax.grad(make())) if grad else make
    return compile_seconds(fn, H0)[0]


def run(quick: bool) -> Section:
    budget = 4.0 if quick else 15.0
    rows = []
    for grad in (False, True):
        fns = {
            "odeckpt event": _compiled(lambda: _ours(True), grad),
            "odeckpt to t*": _compiled(lambda: _ours(False), grad),
            "diffrax event": _compiled(lambda: _theirs(True), grad),
            "diffrax to t*": _compiled(lambda: _theirs(False), grad),
        }
        samples = interleaved_samples(fns, (H0,), budget)
        median = {name: sorted(s)[len(s) // 2] for name, s in samples.items()}
        ours = paired_ratio(samples["odeckpt event"], samples["odeckpt to t*"])
        theirs = paired_ratio(samples["diffrax event"], samples["diffrax to t*"])
        versus = paired_ratio(samples["odeckpt event"], samples["diffrax event"])
        what = "gradient of t* + v(t*)" if grad else "forward"
        rows.append(
            [
                what,
                seconds_cell(median["odeckpt event"]),
                seconds_cell(median["odeckpt to t*"]),
                ratio_cell(ours, 1.3) if not grad else f"{ours:.2f}",
                seconds_cell(median["diffrax event"]),
                f"{theirs:.2f}",
                f"{versus:.2f}",
            ]
        )
    columns = [
        "",
        "odeckpt, event",
        "odeckpt, no event to t*",
        "event / no event",
        "diffrax, event (optx.Newton)",
        "diffrax event / no event",
        "odeckpt event / diffrax event",
    ]
    notes = [
        "Medians of interleaved samples after compilation; the ratios are medians of "
        "per-round ratios, so the load of a shared machine cancels in them (absolute "
        "times do not). odeckpt locates the crossing to 4 ulp with its Illinois "
        "iteration; diffrax's Newton stops at its tolerance (1e-8). diffrax's gradient "
        "uses its default `RecursiveCheckpointAdjoint`, odeckpt's `CheckpointAdjoint()`.",
    ]
    return Section("Events", Table(columns, rows), notes)
