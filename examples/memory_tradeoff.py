"""Memory against time: a gradient through a large solve, for every checkpoint count.

A 1-D reaction–diffusion (Fisher–KPP) on a periodic grid of `--points` cells,
`du/dt = D u_xx + r u (1 - u)`, is solved with `Tsit5` in `--steps` constant steps. The
gradient of `sum(u(T)^2)` with respect to the initial field `u0` and to `(D, r)` goes
through `CheckpointAdjoint(checkpoints=c)` for a range of c, from 2 to one per step.
For each c:

- memory: XLA's `temp_size_in_bytes` of the compiled gradient
  (`jax.jit(f).lower(...).compile().memory_analysis()`), against the bytes of c stored
  states;
- time: the best of `--repeats` runs of the compiled gradient;
- step evaluations: what the checkpointed loop executes, `schedules.online_plan(n, c).total`
  (the forward pass places checkpoints without knowing n), and the offline Revolve
  optimum `schedules.optimal_total(n, c)`, both relative to storing every step (2n).

Every c gives the same gradient (checked, and printed).

    python examples/memory_tradeoff.py
    python examples/memory_tradeoff.py --points 8192 --steps 512

Writes `memory_tradeoff.png` into `--out`.
"""

import argparse
import dataclasses
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

import odeckpt as oc
from odeckpt import schedules

MiB = 2**20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Problem size, the checkpoint counts, repeats, and the output directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=4096, help="grid cells (state size)")
    p.add_argument("--steps", type=int, default=256, help="solver steps n")
    p.add_argument(
        "--checkpoints",
        type=int,
        nargs="+",
        default=[2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128],
        help="checkpoint counts c to measure (one per step, c = n, is always added)",
    )
    p.add_argument("--repeats", type=int, default=5, help="timed gradients per c")
    p.add_argument("--quick", action="store_true", help="256 cells, 32 steps, c = 2, 4, 32")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNG (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.points, args.steps, args.checkpoints, args.repeats = 256, 32, [2, 4], 2
    args.checkpoints = sorted({c for c in args.checkpoints if c < args.steps} | {args.steps})
    return args


DIFFUSION, RATE, DT = 4.0, 0.5, 0.1
"""`D dt / dx^2 = 0.4`: within Tsit5's stability region (dx = 1)."""


def fisher_kpp(t, u, args):
    """`D u_xx + r u (1 - u)` on a periodic grid of unit spacing."""
    diffusion, rate = args
    laplacian = jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1)
    return diffusion * laplacian + rate * u * (1 - u)


def initial_field(points: int):
    """Eight bumps of height 1/2: each grows into two fronts travelling at `2 sqrt(D r)`."""
    x = jnp.arange(points, dtype=float)
    centres = (jnp.arange(8, dtype=x.dtype) + 0.5) * points / 8
    width = points / 128
    return 0.5 * jnp.sum(jnp.exp(-(((x[None, :] - centres[:, None]) / width) ** 2)), axis=0)


def make_gradient(steps: int, checkpoints: int):
    """`(u0, (D, r)) -> gradient of sum(u(T)^2)`, through `CheckpointAdjoint(checkpoints)`."""

    def loss(u0, args):
        sol = oc.diffeqsolve(
            fisher_kpp,
            oc.Tsit5(),
            0.0,
            steps * DT,
            DT,
            u0,
            args,
            adjoint=oc.CheckpointAdjoint(checkpoints=checkpoints),
            max_steps=steps,
        )
        return jnp.sum(sol.ys[-1] ** 2)

    return jax.grad(loss, argnums=(0, 1))


@dataclasses.dataclass
class Measurement:
    """One checkpoint count's compiled memory, time, planned cost and gradient."""

    checkpoints: int
    temp_bytes: int
    seconds: float
    online_total: int
    optimal_total: int
    gradient: np.ndarray  # flattened, to check that every c gives the same one


def compile_all(args: argparse.Namespace, operands) -> dict:
    """The compiled gradient for every checkpoint count."""
    compiled = {}
    for c in args.checkpoints:
        compiled[c] = jax.jit(make_gradient(args.steps, c)).lower(*operands).compile()
        print(f"compiled c = {c}", flush=True)
    return compiled


def best_times(compiled: dict, operands, repeats: int) -> dict:
    """The fastest of `repeats` runs of each function, run in interleaved rounds so that
    a busy spell of the machine does not land on one checkpoint count only."""
    for fn in compiled.values():
        jax.block_until_ready(fn(*operands))  # warm-up
    samples = {c: [] for c in compiled}
    for _ in range(repeats):
        for c, fn in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*operands))
            samples[c].append(time.perf_counter() - start)
    return {c: min(s) for c, s in samples.items()}


def measure(args: argparse.Namespace, operands) -> list[Measurement]:
    """Memory analysis, time, planned cost and gradient for every checkpoint count."""
    compiled = compile_all(args, operands)
    seconds = best_times(compiled, operands, args.repeats)
    results = []
    for c, fn in compiled.items():
        gradient = np.concatenate([np.ravel(g) for g in jax.tree.leaves(fn(*operands))])
        temp = int(fn.memory_analysis().temp_size_in_bytes)
        online, optimal = (
            schedules.online_plan(args.steps, c),
            schedules.optimal_total(args.steps, c),
        )
        results.append(Measurement(c, temp, seconds[c], online.total, optimal, gradient))
    return results


def plain_log_ticks(axis) -> None:
    """Ticks at 1, 2, 5 times powers of ten, written as plain numbers."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def plot_memory(ax, results: list[Measurement], state_bytes: int) -> None:
    """XLA's temp bytes against c, and the fewest-checkpoint run plus one state per extra one."""
    c = np.array([m.checkpoints for m in results])
    mem = np.array([m.temp_bytes for m in results]) / MiB
    ax.loglog(c, mem, "o-", label="XLA temp_size_in_bytes")
    ax.loglog(
        c[:-1],
        mem[0] + (c[:-1] - c[0]) * state_bytes / MiB,
        "k--",
        lw=1,
        label=f"c = {c[0]}, plus one state ({state_bytes // 1024} KiB) per checkpoint",
    )
    ax.annotate(
        "every step stored:\ny and the solver's\nfirst stage",
        (c[-1], mem[-1]),
        textcoords="offset points",
        xytext=(-90, -30),
        fontsize=8,
    )
    ax.set(xlabel="checkpoints c", ylabel="MiB", title="Memory of the compiled gradient")
    plain_log_ticks(ax.yaxis)
    ax.legend(fontsize=8)


def plot_cost(ax, results: list[Measurement], n: int) -> None:
    """Measured time and planned step evaluations against c, relative to storing every step."""
    c = [m.checkpoints for m in results]
    seconds = np.array([m.seconds for m in results])
    ax.semilogx(c, seconds / seconds[-1], "o-", label="measured gradient time")
    ax.semilogx(
        c,
        [m.online_total / (2 * n) for m in results],
        "s--",
        label="step evaluations: online_plan(n, c).total (executed)",
    )
    ax.semilogx(
        c,
        [m.optimal_total / (2 * n) for m in results],
        "k:",
        label="step evaluations: optimal_total(n, c) (Revolve)",
    )
    ax.set(
        xlabel="checkpoints c",
        ylabel="relative to storing every step (c = n)",
        title=f"Cost of a gradient (n = {n} steps)",
    )
    ax.legend(fontsize=8)


def plot_tradeoff(ax, results: list[Measurement]) -> None:
    """Time against memory, labelled with c at the powers of two."""
    mem = [m.temp_bytes / MiB for m in results]
    ms = [m.seconds * 1e3 for m in results]
    ax.plot(mem, ms, "o-")
    for m, x, y in zip(results, mem, ms, strict=True):
        if m.checkpoints & (m.checkpoints - 1) == 0 or m is results[-1]:
            ax.annotate(f"c={m.checkpoints}", (x, y), textcoords="offset points", xytext=(5, 3))
    ax.set(xscale="log", xlabel="memory (MiB)", ylabel="gradient time (ms)", title="The trade-off")
    plain_log_ticks(ax.xaxis)


def plot(results: list[Measurement], args: argparse.Namespace, path: pathlib.Path) -> None:
    """Memory against c, cost against c (measured and planned), and time against memory."""
    state_bytes = args.points * 8
    fig = Figure(figsize=(15, 4.8), layout="constrained")
    ax_mem, ax_cost, ax_trade = fig.subplots(1, 3)
    plot_memory(ax_mem, results, state_bytes)
    plot_cost(ax_cost, results, args.steps)
    plot_tradeoff(ax_trade, results)
    fig.suptitle(
        f"Fisher–KPP, {args.points} cells ({state_bytes // 1024} KiB state), Tsit5, "
        f"{args.steps} steps: gradient through CheckpointAdjoint(checkpoints=c)"
    )
    fig.savefig(path, dpi=120)


def print_table(results: list[Measurement], n: int) -> None:
    """A Markdown table, one line per checkpoint count."""
    print("| c | temp memory (MiB) | gradient time (ms) | online_plan total | Revolve optimum |")
    print("|---:|---:|---:|---:|---:|")
    for m in results:
        print(
            f"| {m.checkpoints} | {m.temp_bytes / MiB:.2f} | {m.seconds * 1e3:.1f} "
            f"| {m.online_total} ({m.online_total / (2 * n):.2f}) "
            f"| {m.optimal_total} ({m.optimal_total / (2 * n):.2f}) |"
        )


def main(argv: list[str] | None = None) -> list[Measurement]:
    """Measure every checkpoint count; print the table and a summary; plot."""
    jax.config.update("jax_enable_x64", True)
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    operands = (initial_field(args.points), (jnp.asarray(DIFFUSION), jnp.asarray(RATE)))
    results = measure(args, operands)
    print_table(results, args.steps)
    path = args.out / "memory_tradeoff.png"
    plot(results, args, path)
    full, fewest = results[-1], results[0]
    spread = max(np.max(np.abs(m.gradient - full.gradient)) for m in results)
    scale = np.max(np.abs(full.gradient))
    print(
        f"c = {fewest.checkpoints}: {fewest.temp_bytes / MiB:.1f} MiB and "
        f"{fewest.seconds / full.seconds:.1f}x the time of storing all {args.steps} steps "
        f"({full.temp_bytes / MiB:.1f} MiB); every c gives the same gradient "
        f"(max difference {spread / scale:.1e} relative). plot: {path}"
    )
    return results


if __name__ == "__main__":
    main()
