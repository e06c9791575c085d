"""How close is a gradient to its floor?

The floor of a gradient is the time of its vector-field work alone: the number of
vector-field evaluations times the time of one, plus the number of vector-field VJPs
times the time of one, each timed in isolation in a jitted loop on the same inputs.
Counts come from a build whose field is wrapped in a `jax.custom_vjp` with a host
callback in its evaluation and in its VJP (separate from the timed build). The
gradient's time over its floor is its overhead: loop bookkeeping, checkpoint traffic,
step-size control, kernel launches.

Two problems, each with odeckpt's `CheckpointAdjoint()` and diffrax's
`RecursiveCheckpointAdjoint()` (their defaults): the neural-ODE training step of
`bench_neural_ode` with the batch inside the field (an MLP 2-64-64-2 on 256 states,
Tsit5) and the damped oscillator of `bench_gradient` (2-D, Tsit5).
"""

import statistics

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from _common import Section, Table, interleaved_samples, seconds_cell
from _problems import PROBLEMS
from bench_neural_ode import ATOL, MAX_STEPS, RTOL, T1, TS, _data
from jax import lax

import odeckpt as oc

LOOP = 200  # iterations of the isolated timing loops


class _Counts:
    evals = 0
    vjps = 0


def _tick_eval():
    _Counts.evals += 1


def _tick_vjp():
    _Counts.vjps += 1


def counted(f):
    """`f(t, y, p)` with a host callback per evaluation and per VJP."""

    @jax.custom_vjp
    def g(t, y, p):
        jax.debug.callback(_tick_eval)
        return f(t, y, p)

    def fwd(t, y, p):
        jax.debug.callback(_tick_eval)
        return jax.vjp(f, t, y, p)

    def bwd(vjp_fn, ct):
        jax.debug.callback(_tick_vjp)
        return vjp_fn(ct)

    g.defvjp(fwd, bwd)
    return g


def _solve(lib, f, y0, p, setup):
    m = oc if lib == "odeckpt" else dfx
    adjoint = oc.CheckpointAdjoint() if lib == "odeckpt" else dfx.RecursiveCheckpointAdjoint()
    t1, ts, rtol, atol, max_steps, dt0 = setup
    sol = m.diffeqsolve(
        m.ODETerm(f),
        m.Tsit5(),
        0.0,
        t1,
        dt0,
        y0,
        p,
        saveat=m.SaveAt(ts=ts),
        stepsize_controller=m.PIDController(rtol=rtol, atol=atol),
        adjoint=adjoint,
        max_steps=max_steps,
    )
    return jnp.asarray(sol.ys)


def _gradient(lib, f, setup, targets):
    def loss(p, y0):
        return jnp.mean((_solve(lib, f, y0, p, setup) - targets) ** 2)

    return jax.jit(jax.grad(loss))


def _isolated(f, t, y, p) -> dict:
    """Jitted loops of `LOOP` evaluations and of `LOOP` VJPs of `f` at `(t, y, p)`."""

    def evals(y, p):
        return lax.fori_loop(0, LOOP, lambda i, y: y + 1e-9 * f(t, y, p), y)

    def vjps(y, p):
        _, vjp_fn = jax.vjp(lambda y, p: f(t, y, p), y, p)

        def body(i, carry):
            ct, acc = carry
            dy, dp = vjp_fn(ct)
            return ct + 1e-9 * dy, jax.tree.map(jnp.add, acc, dp)

        return lax.fori_loop(0, LOOP, body, (jnp.ones_like(y), jax.tree.map(jnp.zeros_like, p)))

    return {"eval": jax.jit(evals), "vjp": jax.jit(vjps)}


def _rows(name, f, y0, p, setup, targets, budget) -> list[list[str]]:
    loops = _isolated(f, jnp.asarray(0.5), y0, p)
    fns = {k: (lambda fn=fn: fn(y0, p)) for k, fn in loops.items()}
    counts = {}
    for lib in ("odeckpt", "diffrax"):
        grad = _gradient(lib, f, setup, targets)
        fns[lib] = lambda grad=grad: grad(p, y0)
        counting = _gradient(lib, counted(f), setup, targets)
        jax.block_until_ready(counting(p, y0))
        _Counts.evals = _Counts.vjps = 0
        jax.block_until_ready(counting(p, y0))
        jax.effects_barrier()
        counts[lib] = (_Counts.evals, _Counts.vjps)
    # One set of interleaved rounds: the isolated loops are timed under the same load.
    samples = interleaved_samples(fns, (), budget_seconds=budget)
    t_eval, t_vjp = (statistics.median(samples[k]) / LOOP for k in ("eval", "vjp"))
    rows = []
    for lib in ("odeckpt", "diffrax"):
        seconds = statistics.median(samples[lib])
        evals, vjps = counts[lib]
        floor = evals * t_eval + vjps * t_vjp
        rows.append(
            [
                name,
                lib,
                seconds_cell(seconds),
                str(evals),
                str(vjps),
                seconds_cell(t_eval),
                seconds_cell(t_vjp),
                seconds_cell(floor),
                f"{seconds / floor:.2f}",
            ]
        )
    return rows


def neural_ode_rows(budget: float) -> list[list[str]]:
    params, static, y0, targets = _data()

    def field(t, y, params):
        return jax.vmap(eqx.combine(params, static))(y)

    setup = (T1, TS, RTOL, ATOL, MAX_STEPS, None)
    targets = jnp.swapaxes(targets, 0, 1)  # (time, batch, 2), as the solve returns
    name = "neural ODE (MLP 2-64-64-2, batch 256 in the field)"
    return _rows(name, field, y0, params, setup, targets, budget)


def damped_rows(budget: float) -> list[list[str]]:
    problem = PROBLEMS["damped"]
    setup = (problem.t1, jnp.linspace(0, problem.t1, 11), 1e-6, 1e-8, 4096, 0.01)
    y0, args = jnp.asarray(problem.y0), jnp.asarray(problem.args)
    return _rows("damped oscillator (2-D)", problem.vf, y0, args, setup, 0.0, budget)


def run(quick: bool) -> Section:
    budget = 5.0 if quick else 20.0
    rows = neural_ode_rows(budget) + damped_rows(budget)
    columns = [
        "problem",
        "library",
        "gradient",
        "vf evals",
        "vf VJPs",
        "one eval",
        "one VJP",
        "floor",
        "gradient / floor",
    ]
    notes = [
        "Gradient: `jax.jit(jax.grad(loss))` with respect to the parameters, Tsit5 with "
        "`PIDController` (neural ODE: rtol 1e-3, atol 1e-6, 20 outputs; damped: rtol 1e-6, "
        "atol 1e-8, dt0 0.01, 11 outputs), odeckpt `CheckpointAdjoint()` and diffrax "
        "`RecursiveCheckpointAdjoint()` (defaults). Counts from a build whose field is a "
        "`jax.custom_vjp` with a host callback in its evaluation and its VJP; one eval / "
        f"one VJP: medians of a jitted loop of {LOOP} evaluations (or VJPs with the "
        "residuals computed once) on the same inputs. Floor = evals x one eval + VJPs x "
        "one VJP. Medians of interleaved samples (the gradients and the isolated loops "
        "in the same rounds), same process. A ratio below 1 means the solver's "
        "evaluations ran faster than the isolated loop's (XLA fuses them with the stage "
        "arithmetic around them): the floor is a yardstick, not a bound.",
    ]
    return Section("Gradient time over its floor", Table(columns, rows), notes)
