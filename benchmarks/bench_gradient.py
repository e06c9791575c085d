"""Gradients against diffrax: step evaluations, compile time, wall time, backward overhead.

Four measurements, each against diffrax's `RecursiveCheckpointAdjoint` on the same
problem in the same process:

1. Step evaluations per gradient with fixed steps (n = 1000, 10000), against the
   Revolve optimum `n + t(n, c)` (`schedules.optimal_total`) and the best any online
   schedule can do (`schedules.online_lower_bound`). Counted with a host callback in the
   vector field, in builds separate from the timed ones.
2. Vector-field evaluations of a gradient that stores every step, against the forward's.
3. Compile time of `jax.jit(jax.grad(loss))`, split into trace, lower and XLA compile.
4. Gradient wall time at equal checkpoint counts (damped oscillator, reaction-diffusion),
   and the time per backward step evaluation across checkpoint counts.

The plot `plots/tradeoff.png` shows step evaluations against checkpoints (n = 1000) and
gradient time against compiled memory (the problem of `bench_memory`).
"""

import dataclasses
import statistics
import time
from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _common import (
    Section,
    Table,
    interleaved_samples,
    paired_ratio,
    plot_path,
    ratio_cell,
    seconds_cell,
    warn,
)
from _problems import PROBLEMS

import odeckpt as oc
from odeckpt import schedules
from odeckpt._adjoints import useful_checkpoints

DEFAULT = "default"  # a checkpoint count meaning "the library's default adjoint"
LIBS = ("odeckpt", "diffrax")

# ----------------------------------------------------------------------------------
# One solve in either library


@dataclasses.dataclass(frozen=True)
class Setup:
    """A solve: `vf` from `y0` over `[0, t1]` with Tsit5; fixed steps `dt0` or adaptive."""

    vf: Callable
    t1: float
    dt0: float
    fixed: bool
    max_steps: int
    ts: tuple[float, ...] | None = None  # SaveAt(ts=...); None: SaveAt(t1=True)
    rtol: float = 1e-6
    atol: float = 1e-8


def solve(lib: str, setup: Setup, y0, args, c, vf=None):
    """`sol.ys` of one solve; `c` is the checkpoint count or `DEFAULT`."""
    m = oc if lib == "odeckpt" else dfx
    if lib == "odeckpt":
        adjoint = oc.CheckpointAdjoint() if c == DEFAULT else oc.CheckpointAdjoint(checkpoints=c)
    else:
        adjoint = (
            dfx.RecursiveCheckpointAdjoint()
            if c == DEFAULT
            else dfx.RecursiveCheckpointAdjoint(checkpoints=c)
        )
    controller = (
        m.ConstantStepSize() if setup.fixed else m.PIDController(rtol=setup.rtol, atol=setup.atol)
    )
    saveat = m.SaveAt(t1=True) if setup.ts is None else m.SaveAt(ts=jnp.asarray(setup.ts))
    sol = m.diffeqsolve(
        m.ODETerm(vf or setup.vf),
        m.Tsit5(),
        0.0,
        setup.t1,
        setup.dt0,
        y0,
        args,
        saveat=saveat,
        stepsize_controller=controller,
        adjoint=adjoint,
        max_steps=setup.max_steps,
    )
    return sol.ys


def make_loss(lib: str, setup: Setup, c, vf=None) -> Callable:
    """`params = (y0, args) -> scalar`: the mean square of the saved states."""

    def loss(params):
        y0, args = params
        return jnp.mean(solve(lib, setup, y0, args, c, vf) ** 2)

    return loss


def make_grad(lib, setup, c, vf=None) -> Callable:
    return jax.grad(make_loss(lib, setup, c, vf))


def num_checkpoints(lib: str, setup: Setup, y0, c) -> int | str:
    """The checkpoint count a library's adjoint actually uses (its default resolved)."""
    if c != DEFAULT:
        return min(c, setup.max_steps)
    if lib == "diffrax":  # equinox's checkpointed_while_loop with checkpoints=None
        return int(np.floor(-1.5 + np.sqrt(2 * setup.max_steps + 0.25))) + 1
    # odeckpt's rule (CheckpointAdjoint.num_checkpoints): every state if max_steps solver
    # states (y, f(t, y) and ~53 bytes of scalars) fit the budget, else as many
    # checkpoints (y and the scalars) as fit, at most `useful_checkpoints(max_steps)`.
    scalars = 53
    budget = oc.CheckpointAdjoint().memory_budget_bytes()
    if setup.max_steps * (2 * y0.nbytes + scalars) <= budget:
        return "all"
    fit = min(max(budget // (y0.nbytes + scalars), 2), setup.max_steps - 1)
    return int(min(fit, max(useful_checkpoints(setup.max_steps), 2)))


# ----------------------------------------------------------------------------------
# Counting vector-field evaluations with a host callback


class _Counter:
    calls = 0


def _bump():
    _Counter.calls += 1


def counted(vf: Callable) -> Callable:
    def f(t, y, args):
        jax.debug.callback(_bump)
        return vf(t, y, args)

    return f


def count_calls(fn: Callable, *args) -> int:
    """Vector-field evaluations of one call of `jax.jit(fn)` (fn built with `counted`)."""
    compiled = jax.jit(fn).lower(*args).compile()
    _Counter.calls = 0
    jax.block_until_ready(compiled(*args))
    jax.effects_barrier()
    return _Counter.calls


# ----------------------------------------------------------------------------------
# Problems


def linear(t, y, a):
    return a @ y


LINEAR_A = jnp.array([[-1e-3, 1e-2], [-1e-2, -1e-3]])
LINEAR_Y0 = jnp.array([1.0, 0.5])


def fixed_setup(n: int) -> Setup:
    """Exactly n steps of size 1 over [0, n] (integer times: no rounding at t1)."""
    return Setup(linear, float(n), 1.0, True, n)


DAMPED = PROBLEMS["damped"]


def damped_setup() -> Setup:
    return Setup(DAMPED.vf, DAMPED.t1, 0.01, False, 4096, tuple(np.linspace(0, DAMPED.t1, 11)))


RD_POINTS = 4096


def reaction_diffusion(t, u, args):
    """u_t = D u_xx + r u (1 - u) on [0, 1), periodic, second-order differences."""
    diffusion, rate = args
    lap = (jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1)) * RD_POINTS**2
    return diffusion * lap + rate * u * (1 - u)


def rd_setup(quick: bool) -> Setup:
    return Setup(reaction_diffusion, 1.0 if quick else 5.0, 0.01, False, 4096)


def rd_params():
    x = jnp.arange(RD_POINTS) / RD_POINTS
    u0 = 0.5 + 0.3 * jnp.sin(2 * jnp.pi * x) + 0.1 * jnp.cos(6 * jnp.pi * x)
    return u0, (jnp.asarray(1e-5), jnp.asarray(1.0))


# ----------------------------------------------------------------------------------
# 1. Step evaluations with fixed steps


@dataclasses.dataclass
class Counts:
    n: int
    c: int
    oc_vf: int
    oc_steps: float
    oc_matches: bool
    dfx_vf: int
    dfx_steps: float

    @property
    def optimum(self) -> int:
        return schedules.optimal_total(self.n, self.c)

    @property
    def lower_bound(self) -> int:
        return schedules.online_lower_bound(self.n, self.c)


def _restores(plan) -> int:
    return sum(isinstance(a, schedules.Restore) for a in plan.actions)


def count_fixed(n: int, c: int) -> Counts:
    """Traced step evaluations of one gradient of n fixed steps with c checkpoints.

    odeckpt's Tsit5: 1 evaluation at the start, 6 per step (FSAL), 1 per restore (the
    first stage of a restored checkpoint); diffrax's: 1 at the start, 6 per step.
    """
    setup, params = fixed_setup(n), (LINEAR_Y0, LINEAR_A)
    vf = counted(linear)
    oc_vf = count_calls(make_grad("odeckpt", setup, c, vf), params)
    dfx_vf = count_calls(make_grad("diffrax", setup, c, vf), params)
    if c < n:
        plan = schedules.known_plan(n, c)  # fixed steps over concrete times: n is known
        restores = _restores(plan)
        matches = oc_vf == 1 + 6 * plan.total + restores
    else:  # every state stored: forward + one taped evaluation per step, no restores
        restores = 0
        matches = oc_vf == 1 + 12 * n
    if not matches:
        warn(f"odeckpt's traced evaluations ({oc_vf}) differ from its plan (n={n}, c={c})")
    return Counts(n, c, oc_vf, (oc_vf - 1 - restores) / 6, matches, dfx_vf, (dfx_vf - 1) / 6)


def forward_calibration(n: int) -> dict[str, int]:
    """Vector-field evaluations of one forward solve (no gradient) of n fixed steps."""
    setup, params = fixed_setup(n), (LINEAR_Y0, LINEAR_A)
    return {lib: count_calls(make_loss(lib, setup, 8, counted(linear)), params) for lib in LIBS}


def target_cell(r: float, target: float) -> str:
    """`r` against a target with two decimals, e.g. `1.008 (target <= 1.02: met)`."""
    met = r <= target
    return f"{r:.3f} (target <= {target:g}: {'met' if met else '**not met**'})"


def _steps_cell(x: float) -> str:
    return f"{x:.0f}" if x == int(x) else f"{x:.1f}"


def counts_table(counts: list[Counts]) -> Table:
    columns = [
        "n",
        "c",
        "Revolve optimum n + t(n, c)",
        "online lower bound",
        "odeckpt vf evals (traced)",
        "odeckpt step evals",
        "matches plan",
        "odeckpt / optimum",
        "odeckpt / online bound",
        "diffrax step evals",
        "diffrax / optimum",
    ]
    rows = []
    for k in counts:
        rows.append(
            [
                str(k.n),
                str(k.c),
                str(k.optimum),
                str(k.lower_bound),
                str(k.oc_vf),
                _steps_cell(k.oc_steps),
                "yes" if k.oc_matches else "**no**",
                target_cell(k.oc_steps / k.optimum, 1.02),
                f"{k.oc_steps / k.lower_bound:.3f}",
                _steps_cell(k.dfx_steps),
                f"{k.dfx_steps / k.optimum:.2f}",
            ]
        )
    return Table(columns, rows)


# ----------------------------------------------------------------------------------
# 2. Storing every step


def store_all_table(n: int) -> Table:
    setup, params = fixed_setup(n), (LINEAR_Y0, LINEAR_A)
    vf = counted(linear)
    forward = {lib: count_calls(make_loss(lib, setup, DEFAULT, vf), params) for lib in LIBS}
    cases = [
        ("odeckpt", DEFAULT, "`CheckpointAdjoint()` (default: every state fits the budget)"),
        ("odeckpt", n, f"`CheckpointAdjoint(checkpoints={n})` (= max_steps)"),
        ("diffrax", n, f"`RecursiveCheckpointAdjoint(checkpoints={n})` (= max_steps)"),
        (
            "diffrax",
            DEFAULT,
            "`RecursiveCheckpointAdjoint()` (default: "
            f"{num_checkpoints('diffrax', setup, LINEAR_Y0, DEFAULT)} checkpoints)",
        ),
    ]
    rows = []
    for lib, c, label in cases:
        grad = count_calls(make_grad(lib, setup, c, vf), params)
        r = grad / forward[lib]
        cell = ratio_cell(r, 2.0) if lib == "odeckpt" else f"{r:.2f} (reference)"
        rows.append([label, str(forward[lib]), str(grad), cell])
    return Table(
        ["adjoint", "forward vf evals", "gradient vf evals", "gradient / forward"],
        rows,
        caption=f"Storing every step: vector-field evaluations, n = {n} fixed steps, "
        f"max_steps = {n}, Tsit5",
    )


# ----------------------------------------------------------------------------------
# 3. Compile time


def _compile_split(make_fn: Callable, args) -> tuple[Callable, float, float, float]:
    """(compiled, trace s, lower s, XLA compile s) of a fresh function, caches cleared."""
    fn = make_fn()
    jax.clear_caches()
    t0 = time.perf_counter()
    traced = jax.jit(fn).trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1, t3 - t2


def _median_split(make_fn, args, repeats):
    results = [_compile_split(make_fn, args) for _ in range(repeats)]
    return results[0][0], tuple(statistics.median(r[i] for r in results) for i in (1, 2, 3))


LINEAR_2D = Setup(linear, 10.0, 0.01, False, 4096, tuple(np.linspace(0.0, 10.0, 11)))
LINEAR_2D_PARAMS = (jnp.array([1.0, 0.0]), jnp.array([[0.0, 1.0], [-1.0, -0.1]]))

NODE_BATCH = 256
NODE_TS = tuple(np.linspace(0.0, 1.0, 10))


def _node_vf(t, y, model):
    return model(y)


def node_params():
    model = eqx.nn.MLP(2, 2, 64, depth=2, activation=jax.nn.tanh, key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    y0 = jax.random.normal(jax.random.key(1), (NODE_BATCH, 2))
    target = jax.random.normal(jax.random.key(2), (NODE_BATCH, len(NODE_TS), 2))
    return (params, y0, target), static


def make_node_step(lib: str, c, static) -> Callable:
    """One training step: value and gradient of the batch loss, then an SGD update."""
    setup = Setup(_node_vf, 1.0, 0.05, False, 4096, NODE_TS, rtol=1e-4, atol=1e-6)

    def loss(params, y0, target):
        model = eqx.combine(params, static)
        ys = jax.vmap(lambda y: solve(lib, setup, y, model, c))(y0)
        return jnp.mean((ys - target) ** 2)

    def step(params, y0, target):
        value, grads = jax.value_and_grad(loss)(params, y0, target)
        return value, jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    return step


def compile_cases() -> list:
    """The compile table's cases: `(label, checkpoints, make, args, target)`, `make(lib,
    c)` building the function to compile: the defaults against the first compile target
    (0.5), c = 16 against the checkpointed one (0.7)."""
    node_args, static = node_params()
    node = f"neural ODE training step (MLP 2-64-64-2, vmap {NODE_BATCH})"

    def linear(ts: bool, max_steps: int):
        setup = dataclasses.replace(LINEAR_2D, max_steps=max_steps, ts=LINEAR_2D.ts if ts else None)
        label = f"2-D linear ODE, adaptive, SaveAt({'ts' if ts else 't1'}), max_steps {max_steps}"
        return label, lambda lib, c: make_grad(lib, setup, c), (LINEAR_2D_PARAMS,)

    node_case = (node, lambda lib, c: make_node_step(lib, c, static), node_args)
    ts_4096 = linear(True, 4096)
    return [
        (ts_4096[0], DEFAULT, *ts_4096[1:], 0.5),
        (node_case[0], DEFAULT, *node_case[1:], 0.5),
        *[
            (label, 16, make, args, 0.7)
            for label, make, args in (
                ts_4096,
                linear(True, 8192),
                linear(False, 4096),
                linear(False, 8192),
                node_case,
            )
        ],
    ]


def compile_table(quick: bool) -> tuple[Table, list]:
    # One fresh compile per library and case in quick mode, the median of 3 in full mode
    # (a single compile on a shared 2-core machine varies by 10-15%).
    repeats = 1 if quick else 3
    cases = compile_cases()
    rows, ratios = [], []
    for i, (label, c, make, args, target) in enumerate(cases):
        split = {}
        order = LIBS if i % 2 == 0 else LIBS[::-1]
        for lib in order:
            _, split[lib] = _median_split(
                lambda lib=lib, make=make, c=c: make(lib, c), args, repeats
            )
        total = {lib: sum(split[lib]) for lib in LIBS}
        r = total["odeckpt"] / total["diffrax"]
        ratios.append((f"{label}, c={c}", r))
        rows.append(
            [
                label,
                str(c),
                " / ".join(seconds_cell(s) for s in split["odeckpt"]),
                " / ".join(seconds_cell(s) for s in split["diffrax"]),
                seconds_cell(total["odeckpt"]),
                seconds_cell(total["diffrax"]),
                ratio_cell(r, target),
            ]
        )
        print(f"  gradient: compile {label} c={c} done", flush=True)
    columns = [
        "problem",
        "checkpoints",
        "odeckpt trace / lower / compile",
        "diffrax trace / lower / compile",
        "odeckpt total",
        "diffrax total",
        "compile ratio",
    ]
    caption = (
        "Compile time of `jax.jit(jax.grad(loss))` (trace + lower + XLA compile of a fresh "
        f"function after `jax.clear_caches()`, median of {repeats})"
    )
    return Table(columns, rows, caption), ratios


# ----------------------------------------------------------------------------------
# 4. Gradient wall time


def _rel_diff(a, b) -> float:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return max(
        float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-300))
        for x, y in zip(la, lb, strict=True)
    )


def _steps(setup: Setup, params) -> tuple[int, int]:
    y0, args = params
    sol = jax.jit(
        lambda y0, args: oc.diffeqsolve(
            setup.vf,
            oc.Tsit5(),
            0.0,
            setup.t1,
            setup.dt0,
            y0,
            args,
            stepsize_controller=oc.PIDController(rtol=setup.rtol, atol=setup.atol),
            max_steps=setup.max_steps,
        )
    )(y0, args)
    return int(sol.stats["num_accepted_steps"]), int(sol.stats["num_rejected_steps"])


def walltime_rows(name: str, setup: Setup, params, cs, budget: float, rounds: int):
    accepted, rejected = _steps(setup, params)
    compiled = {}
    for c in cs:
        for lib in LIBS:
            fn = make_grad(lib, setup, c)
            compiled[(lib, c)] = jax.jit(fn).lower(params).compile()
    rows, ratios = [], []
    for c in cs:
        fns = {lib: compiled[(lib, c)] for lib in LIBS}
        grads = {lib: fn(params) for lib, fn in fns.items()}
        samples = interleaved_samples(fns, (params,), budget, min_rounds=rounds)
        med = {lib: statistics.median(v) for lib, v in samples.items()}
        r = paired_ratio(samples["odeckpt"], samples["diffrax"])
        ratios.append((f"{name}, c={c}", r))
        used = {lib: num_checkpoints(lib, setup, params[0], c) for lib in LIBS}
        c_cell = (
            str(c)
            if c != DEFAULT
            else f"default (odeckpt {used['odeckpt']}, diffrax {used['diffrax']})"
        )
        rows.append(
            [
                name,
                f"{accepted} / {rejected}",
                c_cell,
                seconds_cell(med["odeckpt"]),
                seconds_cell(med["diffrax"]),
                ratio_cell(r, 0.7),
                f"{_rel_diff(grads['odeckpt'][1], grads['diffrax'][1]):.1e} / "
                f"{_rel_diff(grads['odeckpt'][0], grads['diffrax'][0]):.1e}",
            ]
        )
        print(f"  gradient: wall time {name} c={c} done", flush=True)
    return rows, ratios


def node_walltime_rows(cs, budget: float, rounds: int) -> list:
    """Wall time of the vmapped neural-ODE training step of the compile table: the
    batch's per-element parameter cotangents and `lax.cond`s under `jax.vmap` weigh
    here, where the 2-D problems above measure per-step overhead."""
    args, static = node_params()
    rows = []
    for c in cs:
        fns = {lib: jax.jit(make_node_step(lib, c, static)).lower(*args).compile() for lib in LIBS}
        # The step returns the loss and params - 1e-3 * gradient: recover the gradients.
        grads = {
            lib: jax.tree.map(lambda p, q: (p - q) / 1e-3, args[0], fn(*args)[1])
            for lib, fn in fns.items()
        }
        samples = interleaved_samples(fns, args, budget, min_rounds=rounds)
        med = {lib: statistics.median(v) for lib, v in samples.items()}
        r = paired_ratio(samples["odeckpt"], samples["diffrax"])
        rows.append(
            [
                f"neural ODE training step (MLP 2-64-64-2, vmap {NODE_BATCH}), [0, 1]",
                "—",
                str(c),
                seconds_cell(med["odeckpt"]),
                seconds_cell(med["diffrax"]),
                f"{r:.2f} (no target set)",
                f"{_rel_diff(grads['odeckpt'], grads['diffrax']):.1e} / —",
            ]
        )
        print(f"  gradient: wall time neural ODE c={c} done", flush=True)
    return rows


def walltime_table(quick: bool) -> tuple[Table, list]:
    budget, rounds = (1.0, 5) if quick else (2.0, 7)
    damped_params = (jnp.asarray(DAMPED.y0), jnp.asarray(DAMPED.args))
    rows, ratios = walltime_rows(
        "damped oscillator (damping 1000), [0, 10], 2-D",
        damped_setup(),
        damped_params,
        (16, 64, DEFAULT),
        budget,
        rounds,
    )
    rd = rd_setup(quick)
    more, more_ratios = walltime_rows(
        f"reaction-diffusion, {RD_POINTS} points, [0, {rd.t1:g}]",
        rd,
        rd_params(),
        (16, 64, DEFAULT),
        budget,
        rounds,
    )
    node = node_walltime_rows((16, DEFAULT), budget, rounds)
    columns = [
        "problem",
        "steps acc / rej",
        "checkpoints",
        "odeckpt gradient",
        "diffrax gradient",
        "time ratio",
        "gradient rel diff: parameters / y0",
    ]
    caption = (
        "Gradient wall time (`jax.jit(jax.grad(loss))`, Tsit5, PIDController(rtol=1e-6, "
        "atol=1e-8), dt0=0.01, max_steps=4096), medians of interleaved samples"
    )
    return Table(columns, rows + more + node, caption), ratios + more_ratios


# ----------------------------------------------------------------------------------
# 5. Backward overhead per iteration


def overhead_table(quick: bool, n: int = 4000) -> Table:
    """Backward time across c; every function sampled in the same interleaved rounds, so
    that the growth with c is a paired ratio.

    Two measures. Per backward step evaluation: (gradient - forward) / (advances +
    reversals). Per reversed step: (gradient - forward - advances x the forward's time
    per step) / n, the time of one reversal with what the engine spends around it.
    Every solve reverses the same n steps, while the advances fall as c grows (10,865,
    5,793 and 3,745 at c = 16, 64, 256), and an advance costs a fraction of a reversal
    (a step, against a step, its VJP and the cotangent updates). So the first measure
    rises with c even for an engine whose costs do not depend on c; the "mix alone"
    column gives that rise: its value at c, were each advance and each reversal to cost
    what they cost at c = 16. The second measure is what "overhead must not jump with
    c" asks about."""
    setup, params = fixed_setup(n), (LINEAR_Y0, LINEAR_A)
    cs = (16, 64) if quick else (16, 64, 256)
    vf = counted(linear)
    advances, fns = {}, {}
    for c in cs:
        advances[("odeckpt", c)] = schedules.known_plan(n, c).backward_advances
        dfx_vf = count_calls(make_grad("diffrax", setup, c, vf), params)
        advances[("diffrax", c)] = (dfx_vf - 1) / 6 - 2 * n
        for lib in LIBS:
            fns[f"{lib} grad {c}"] = jax.jit(make_grad(lib, setup, c)).lower(params).compile()
            fns[f"{lib} fwd {c}"] = jax.jit(make_loss(lib, setup, c)).lower(params).compile()
        print(f"  gradient: backward overhead c={c} compiled", flush=True)
    budget = 2.0 if quick else 4.0
    samples = interleaved_samples(fns, (params,), budget, min_rounds=5 if quick else 7)
    rounds = range(len(samples[f"odeckpt grad {cs[0]}"]))

    def backward(lib, c, r):
        return samples[f"{lib} grad {c}"][r] - samples[f"{lib} fwd {c}"][r]

    def per_eval(lib, c, r):
        return backward(lib, c, r) / (advances[(lib, c)] + n)

    def per_reversal(lib, c, r):
        step = samples[f"{lib} fwd {c}"][r] / n
        return (backward(lib, c, r) - advances[(lib, c)] * step) / n

    def mix_alone(lib, c, r):
        step = samples[f"{lib} fwd {cs[0]}"][r] / n
        now = (n * per_reversal(lib, cs[0], r) + advances[(lib, c)] * step) / (
            n + advances[(lib, c)]
        )
        return now / per_eval(lib, cs[0], r)

    def median(fn, lib, c):
        return statistics.median(fn(lib, c, r) for r in rounds)

    def growth(fn, lib, c):
        return statistics.median(fn(lib, c, r) / fn(lib, cs[0], r) for r in rounds)

    rows = []
    for c in cs:
        for lib in LIBS:
            target = growth(per_reversal, lib, c)
            cell = ratio_cell(target, 1.5) if lib == "odeckpt" else f"{target:.2f}"
            rows.append(
                [
                    lib,
                    str(c),
                    seconds_cell(statistics.median(samples[f"{lib} fwd {c}"])),
                    seconds_cell(statistics.median(samples[f"{lib} grad {c}"])),
                    f"{advances[(lib, c)]:.0f} + {n}",
                    seconds_cell(median(per_eval, lib, c)),
                    f"{growth(per_eval, lib, c):.2f}",
                    f"{median(mix_alone, lib, c):.2f}",
                    seconds_cell(median(per_reversal, lib, c)),
                    cell,
                ]
            )
    columns = [
        "library",
        "checkpoints",
        "forward",
        "gradient",
        "backward evals: advances + reversals",
        "(gradient - forward) / backward evals",
        f"vs c = {cs[0]} (paired)",
        "mix alone",
        "per reversed step",
        f"vs c = {cs[0]} (paired)",
    ]
    caption = (
        f"Backward time across c, 2-D linear ODE, n = {n} fixed steps (odeckpt's advances "
        "from its plan, diffrax's counted by callback; forward = `jax.jit(loss)` alone)"
    )
    return Table(columns, rows, caption)


# ----------------------------------------------------------------------------------
# The plot


def tradeoff_plot(sweep: list[Counts], quick: bool) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from bench_memory import tradeoff_points

    points = tradeoff_points(quick)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    cs = [k.c for k in sweep]
    n = sweep[0].n
    dense_c = np.unique(np.geomspace(min(cs), max(cs), 60).astype(int))
    ax1.plot(
        dense_c,
        [schedules.optimal_total(n, int(c)) for c in dense_c],
        "k--",
        label="Revolve optimum n + t(n, c)",
    )
    ax1.plot(cs, [k.oc_steps for k in sweep], "o-", label="odeckpt")
    ax1.plot(cs, [k.dfx_steps for k in sweep], "s-", label="diffrax")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("checkpoints c")
    ax1.set_ylabel("step evaluations per gradient")
    ax1.set_title(f"Step evaluations, n = {n} fixed steps (Tsit5)", fontsize=10)
    ax1.legend()
    for lib, marker in (("odeckpt", "o-"), ("diffrax", "s-")):
        pts = [p for p in points["points"] if p["lib"] == lib]
        ax2.plot(
            [p["temp_bytes"] / 2**20 for p in pts],
            [p["seconds"] * 1e3 for p in pts],
            marker,
            label=lib,
        )
        for p in pts:
            ax2.annotate(
                f"c={p['c']}",
                (p["temp_bytes"] / 2**20, p["seconds"] * 1e3),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
    ax2.set_xlabel("compiled temporary memory (MiB)")
    ax2.set_ylabel("gradient time (ms)")
    ax2.set_title(points["title"], fontsize=10)
    ax2.legend()
    fig.tight_layout()
    path, relative = plot_path("tradeoff.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return relative


# ----------------------------------------------------------------------------------
# The section


def _timed(what: str, fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    print(f"  gradient: {what} took {time.perf_counter() - start:.0f} s", flush=True)
    return out


def run(quick: bool) -> Section:
    start = time.perf_counter()
    calibration = forward_calibration(1000)
    expected = 1 + 6 * 1000
    if any(v != expected for v in calibration.values()):
        warn(f"forward evaluations per 1000 steps {calibration}, expected {expected}")
    table_cs = (4, 8, 32, 128)
    sweep_cs = table_cs if quick else (2, 4, 8, 16, 32, 64, 128, 256)
    sweep = []
    for c in sweep_cs:
        sweep.append(count_fixed(1000, c))
        print(f"  gradient: counts n=1000 c={c} done", flush=True)
    counts = [k for k in sweep if k.c in table_cs]
    # n = 10000 with c = 4 would cost ~170,000 steps of host callbacks per library
    # (minutes): full mode counts c = 8, 32, 128 there.
    for c in (128,) if quick else table_cs[1:]:
        counts.append(count_fixed(10000, c))
        print(f"  gradient: counts n=10000 c={c} done", flush=True)
    print(f"  gradient: step counts took {time.perf_counter() - start:.0f} s", flush=True)
    store_all = _timed("store-all counts", store_all_table, 1000)
    compile_tab, compile_ratios = _timed("compile times", compile_table, quick)
    wall_tab, wall_ratios = _timed("wall times", walltime_table, quick)
    overhead = _timed("backward overhead", overhead_table, quick)
    plot = _timed("trade-off plot", tradeoff_plot, sweep, quick)

    met = sum(k.oc_steps / k.optimum <= 1.02 for k in counts)
    notes = [
        f"Summary: step evaluations within 2% of the Revolve optimum on {met}/{len(counts)}; "
        f"compile ratio <= 0.5 on {sum(r <= 0.5 for _, r in compile_ratios)}/"
        f"{len(compile_ratios)}; gradient time ratio <= 0.7 on "
        f"{sum(r <= 0.7 for _, r in wall_ratios)}/{len(wall_ratios)}.",
        "Step evaluations: gradient of the mean square of y(n) for the 2-D linear ODE "
        "y' = A y, Tsit5 with `ConstantStepSize`, dt = 1 over [0, n] (exactly n steps), "
        "`max_steps = n`; odeckpt `CheckpointAdjoint(checkpoints=c)`, diffrax "
        "`RecursiveCheckpointAdjoint(checkpoints=c)`. Vector-field evaluations are counted "
        "by a `jax.debug.callback` in the vector field, in builds separate from the timed "
        f"ones. Calibration: a forward solve of 1000 steps makes {calibration['odeckpt']} "
        f"(odeckpt) and {calibration['diffrax']} (diffrax) evaluations, i.e. 1 + 6 per step "
        "(Tsit5 is FSAL). odeckpt step evaluations = (evaluations - 1 - restores) / 6, "
        "restores being the Restore actions of `schedules.known_plan(n, c)` (each "
        "recomputes the first stage of a checkpoint; with fixed steps over concrete times "
        "the step count is known before the solve, so the forward pass stores where "
        "Revolve's first sweep would, `schedules.known_slots`, where an adaptive solve "
        'places checkpoints online); "matches plan" says the traced '
        "count equals 1 + 6 (plan total) + restores exactly. diffrax step evaluations = "
        "(evaluations - 1) / 6 (diffrax stores the first stage in its checkpoints; a "
        "fraction means a few evaluations outside steps). The online lower bound "
        "(`schedules.online_lower_bound`) is the least cost of any schedule that "
        "evaluates every step once forward before n is known (the adaptive case); "
        "target: within 2% of the offline optimum.",
        "Compile: `jax.jit(jax.grad(loss))` of the 2-D linear ODE y' = A y over [0, 10] "
        "(PIDController(1e-6, 1e-8), dt0 = 0.01, SaveAt(ts) with 11 points or SaveAt(t1), "
        "max_steps 4096 or 8192, gradient in y0 and A), and one neural-ODE training step "
        f"(`eqx.nn.MLP(2, 2, 64, depth=2)`, `jax.vmap` over {NODE_BATCH} initial states, "
        "Tsit5, PIDController(1e-4, 1e-6), "
        "SaveAt(ts) with 10 points, value and gradient in the MLP parameters plus an SGD "
        "update). Defaults: odeckpt `CheckpointAdjoint()` (stores every step when "
        "max_steps states, for the whole batch under `jax.vmap`, fit 16 MiB; otherwise "
        "min(fit in 128 MiB, 90) checkpoints for max_steps = 4096), diffrax "
        "`RecursiveCheckpointAdjoint()` "
        "(floor(sqrt(2 max_steps)) checkpoints, 90 for max_steps = 4096). Targets: "
        "ratio <= 0.5 with the defaults, <= 0.7 with 16 checkpoints. Times are wall "
        "times; XLA's CPU compiler runs its code generation on both cores, about the same "
        "time per generated kernel for both libraries; `python benchmarks/kernels.py` "
        "counts the kernels of each case (deterministic, where compile times vary by up "
        "to 1.5x between runs).",
        "Wall time: gradient of the mean square of the saved states with respect to y0 and "
        "the parameters, both libraries compiled first, then sampled in alternation; the "
        "ratio is the median of per-round ratios. Reaction-diffusion: D = 1e-5, r = 1, "
        "u0 = 0.5 + 0.3 sin 2 pi x + 0.1 cos 6 pi x, SaveAt(t1). Its steps are limited by "
        "stability (many rejections), and the exact discrete gradient in u0 is dominated by "
        "grid-scale (Nyquist) modes of size ~1e6, amplified through the steps: rounding "
        "differences between two implementations (or two checkpoint counts) show up there "
        "at the 1e-3 to 1e-1 level, while the smooth modes and the parameter gradients "
        "agree; the last column gives max |difference| / max |diffrax| for the parameters "
        "and for y0. Target: ratio <= 0.7. The neural-ODE rows time the training step of "
        "the compile table (value and gradient in the MLP's weights, an SGD update; no "
        "target set for it): under `jax.vmap` each batch element carries its own cotangent "
        "of the 4,482 weights, and odeckpt's default counts the whole batch when it sizes "
        "the store (see `CheckpointAdjoint`). "
        "Backward overhead: a backward step evaluation is a plain advance or a reversal "
        "(a taped step and its VJP); every solve reverses the n steps once, and the "
        "advances fall as c grows. Per evaluation: (gradient - forward) / (advances + "
        "reversals). Per reversed step: (gradient - forward - advances x forward / n) / n, "
        "the advances priced at the forward's time per step. An advance costs a fraction "
        "of a reversal, so the time per evaluation rises with c as reversals become a "
        'larger share, with no cost that depends on c; "mix alone" is that rise, '
        "computed from the c = 16 costs. Target: odeckpt's time per reversed step at "
        "c = 64 (and 256) at most 1.5x its value at c = 16 (diffrax's growth shown for "
        "reference).",
    ]
    return Section(
        title="Gradients against diffrax: step evaluations, compile time, wall time",
        table=counts_table(counts),
        notes=notes,
        plots=[plot],
        extra_tables=[store_all, compile_tab, wall_tab, overhead],
    )
