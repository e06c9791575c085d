"""A neural-ODE training step: continuous adjoints against diffrax's BacksolveAdjoint.

An MLP 2 -> 64 -> 64 -> 2 (tanh, 4,482 parameters) is the vector field; a batch of 256
initial states is solved with `jax.vmap` over the batch; the loss is the mean squared
distance of the states at 20 output times in (0, 10] from targets (a rotation of the
inputs). The weights are the initialisation scaled by 3, so that the field takes ~20
steps like a trained one (an untrained MLP's field is nearly linear: 3 steps). One
training step = `value_and_grad` with respect to the MLP's weights (the same weights
in every library). Tsit5, `PIDController(rtol=1e-3, atol=1e-6)`.

Times are medians of interleaved samples after compilation, as ratios against diffrax's
`BacksolveAdjoint` measured in the same process; compile times separately.
`jax.experimental.ode.odeint` (Dopri5, its only method) joins that table.

A second table solves the whole batch as one (256, 2) state (the batch inside the vector
field, as torchdiffeq users write it), with Dopri5 everywhere: odeckpt,
`jax.experimental.ode.odeint`, and torchdiffeq's `odeint` and `odeint_adjoint` run by
`torch_peer.py` in a separate environment (skipped with a note if it is absent), on the
same weights, data and tolerances. Vector-field evaluations there are counted with a
host callback in builds separate from the timed ones.
"""

import statistics
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _common import (
    Section,
    Table,
    import_jax_odeint,
    interleaved_samples,
    median_compile_seconds,
    paired_ratio,
    run_torch_peer,
    seconds_cell,
)

import odeckpt as oc

jax_odeint, JAX_ODE_STATUS = import_jax_odeint()

BATCH, WIDTH, DEPTH = 256, 64, 2
RTOL, ATOL, MAX_STEPS = 1e-3, 1e-6, 1024
T1 = 10.0
TS = jnp.linspace(0.5, T1, 20)
WEIGHT_SCALE = 3.0  # an untrained MLP's field is nearly linear: 3 steps; this gives ~20
JAX_ODE = "jax.experimental.ode odeint (Dopri5)"


def _data():
    key_model, key_data = jax.random.split(jax.random.PRNGKey(0))
    mlp = eqx.nn.MLP(2, 2, WIDTH, DEPTH, activation=jnp.tanh, key=key_model)
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    params = jax.tree.map(lambda w: WEIGHT_SCALE * w, params)
    y0 = jax.random.normal(key_data, (BATCH, 2))
    angle = 0.5 * TS  # targets: the inputs rotated by t / 2
    rotation = jnp.stack(
        [
            jnp.stack([jnp.cos(angle), -jnp.sin(angle)], -1),
            jnp.stack([jnp.sin(angle), jnp.cos(angle)], -1),
        ],
        -2,
    )
    targets = jnp.einsum("tij,bj->bti", rotation, y0)
    return params, static, y0, targets


def _solve_odeckpt(adjoint, solver=None):
    def solve(vf, y0, params):
        sol = oc.diffeqsolve(
            vf,
            solver or oc.Tsit5(),
            0.0,
            T1,
            None,
            y0,
            params,
            saveat=oc.SaveAt(ts=TS),
            stepsize_controller=oc.PIDController(rtol=RTOL, atol=ATOL),
            adjoint=adjoint,
            max_steps=MAX_STEPS,
        )
        return sol.ys, sol.stats["num_steps"]

    return solve


def _solve_diffrax(adjoint):
    def solve(vf, y0, params):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(vf),
            dfx.Tsit5(),
            0.0,
            T1,
            None,
            y0,
            params,
            saveat=dfx.SaveAt(ts=TS),
            stepsize_controller=dfx.PIDController(rtol=RTOL, atol=ATOL),
            adjoint=adjoint,
            max_steps=MAX_STEPS,
        )
        return sol.ys, sol.stats["num_steps"]

    return solve


def _solve_jax_ode():
    def solve(vf, y0, params):
        ts = jnp.concatenate([jnp.zeros(1), TS])
        ys = jax_odeint(
            lambda y, t, p: vf(t, y, p), y0, ts, params, rtol=RTOL, atol=ATOL, mxstep=MAX_STEPS
        )
        return ys[1:], jnp.array(-1)  # no step statistics

    return solve


SOLVES = {
    "diffrax BacksolveAdjoint": lambda: _solve_diffrax(dfx.BacksolveAdjoint()),
    "odeckpt BacksolveAdjoint": lambda: _solve_odeckpt(oc.BacksolveAdjoint()),
    "odeckpt InterpolatingAdjoint": lambda: _solve_odeckpt(oc.InterpolatingAdjoint()),
    "odeckpt InterpolatingAdjoint (adaptive, seminorm)": lambda: _solve_odeckpt(
        oc.InterpolatingAdjoint(stepsize_controller=oc.PIDController(rtol=RTOL, atol=ATOL))
    ),
    "odeckpt CheckpointAdjoint": lambda: _solve_odeckpt(oc.CheckpointAdjoint()),
    "diffrax RecursiveCheckpointAdjoint": lambda: _solve_diffrax(dfx.RecursiveCheckpointAdjoint()),
    JAX_ODE: _solve_jax_ode,
}
REFERENCE = "diffrax BacksolveAdjoint"


def make_step(name: str, static):
    """A fresh training step `(params, y0, targets) -> (loss, grads, steps)`."""
    solve = SOLVES[name]()

    def field(t, y, params):
        return eqx.combine(params, static)(y)

    def loss(params, y0, targets):
        # The weights go in through `args`: diffrax's BacksolveAdjoint cannot
        # differentiate closed-over arrays (odeckpt's adjoints can).
        ys, steps = jax.vmap(lambda y: solve(field, y, params))(y0)
        return jnp.mean((ys - targets) ** 2), steps

    def step(params, y0, targets):
        (value, steps), grads = jax.value_and_grad(loss, has_aux=True)(params, y0, targets)
        return value, grads, jnp.max(steps)

    return step


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])


def _slow_samples(fns: dict, args, budget_seconds: float, min_rounds: int) -> dict:
    """Interleaved samples of one call each (`interleaved_samples` without its warm-up).

    For this table's functions, which take 0.1-40 s a call and were each called once
    already: `interleaved_samples` would spend two more calls of each before sampling.
    """
    names, samples = list(fns), {name: [] for name in fns}
    start, r = time.perf_counter(), 0
    while r < min_rounds or time.perf_counter() - start < budget_seconds:
        for name in names[r % len(names) :] + names[: r % len(names)]:
            tic = time.perf_counter()
            jax.block_until_ready(fns[name](*args))
            samples[name].append(time.perf_counter() - tic)
        r += 1
    return samples


def _relative_difference(got, reference) -> float:
    got, reference = _flat(got), _flat(reference)
    return float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))


def _vmap_table(params, static, y0, targets, quick: bool) -> Table:
    args = (params, y0, targets)
    solves = [name for name in SOLVES if name != JAX_ODE or jax_odeint is not None]
    compiled, compile_times, outs = {}, {}, {}
    for name in solves:
        print(f"  compiling {name}", flush=True)
        compiled[name], compile_times[name] = median_compile_seconds(
            lambda name=name: make_step(name, static), args, 1
        )
        outs[name] = jax.block_until_ready(compiled[name](*args))
    samples = _slow_samples(compiled, args, budget_seconds=10.0 if quick else 40.0, min_rounds=3)
    rows = []
    for name in solves:
        steps = int(outs[name][2])
        rows.append(
            [
                name,
                seconds_cell(statistics.median(samples[name])),
                f"{paired_ratio(samples[name], samples[REFERENCE]):.3f}",
                seconds_cell(compile_times[name]),
                str(steps) if steps >= 0 else "—",
                f"{_relative_difference(outs[name][1], outs[REFERENCE][1]):.1e}",
            ]
        )
    columns = [
        "adjoint",
        "time per step",
        "time / diffrax BacksolveAdjoint",
        "compile",
        "forward steps (max over batch)",
        "gradient: relative difference from diffrax BacksolveAdjoint",
    ]
    return Table(columns, rows)


def run(quick: bool) -> Section:
    params, static, y0, targets = _data()
    table = _vmap_table(params, static, y0, targets, quick)
    batched, notes = _batched_table(params, static, y0, targets, quick)
    return Section(
        title="Neural-ODE training step: continuous adjoints",
        table=table,
        extra_tables=[batched],
        notes=[*NOTES, *notes],
    )


# ----------------------------------------------------------------------------------
# The batch inside the vector field: odeckpt, jax.experimental.ode and torchdiffeq

_EVALS = [0]


def _tick():
    _EVALS[0] += 1


def _batched_odeckpt(adjoint):
    solve = _solve_odeckpt(adjoint, oc.Dopri5())
    return lambda vf, y0, params: solve(vf, y0, params)[0]


def _batched_jax_ode(vf, y0, params):
    return _solve_jax_ode()(vf, y0, params)[0]


BATCHED = {
    "odeckpt CheckpointAdjoint (Dopri5)": lambda: _batched_odeckpt(oc.CheckpointAdjoint()),
    "odeckpt BacksolveAdjoint (Dopri5)": lambda: _batched_odeckpt(oc.BacksolveAdjoint()),
    "odeckpt InterpolatingAdjoint (Dopri5)": lambda: _batched_odeckpt(oc.InterpolatingAdjoint()),
    JAX_ODE: lambda: _batched_jax_ode,
}
QUICK_BATCHED = ["odeckpt CheckpointAdjoint (Dopri5)", "odeckpt BacksolveAdjoint (Dopri5)", JAX_ODE]
BATCHED_REFERENCE = "odeckpt CheckpointAdjoint (Dopri5)"
# Each peer's time is compared with the odeckpt adjoint of its kind.
PEER_OF = {
    JAX_ODE: "odeckpt BacksolveAdjoint (Dopri5)",
    "torchdiffeq odeint (dopri5)": "odeckpt CheckpointAdjoint (Dopri5)",
    "torchdiffeq odeint_adjoint (dopri5)": "odeckpt BacksolveAdjoint (Dopri5)",
}


def make_batched(name: str, static, grad: bool, count: bool = False):
    """A fresh `(params, y0, targets) -> loss` or its `value_and_grad`, batch in the field."""
    solve = BATCHED[name]()

    def field(t, y, params):
        if count:
            jax.debug.callback(_tick)
        return jax.vmap(eqx.combine(params, static))(y)

    def loss(params, y0, targets):
        ys = solve(field, y0, params)  # (time, batch, 2)
        return jnp.mean((jnp.swapaxes(ys, 0, 1) - targets) ** 2)

    return jax.value_and_grad(loss) if grad else loss


def _count(name: str, static, args) -> tuple[int, int]:
    """(forward, backward) vector-field evaluations of one training step."""
    counts = []
    for grad in (False, True):
        fn = jax.jit(make_batched(name, static, grad, count=True))
        jax.block_until_ready(fn(*args))
        jax.effects_barrier()
        _EVALS[0] = 0
        jax.block_until_ready(fn(*args))
        jax.effects_barrier()
        counts.append(_EVALS[0])
    return counts[0], counts[1] - counts[0]


def _torch_spec(params, y0, targets, quick: bool) -> dict:
    leaves = [np.asarray(x).tolist() for x in jax.tree.leaves(params)]
    return {
        "neural_ode": {
            "layers": [leaves[i : i + 2] for i in range(0, len(leaves), 2)],
            "y0": np.asarray(y0).tolist(),
            "targets": np.asarray(targets).tolist(),
            "ts": np.asarray(TS).tolist(),
            "rtol": RTOL,
            "atol": ATOL,
            "max_steps": MAX_STEPS,
            "repeats": 7 if quick else 11,
            "budget_seconds": 10.0 if quick else 15.0,
        }
    }


def _ratio_cell(r: float, against: str) -> str:
    return f"{r:.3g} ({against}; no target set)"


def _batched_table(params, static, y0, targets, quick: bool) -> tuple[Table, list[str]]:
    args = (params, y0, targets)
    names = QUICK_BATCHED if quick else list(BATCHED)
    names = [name for name in names if name != JAX_ODE or jax_odeint is not None]
    compiled, compile_times, outs, counts = {}, {}, {}, {}
    for name in names:
        print(f"  compiling {name}, batch in the field", flush=True)
        compiled[name], compile_times[name] = median_compile_seconds(
            lambda name=name: make_batched(name, static, grad=True), args, 1
        )
        outs[name] = jax.block_until_ready(compiled[name](*args))
        counts[name] = _count(name, static, args)
    samples = interleaved_samples(
        compiled, args, budget_seconds=10.0 if quick else 15.0, min_rounds=5 if quick else 7
    )
    seconds = {name: statistics.median(samples[name]) for name in names}
    print("  torchdiffeq (torch_peer.py)", flush=True)
    torch, torch_note = run_torch_peer(_torch_spec(params, y0, targets, quick), 600)
    reference = outs[BATCHED_REFERENCE][1]
    rows = []
    for name in names:
        against = PEER_OF.get(name)
        ratio = "—"
        if against is not None:
            r = paired_ratio(samples[against], samples[name])
            ratio = _ratio_cell(r, f"{against}, paired")
        forward, backward = counts[name]
        rows.append(
            [
                name,
                seconds_cell(seconds[name]),
                ratio,
                seconds_cell(compile_times[name]),
                f"{forward} / {backward}",
                f"{float(outs[name][0]):.6f}",
                f"{_relative_difference(outs[name][1], reference):.1e}",
            ]
        )
    for method, result in (torch or {}).get("neural_ode", {}).items():
        name = f"torchdiffeq {method} (dopri5)"
        against = PEER_OF[name]
        rows.append(
            [
                name,
                seconds_cell(result["seconds"]),
                _ratio_cell(seconds[against] / result["seconds"], f"{against}, medians"),
                "—",
                f"{result['forward_evals']} / {result['backward_evals']}"
                + (" (autograd)" if method == "odeint" else ""),
                f"{result['loss']:.6f}",
                f"{_relative_difference(result['grads'], reference):.1e}",
            ]
        )
    table = Table(
        [
            "method",
            "time per step",
            "time: odeckpt / this",
            "compile",
            "vf evaluations: forward / backward",
            "loss",
            f"gradient: relative difference from {BATCHED_REFERENCE}",
        ],
        rows,
        caption="The batch inside the vector field: one solve of a (256, 2) state, "
        "Dopri5, against jax.experimental.ode and torchdiffeq",
    )
    return table, _batched_notes(torch, torch_note)


NOTES = [
    "MLP 2 -> 64 -> 64 -> 2 (tanh, 4,482 weights, initialisation x 3), batch 256 with "
    "`jax.vmap` over `diffeqsolve`, 20 outputs in (0, 10], MSE loss, "
    "`value_and_grad` with respect to the weights; Tsit5, rtol 1e-3, atol 1e-6, "
    "`max_steps=1024`. Time ratios are medians over interleaved rounds of the "
    "per-round quotient.",
    "Why diffrax's `BacksolveAdjoint` is slow here: under `jax.vmap` every batch "
    "element carries its own cotangent of the 4,482 weights (256 x 4,482 numbers), "
    "and diffrax integrates that cotangent as part of the adjoint ODE's state: every "
    "Runge–Kutta stage forms a combination of it, and its adaptive backward solve "
    "controls the error of it too (no seminorm by default), so the backward pass "
    "takes more steps than the forward pass, each over a state ~1000x larger than y.",
    "odeckpt's continuous adjoints instead step the backward pass on the forward "
    "pass's accepted step times (no error control, no rejected steps), and integrate "
    "the weights' cotangent as a quadrature: one multiply-add per stage into an "
    "accumulator, never a stage combination. What remains is what any continuous "
    "adjoint pays under `vmap`: one per-example VJP with respect to the weights per "
    "stage. `InterpolatingAdjoint` also stores the dense output of the forward "
    "pass instead of integrating `y` backwards. Writing the batch inside the vector "
    "field (one solve over a (256, 2) state) shares one weight cotangent across the "
    "batch and removes that cost altogether.",
]
NOTES.append(
    "`jax.experimental.ode.odeint` in the first table: Dopri5 (its only method), "
    "`mxstep=1024` steps per output interval, under `jax.vmap` like the others; it "
    "reports no step count. Its adjoint integrates `y`, its cotangent and each batch "
    "element's weight cotangent backwards as one ODE state, with error control over all "
    "of it: the cost structure of diffrax's `BacksolveAdjoint` described above."
)


def _batched_notes(torch: dict | None, torch_note: str) -> list[str]:
    notes = [
        "Batch inside the vector field (second table): the field maps the (256, 2) batch "
        "through the MLP, so the batch shares one step size and one error norm, and one "
        "weight cotangent. Dopri5 in every library (the only method of "
        "`jax.experimental.ode`, torchdiffeq's default), rtol 1e-3, atol 1e-6, each "
        "library's own initial step (Hairer's rule in all three), the same weights, data "
        "and loss. One vector-field evaluation is the whole batch; counted in builds "
        "separate from the timed ones (a host callback in JAX, a Python counter in the "
        "torch module); forward = the plain loss, backward = training step - forward. "
        "torchdiffeq's `odeint` backpropagates through the solver's recorded operations "
        "(0 evaluations backward). Gradient difference: max |g - g_ref| / max |g_ref| "
        "over the 4,482 weights against odeckpt's `CheckpointAdjoint` (the exact "
        "gradient of its discretisation); differences of the order of rtol are the "
        "discretisations' own.",
        "Time ratios in the second table: odeckpt's adjoint of the same kind over the "
        "peer (`CheckpointAdjoint` for `odeint`, which differentiates through the solver; "
        "`BacksolveAdjoint` for the continuous adjoints of `jax.experimental.ode` and "
        "`odeint_adjoint`); below 1, odeckpt is faster. No issue sets a target for these "
        "peers. `jax.experimental.ode` is sampled in the same interleaved rounds as "
        "odeckpt (median of per-round quotients); torchdiffeq runs afterwards in its own "
        "process (median of repeated steps after a warm-up), so its ratio is a quotient "
        "of medians taken a minute apart.",
    ]
    if torch is not None:
        versions = torch["versions"]
        notes.append(
            f"torchdiffeq {versions['torchdiffeq']} with torch {versions['torch']} on "
            f"{torch['device']}, `torch.set_num_threads({torch['threads']})` (the usable "
            f"CPUs) with `OMP_WAIT_POLICY={torch['omp_wait_policy']}` (spinning OpenMP "
            "threads made a step ~30x slower on this shared machine), float64, "
            "`options=dict(max_num_steps=1024)`, run by `torch_peer.py` in a separate "
            "environment; `odeint_adjoint` with its defaults (the adjoint "
            "ODE at the same tolerances, error control over the whole augmented state)."
        )
    return [*notes, *filter(None, [torch_note, JAX_ODE_STATUS])]
