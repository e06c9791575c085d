"""Classify irregularly sampled spirals, clockwise or anticlockwise, with a neural CDE.

The data: each series observes a damped spiral `x(t) = exp(-0.3 t) (cos w t, ±sin w t)`
from a random phase, at its own random, sorted times in `[0, 4 pi]` (irregular and
different per series), with observation noise; half turn clockwise. The model: a neural
controlled differential equation (Kidger et al., 2020), `dz = f(z) dX(t)`, driven by
the path `X` through the observations (time as a channel, interpolated by a cubic
through `backward_hermite_coefficients`, so that causality holds), solved as
`ControlTerm(f, X).to_ode()` with `Tsit5` and adaptive steps; the class is
`sigmoid(linear(z(T)))`. Its gradient comes from `CheckpointAdjoint`; Adam (optax)
fits it, a `jax.vmap` over the batch of paths inside one compiled step.

Run from the repository root (a minute or two on two CPU cores):

    python examples/neural_cde.py
    python examples/neural_cde.py --steps 300 --checkpoints 4

Prints the loss and the accuracy on held-out series, and writes
`neural_cde_paths.png` (held-out paths, coloured by the predicted probability over
time) and `neural_cde_loss.png` into `--out`.
"""

import argparse
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure
from tqdm import tqdm

import odeckpt as oc

T_END = 4 * np.pi
"""Every series is observed on [0, T_END]."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: the data, the model, the adjoint and the training run."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=256, help="training series")
    p.add_argument("--times", type=int, default=64, help="observations per series")
    p.add_argument("--noise", type=float, default=0.05, help="observation noise std")
    p.add_argument("--hidden", type=int, default=8, help="size of the CDE's state z")
    p.add_argument("--width", type=int, default=64, help="MLP width")
    p.add_argument("--steps", type=int, default=100, help="Adam steps")
    p.add_argument("--batch-size", type=int, default=32, help="series per step")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    p.add_argument(
        "--checkpoints",
        type=int,
        default=None,
        help="states CheckpointAdjoint stores; default: all that fit its memory budget",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny problem for smoke tests: 32 series, 16 times, width 16, 4 steps",
    )
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNGs (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.series, args.times, args.width, args.steps = 32, 16, 16, 4
    args.batch_size = min(args.batch_size, args.series)
    return args


# ------------------------------------------------------------------------------------------
# Data


def make_data(key, count: int, times: int, noise: float):
    """`count` series: their sorted random times `(count, times)`, observations
    `(count, times, 3)` (time, x, y) and labels (1.0: anticlockwise)."""
    time_key, phase_key, noise_key = jax.random.split(key, 3)
    inner = jax.random.uniform(time_key, (count, times - 2), minval=0.0, maxval=T_END)
    ends = jnp.broadcast_to(jnp.asarray([0.0, T_END]), (count, 2))
    ts = jnp.sort(jnp.concatenate([ends, inner], axis=1), axis=1)
    phase = jax.random.uniform(phase_key, (count, 1), minval=0.0, maxval=2 * np.pi)
    labels = (jnp.arange(count) % 2).astype(ts.dtype)
    turn = jnp.where(labels[:, None] > 0, 1.0, -1.0)
    decay = jnp.exp(-0.3 * ts / np.pi)
    xs = decay * jnp.cos(ts + phase)
    ys = turn * decay * jnp.sin(ts + phase)
    data = jnp.stack([ts / T_END, xs, ys], axis=-1)
    data = data.at[..., 1:].add(noise * jax.random.normal(noise_key, data[..., 1:].shape))
    return ts, data, labels


# ------------------------------------------------------------------------------------------
# Model


class Field(eqx.Module):
    """`f(z)`: an MLP from the hidden state to a (hidden, channels) matrix, `tanh`-bounded
    so that the state cannot blow up."""

    mlp: eqx.nn.MLP
    hidden: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    def __init__(self, hidden: int, channels: int, width: int, *, key):
        self.hidden, self.channels = hidden, channels
        self.mlp = eqx.nn.MLP(
            hidden,
            hidden * channels,
            width,
            1,
            activation=jax.nn.softplus,
            final_activation=jnp.tanh,
            key=key,
        )

    def __call__(self, t, z, args):
        return self.mlp(z).reshape(self.hidden, self.channels)


class NeuralCDE(eqx.Module):
    """`z(0) = initial(X(0))`, `dz = f(z) dX`, probability `sigmoid(readout(z))`."""

    initial: eqx.nn.MLP
    field: Field
    readout: eqx.nn.Linear

    def __init__(self, hidden: int, channels: int, width: int, *, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.initial = eqx.nn.MLP(channels, hidden, width, 1, key=k1)
        self.field = Field(hidden, channels, width, key=k2)
        self.readout = eqx.nn.Linear(hidden, 1, key=k3)

    def __call__(self, ts, data, adjoint, save_all=False):
        """The probability of anticlockwise at the end (or at every observation)."""
        control = oc.CubicInterpolation(ts, oc.backward_hermite_coefficients(ts, data))
        sol = oc.diffeqsolve(
            oc.ControlTerm(self.field, control).to_ode(),
            oc.Tsit5(),
            ts[0],
            ts[-1],
            None,
            self.initial(control.evaluate(ts[0])),
            saveat=oc.SaveAt(ts=ts) if save_all else oc.SaveAt(t1=True),
            stepsize_controller=oc.PIDController(rtol=1e-3, atol=1e-6),
            adjoint=adjoint,
            max_steps=512,
        )
        return jax.nn.sigmoid(jax.vmap(self.readout)(sol.ys)[:, 0])


def loss_and_accuracy(model, ts, data, labels, adjoint):
    """Binary cross-entropy and accuracy over a batch of series."""
    prob = jax.vmap(lambda t, d: model(t, d, adjoint)[-1])(ts, data)
    prob = jnp.clip(prob, 1e-6, 1 - 1e-6)
    bce = -jnp.mean(labels * jnp.log(prob) + (1 - labels) * jnp.log(1 - prob))
    accuracy = jnp.mean((prob > 0.5) == (labels > 0.5))
    return bce, accuracy


@eqx.filter_jit
def train_step(model, opt_state, batch, optimiser, adjoint):
    """One Adam step on a batch `(ts, data, labels)`."""
    grad_fn = eqx.filter_value_and_grad(loss_and_accuracy, has_aux=True)
    (loss, accuracy), grads = grad_fn(model, *batch, adjoint)
    params = eqx.filter(model, eqx.is_inexact_array)
    # optax's Adam mixes its int32 step count with floats, which strict dtype promotion
    # refuses: its update runs under standard promotion.
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = optimiser.update(grads, opt_state, params)
    return eqx.apply_updates(model, updates), opt_state, loss, accuracy


def train(args, model, data, adjoint):
    """`args.steps` Adam steps over shuffled batches, with a progress bar."""
    optimiser = optax.adam(args.lr)
    opt_state = optimiser.init(eqx.filter(model, eqx.is_inexact_array))
    rng = np.random.default_rng(args.seed)
    losses = []
    with tqdm(total=args.steps, desc="training", unit="step") as bar:
        for _ in range(args.steps):
            pick = rng.choice(len(data[0]), args.batch_size, replace=False)
            batch = tuple(x[pick] for x in data)
            model, opt_state, loss, accuracy = train_step(
                model, opt_state, batch, optimiser, adjoint
            )
            losses.append(float(loss))
            bar.set_postfix(loss=f"{losses[-1]:.3f}", accuracy=f"{float(accuracy):.2f}")
            bar.update()
    return model, np.asarray(losses)


# ------------------------------------------------------------------------------------------
# Plots


def plot_paths(model, test, adjoint, path: pathlib.Path) -> None:
    """Four held-out series: the observed path, coloured by the model's probability of
    anticlockwise as the CDE reads it."""
    ts, data, labels = test
    fig = Figure(figsize=(12, 3.4))
    for i in range(4):
        ax = fig.add_subplot(1, 4, i + 1)
        prob = np.asarray(model(ts[i], data[i], adjoint, save_all=True))
        points = ax.scatter(
            data[i, :, 1], data[i, :, 2], c=prob, cmap="coolwarm", vmin=0, vmax=1, s=14
        )
        ax.plot(data[i, :, 1], data[i, :, 2], lw=0.5, c="grey")
        truth = "anticlockwise" if labels[i] > 0.5 else "clockwise"
        ax.set_title(f"{truth}: p = {prob[-1]:.2f}", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(points, ax=fig.axes, label="P(anticlockwise) over time")
    fig.savefig(path, dpi=100)


def plot_loss(losses: np.ndarray, path: pathlib.Path) -> None:
    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    ax.plot(losses)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("binary cross-entropy")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train_key, test_key, model_key = jax.random.split(jax.random.PRNGKey(args.seed), 3)
    train_data = make_data(train_key, args.series, args.times, args.noise)
    test_data = make_data(test_key, args.series, args.times, args.noise)
    adjoint = oc.CheckpointAdjoint(checkpoints=args.checkpoints)
    model = NeuralCDE(args.hidden, 3, args.width, key=model_key)
    model, losses = train(args, model, train_data, adjoint)
    loss, accuracy = eqx.filter_jit(loss_and_accuracy)(model, *test_data, adjoint)
    print(f"final loss {losses[-1]:.4f}; held-out loss {float(loss):.4f}, ", end="")
    print(f"held-out accuracy {float(accuracy):.3f}")
    plot_paths(model, test_data, adjoint, args.out / "neural_cde_paths.png")
    plot_loss(losses, args.out / "neural_cde_loss.png")
    print(f"wrote {args.out / 'neural_cde_paths.png'} and {args.out / 'neural_cde_loss.png'}")


if __name__ == "__main__":
    main()
