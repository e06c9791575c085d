"""Second derivatives: a Hessian-vector product's time and compiled memory against
`max_steps`, odeckpt against diffrax.

`hvp(p, v) = jax.jvp(jax.grad(loss), (p,), (v,))[1]` (forward-over-reverse) for a
state of `STATE_SIZE` float64s, `STEPS` fixed Tsit5 steps, and `max_steps` growing
past them. odeckpt runs `CheckpointAdjoint(checkpoints=8)`; diffrax `DirectAdjoint()`
and `RecursiveCheckpointAdjoint(checkpoints=8)`, each where it works (a failure is
reported as a row). Memory: `jax.jit(hvp).lower(p, v).compile().memory_analysis()
.temp_size_in_bytes` (deterministic); time: medians of interleaved samples, with the
gradient `jax.grad(loss)` of the same solve timed alongside for the ratio HVP / gradient.
"""

import statistics

import diffrax
import jax
import jax.numpy as jnp
from _common import Section, Table, bytes_cell, interleaved_samples, ratio_cell, seconds_cell

import odeckpt as oc

STATE_SIZE = 4096
STEPS = 100
T1 = 1.0
CHECKPOINTS = 8


def coupled_decay(t, y, args):
    decay, coupling = args
    return -decay * y + coupling * (jnp.roll(y, 1) - y)


def params():
    y0 = jnp.cos(jnp.arange(STATE_SIZE) * 0.01)
    return y0, (jnp.asarray(0.5), jnp.asarray(2.0))


def _odeckpt_solve(max_steps):
    def solve(p):
        y0, args = p
        return oc.diffeqsolve(
            oc.ODETerm(coupled_decay),
            oc.Tsit5(),
            0.0,
            T1,
            T1 / STEPS,
            y0,
            args=args,
            adjoint=oc.CheckpointAdjoint(checkpoints=CHECKPOINTS),
            max_steps=max_steps,
        ).ys

    return solve


def _diffrax_solve(adjoint, max_steps):
    def solve(p):
        y0, args = p
        return diffrax.diffeqsolve(
            diffrax.ODETerm(coupled_decay),
            diffrax.Tsit5(),
            0.0,
            T1,
            T1 / STEPS,
            y0,
            args=args,
            adjoint=adjoint,
            max_steps=max_steps,
        ).ys

    return solve


LIBS = {
    "odeckpt CheckpointAdjoint(checkpoints=8)": _odeckpt_solve,
    "diffrax DirectAdjoint()": lambda m: _diffrax_solve(diffrax.DirectAdjoint(), m),
    "diffrax RecursiveCheckpointAdjoint(checkpoints=8)": lambda m: _diffrax_solve(
        diffrax.RecursiveCheckpointAdjoint(checkpoints=CHECKPOINTS), m
    ),
}


def _programs(solve):
    loss = lambda p: jnp.mean(solve(p) ** 2)
    grad = lambda p, v: jax.grad(loss)(p)
    hvp = lambda p, v: jax.jvp(jax.grad(loss), (p,), (v,))[1]
    return {"hvp": hvp, "grad": grad}


def _compile(fn, p, v):
    compiled = jax.jit(fn).lower(p, v).compile()
    return compiled, int(compiled.memory_analysis().temp_size_in_bytes)


def measure(quick: bool) -> dict:
    p = params()
    v = jax.tree.map(lambda x: jnp.ones_like(x) * 0.1, p)
    sizes = (128, 512) if quick else (128, 512, 2048)
    compiled, memory, failed = {}, {}, {}
    for lib, make in LIBS.items():
        for max_steps in sizes:
            try:
                for kind, fn in _programs(make(max_steps)).items():
                    compiled[(lib, max_steps, kind)], memory[(lib, max_steps, kind)] = _compile(
                        fn, p, v
                    )
            except Exception as e:  # a peer without this mode: reported as a row
                failed[(lib, max_steps)] = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
            print(f"  hvp: compiled {lib}, max_steps={max_steps}", flush=True)
    names = {f"{k[0]}|{k[1]}|{k[2]}": fn for k, fn in compiled.items()}
    samples = interleaved_samples(names, (p, v), budget_seconds=3.0 if quick else 8.0, min_rounds=5)
    seconds = {k: statistics.median(samples[f"{k[0]}|{k[1]}|{k[2]}"]) for k in compiled}
    return {"sizes": sizes, "memory": memory, "seconds": seconds, "failed": failed}


def run(quick: bool) -> Section:
    m = measure(quick)
    rows = []
    for lib in LIBS:
        for max_steps in m["sizes"]:
            if (lib, max_steps) in m["failed"]:
                rows.append([lib, str(max_steps), "fails", m["failed"][(lib, max_steps)], "", ""])
                continue
            hvp, grad = (lib, max_steps, "hvp"), (lib, max_steps, "grad")
            ratio = m["seconds"][hvp] / m["seconds"][grad]
            rows.append(
                [
                    lib,
                    str(max_steps),
                    bytes_cell(m["memory"][hvp]),
                    seconds_cell(m["seconds"][hvp]),
                    seconds_cell(m["seconds"][grad]),
                    ratio_cell(ratio, 4.0) if lib.startswith("odeckpt") else f"{ratio:.2f}",
                ]
            )
    table = Table(
        [
            "solve",
            "max_steps",
            "HVP temp memory",
            "HVP time",
            "gradient time",
            "HVP / gradient time",
        ],
        rows,
    )
    y_bytes = params()[0].nbytes
    notes = [
        f"Problem: y' = -a y + b (roll(y, 1) - y), y of {STATE_SIZE} float64s "
        f"(|y| = {bytes_cell(y_bytes)}), Tsit5, {STEPS} fixed steps over [0, {T1:g}], loss "
        "the mean square of y(t1); HVP = `jax.jvp(jax.grad(loss), (p,), (v,))` with p = "
        "(y0, (a, b)). Memory: XLA's `temp_size_in_bytes` of the compiled HVP; times: "
        "medians of interleaved samples. Targets: odeckpt's HVP memory flat in "
        "`max_steps` at fixed `checkpoints`, and its HVP at most 4x its gradient's time.",
    ]
    return Section(
        title="Second derivatives: Hessian-vector products against max_steps",
        table=table,
        notes=notes,
    )
