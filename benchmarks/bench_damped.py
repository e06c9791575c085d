"""Continuous adjoints on damped systems: gradient error and backward cost.

Every adjoint, odeckpt's, diffrax's and `jax.experimental.ode.odeint`'s, differentiates
the same loss in the same run, and torchdiffeq's `odeint` and `odeint_adjoint` in a
separate process (`torch_peer.py`, skipped with a note if its environment is absent):
`sum_k sum_i y_i(t_k)` over 12 output times in (0, 10], with Tsit5, rtol 1e-6,
atol 1e-8, with respect to the system matrix `A` and `y0` of `dy/dt = A y`. The
reference is the closed form (the Fréchet derivative of the matrix exponential, in
SciPy). Vector-field evaluations are counted with a host callback inside the vector
field: once in the plain solve (forward), once in the gradient (forward + backward).
`jax.experimental.ode` and torchdiffeq offer Dopri5 only, so they run Dopri5.

A second table checks the non-damped problems (Lotka–Volterra, Van der Pol, a small
neural ODE) against odeckpt's `CheckpointAdjoint`.
"""

import dataclasses
from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from _common import Section, Table, import_jax_odeint, run_torch_peer, warn
from _problems import PROBLEMS

import odeckpt as oc

jax_odeint, JAX_ODE_STATUS = import_jax_odeint()

RTOL, ATOL, MAX_STEPS = 1e-6, 1e-8, 4096
TS = np.linspace(0.0, 10.0, 13)[1:]
ERROR_TARGET, COST_TARGET = 1e-4, 2.0


# ----------------------------------------------------------------------------------
# Problems and references


def oscillator(damping: float):
    return np.array([[0.0, 1.0], [-1.0, -damping]]), np.array([1.0, 0.0])


CASES = {
    "damped oscillator, c=1": oscillator(1.0),
    "damped oscillator, c=10": oscillator(10.0),
    "damped oscillator, c=100": oscillator(100.0),
    "damped oscillator, c=1000": oscillator(1000.0),
    "diagonal decay, rates 1..1000": (-np.diag([1.0, 10.0, 100.0, 1000.0]), np.ones(4)),
}
QUICK_CASES = [
    "damped oscillator, c=10",
    "damped oscillator, c=1000",
    "diagonal decay, rates 1..1000",
]


def closed_form_gradient(a: np.ndarray, y0: np.ndarray):
    """d/dA, d/dy0 of sum_k 1^T expm(A t_k) y0; d/dA = t L(t A^T, 1 y0^T)."""
    w = np.ones_like(y0)
    grad_a, grad_y0 = np.zeros_like(a), np.zeros_like(y0)
    for t in TS:
        grad_a += t * scipy.linalg.expm_frechet(t * a.T, np.outer(w, y0))[1]
        grad_y0 += scipy.linalg.expm(t * a).T @ w
    return grad_a, grad_y0


# ----------------------------------------------------------------------------------
# Counting vector-field evaluations


_EVALS = [0]


def _tick():
    _EVALS[0] += 1


def counted(vf: Callable) -> Callable:
    """`vf` that counts its evaluations on the host (primal evaluations only)."""

    def field(t, y, args):
        jax.debug.callback(_tick)
        return vf(t, y, args)

    return field


def evaluations(fn: Callable, *args):
    """(result, evaluations) of the first call of the jitted `fn`.

    Host callbacks run when the compiled function runs, never while it is traced or
    compiled: the first call counts one execution, with no warm-up call.
    """
    jax.effects_barrier()
    _EVALS[0] = 0
    out = jax.block_until_ready(fn(*args))
    jax.effects_barrier()
    return out, _EVALS[0]


# ----------------------------------------------------------------------------------
# The adjoints compared


@dataclasses.dataclass(frozen=True)
class Adjoint:
    label: str
    library: str  # "odeckpt", "diffrax", "jax.experimental.ode" or "torchdiffeq"
    make: Callable[[], object]
    on_grid: bool = False  # steps on the forward pass's step times
    kind: str = ""  # "interpolating" | "backsolve" | "autograd" (no backward vf evals) | ""


def _pid(lib):
    return lib.PIDController(rtol=RTOL, atol=ATOL)


ADJOINTS = [
    Adjoint("odeckpt CheckpointAdjoint", "odeckpt", oc.CheckpointAdjoint),
    Adjoint(
        "odeckpt InterpolatingAdjoint (forward grid)",
        "odeckpt",
        oc.InterpolatingAdjoint,
        True,
        "interpolating",
    ),
    Adjoint(
        "odeckpt InterpolatingAdjoint (adaptive)",
        "odeckpt",
        lambda: oc.InterpolatingAdjoint(stepsize_controller=_pid(oc)),
        False,
        "interpolating",
    ),
    Adjoint(
        "odeckpt BacksolveAdjoint (forward grid)", "odeckpt", oc.BacksolveAdjoint, True, "backsolve"
    ),
    Adjoint(
        "odeckpt BacksolveAdjoint (forward grid, checkpoints=1)",
        "odeckpt",
        lambda: oc.BacksolveAdjoint(checkpoints=1),
        True,
        "backsolve",
    ),
    Adjoint("diffrax BacksolveAdjoint", "diffrax", dfx.BacksolveAdjoint),
    Adjoint("diffrax RecursiveCheckpointAdjoint", "diffrax", dfx.RecursiveCheckpointAdjoint),
    Adjoint("jax.experimental.ode odeint (Dopri5)", "jax.experimental.ode", lambda: None),
]
QUICK_ADJOINTS = [0, 1, 2, 3, 5, 7]
TORCH_METHODS = {
    "odeint": "torchdiffeq odeint (dopri5)",
    "odeint_adjoint": "torchdiffeq odeint_adjoint (dopri5)",
}


def solve_linear(adjoint: Adjoint, a, y0, throw: bool):
    field = counted(lambda t, y, a: a @ y)
    if adjoint.library == "jax.experimental.ode":
        # Its `mxstep` bounds the steps between two outputs; running out is silent.
        ts = jnp.asarray([0.0, *TS])
        ys = jax_odeint(
            lambda y, t, a: field(t, y, a), y0, ts, a, rtol=RTOL, atol=ATOL, mxstep=MAX_STEPS
        )[1:]
        return jnp.sum(ys)
    if adjoint.library == "odeckpt":
        sol = oc.diffeqsolve(
            field,
            oc.Tsit5(),
            0.0,
            10.0,
            None,
            y0,
            a,
            saveat=oc.SaveAt(ts=jnp.asarray(TS)),
            stepsize_controller=_pid(oc),
            adjoint=adjoint.make(),
            max_steps=MAX_STEPS,
            throw=throw,
        )
    else:
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field),
            dfx.Tsit5(),
            0.0,
            10.0,
            None,
            y0,
            a,
            saveat=dfx.SaveAt(ts=jnp.asarray(TS)),
            stepsize_controller=_pid(dfx),
            adjoint=adjoint.make(),
            max_steps=MAX_STEPS,
            throw=throw,
        )
    return jnp.sum(sol.ys)


@dataclasses.dataclass
class Row:
    case: str
    adjoint: Adjoint
    error: float
    status: str
    forward: int
    backward: int

    @property
    def cost(self) -> float:
        return self.backward / max(self.forward, 1)


def _relative_error(got, want) -> float:
    got = np.concatenate([np.ravel(x) for x in got])
    want = np.concatenate([np.ravel(x) for x in want])
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def measure_linear(case: str, adjoint: Adjoint, forward: dict) -> Row:
    a, y0 = (jnp.asarray(x) for x in CASES[case])
    if adjoint.library not in forward:
        fwd = jax.jit(lambda a, y0: solve_linear(adjoint, a, y0, throw=False))
        forward[adjoint.library] = evaluations(fwd, a, y0)[1]
    # odeckpt with throw=False: a diverged backsolve shows as NaN (with throw=True it
    # raises). diffrax with throw=True, its default: with False, a backward solve that
    # runs out of max_steps returns its last state silently.
    throw = adjoint.library == "diffrax"
    grad = jax.jit(jax.grad(lambda a, y0: solve_linear(adjoint, a, y0, throw), argnums=(0, 1)))
    try:
        got, total = evaluations(grad, a, y0)
    except Exception as error:  # noqa: BLE001 - a failed backward solve is a result here
        message = str(error).splitlines()[0][:60] if str(error) else type(error).__name__
        status = "max_steps (raised)" if "max" in str(error).lower() else f"raised: {message}"
        return Row(case, adjoint, float("nan"), status, forward[adjoint.library], -1)
    error, status = _error_status(case, got, adjoint.library)
    return Row(
        case, adjoint, error, status, forward[adjoint.library], total - forward[adjoint.library]
    )


def _error_status(case: str, got, library: str) -> tuple[float, str]:
    error = _relative_error(got, closed_form_gradient(*CASES[case]))
    if np.all(np.isnan(np.concatenate([np.ravel(x) for x in got]))):
        # odeckpt checks its reconstruction of y; elsewhere NaN comes from overflow.
        return error, "diverged: detected (NaN)" if library == "odeckpt" else "diverged: NaN"
    return error, "ok" if error <= ERROR_TARGET else "**wrong, silent**"


def _torch_status(message: str) -> str:
    if "max_num_steps" in message:
        return "max_steps (raised)"
    if "non-finite" in message:
        return "diverged: raised (non-finite `y`)"
    return f"raised: {message[:60]}"


def torch_rows(cases: list[str], timeout_seconds: float) -> tuple[dict[str, list[Row]], str]:
    """torchdiffeq's rows per case, measured by `torch_peer.py`; and a note."""
    problems = {
        case: {"a": CASES[case][0].tolist(), "y0": CASES[case][1].tolist()} for case in cases
    }
    spec = {
        "damped": {
            "ts": TS.tolist(),
            "rtol": RTOL,
            "atol": ATOL,
            "max_steps": MAX_STEPS,
            "cases": problems,
        }
    }
    results, note = run_torch_peer(spec, timeout_seconds)
    if results is None:
        return {}, note
    rows: dict[str, list[Row]] = {}
    for case, methods in results["damped"].items():
        for method, result in methods.items():
            kind = "autograd" if method == "odeint" else ""
            adjoint = Adjoint(TORCH_METHODS[method], "torchdiffeq", lambda: None, kind=kind)
            if "error" in result:
                status = _torch_status(result["error"])
                row = Row(case, adjoint, float("nan"), status, result["forward_evals"], -1)
            else:
                got = [result["grad_a"], result["grad_y0"]]
                error, status = _error_status(case, got, "torchdiffeq")
                backward = result["backward_evals"]
                row = Row(case, adjoint, error, status, result["forward_evals"], backward)
            rows.setdefault(case, []).append(row)
    versions = results["versions"]
    return rows, (
        f"torchdiffeq {versions['torchdiffeq']} with torch {versions['torch']} "
        f"({results['device']}, `torch.set_num_threads({results['threads']})`, the usable "
        f"CPUs, `OMP_WAIT_POLICY={results['omp_wait_policy']}`), run by `torch_peer.py` "
        "in its own environment: dopri5, the same rtol, atol, outputs and float64; "
        "`options=dict(max_num_steps=4096)` (steps between two outputs; exceeding it "
        "raises). `odeint` backpropagates through the solver's operations: its backward "
        "pass evaluates no vector field (0 counted). "
        "`odeint_adjoint` solves the adjoint ODE backwards with the same tolerances, "
        "resetting `y` to the forward solution at each output, with error control over "
        "the whole augmented state (torchdiffeq's default)."
    )


def _check(row: Row) -> None:
    if row.adjoint.kind == "interpolating" and not row.error <= ERROR_TARGET:
        warn(f"{row.adjoint.label} on {row.case}: relative error {row.error:.2e} > 1e-4")
    if row.adjoint.kind == "backsolve" and row.status == "**wrong, silent**":
        warn(f"{row.adjoint.label} on {row.case}: silently wrong ({row.error:.2e})")
    if row.adjoint.on_grid and row.status == "ok" and row.cost > COST_TARGET:
        warn(f"{row.adjoint.label} on {row.case}: backward/forward {row.cost:.2f} > 2")


def _linear_table(rows: list[Row]) -> Table:
    cells = []
    for r in rows:
        error = "—" if np.isnan(r.error) else f"{r.error:.1e}"
        backward = "—" if r.backward < 0 else str(r.backward)
        cost = "—" if r.backward < 0 else f"{r.cost:.2f}"
        if r.adjoint.kind == "autograd":  # VJPs of recorded operations, no vf calls
            backward, cost = f"{backward} (autograd)", "—"
        cells.append([r.case, r.adjoint.label, error, r.status, str(r.forward), backward, cost])
    return Table(
        [
            "problem",
            "adjoint",
            "relative error",
            "status",
            "forward evals",
            "backward evals",
            "backward / forward",
        ],
        cells,
    )


# ----------------------------------------------------------------------------------
# Non-damped problems: agreement with CheckpointAdjoint


def _mlp():
    return eqx.nn.MLP(2, 2, 32, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))


NONLINEAR = {
    "Lotka–Volterra": (PROBLEMS["lotka_volterra"].vf, (1.0, 1.0), (1.5, 1.0, 3.0, 1.0)),
    "Van der Pol (mu=1)": (PROBLEMS["van_der_pol"].vf, (2.0, 0.0), 1.0),
}


def _nonlinear_gradient(name: str, adjoint):
    if name == "neural ODE (MLP 2-32-32-2)":
        params, static = eqx.partition(_mlp(), eqx.is_array)
        vf = lambda t, y, p: eqx.combine(p, static)(y)
        y0, args, t1 = jnp.array([1.0, 0.5]), params, 1.0
    else:
        vf, y0, args = NONLINEAR[name]
        y0, args, t1 = jnp.asarray(y0), jax.tree.map(jnp.asarray, args), 10.0

    def loss(y0, args):
        ts = jnp.linspace(0.0, t1, 13)[1:]
        if isinstance(adjoint, oc.AbstractAdjoint):
            sol = oc.diffeqsolve(
                vf,
                oc.Tsit5(),
                0.0,
                t1,
                None,
                y0,
                args,
                saveat=oc.SaveAt(ts=ts),
                stepsize_controller=_pid(oc),
                adjoint=adjoint,
                max_steps=MAX_STEPS,
            )
        else:
            sol = dfx.diffeqsolve(
                dfx.ODETerm(vf),
                dfx.Tsit5(),
                0.0,
                t1,
                None,
                y0,
                args,
                saveat=dfx.SaveAt(ts=ts),
                stepsize_controller=_pid(dfx),
                adjoint=adjoint,
                max_steps=MAX_STEPS,
            )
        return jnp.sum(sol.ys)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)
    return [np.asarray(x) for x in jax.tree.leaves(grad)]


def _agreement_table(quick: bool) -> Table:
    names = [*NONLINEAR, "neural ODE (MLP 2-32-32-2)"]
    adjoints = {
        "odeckpt InterpolatingAdjoint": oc.InterpolatingAdjoint(),
        "odeckpt BacksolveAdjoint": oc.BacksolveAdjoint(),
        "diffrax BacksolveAdjoint": dfx.BacksolveAdjoint(),
    }
    if not quick:
        adjoints["odeckpt InterpolatingAdjoint (adaptive)"] = oc.InterpolatingAdjoint(
            stepsize_controller=_pid(oc)
        )
        adjoints["diffrax RecursiveCheckpointAdjoint"] = dfx.RecursiveCheckpointAdjoint()
    rows = []
    for name in names:
        reference = _nonlinear_gradient(name, oc.CheckpointAdjoint())
        for label, adjoint in adjoints.items():
            diff = _relative_error(_nonlinear_gradient(name, adjoint), reference)
            met = "met" if diff <= 10 * RTOL else "**not met**"
            if label.startswith("odeckpt") and diff > 10 * RTOL:
                warn(f"{label} on {name}: differs from CheckpointAdjoint by {diff:.1e}")
            rows.append([name, label, f"{diff:.1e}", f"{diff / RTOL:.1f} ({met})"])
    return Table(
        [
            "problem",
            "adjoint",
            "relative difference from CheckpointAdjoint",
            "in units of rtol (target <= 10)",
        ],
        rows,
        caption="Non-damped problems: agreement with odeckpt's CheckpointAdjoint "
        "(Tsit5, rtol 1e-6, atol 1e-8, loss summed over 12 outputs)",
    )


# ----------------------------------------------------------------------------------


def run(quick: bool) -> Section:
    cases = QUICK_CASES if quick else list(CASES)
    adjoints = [ADJOINTS[i] for i in QUICK_ADJOINTS] if quick else ADJOINTS
    if jax_odeint is None:
        adjoints = [a for a in adjoints if a.library != "jax.experimental.ode"]
    print("  torchdiffeq (torch_peer.py)", flush=True)
    torch, torch_note = torch_rows(cases, timeout_seconds=600 if quick else 1200)
    rows = []
    for case in cases:
        forward: dict[str, int] = {}
        for adjoint in adjoints:
            print(f"  {case} · {adjoint.label}", flush=True)
            rows.append(measure_linear(case, adjoint, forward))
            _check(rows[-1])
        rows += torch.get(case, [])
    return Section(
        title="Continuous adjoints on damped systems",
        table=_linear_table(rows),
        extra_tables=[_agreement_table(quick)],
        notes=[*NOTES, *filter(None, [(JAX_ODE_NOTE + JAX_ODE_STATUS).strip(), torch_note])],
    )


JAX_ODE_NOTE = (
    "`jax.experimental.ode.odeint` (Dopri5, its only method): the same rtol, atol and "
    "outputs, `mxstep=4096` (steps between two outputs; running out returns the state "
    "reached, silently). Its adjoint solves the augmented ODE backwards between outputs "
    "with the same tolerances and error control over the whole augmented state, "
    "resetting `y` to the forward solution at each output. "
)
NOTES = [
    "Loss: the sum of `y` over 12 output times in (0, 10]; gradient with respect to "
    "`A` and `y0` of `dy/dt = A y`; reference: the closed form (matrix exponential). "
    "Tsit5, `PIDController(rtol=1e-6, atol=1e-8)`, `max_steps=4096`; odeckpt with "
    "`throw=False` (a detected divergence shows as NaN), diffrax with `throw=True`. "
    "Relative error: max |g - g_ref| / max |g_ref| over all entries. Evaluations are "
    "vector-field calls counted on the host; backward = gradient - plain solve.",
    "Targets: `InterpolatingAdjoint` <= 1e-4 everywhere; `BacksolveAdjoint` <= 1e-4 "
    "or divergence detected (NaN with `throw=False`, an error naming "
    "`InterpolatingAdjoint` and `CheckpointAdjoint` with `throw=True`); on the forward "
    "grid, backward <= 2x forward evaluations.",
    "Forward grid: one adjoint step per accepted forward step (rejected steps are not "
    "repeated), split at the outputs. `BacksolveAdjoint()` anchors `y` at every "
    "accepted step when `max_steps` copies of `y` fit in 128 MiB (here); with "
    "`checkpoints=1` only the 12 outputs and `t0` anchor it, and on the damped cases "
    "its `y` leaves the forward solution between outputs: detected.",
    "On the stiff cases the forward pass's steps sit at Tsit5's stability limit for "
    "the fast mode (h*lambda ~ -3.5): harmless for `y`, whose fast mode is below "
    "`atol`, but each output's cotangent puts an O(1) value into the adjoint's fast "
    "mode. On the forward grid, a step whose stiffness estimate (from its last two "
    "stages) exceeds 0.9x the stability limit while that mode is above tolerance is "
    "taken in halves; without that, the diagonal decay's error was 1.0e-4.",
]
