"""Fit Lotka-Volterra to noisy data by Newton-CG, with Hessian-vector products through a
checkpointed solve, and read parameter confidence ellipses off the Hessian.

Prey `x` and predators `y` follow `x' = a x - b x y`, `y' = -c y + d x y`. Both are
observed at 30 times on [0, 10] with Gaussian noise (sd `SIGMA`), from `a, b, c, d =
1.5, 1, 3, 1`. The parameters are fitted in logarithms, `theta = log(a, b, c, d)`, by
minimising the negative log-likelihood `L(theta) = sum (model - data)^2 / (2 sd^2)`:

- Newton-CG (trust region, Steihaug's conjugate gradients): each iteration solves
  `H p = -g` with Hessian-vector products `odeckpt.hvp(L, theta, v)`, that is
  `jax.jvp(jax.grad(L), (theta,), (v,))`, forward over reverse through
  `CheckpointAdjoint(checkpoints=c)`, whose memory is `c` states and their tangents
  whatever the number of steps;
- Adam (optax), from the same start, on the same loss, with its gradient through the
  same adjoint, for comparison.

At the optimum the Hessian (HVPs along the four unit vectors: what `jax.hessian`
computes, forward over reverse) is the inverse covariance of the Laplace
approximation of the posterior (flat prior in `theta`): the 95% ellipses of
`(log a, log b)` and `(log c, log d)` are drawn with the true values. With
`--check-hessian`, `odeckpt.testing.check_hessian` first checks that Hessian against
finite differences of the gradient.

    python examples/parameter_fit_newton.py
    python examples/parameter_fit_newton.py --checkpoints 4 --check-hessian --quick

Writes `parameter_fit_newton.png` into `--out` (none with `--no-plot`).
"""

import argparse
import dataclasses
import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure

import odeckpt as oc
import odeckpt.testing

jax.config.update("jax_enable_x64", True)

TRUE = np.asarray([1.5, 1.0, 3.0, 1.0])  # a, b, c, d
START = TRUE * np.asarray([1.3, 0.75, 0.8, 1.25])
NAMES = ("a", "b", "c", "d")
Y0 = np.asarray([1.0, 1.0])
T_END, NUM_OBS, SIGMA = 10.0, 30, 0.25
CHI2_95_2DOF = 5.991464547107979  # the 95% quantile of chi-squared with 2 degrees of freedom


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoints", type=int, default=8, help="CheckpointAdjoint(checkpoints=)")
    p.add_argument("--newton-steps", type=int, default=30, help="most Newton-CG iterations")
    p.add_argument("--adam-steps", type=int, default=1500, help="Adam iterations")
    p.add_argument("--learning-rate", type=float, default=0.02, help="Adam's step size")
    p.add_argument("--seed", type=int, default=0, help="seed of the observation noise")
    p.add_argument("--quick", action="store_true", help="300 Adam steps, for smoke tests")
    p.add_argument(
        "--check-hessian",
        action="store_true",
        help="check the Hessian against finite differences (odeckpt.testing; compiles more)",
    )
    p.add_argument("--no-plot", action="store_true", help="print the results only")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "out",
        help="directory for the PNG (default: examples/out)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.adam_steps = min(args.adam_steps, 300)
    return args


def vector_field(t, y, params):
    a, b, c, d = params
    prey, predators = y
    return jnp.stack([a * prey - b * prey * predators, -c * predators + d * prey * predators])


def observation_times():
    return jnp.linspace(T_END / NUM_OBS, T_END, NUM_OBS)


def simulate(params, ts, adjoint):
    sol = oc.diffeqsolve(
        vector_field,
        oc.Tsit5(),
        0.0,
        T_END,
        0.05,
        jnp.asarray(Y0),
        params,
        saveat=oc.SaveAt(ts=ts),
        stepsize_controller=oc.PIDController(rtol=1e-9, atol=1e-9),
        adjoint=adjoint,
        max_steps=4096,
    )
    return sol.ys


def make_loss(data, adjoint):
    """The negative log-likelihood of `data` as a function of `theta = log(params)`."""

    def loss(theta):
        residuals = simulate(jnp.exp(theta), observation_times(), adjoint) - data
        return 0.5 * jnp.sum(residuals**2) / SIGMA**2

    return loss


@dataclasses.dataclass
class Fit:
    """An optimiser's path: the loss after each iteration and the final `theta`."""

    losses: list[float]
    theta: np.ndarray
    hvps: int = 0


def steihaug(grad, hvp, radius: float, max_iter: int):
    """Approximately minimise `g.p + p.Hp/2` over `|p| <= radius` by conjugate gradients.

    Returns `(p, number of HVPs)`; stops on negative curvature or at the boundary.
    """
    p, r = np.zeros_like(grad), grad.copy()
    d, count = -r, 0
    tol = min(0.5, np.sqrt(np.linalg.norm(grad))) * np.linalg.norm(grad)
    for _ in range(max_iter):
        hd = hvp(d)
        count += 1
        curvature = d @ hd
        if curvature <= 0 or np.linalg.norm(p + (r @ r) / curvature * d) >= radius:
            return p + _to_boundary(p, d, radius) * d, count
        alpha = (r @ r) / curvature
        p, r_next = p + alpha * d, r + alpha * hd
        if np.linalg.norm(r_next) < tol:
            return p, count
        d, r = -r_next + (r_next @ r_next) / (r @ r) * d, r_next
    return p, count


def _to_boundary(p, d, radius: float) -> float:
    """The `tau >= 0` with `|p + tau d| = radius`."""
    a, b, c = d @ d, 2 * (p @ d), p @ p - radius**2
    return (-b + np.sqrt(b * b - 4 * a * c)) / (2 * a)


def newton_cg(value_and_grad, hvp, theta0, max_steps: int) -> Fit:
    """Trust-region Newton-CG (Nocedal & Wright, Numerical Optimization, Alg. 4.1 + 7.2)."""
    theta, radius = np.asarray(theta0), 1.0
    value, grad = (np.asarray(x) for x in value_and_grad(theta))
    fit = Fit([float(value)], theta)
    for _ in range(max_steps):
        if np.linalg.norm(grad) <= 1e-8 * max(1.0, abs(value)):
            break
        hvp_here = functools.partial(_hvp_at, hvp, jnp.asarray(theta))
        step, count = steihaug(grad, hvp_here, radius, 8)
        predicted = -(grad @ step + 0.5 * step @ hvp_here(step))
        fit.hvps += count + 1
        new_value, new_grad = (np.asarray(x) for x in value_and_grad(theta + step))
        ratio = (value - new_value) / predicted if predicted > 0 else -1.0
        if ratio < 0.25:
            radius *= 0.25
        elif ratio > 0.75 and np.isclose(np.linalg.norm(step), radius):
            radius *= 2.0
        if ratio > 0.1:
            theta, value, grad = theta + step, new_value, new_grad
        fit.losses.append(float(value))
        fit.theta = theta
    return fit


def _hvp_at(hvp, theta, v: np.ndarray) -> np.ndarray:
    return np.asarray(hvp(theta, jnp.asarray(v)))


def adam(value_and_grad, theta0, steps: int, learning_rate: float) -> Fit:
    """Adam from `theta0`: the same compiled gradient as Newton-CG's, optax's update."""
    optimiser = optax.adam(learning_rate)
    update = jax.jit(optimiser.update)
    theta = jnp.asarray(theta0)
    state, losses = optimiser.init(theta), []
    for _ in range(steps):
        value, grad = value_and_grad(theta)
        updates, state = update(grad, state, theta)
        theta = optax.apply_updates(theta, updates)
        losses.append(float(value))
    losses.append(float(value_and_grad(theta)[0]))
    return Fit(losses, np.asarray(theta))


def ellipse(mean, cov, level: float = CHI2_95_2DOF, num: int = 200):
    """Points on `{x: (x - mean)^T cov^-1 (x - mean) = level}` (2-D)."""
    values, vectors = np.linalg.eigh(cov)
    angle = np.linspace(0, 2 * np.pi, num)
    circle = np.stack([np.cos(angle), np.sin(angle)])
    return mean[:, None] + vectors @ (np.sqrt(level * values)[:, None] * circle)


def plot(data, newton: Fit, adam_fit: Fit, cov, args, path: pathlib.Path) -> None:
    fig = Figure(figsize=(15, 4.2))
    fit_ax, loss_ax, *ellipse_axes = fig.subplots(1, 4)
    ts, fine = np.asarray(observation_times()), jnp.linspace(0.0, T_END, 300)
    curves = np.asarray(simulate(jnp.exp(jnp.asarray(newton.theta)), fine, oc.CheckpointAdjoint()))
    for k, (name, colour) in enumerate((("prey", "C0"), ("predators", "C3"))):
        fit_ax.plot(ts, data[:, k], "o", color=colour, ms=4, label=f"{name} (data)")
        fit_ax.plot(fine, curves[:, k], "-", color=colour, label=f"{name} (Newton-CG fit)")
    fit_ax.set(xlabel="t", ylabel="population", title="Lotka-Volterra fit")
    fit_ax.legend(fontsize=8)
    best = min(newton.losses[-1], adam_fit.losses[-1])
    for fit, label in ((newton, f"Newton-CG ({newton.hvps} HVPs)"), (adam_fit, "Adam")):
        loss_ax.semilogy(np.maximum(np.asarray(fit.losses) - best, 1e-12), label=label)
    loss_ax.set(xscale="symlog", xlabel="iteration", ylabel="loss - best loss", title="Loss")
    loss_ax.legend()
    for ax, (i, j) in zip(ellipse_axes, ((0, 1), (2, 3)), strict=True):
        mean = newton.theta[[i, j]]
        points = ellipse(mean, cov[np.ix_([i, j], [i, j])])
        ax.plot(*points, "-", label="95% (Laplace)")
        ax.plot(*mean, "+", ms=10, label="Newton-CG estimate")
        ax.plot(*np.log(TRUE[[i, j]]), "k*", ms=10, label="true")
        ax.set(xlabel=f"log {NAMES[i]}", ylabel=f"log {NAMES[j]}", title="Confidence region")
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Newton-CG with HVPs through CheckpointAdjoint(checkpoints={args.checkpoints}); "
        f"{NUM_OBS} noisy observations per species, sd {SIGMA:g}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    truth = simulate(jnp.asarray(TRUE), observation_times(), oc.CheckpointAdjoint())
    noise = np.random.default_rng(args.seed).normal(0.0, SIGMA, truth.shape)
    data = np.asarray(truth) + noise
    loss = make_loss(jnp.asarray(data), oc.CheckpointAdjoint(checkpoints=args.checkpoints))
    value_and_grad = jax.jit(jax.value_and_grad(loss))
    hvp = jax.jit(lambda theta, v: oc.hvp(loss, theta, v))  # jax.jvp(jax.grad(loss), ...)
    theta0 = np.log(START)

    started = time.perf_counter()
    jax.block_until_ready((value_and_grad(theta0), hvp(theta0, theta0)))  # compile both
    print(f"compiled the gradient and the HVP in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    newton = newton_cg(value_and_grad, hvp, theta0, args.newton_steps)
    newton_time, started = time.perf_counter() - started, time.perf_counter()
    adam_fit = adam(value_and_grad, theta0, args.adam_steps, args.learning_rate)
    adam_time = time.perf_counter() - started

    optimum = jnp.asarray(newton.theta)
    check = odeckpt.testing.check_hessian(loss, optimum, rtol=1e-5) if args.check_hessian else None
    hessian = np.stack([np.asarray(hvp(optimum, e)) for e in jnp.eye(4)])  # H's rows
    cov = np.linalg.inv(0.5 * (hessian + hessian.T))  # Laplace: the inverse Hessian
    offset = newton.theta - np.log(TRUE)
    distance = float(offset @ np.linalg.solve(cov, offset))
    within = next((i for i, v in enumerate(adam_fit.losses) if v <= newton.losses[-1] + 1e-3), None)
    print(f"start:     loss {newton.losses[0]:.6f}, params {np.round(START, 4)}")
    print(
        f"Newton-CG: loss {newton.losses[-1]:.6f} after {len(newton.losses) - 1} iterations "
        f"({len(newton.losses)} gradients, {newton.hvps} HVPs, {newton_time:.2f} s), "
        f"params {np.round(np.exp(newton.theta), 4)}"
    )
    print(
        f"Adam:      loss {adam_fit.losses[-1]:.6f} after {args.adam_steps} iterations "
        f"(lr {args.learning_rate:g}, {adam_time:.2f} s); within 1e-3 of Newton-CG's loss "
        + (f"after {within} iterations" if within is not None else "never")
    )
    print(f"true params {TRUE}; Laplace sd of the log params {np.round(np.sqrt(np.diag(cov)), 4)}")
    print(f"squared Mahalanobis distance of the truth: {distance:.2f} (95% of chi2(4) is < 9.49)")
    if check is not None:
        print(f"Hessian check (differences of the gradient, rtol 1e-5): {check.passed}")
    if not args.no_plot:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "parameter_fit_newton.png"
        plot(data, newton, adam_fit, cov, args, path)
        print(f"plot: {path}")
    return {"newton": newton, "adam": adam_fit, "cov": cov, "check": check, "within": within}


if __name__ == "__main__":
    main()
