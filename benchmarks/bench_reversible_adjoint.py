"""`Reversible(Tsit5())` with `ReversibleAdjoint()`: memory, time at equal memory, and
the coupling's effect on damped problems.

1. Memory: the gradient of `sum(y(t1)^2)` on the 4096-state ring of oscillators of
   `bench_reversible` (non-dissipative), compiled at n = 1000 and n = 100000 constant
   steps (`max_steps = n`): XLA's `temp_size_in_bytes`, and the ratio of the two after
   subtracting the 16 bytes per step the adjoint records (two float64 times).
2. Time at equal memory: `ReversibleAdjoint` against `CheckpointAdjoint(checkpoints=c)`
   for c = 2, 4, 8, through the same solver and through `Tsit5()` itself, and diffrax's
   `RecursiveCheckpointAdjoint
   (checkpoints=8)`, on a 4096-point heat equation (mild diffusion: the fastest mode
   decays by e^-4 over the solve, so that the reversible method is stable on it) and
   a neural-ODE training step (MLP 4-32-32-4, a batch of 64 written into the state,
   gradient with respect to the weights); n = 1000 constant steps (quick mode), and
   n = 10000 too in full mode (without c = 2 there, 94 evaluations per step, and against
   `Tsit5()` only; three rounds). Each row gives the
   gradient's compiled memory and Revolve's step evaluations per step for its c
   (`schedules.optimal_total`), so the crossover shows against the evaluations.
   Times are medians of interleaved samples, as ratios to the reversible one.
3. Damped problems: `y' = [[0, 1], [-1, -d]] y` over [0, 2], Tsit5 base, PID rtol
   1e-10, atol 1e-12: the gradient of `sum(y(2))` with respect to `y0` and `d`
   against the closed form (matrix exponential and its Fréchet derivative), for
   damping d = 1 ... 1000 and several couplings: right (error shown), or refused.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _common import Section, Table, bytes_cell, interleaved_samples, paired_ratio, plot_path
from bench_reversible import STATE_SIZE, params, ring

import odeckpt as oc
from odeckpt.schedules import optimal_total

MEMORY_STEPS = (1000, 100_000)
BYTES_PER_STEP = 16
CHECKPOINTS = (2, 4, 8)
DIFFUSION = 4.0 / (4 * (STATE_SIZE / 2) ** 2)  # the fastest mode decays at rate 4 (t in [0, 1])
REVERSIBLE = "ReversibleAdjoint, Reversible(Tsit5())"


def _memory_rows() -> tuple[list[list[str]], float]:
    y0, args = params()
    temps = []
    for n in MEMORY_STEPS:

        def loss(y0, args, n=n):
            sol = oc.diffeqsolve(
                ring,
                oc.Reversible(oc.Tsit5()),
                0.0,
                1.0,
                1.0 / n,
                y0,
                args,
                adjoint=oc.ReversibleAdjoint(),
                max_steps=n,
            )
            return jnp.sum(sol.ys**2)

        compiled = jax.jit(jax.grad(loss, (0, 1))).lower(y0, args).compile()
        temps.append(int(compiled.memory_analysis().temp_size_in_bytes))
        print(f"  reversible_adjoint: memory compiled n={n}", flush=True)
    net = [t - BYTES_PER_STEP * n for t, n in zip(temps, MEMORY_STEPS, strict=True)]
    rows = [
        [str(n), bytes_cell(t), bytes_cell(m), f"{m / y0.nbytes:.1f}"]
        for n, t, m in zip(MEMORY_STEPS, temps, net, strict=True)
    ]
    return rows, net[1] / net[0]


def heat(t, y, args):
    return args * (jnp.roll(y, 1) - 2 * y + jnp.roll(y, -1))


class _Field(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return jax.vmap(self.mlp)(y)


def _problems():
    """name -> (vector field given its parameters, the differentiated parameters, y0)."""
    x = jnp.linspace(0.0, 1.0, STATE_SIZE)
    y_heat = jnp.exp(-50 * (x - 0.5) ** 2) + 0.1 * jnp.sin(40 * x)
    mlp = eqx.nn.MLP(4, 4, 32, 2, activation=jnp.tanh, key=jr.PRNGKey(0))
    weights, rest = eqx.partition(mlp, eqx.is_array)
    y_batch = jr.normal(jr.PRNGKey(1), (64, 4))
    return {
        "heat equation (4096 points)": (lambda d: heat, jnp.asarray(DIFFUSION), y_heat),
        "neural ODE step (MLP 4-32-32-4, batch 64)": (
            lambda w: _Field(eqx.combine(w, rest)),
            weights,
            y_batch,
        ),
    }


def _odeckpt_grad(field, solver, adjoint, n):
    def loss(params, y0):
        sol = oc.diffeqsolve(
            oc.ODETerm(field(params)),
            solver,
            0.0,
            1.0,
            1.0 / n,
            y0,
            params,
            adjoint=adjoint,
            max_steps=n,
        )
        return jnp.sum(sol.ys**2)

    return jax.jit(jax.grad(loss, (0, 1)))


def _diffrax_grad(field, n, c):
    def loss(params, y0):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field(params)),
            dfx.Tsit5(),
            0.0,
            1.0,
            1.0 / n,
            y0,
            params,
            adjoint=dfx.RecursiveCheckpointAdjoint(checkpoints=c),
            max_steps=n,
        )
        return jnp.sum(sol.ys**2)

    return jax.jit(jax.grad(loss, (0, 1)))


def _solver_name(solver) -> str:
    return "Reversible(Tsit5())" if isinstance(solver, oc.Reversible) else "Tsit5()"


def _variants(field, n):
    """name -> (gradient function, Revolve's evaluations per step or None)."""
    reversible = _odeckpt_grad(field, oc.Reversible(oc.Tsit5()), oc.ReversibleAdjoint(), n)
    out = {REVERSIBLE: (reversible, None)}
    # At n = 10000: no c = 2 (94 evaluations per step), and the checkpointed
    # `Reversible(Tsit5())` only at n = 1000 (each of its gradients takes minutes there).
    for c in CHECKPOINTS if n <= 1000 else CHECKPOINTS[1:]:
        per_step = optimal_total(n, c) / n
        solvers = (oc.Tsit5(), oc.Reversible(oc.Tsit5())) if n <= 1000 else (oc.Tsit5(),)
        for solver in solvers:
            fn = _odeckpt_grad(field, solver, oc.CheckpointAdjoint(checkpoints=c), n)
            out[f"CheckpointAdjoint(checkpoints={c}), {_solver_name(solver)}"] = (fn, per_step)
    out["diffrax RecursiveCheckpointAdjoint(checkpoints=8), Tsit5()"] = (
        _diffrax_grad(field, n, 8),
        None,
    )
    return out


def _time_rows(steps, budget) -> tuple[list[list[str]], list]:
    rows, points = [], []
    for name, (field, inputs, y0) in _problems().items():
        for n in steps:
            variants = _variants(field, n)
            fns, evals = {}, {}
            for label, (fn, per_step) in variants.items():
                fns[label] = compiled = fn.lower(inputs, y0).compile()
                evals[label] = (per_step, int(compiled.memory_analysis().temp_size_in_bytes))
            print(f"  reversible_adjoint: compiled {name}, n={n}", flush=True)
            rounds = 5 if n <= 1000 else 3
            samples = interleaved_samples(fns, (inputs, y0), budget, min_rounds=rounds)
            base = samples[REVERSIBLE]
            for label in fns:
                per_step, temp = evals[label]
                r = paired_ratio(samples[label], base)
                median = sorted(samples[label])[len(samples[label]) // 2]
                rows.append(
                    [
                        name,
                        str(n),
                        label,
                        "" if per_step is None else f"{per_step:.1f}",
                        bytes_cell(temp),
                        f"{1e3 * median:.1f} ms",
                        f"{r:.2f}",
                    ]
                )
                if per_step is not None:
                    points.append((name, n, label.split("), ", 1)[1], per_step, r))
    return rows, points


def _damped_rows(dampings, couplings) -> list[list[str]]:
    rows = []
    for d in dampings:
        a = jnp.asarray([[0.0, 1.0], [-1.0, -d]])
        e = jnp.asarray([[0.0, 0.0], [0.0, -1.0]])
        y0 = jnp.asarray([1.0, 0.5])
        expm, frechet = jax.scipy.linalg.expm_frechet(2.0 * a, 2.0 * e)
        exact = (expm.T @ jnp.ones(2), jnp.sum(frechet @ y0))
        cells = [str(int(d))]
        for coupling in couplings:
            cells.append(_damped_cell(y0, jnp.asarray(d), exact, coupling))
        rows.append(cells)
        print(f"  reversible_adjoint: damping {d}", flush=True)
    return rows


def _damped_cell(y0, d, exact, coupling) -> str:
    def loss(y0, d):
        field = lambda t, y, d: jnp.stack([y[1], -y[0] - d * y[1]])
        pid = oc.PIDController(rtol=1e-10, atol=1e-12)
        sol = oc.diffeqsolve(
            field,
            oc.Reversible(oc.Tsit5(), coupling=coupling),
            0.0,
            2.0,
            0.01,
            y0,
            d,
            adjoint=oc.ReversibleAdjoint(),
            max_steps=4096,
            stepsize_controller=pid,
        )
        return jnp.sum(sol.ys), sol.stats["num_steps"]

    try:
        got, steps = jax.grad(loss, (0, 1), has_aux=True)(y0, d)
    except (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError) as error:
        cause = "max_steps reached" if "max_steps" in str(error) else "reconstruction drifted"
        return f"refused ({cause})"
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(exact), strict=True)
    err = max(float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w))) for g, w in pairs)
    return f"{err:.1e} ({int(steps)} steps)"


def _plot(points) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path, relative = plot_path("reversible_adjoint_crossover.png")
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in sorted({point[:3] for point in points}):
        xs = [point[3] for point in points if point[:3] == key]
        ys = [point[4] for point in points if point[:3] == key]
        ax.plot(xs, ys, marker="o", label=f"{key[0]}, n={key[1]}, checkpointed {key[2]}")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Revolve step evaluations per step (checkpoints c = 8, 4, 2)")
    ax.set_ylabel("time / ReversibleAdjoint (above 1: reversible faster)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [relative]


def run(quick: bool) -> Section:
    memory_rows, growth = _memory_rows()
    steps = (1000,) if quick else (1000, 10_000)
    time_rows, points = _time_rows(steps, 5.0)
    couplings = (0.5, 0.9, 0.999, 1.0)
    damped = _damped_rows((1.0, 10.0, 100.0, 1000.0), couplings)
    return Section(
        title="ReversibleAdjoint: exact gradients in O(1) memory through Reversible(solver)",
        table=Table(
            [
                "steps n",
                "temp memory of the gradient",
                f"less {BYTES_PER_STEP} B/step",
                "in states (32 KiB each)",
            ],
            memory_rows,
            caption=(
                f"Compiled temporary memory, {STATE_SIZE}-state ring of oscillators, "
                f"Reversible(Tsit5()): n = 100000 over n = 1000 after subtracting "
                f"{BYTES_PER_STEP} B/step: {growth:.3f}x (target <= 1.1x)."
            ),
        ),
        extra_tables=[
            Table(
                [
                    "problem",
                    "n",
                    "adjoint",
                    "Revolve evaluations / step",
                    "temp memory",
                    "time",
                    "time / reversible",
                ],
                time_rows,
                caption="Gradient time at (about) equal memory; same run, interleaved.",
            ),
            Table(
                ["damping", *(f"coupling {c}" for c in couplings)],
                damped,
                caption=(
                    "Damped oscillator, gradient of sum(y(2)) against the closed form "
                    "(relative error, steps taken), or refused (`throw=True`)."
                ),
            ),
        ],
        plots=_plot(points),
        notes=[
            "Two comparisons. Through the same solver, `Reversible(Tsit5())` "
            "checkpointed (a checkpoint holds `y` and `z`): the reversible gradient "
            "evaluates each step twice in all (forwards, and once backwards: its inverse, "
            "linearised as it goes, is the step's linearisation too), the checkpointed one "
            "Revolve's evaluations per step plus the reversal's. Against `Tsit5()` itself "
            "(checkpoints of one state): a reversible step costs two Tsit5 steps, so the "
            "crossover moves to more evaluations per step.",
        ],
    )
