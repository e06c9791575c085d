"""Train a neural ODE on noisy Lotka–Volterra trajectories, differentiating through the solver.

The data: predator–prey trajectories, `prey' = prey (1 - predators)` and `predators' =
predators (prey - 1)`, from random initial populations, solved by odeckpt itself and
observed with Gaussian noise. The model: `dy/dt = MLP(y)`, an equinox MLP, solved with
`Tsit5` and an adaptive step; its gradient comes from `CheckpointAdjoint` (or a
continuous adjoint, `--adjoint`; or `--adjoint reversible`: `Reversible(Tsit5())`
differentiated by `ReversibleAdjoint`, exact gradients in O(1) memory). Adam (optax)
fits it, while the fitted horizon grows from a quarter of the time span to all of it
over the first `--curriculum` of training (long periodic trajectories are hard to fit
from scratch). The horizon is a traced argument, so the training step compiles once.

Run from the repository root (a minute or two on two CPU cores):

    python examples/neural_ode.py
    python examples/neural_ode.py --checkpoints 4 --epochs 100
    python examples/neural_ode.py --adjoint interpolating --rtol 1e-4 --atol 1e-7
    python examples/neural_ode.py --adjoint reversible

Writes `neural_ode_loss.png` (the loss curve) and `neural_ode_fit.png` (fitted against
true trajectories, for initial conditions not seen in training) into `--out`.
"""

import argparse
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure
from tqdm import tqdm

import odeckpt as oc

T_END = 10.0
"""The time span of every trajectory is [0, T_END]."""

NUM_HELD_OUT = 4
"""Trajectories kept out of training and plotted."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: the adjoint, its checkpoints, tolerances, and the training run."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--adjoint",
        default="checkpoint",
        choices=["checkpoint", "backsolve", "interpolating", "reversible"],
        help="how reverse mode goes through the solve (default: checkpoint)",
    )
    p.add_argument(
        "--checkpoints",
        type=int,
        default=None,
        help="states the adjoint stores; default: all that fit in its memory budget",
    )
    p.add_argument("--rtol", type=float, default=1e-3, help="solver relative tolerance")
    p.add_argument("--atol", type=float, default=1e-6, help="solver absolute tolerance")
    p.add_argument("--max-steps", type=int, default=256, help="bound on solver steps per solve")
    p.add_argument("--epochs", type=int, default=500, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=32, help="trajectories per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak Adam learning rate")
    p.add_argument(
        "--curriculum",
        type=float,
        default=0.4,
        help="fraction of training over which the horizon grows to the full span",
    )
    p.add_argument("--trajectories", type=int, default=256, help="training trajectories")
    p.add_argument("--times", type=int, default=64, help="observation times per trajectory")
    p.add_argument("--noise", type=float, default=0.02, help="observation noise std")
    p.add_argument("--width", type=int, default=64, help="MLP width")
    p.add_argument("--depth", type=int, default=2, help="MLP hidden layers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny problem for smoke tests: 16 trajectories, 16 times, width 16",
    )
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNGs (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.trajectories, args.times, args.width = 16, 16, 16
    args.batch_size = min(args.batch_size, args.trajectories)
    return args


def make_adjoint(name: str, checkpoints: int | None) -> oc.AbstractAdjoint:
    """`oc.CheckpointAdjoint` (or `BacksolveAdjoint` / `InterpolatingAdjoint`) by name;
    `ReversibleAdjoint` (which stores no states: `checkpoints` does not apply) for
    "reversible"."""
    if name == "reversible":
        return oc.ReversibleAdjoint()
    class_name = {
        "checkpoint": "CheckpointAdjoint",
        "backsolve": "BacksolveAdjoint",
        "interpolating": "InterpolatingAdjoint",
    }[name]
    cls = getattr(oc, class_name, None)
    if cls is None:
        raise SystemExit(f"`--adjoint {name}`: this odeckpt has no `{class_name}`.")
    return cls(checkpoints=checkpoints)


def make_solver(name: str) -> oc.AbstractSolver:
    """`Tsit5()`, or for the reversible adjoint `Reversible(Tsit5())` (the same method
    made algebraically reversible, whose states its backward pass reconstructs)."""
    return oc.Reversible(oc.Tsit5()) if name == "reversible" else oc.Tsit5()


# ------------------------------------------------------------------------------------------
# Data: Lotka–Volterra, solved by odeckpt


def lotka_volterra(t, y, args):
    """Prey `y[0]` and predators `y[1]`, every rate 1: orbits around (1, 1)."""
    prey, predators = y[0], y[1]
    return jnp.stack([prey - prey * predators, prey * predators - predators])


def make_data(key, count: int, ts, noise: float):
    """`count` noise-free and noisy trajectories at `ts` from random initial populations."""
    init_key, noise_key = jax.random.split(key)
    y0 = jax.random.uniform(init_key, (count, 2), minval=0.4, maxval=1.6)

    def solve(y0):
        controller = oc.PIDController(rtol=1e-8, atol=1e-8)
        saveat = oc.SaveAt(ts=ts)
        return oc.diffeqsolve(
            lotka_volterra,
            oc.Tsit5(),
            0.0,
            T_END,
            0.1,
            y0,
            saveat=saveat,
            stepsize_controller=controller,
        ).ys

    clean = jax.jit(jax.vmap(solve))(y0)
    return clean, clean + noise * jax.random.normal(noise_key, clean.shape, clean.dtype)


# ------------------------------------------------------------------------------------------
# Model and training


class NeuralVectorField(eqx.Module):
    """`dy/dt = MLP(y)`: an autonomous vector field on the 2-D state."""

    mlp: eqx.nn.MLP

    def __init__(self, width: int, depth: int, *, key):
        self.mlp = eqx.nn.MLP(2, 2, width, depth, activation=jnp.tanh, key=key)

    def __call__(self, t, y, args):
        return self.mlp(y)


class Trainer(eqx.Module):
    """What a training step needs besides the model: the solve's and optimiser's settings."""

    adjoint: oc.AbstractAdjoint
    solver: oc.AbstractSolver
    optimiser: optax.GradientTransformation = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)

    def predict(self, model, y0, ts, horizon):
        """The model's trajectory from `y0`, saved at `ts` up to `horizon`; and its steps."""
        sol = oc.diffeqsolve(
            model,
            self.solver,
            0.0,
            horizon,
            0.1,
            y0,
            saveat=oc.SaveAt(ts=jnp.minimum(ts, horizon)),
            stepsize_controller=oc.PIDController(rtol=self.rtol, atol=self.atol),
            adjoint=self.adjoint,
            max_steps=self.max_steps,
        )
        return sol.ys, sol.stats["num_steps"]

    def loss(self, model, ys, ts, horizon):
        """Mean squared error over the observations up to `horizon`; and the solver steps."""
        pred, steps = jax.vmap(self.predict, (None, 0, None, None))(model, ys[:, 0], ts, horizon)
        seen = (ts <= horizon)[None, :, None]
        count = jnp.sum(seen, dtype=ys.dtype) * ys.shape[0] * ys.shape[2]
        return jnp.sum(jnp.where(seen, (pred - ys) ** 2, 0.0)) / count, steps

    @eqx.filter_jit
    def step(self, model, opt_state, ys, ts, horizon):
        """One Adam step on a batch of observed trajectories `ys` (batch, times, 2)."""
        grad_fn = eqx.filter_value_and_grad(self.loss, has_aux=True)
        (loss, steps), grads = grad_fn(model, ys, ts, horizon)
        params = eqx.filter(model, eqx.is_inexact_array)
        # optax's Adam mixes its int32 step count with floats, which strict dtype
        # promotion refuses: its update runs under standard promotion.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = self.optimiser.update(grads, opt_state, params)
        return eqx.apply_updates(model, updates), opt_state, loss, jnp.mean(steps, dtype=loss.dtype)


def horizon_at(step: int, total: int, curriculum: float) -> float:
    """The fitted horizon: a quarter of the span, growing linearly to all of it."""
    grown = 1.0 if curriculum <= 0 else min(1.0, step / (curriculum * total))
    return T_END * (0.25 + 0.75 * grown)


def train(args, trainer: Trainer, model, data, ts):
    """Run `args.epochs` of Adam over shuffled batches with a progress bar; return the model
    and the per-step losses."""
    rng = np.random.default_rng(args.seed)
    batches = len(data) // args.batch_size
    total = args.epochs * batches
    opt_state = trainer.optimiser.init(eqx.filter(model, eqx.is_inexact_array))
    losses = []
    with tqdm(total=total, desc="training", unit="step") as bar:
        for epoch in range(args.epochs):
            order = rng.permutation(len(data))
            for b in range(batches):
                horizon = horizon_at(len(losses), total, args.curriculum)
                batch = data[order[b * args.batch_size : (b + 1) * args.batch_size]]
                model, opt_state, loss, steps = trainer.step(
                    model, opt_state, batch, ts, jnp.asarray(horizon, ts.dtype)
                )
                losses.append(float(loss))
                bar.set_postfix(
                    epoch=epoch + 1,
                    loss=f"{losses[-1]:.2e}",
                    horizon=f"{horizon:.1f}",
                    solver_steps=f"{float(steps):.1f}",
                    refresh=False,
                )
                bar.update()
    return model, np.asarray(losses)


# ------------------------------------------------------------------------------------------
# Plots


def plot_loss(
    losses, noise: float, batches_per_epoch: int, curriculum: float, path: pathlib.Path
) -> None:
    """The per-step loss, its per-epoch mean, the noise floor, and the curriculum phase."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    steps = np.arange(1, len(losses) + 1)
    ax.semilogy(steps, losses, color="tab:blue", alpha=0.3, lw=0.8, label="batch loss")
    epochs = len(losses) // batches_per_epoch
    if epochs > 0:
        mean = losses[: epochs * batches_per_epoch].reshape(epochs, -1).mean(axis=1)
        ax.semilogy(
            steps[batches_per_epoch - 1 :: batches_per_epoch][:epochs],
            mean,
            color="tab:blue",
            label="epoch mean",
        )
    ax.axhline(noise**2, color="gray", ls="--", label=f"noise variance ({noise}²)")
    if curriculum > 0:
        ax.axvspan(
            0,
            curriculum * len(losses),
            color="gray",
            alpha=0.1,
            label=f"horizon grows from {T_END / 4:g} to {T_END:g}",
        )
    ax.set(
        xlabel="training step",
        ylabel="mean squared error",
        title="Neural ODE training loss (Lotka–Volterra)",
    )
    ax.legend()
    fig.savefig(path, dpi=120)


def plot_fit(ts, clean, noisy, fitted, path: pathlib.Path) -> None:
    """Held-out trajectories: noisy observations, the true solution, and the model's."""
    fig = Figure(figsize=(10, 6), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True).ravel()
    for i, ax in enumerate(axes[: len(clean)]):
        for j, (name, color) in enumerate([("prey", "tab:green"), ("predators", "tab:red")]):
            ax.plot(ts, noisy[i, :, j], ".", color=color, ms=3, alpha=0.5)
            ax.plot(ts, clean[i, :, j], color="black", lw=1, alpha=0.6)
            ax.plot(ts, fitted[i, :, j], "--", color=color, lw=2, label=f"{name} (model)")
        prey, predators = clean[i, 0]
        ax.set_title(f"held-out trajectory {i + 1}: y0 = ({prey:.2f}, {predators:.2f})")
    axes[0].plot([], [], ".", color="gray", label="noisy observations")
    axes[0].plot([], [], color="black", label="true solution")
    axes[0].legend(fontsize=8)
    for ax in axes[2:]:
        ax.set_xlabel("t")
    fig.suptitle(
        "Neural ODE against Lotka–Volterra on trajectories not seen in training "
        "(the model solved from the true initial state)"
    )
    fig.savefig(path, dpi=120)


# ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    """Generate data, train, plot, print a summary; return the summary's numbers."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    data_key, model_key = jax.random.split(jax.random.key(args.seed))
    ts = jnp.linspace(0.0, T_END, args.times)
    clean, noisy = make_data(data_key, args.trajectories + NUM_HELD_OUT, ts, args.noise)
    total = args.epochs * (args.trajectories // args.batch_size)
    trainer = Trainer(
        make_adjoint(args.adjoint, args.checkpoints),
        make_solver(args.adjoint),
        optax.adam(optax.cosine_decay_schedule(args.lr, max(total, 1), alpha=0.05)),
        args.rtol,
        args.atol,
        args.max_steps,
    )
    model = NeuralVectorField(args.width, args.depth, key=model_key)
    model, losses = train(args, trainer, model, noisy[: args.trajectories], ts)
    held_out = slice(args.trajectories, None)
    predict = eqx.filter_jit(jax.vmap(trainer.predict, (None, 0, None, None)))
    fitted, steps = predict(model, clean[held_out, 0], ts, jnp.asarray(T_END, ts.dtype))
    plot_loss(
        losses,
        args.noise,
        args.trajectories // args.batch_size,
        args.curriculum,
        args.out / "neural_ode_loss.png",
    )
    plot_fit(ts, clean[held_out], noisy[held_out], fitted, args.out / "neural_ode_fit.png")
    summary = {
        "final_loss": float(np.mean(losses[-(args.trajectories // args.batch_size) :])),
        "held_out_mse": float(jnp.mean((fitted - clean[held_out]) ** 2)),
        "solver_steps": float(jnp.mean(steps)),
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
    }
    print(
        f"{args.adjoint} adjoint (checkpoints={args.checkpoints}), {len(losses)} steps: "
        f"final loss {summary['final_loss']:.2e} (noise variance {args.noise**2:.1e}), "
        f"held-out MSE against the true solution {summary['held_out_mse']:.2e}, "
        f"{summary['solver_steps']:.1f} solver steps per solve; "
        f"{summary['wall_s']:.0f} s wall, {summary['cpu_s']:.0f} s CPU. PNGs in {args.out}/"
    )
    return summary


if __name__ == "__main__":
    main()
