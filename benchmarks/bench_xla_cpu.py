"""Small systems on CPU: XLA's small-loop threshold, for odeckpt and diffrax alike.

XLA's CPU runtime runs each kernel of a while loop's body as its own task ("thunk",
tens of nanoseconds each), unless the whole loop touches fewer bytes per iteration than
`xla_cpu_small_while_loop_byte_threshold` (1 KiB by default): such a loop is compiled
into one function. The step of a 2-D ODE touches a few KiB, so its loops run kernel by
kernel, and the per-kernel cost, not arithmetic, sets the time of a gradient. Raising
the threshold (an XLA flag, read when JAX starts) compiles those loops whole.

Each setting runs in its own process (`XLA_FLAGS` is read once, at start-up); both
libraries are compiled and sampled in the same process, as in the other sections.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import Section, Table, seconds_cell

FLAG = "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold="
THRESHOLDS = (None, 65536)  # None: XLA's default (1 KiB)
CHECKPOINTS = (16, "default")


def _child(quick: bool) -> dict:
    """Compile and time the damped oscillator's gradient for both libraries."""
    import jax
    import jax.numpy as jnp
    from _common import interleaved_samples, paired_ratio
    from bench_gradient import DAMPED, DEFAULT, LIBS, damped_setup, make_grad

    setup, params = damped_setup(), (jnp.asarray(DAMPED.y0), jnp.asarray(DAMPED.args))
    out = {}
    for c in CHECKPOINTS:
        cc = DEFAULT if c == "default" else c
        fns, compile_s = {}, {}
        for lib in LIBS:
            start = time.perf_counter()
            fns[lib] = jax.jit(make_grad(lib, setup, cc)).lower(params).compile()
            compile_s[lib] = time.perf_counter() - start
        samples = interleaved_samples(fns, (params,), 1.0 if quick else 2.0, min_rounds=7)
        out[str(c)] = {
            "time": {lib: statistics.median(v) for lib, v in samples.items()},
            "ratio": paired_ratio(samples["odeckpt"], samples["diffrax"]),
            "compile": compile_s,
        }
    return out


def _measure(threshold, quick: bool) -> dict:
    env = dict(os.environ)
    if threshold is not None:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {FLAG}{threshold}".strip()
    args = [sys.executable, str(Path(__file__).resolve()), "--child"]
    if quick:
        args.append("--quick")
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool) -> Section:
    results = {t: _measure(t, quick) for t in THRESHOLDS}
    rows = []
    for t in THRESHOLDS:
        for c in CHECKPOINTS:
            r = results[t][str(c)]
            default = results[None][str(c)]["time"]["odeckpt"]
            rows.append(
                [
                    "1 KiB (XLA's default)" if t is None else f"{t // 1024} KiB",
                    str(c),
                    seconds_cell(r["time"]["odeckpt"]),
                    seconds_cell(r["time"]["diffrax"]),
                    f"{r['ratio']:.2f}",
                    f"{default / r['time']['odeckpt']:.1f}x",
                    f"{seconds_cell(r['compile']['odeckpt'])} / "
                    f"{seconds_cell(r['compile']['diffrax'])}",
                ]
            )
    table = Table(
        [
            "small-loop threshold",
            "checkpoints",
            "odeckpt gradient",
            "diffrax gradient",
            "time ratio (paired)",
            "odeckpt speed-up over the default threshold",
            "compile odeckpt / diffrax",
        ],
        rows,
        "Gradient of the damped oscillator (damping 1000, [0, 10], 2-D state, Tsit5, "
        "PIDController(1e-6, 1e-8), max_steps=4096), each threshold in its own process",
    )
    notes = [
        "Setting: `XLA_FLAGS=--xla_backend_extra_options="
        "xla_cpu_small_while_loop_byte_threshold=65536` in the environment before JAX "
        "starts. Loops that touch more bytes per iteration than the threshold are left "
        "as they are (kernel by kernel, their large kernels spread over the thread pool), "
        "so a large state is not affected. The flag is XLA's, not odeckpt's: neither "
        "library sets it, and the tests run without it.",
    ]
    return Section("Small systems on CPU: XLA's small-loop threshold", table, notes)


if __name__ == "__main__" and "--child" in sys.argv:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    print(json.dumps(_child("--quick" in sys.argv)))
