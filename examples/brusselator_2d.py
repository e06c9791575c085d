"""Learn a diffusion coefficient from one snapshot of a 2-D Brusselator pattern.

The Brusselator on a periodic m x m grid (two species, `N = 2 m^2` unknowns),

    u_t = 1 + u^2 v - 4.4 u + alpha lap(u),   v_t = 3.4 u - u^2 v + alpha lap(v),

is stiff through its diffusion: its dense Jacobian at 128 x 128 would be 32768 x 32768
(8.6 GB). `KenCarp4` treats the reaction explicitly and the diffusion implicitly, with
a matrix-free Krylov solver (`lineax.BiCGStab`) preconditioned by the diffusion's exact
inverse (two FFTs: `fft_preconditioner`). The snapshot `u(t1)` of a run with
`alpha = 0.1` is the data; starting from `alpha = 0.04`, Adam on `log alpha` fits it,
each gradient through `CheckpointAdjoint(checkpoints=16)`: its memory is a few dozen
states, whatever the number of steps. See docs/stiff.md.

    python examples/brusselator_2d.py            # 128 x 128
    python examples/brusselator_2d.py --quick    # 32 x 32, a few iterations

Writes `brusselator_2d_fit.png` (data, start, fit) and `brusselator_2d_loss.png` into
`--out`.
"""

import argparse
import pathlib

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
from matplotlib.figure import Figure
from tqdm import tqdm

import odeckpt as oc

jax.config.update("jax_enable_x64", True)

A, B, T1 = 1.0, 3.4, 1.0
TRUE_ALPHA, START_ALPHA = 0.1, 0.04


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", type=int, default=128, help="grid points per side")
    p.add_argument("--iterations", type=int, default=40, help="Adam iterations")
    p.add_argument("--quick", action="store_true", help="32 x 32 grid, 6 iterations")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNGs (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.grid, args.iterations = min(args.grid, 32), min(args.iterations, 6)
    return args


def laplacian(y):
    m = y.shape[-1]
    rolled = jnp.roll(y, 1, -2) + jnp.roll(y, -1, -2) + jnp.roll(y, 1, -1) + jnp.roll(y, -1, -1)
    return (rolled - 4 * y) * m**2


def reaction(t, y, alpha):
    u, v = y[0], y[1]
    uuv = u * u * v
    return jnp.stack([A + uuv - (B + 1) * u, B * u - uuv])


def diffusion(t, y, alpha):
    return alpha * laplacian(y)


def fft_preconditioner(t, y, alpha, gamma_h):
    """The exact inverse of `I - gamma_h alpha lap` on each species (the Laplacian is
    diagonal in Fourier space on a periodic grid): for KenCarp4, whose implicit part is
    the diffusion alone, it is the Newton matrix's inverse."""
    m = y.shape[-1]
    k = 2 * np.pi * np.fft.fftfreq(m, d=1.0 / m)
    one_d = (2 * np.cos(k / m) - 2) * m**2
    symbol = jnp.asarray(one_d[:, None] + one_d[None, :])

    def apply(v):
        return jnp.real(jnp.fft.ifft2(jnp.fft.fft2(v) / (1 - gamma_h * alpha * symbol[None])))

    return apply


SOLVER = oc.KenCarp4(
    linear_solver=lx.BiCGStab(rtol=1e-8, atol=1e-10, max_steps=100),
    preconditioner=fft_preconditioner,
)


def initial(m):
    x = np.arange(m) / m
    xx, yy = np.meshgrid(x, x, indexing="ij")
    return jnp.asarray(np.stack([0.5 + yy, 1.0 + 5.0 * xx]))


def snapshot(alpha, y0):
    """`u(t1)` from `y0` with diffusion `alpha`."""
    sol = oc.diffeqsolve(
        oc.MultiTerm(oc.ODETerm(reaction), oc.ODETerm(diffusion)),
        SOLVER,
        0.0,
        T1,
        1e-3,
        y0,
        alpha,
        stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-8),
        saveat=oc.SaveAt(t1=True),
        adjoint=oc.CheckpointAdjoint(checkpoints=16),
    )
    return sol.ys[-1][0]


def _plot(out: pathlib.Path, data, start, fit, losses, alpha_fit):
    fig = Figure(figsize=(10, 3.4))
    axes = fig.subplots(1, 3)
    low, high = float(np.min(data)), float(np.max(data))
    for ax, image, title in zip(
        axes,
        (data, start, fit),
        (
            "data: u(1), alpha = 0.1",
            f"start: alpha = {START_ALPHA}",
            f"fit: alpha = {alpha_fit:.4f}",
        ),
        strict=True,
    ):
        ax.imshow(np.asarray(image), vmin=low, vmax=high, cmap="viridis")
        ax.set_title(title)
        ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(out / "brusselator_2d_fit.png", dpi=110)
    fig = Figure(figsize=(5, 3.2))
    ax = fig.subplots()
    ax.semilogy(losses)
    ax.set_xlabel("Adam iteration")
    ax.set_ylabel("mean square misfit")
    fig.tight_layout()
    fig.savefig(out / "brusselator_2d_loss.png", dpi=110)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    y0 = initial(args.grid)
    data = jax.jit(snapshot)(jnp.asarray(TRUE_ALPHA), y0)

    def loss(log_alpha):
        return jnp.mean((snapshot(jnp.exp(log_alpha), y0) - data) ** 2)

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    optimiser = optax.adam(0.1)
    log_alpha = jnp.log(jnp.asarray(START_ALPHA))
    state = optimiser.init(log_alpha)
    losses = []
    bar = tqdm(range(args.iterations), desc=f"fit alpha ({args.grid}^2 grid)")
    for _ in bar:
        value, grad = value_and_grad(log_alpha)
        updates, state = optimiser.update(grad, state)
        log_alpha = optax.apply_updates(log_alpha, updates)
        losses.append(float(value))
        bar.set_postfix(loss=f"{float(value):.2e}", alpha=f"{float(jnp.exp(log_alpha)):.4f}")
    alpha_fit = float(jnp.exp(log_alpha))
    start = jax.jit(snapshot)(jnp.asarray(START_ALPHA), y0)
    fit = jax.jit(snapshot)(jnp.asarray(alpha_fit), y0)
    _plot(args.out, data, start, fit, losses, alpha_fit)
    error = abs(alpha_fit - TRUE_ALPHA) / TRUE_ALPHA
    print(f"fitted alpha = {alpha_fit:.5f} (true {TRUE_ALPHA}); relative error {error:.1e}")
    print(f"final loss {losses[-1]:.3e} after {args.iterations} iterations")


if __name__ == "__main__":
    main()
