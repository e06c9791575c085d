"""Damped systems on one page: each adjoint's gradient error and backward cost as damping grows.

The damped oscillator `y'' + k y' + y = 0`, as `dy/dt = A y` with `A = [[0, 1], [-1, -k]]`,
`y(0) = (1, 0)`, on t in [0, 10] for k = 1, 10, 100, 1000: from lightly damped to stiff.
The loss sums `|y(t_i)|^2` over 12 output times; its gradient with respect to `A` and
`y(0)` is compared with the closed form `y(t) = expm(A t) y(0)` (`jax.scipy.linalg.expm`).
Every solve uses `Tsit5` with `PIDController(rtol=1e-6, atol=1e-8)`.

- `CheckpointAdjoint` differentiates the solver's own steps (discretise-then-optimise):
  its gradient is as accurate as the forward solution, whatever the damping; storing
  fewer states (`checkpoints=16`) changes the cost, never the gradient.
- `BacksolveAdjoint` integrates `y` backwards with the adjoint. Backwards, a mode that
  decays at rate k grows at rate k: anchored only at the outputs
  (`checkpoints=1`) the reconstruction leaves the true `y` and the gradient is lost
  (reported as NaN); anchored at stored states it holds.
- `InterpolatingAdjoint` reads `y` from the forward pass's dense output: stable.

Backward cost is counted in vector-field evaluations (one per evaluation, or per VJP of
the vector field), with `jax.debug.callback`, less the forward solve's evaluations.

    python examples/damped_system.py
    python examples/damped_system.py --dampings 1 100 --adjoints checkpoint interpolating

Writes `damped_system.png` into `--out`.
"""

import argparse
import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import expm
from matplotlib.figure import Figure

import odeckpt as oc

T_END = 10.0
NUM_OUTPUTS = 12

ADJOINTS = {
    "checkpoint": ("CheckpointAdjoint", {}, "every step stored"),
    "checkpoint-16": ("CheckpointAdjoint", {"checkpoints": 16}, ""),
    "backsolve": ("BacksolveAdjoint", {}, ""),
    "backsolve-outputs": ("BacksolveAdjoint", {"checkpoints": 1}, "anchored at outputs only"),
    "interpolating": ("InterpolatingAdjoint", {}, ""),
}
"""Name on the command line: (odeckpt class, its arguments, a note for the label)."""


def label(name: str) -> str:
    """How an adjoint is constructed, e.g. `CheckpointAdjoint(checkpoints=16)`."""
    class_name, kwargs, note = ADJOINTS[name]
    call = f"{class_name}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    return f"{call} ({note})" if note else call


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Dampings, adjoints, tolerances and the output directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dampings",
        type=float,
        nargs="+",
        default=[1.0, 10.0, 100.0, 1000.0],
        help="values of k (default: 1 10 100 1000)",
    )
    p.add_argument(
        "--adjoints",
        nargs="+",
        default=list(ADJOINTS),
        choices=list(ADJOINTS),
        help="adjoints to compare (default: all)",
    )
    p.add_argument("--rtol", type=float, default=1e-6, help="solver relative tolerance")
    p.add_argument("--atol", type=float, default=1e-8, help="solver absolute tolerance")
    p.add_argument(
        "--max-steps",
        type=int,
        default=16384,
        help="bound on solver steps (k = 1000 takes about 3600)",
    )
    p.add_argument("--quick", action="store_true", help="k = 1 and 10 only, for smoke tests")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNG (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.dampings, args.max_steps = [1.0, 10.0], 1024
    return args


class EvalCounter:
    """Counts vector-field evaluations as they run, through `jax.debug.callback`.

    The callback runs wherever the evaluation runs: in the forward solve, and in every
    recomputation or VJP of the vector field in the backward pass.
    """

    def __init__(self):
        self.count = 0

    def tick(self) -> None:
        self.count += 1

    def vector_field(self, t, y, matrix):
        """`dy/dt = A y`, counted."""
        jax.debug.callback(self.tick)
        return matrix @ y


def damped_matrix(k: float):
    """The oscillator `y'' + k y' + y = 0` as a first-order system's matrix."""
    return jnp.array([[0.0, 1.0], [-1.0, -k]])


def output_times():
    return jnp.linspace(T_END / NUM_OUTPUTS, T_END, NUM_OUTPUTS)


def exact_loss(matrix, y0):
    """The loss through the closed form `y(t) = expm(A t) y0`."""
    ys = jax.vmap(lambda t: expm(matrix * t) @ y0)(output_times())
    return jnp.sum(ys**2)


exact_gradient = jax.jit(jax.grad(exact_loss, argnums=(0, 1)))
"""The exact gradient of the loss with respect to `(A, y0)`."""


def solver_gradient(counter: EvalCounter, adjoint, args: argparse.Namespace):
    """A jitted `(A, y0) -> ((dL/dA, dL/dy0), stats)` through `diffeqsolve` with `adjoint`.

    `throw=False`: a failed solve or a diverged backsolve shows up as a NaN gradient.
    """

    def loss(matrix, y0):
        sol = oc.diffeqsolve(
            counter.vector_field,
            oc.Tsit5(),
            0.0,
            T_END,
            0.01,
            y0,
            matrix,
            saveat=oc.SaveAt(ts=output_times()),
            stepsize_controller=oc.PIDController(rtol=args.rtol, atol=args.atol),
            adjoint=adjoint,
            max_steps=args.max_steps,
            throw=False,
        )
        return jnp.sum(sol.ys**2), sol.stats

    return jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))


@dataclasses.dataclass
class Row:
    """One (adjoint, damping) measurement."""

    adjoint: str
    damping: float
    error: float  # relative 2-norm error of the gradient; NaN if it was lost
    forward_evals: int
    backward_evals: int
    steps: int


def measure(name: str, args: argparse.Namespace) -> list[Row]:
    """Every damping for one adjoint: one compilation, reused (A is an argument)."""
    class_name, kwargs, _ = ADJOINTS[name]
    counter = EvalCounter()
    grad = solver_gradient(counter, getattr(oc, class_name)(**kwargs), args)
    y0 = jnp.array([1.0, 0.0])
    rows = []
    for k in args.dampings:
        matrix = damped_matrix(k)
        counter.count = 0
        (g_matrix, g_y0), stats = grad(matrix, y0)
        jax.effects_barrier()  # every callback has run
        e_matrix, e_y0 = exact_gradient(matrix, y0)
        diff = jnp.concatenate([(g_matrix - e_matrix).ravel(), g_y0 - e_y0])
        scale = jnp.concatenate([e_matrix.ravel(), e_y0])
        forward = int(stats["num_vf_evals"])
        rows.append(
            Row(
                name,
                k,
                float(jnp.linalg.norm(diff) / jnp.linalg.norm(scale)),
                forward,
                counter.count - forward,
                int(stats["num_steps"]),
            )
        )
    return rows


def print_table(rows: list[Row]) -> None:
    """A Markdown table, one line per (damping, adjoint)."""
    print("| k | adjoint | gradient error | forward evals | backward evals | backward/forward |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: r.damping):
        error = "NaN (lost)" if np.isnan(r.error) else f"{r.error:.1e}"
        print(
            f"| {r.damping:g} | {label(r.adjoint)} | {error} | {r.forward_evals} "
            f"| {r.backward_evals} | {r.backward_evals / r.forward_evals:.2f} |"
        )


STYLES = {
    "checkpoint": dict(marker="o", ls="-"),
    "checkpoint-16": dict(marker="s", ls="--", mfc="none", ms=10),  # same gradient: drawn open
    "backsolve": dict(marker="D", ls="-"),
    "backsolve-outputs": dict(marker="^", ls="-"),
    "interpolating": dict(marker="v", ls=":", mfc="none", ms=10),
}


def plot(rows: list[Row], args: argparse.Namespace, path: pathlib.Path) -> None:
    """Gradient error (a lost, NaN gradient drawn as a cross at 1) and backward cost, against k."""
    fig = Figure(figsize=(12, 5.4), layout="constrained")
    ax_err, ax_cost = fig.subplots(1, 2)
    for name in args.adjoints:
        mine = [r for r in rows if r.adjoint == name]
        k = np.array([r.damping for r in mine])
        error = np.array([r.error for r in mine])
        (line,) = ax_err.loglog(k, error, label=label(name), **STYLES[name])
        lost = np.isnan(error)
        ax_err.loglog(k[lost], np.ones(lost.sum()), "x", color=line.get_color(), ms=12, mew=2)
        ax_cost.loglog(k, [r.backward_evals for r in mine], **STYLES[name])
    first = [r for r in rows if r.adjoint == args.adjoints[0]]
    ax_cost.loglog(
        [r.damping for r in first],
        [r.forward_evals for r in first],
        "k",
        lw=3,
        alpha=0.25,
        label="forward solve",
    )
    ax_err.plot([], [], "x", color="gray", ms=10, mew=2, label="gradient lost (NaN)")
    ax_err.axhline(1.0, color="gray", ls=":", lw=1)
    ax_err.set(
        xlabel="damping k",
        ylabel="relative error of dL/d(A, y0)",
        title="Gradient error against the closed form (expm)",
    )
    ax_cost.set(
        xlabel="damping k", ylabel="vector-field evaluations (or VJPs)", title="Backward-pass cost"
    )
    handles = ax_err.get_legend_handles_labels()
    extra = ax_cost.get_legend_handles_labels()
    fig.legend(
        handles[0] + extra[0], handles[1] + extra[1], loc="outside lower center", ncol=3, fontsize=9
    )
    fig.suptitle(
        f"y'' + k y' + y = 0 on [0, {T_END:g}], Tsit5, rtol={args.rtol:g}, "
        f"atol={args.atol:g}, loss over {NUM_OUTPUTS} outputs"
    )
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> list[Row]:
    """Measure every adjoint at every damping; print the table; plot."""
    jax.config.update("jax_enable_x64", True)
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    missing = [n for n in args.adjoints if not hasattr(oc, ADJOINTS[n][0])]
    for name in missing:
        print(f"skipping {name}: this odeckpt has no `{ADJOINTS[name][0]}`")
    args.adjoints = [n for n in args.adjoints if n not in missing]
    rows = []
    for name in args.adjoints:
        rows += measure(name, args)
        print(f"measured {label(name)}", flush=True)
    print_table(rows)
    path = args.out / "damped_system.png"
    plot(rows, args, path)
    for name in args.adjoints:
        mine = [r for r in rows if r.adjoint == name]
        lost = [f"{r.damping:g}" for r in mine if np.isnan(r.error)]
        worst = max((r.error for r in mine if not np.isnan(r.error)), default=float("nan"))
        verdict = f"; gradient lost at k = {', '.join(lost)}" if lost else ""
        print(f"{label(name)}: worst finite error {worst:.1e}{verdict}")
    print(f"plot: {path}")
    return rows


if __name__ == "__main__":
    main()
