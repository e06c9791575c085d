"""A bouncing ball: fit its restitution and drag from the times it hits the ground.

The ball falls under gravity with quadratic air drag, `h' = v`, `v' = -g - c v |v|`. Each
flight is one solve that an `Event` ends where the height crosses zero; the ball then
leaves the ground with velocity `-e v` (restitution `e`) and the next flight starts
there. The observed data are the first impact times of a ball with `e = 0.8`,
`c = 0.05`; starting from `e = 0.6`, `c = 0.2`, Gauss-Newton fits both.

The residuals' Jacobian is `jax.jacrev` through every solve: each impact time depends
on the parameters directly and through the state at the previous impact, and
`CheckpointAdjoint` differentiates both exactly (the event time by the implicit
function theorem at the located crossing; see docs/events.md).

    python examples/bouncing_ball.py
    python examples/bouncing_ball.py --bounces 4 --quick

Writes `bouncing_ball.png` into `--out`.
"""

import argparse
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

import odeckpt as oc

jax.config.update("jax_enable_x64", True)

G = 9.81
H0 = 10.0
TRUE = np.asarray([0.8, 0.05])  # restitution e, drag c
START = np.asarray([0.6, 0.2])
GROUND = oc.Event(lambda t, y, args, **kwargs: y[0], direction=False)
CONTROLLER = oc.PIDController(rtol=1e-10, atol=1e-10)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bounces", type=int, default=6, help="observed impacts")
    p.add_argument("--iterations", type=int, default=8, help="Gauss-Newton iterations")
    p.add_argument("--quick", action="store_true", help="3 bounces, 4 iterations")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNG (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.bounces, args.iterations = min(args.bounces, 3), min(args.iterations, 4)
    return args


def vector_field(t, y, c):
    h, v = y
    return jnp.stack([v, -G - c * v * jnp.abs(v)])


def flight(t0, y0, c, dense: bool = False):
    """One flight from `(t0, y0)` until the ball reaches the ground."""
    saveat = oc.SaveAt(t1=True, dense=dense)
    return oc.diffeqsolve(
        vector_field,
        oc.Tsit5(),
        t0,
        jnp.inf,
        0.01,
        y0,
        c,
        saveat=saveat,
        stepsize_controller=CONTROLLER,
        event=GROUND,
    )


def impact_times(params, bounces: int):
    """The first `bounces` impact times of a ball dropped from rest at height H0."""
    e, c = params[0], params[1]
    t, y, times = jnp.asarray(0.0), jnp.stack([jnp.asarray(H0), jnp.asarray(0.0)]), []
    for _ in range(bounces):
        sol = flight(t, y, c)
        t, y = sol.ts[0], sol.ys[0]
        times.append(t)
        y = jnp.stack([jnp.zeros_like(y[0]), -e * y[1]])  # leaves the ground, h = 0^+
    return jnp.stack(times)


def fit(observed, args: argparse.Namespace) -> list[np.ndarray]:
    """Gauss-Newton on the impact-time residuals; the parameters after each iteration."""
    residuals = lambda p: impact_times(p, args.bounces) - observed
    step = jax.jit(lambda p: (residuals(p), jax.jacrev(residuals)(p)))
    params, history = jnp.asarray(START), [np.asarray(START)]
    for _ in range(args.iterations):
        r, jac = step(params)
        params = params - jnp.linalg.lstsq(jac, r)[0]
        history.append(np.asarray(params))
    return history


def trajectory(params, bounces: int):
    """`(ts, heights)` of the whole bouncing trajectory, from each flight's dense output."""
    e, c = params
    t, y, ts, hs = jnp.asarray(0.0), jnp.asarray([H0, 0.0]), [], []
    for _ in range(bounces):
        sol = flight(t, y, c, dense=True)
        grid = jnp.linspace(t, sol.ts[0], 60)
        ts.append(np.asarray(grid))
        hs.append(np.asarray(sol.evaluate(grid)[:, 0]))
        t, y = sol.ts[0], jnp.stack([0.0, -e * sol.ys[0, 1]])
    return np.concatenate(ts), np.concatenate(hs)


def plot(observed, history, args: argparse.Namespace, path: pathlib.Path) -> None:
    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2)
    for params, label, style in ((START, "start", ":"), (history[-1], "fitted", "-")):
        ts, hs = trajectory(params, args.bounces)
        left.plot(ts, hs, style, label=f"{label}: e={params[0]:.3f}, c={params[1]:.3f}")
    left.plot(observed, np.zeros_like(observed), "kx", ms=9, label="observed impacts")
    left.set(xlabel="t", ylabel="height", title="Bouncing ball, fitted from impact times")
    left.legend()
    errors = [np.abs(np.asarray(p) - TRUE) for p in history]
    right.semilogy([e[0] for e in errors], "o-", label="|e - e_true|")
    right.semilogy([e[1] for e in errors], "s-", label="|c - c_true|")
    right.set(xlabel="Gauss-Newton iteration", ylabel="parameter error", title="Convergence")
    right.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    observed = jax.jit(lambda p: impact_times(p, args.bounces))(jnp.asarray(TRUE))
    history = fit(observed, args)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(np.asarray(observed), history, args, args.out / "bouncing_ball.png")
    error = np.max(np.abs(history[-1] - TRUE))
    print(f"observed impact times: {np.round(np.asarray(observed), 4)}")
    print(f"fitted e = {history[-1][0]:.6f}, c = {history[-1][1]:.6f}; parameter error {error:.1e}")


if __name__ == "__main__":
    main()
