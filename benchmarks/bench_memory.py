"""Memory of a gradient against diffrax: compiled bytes per checkpoint.

For a state of `STATE_SIZE` float64s, `jax.jit(jax.grad(loss))` is compiled with c
checkpoints for several c; the slope of XLA's `temp_size_in_bytes` over c is the memory
one more checkpoint costs. It is compared with the bytes a checkpoint must hold: y, and
the scalars of odeckpt's `Checkpoint` record (time, next time, controller memory,
counters). The same compiled functions are timed, giving the time/memory trade-off
plotted (with the step counts of `bench_gradient`) in `plots/tradeoff.png`.
"""

import functools as ft
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from _common import Section, Table, bytes_cell, interleaved_samples, seconds_cell
from bench_gradient import LIBS, Setup, make_grad, target_cell

import odeckpt as oc

STATE_SIZE = 10_000
CHECKPOINTS = (8, 16, 32, 64)


def coupled_decay(t, y, args):
    decay, coupling = args
    return -decay * y + coupling * (jnp.roll(y, 1) - y)


def setup(quick: bool) -> Setup:
    steps = 128 if quick else 512
    return Setup(coupled_decay, float(steps), 1.0, True, steps)


def params():
    y0 = jnp.cos(jnp.arange(STATE_SIZE) * 0.01)
    return y0, (jnp.asarray(1e-3), jnp.asarray(1e-2))


def checkpoint_scalar_bytes(y0, args) -> int | None:
    """Bytes of odeckpt's `Checkpoint` record besides y (its scalars), or None."""
    try:
        from odeckpt._controllers import UniformSteps
        from odeckpt._integrator import Integrator, Problem

        def record(y0, args):
            integrator = Integrator(oc.Tsit5(), max_steps=8, saves=(), save_dense=False)
            t0, t1 = jnp.asarray(0.0), jnp.asarray(8.0)
            steps = UniformSteps(t0, t1, jnp.asarray(8))  # ConstantStepSize(), dt0 = 1
            problem = Problem(oc.ODETerm(coupled_decay), args, steps, t1, t1, ())
            state = integrator.init(problem, t0, y0, jnp.asarray(1.0))
            return integrator.compress(state)

        shapes = jax.eval_shape(record, y0, args)
        leaves = jax.tree.leaves(shapes)
        total = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
        return total - y0.nbytes
    except Exception as e:  # internal API: report rather than fail
        print(f"  memory: could not size odeckpt's Checkpoint record: {e!r}", flush=True)
        return None


@ft.lru_cache(maxsize=2)
def measure(quick: bool) -> dict:
    """Compile each (library, c), record its memory analysis, then time them interleaved."""
    s, p = setup(quick), params()
    compiled, analysis = {}, {}
    for c in CHECKPOINTS:
        for lib in LIBS:
            fn = jax.jit(make_grad(lib, s, c)).lower(p).compile()
            compiled[(lib, c)] = fn
            m = fn.memory_analysis()
            analysis[(lib, c)] = {
                "temp": int(m.temp_size_in_bytes),
                "argument": int(m.argument_size_in_bytes),
                "output": int(m.output_size_in_bytes),
                "hlo_chars": len(fn.as_text()),
            }
        print(f"  memory: compiled c={c}", flush=True)
    samples = interleaved_samples(
        {f"{lib} {c}": fn for (lib, c), fn in compiled.items()},
        (p,),
        budget_seconds=2.0 if quick else 4.0,
        min_rounds=5,
    )
    seconds = {key: statistics.median(samples[f"{key[0]} {key[1]}"]) for key in compiled}
    return {"setup": s, "analysis": analysis, "seconds": seconds}


def tradeoff_points(quick: bool) -> dict:
    """Gradient time against compiled temporary bytes, per library and c (for the plot)."""
    m = measure(quick)
    points = [
        {
            "lib": lib,
            "c": c,
            "temp_bytes": m["analysis"][(lib, c)]["temp"],
            "seconds": m["seconds"][(lib, c)],
        }
        for lib in LIBS
        for c in CHECKPOINTS
    ]
    title = (
        f"Gradient time vs memory, {STATE_SIZE} float64 state, "
        f"{m['setup'].max_steps} fixed steps, c = {', '.join(map(str, CHECKPOINTS))}"
    )
    return {"points": points, "title": title}


def _slope(lib: str, analysis) -> float:
    temps = [analysis[(lib, c)]["temp"] for c in CHECKPOINTS]
    return float(np.polyfit(CHECKPOINTS, temps, 1)[0])


def run(quick: bool) -> Section:
    m = measure(quick)
    s, (y0, args) = m["setup"], params()
    analysis = m["analysis"]
    y_bytes = y0.nbytes
    scalars = checkpoint_scalar_bytes(y0, args)
    rows = []
    for lib in LIBS:
        slope = _slope(lib, analysis)
        per_y = slope / y_bytes
        cell_y = target_cell(per_y, 1.1) if lib == "odeckpt" else f"{per_y:.2f} (reference)"
        if scalars is None:
            cell_rec = "n/a"
        else:
            per_rec = slope / (y_bytes + scalars)
            cell_rec = (
                target_cell(per_rec, 1.1) if lib == "odeckpt" else f"{per_rec:.2f} (reference)"
            )
        rows.append([lib, bytes_cell(round(slope)), f"{slope:.0f}", cell_y, cell_rec])
    table = Table(
        [
            "library",
            "temp bytes per checkpoint (slope)",
            "bytes",
            "/ |y|",
            "/ (|y| + Checkpoint scalars)",
        ],
        rows,
    )
    detail_rows = []
    for c in CHECKPOINTS:
        row = [str(c)]
        for lib in LIBS:
            a = analysis[(lib, c)]
            row += [
                bytes_cell(a["temp"]),
                bytes_cell(a["argument"]),
                bytes_cell(a["output"]),
                f"{a['hlo_chars'] / 1e3:.0f} k",
                seconds_cell(m["seconds"][(lib, c)]),
            ]
        detail_rows.append(row)
    columns = ["c"] + [
        f"{lib} {what}"
        for lib in LIBS
        for what in ("temp", "argument", "output", "HLO text", "gradient time")
    ]
    detail = Table(
        columns,
        detail_rows,
        caption="Per checkpoint count: XLA memory analysis of the compiled gradient, size of "
        "its optimised HLO text (characters), and its median time (interleaved)",
    )
    notes = [
        f"Problem: y' = -a y + b (roll(y, 1) - y) with y of {STATE_SIZE} float64s "
        f"(|y| = {bytes_cell(y_bytes)} = {y_bytes} bytes), Tsit5 with ConstantStepSize, "
        f"{s.max_steps} fixed steps (max_steps = {s.max_steps}), loss the mean square of "
        "y(t1), gradient in y0 and (a, b). Memory: "
        "`jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis()."
        "temp_size_in_bytes`, deterministic; slope: least-squares line over c = "
        f"{', '.join(map(str, CHECKPOINTS))}. odeckpt's `Checkpoint` record holds y and "
        + (f"{scalars} bytes of scalars" if scalars is not None else "a few scalars")
        + " (t, next t, controller memory, counters, result). Target: odeckpt's slope at "
        "most 1.1x the bytes a checkpoint must hold; diffrax's slope for reference.",
    ]
    return Section(
        title="Gradient memory per checkpoint against diffrax",
        table=table,
        notes=notes,
        extra_tables=[detail],
    )
