"""Large stiff systems: the 2-D Brusselator on m x m periodic grids (N = 2 m^2 unknowns),
odeckpt's implicit solvers with matrix-free Krylov linear solvers against SciPy's BDF
with a sparse Jacobian, diffrax's Kvaerno5 with lineax's GMRES, odeckpt's dense path
and pydiffsol's BDF with a sparse LU, in one process.

Problem: `u_t = 1 + u^2 v - 4.4 u + alpha lap(u)`, `v_t = 3.4 u - u^2 v + alpha lap(v)`,
alpha = 0.1, the five-point Laplacian on the unit torus (spacing 1/m), u(0) = 0.5 + y,
v(0) = 1 + 5 x, over [0, 1]; at 128^2 the diffusion's stiffness `8 alpha / dx^2` is
1.3e4. Tolerances rtol = 1e-6, atol = 1e-8 for every solver; accuracy is the max error
at t = 1 against SciPy's BDF at rtol = 1e-10, atol = 1e-12 (sparse Jacobian).

odeckpt's runs: `Kvaerno5` on the whole field and `KenCarp4` on `MultiTerm(reaction,
diffusion)`, with `lineax.GMRES(rtol=1e-4, atol=1e-8, restart=10, max_steps=50)` or
`lineax.BiCGStab(rtol=1e-4, atol=1e-8, max_steps=100)`, unpreconditioned or with the
diffusion's exact inverse by FFT as `preconditioner` (`fft_preconditioner`, the
preconditioner `docs/stiff.md` shows). diffrax 0.7.2's Kvaerno5 takes the same GMRES
through `optimistix.Newton(rtol=1e-8, atol=1e-10, linear_solver=...)` as its root
finder (it has no preconditioner hook; with its default `VeryChord`, or optimistix's
`Chord`, a Krylov `linear_solver` fails to trace: a TypeError, a Jaxpr carried in the
root finder's state). pydiffsol (`pip install pydiffsol`, optional: its row is skipped
without it) runs its BDF with a sparse LU on the same model written in DiffSL; its
DiffSL build time grows with the grid (its row gives it), so it is timed on the
smallest grids only. Times: the
median of `REPEATS` calls of each compiled solve (`jax.jit`, inputs `y0` and `alpha`),
SciPy's and pydiffsol's calls likewise; SciPy's BDF evaluates the field through a
jitted JAX function. Gradient: `d/d(alpha, y0) sum(u(1)^2)` under
`CheckpointAdjoint(checkpoints=16)`; its memory is XLA's `temp_size_in_bytes` of the
compiled gradient, against `|y| = 8 N` bytes.

1-D table: the same Brusselator on M grid points of [0, 1] with u = 1, v = 3 at both
ends, alpha = 0.02, the state shaped `(M, 2)` so that its Jacobian is a band of width 2;
`Rodas5P` and `Kvaerno5` with `jac_sparsity=` (one product per colour, LU in band
storage) against their dense path (where N <= 1000) and SciPy's BDF with the same
pattern.
"""

import os
import statistics
import time

import diffrax as dfx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
import scipy.integrate
import scipy.sparse
from _common import Section, Table, plot_path, seconds_cell, temp_bytes, warn

import odeckpt as oc

ALPHA, A, B, T1 = 0.1, 1.0, 3.4, 1.0
RTOL, ATOL = 1e-6, 1e-8
FULL_SIZES, QUICK_SIZES = (32, 64, 128, 256), (16, 32)
REPEATS = 3
GMRES = lx.GMRES(rtol=1e-4, atol=1e-8, restart=10, max_steps=50)
BICGSTAB = lx.BiCGStab(rtol=1e-4, atol=1e-8, max_steps=100)
# Runs too slow to time at every size: the largest grid side each is timed on.
UNPRECONDITIONED_MAX, DENSE_MAX, PYDIFFSOL_MAX, REFERENCE_MAX = 64, 32, 32, 128
# diffrax's unpreconditioned GMRES needs over 10 minutes a call at 128 x 128, and
# SciPy's BDF 7.5 minutes at 256 x 256: both stop a size earlier.
GMRES_MAX, DIFFRAX_MAX, SCIPY_MAX = 128, 64, 128
GRADIENT_SIZE = {True: 32, False: 128}  # quick mode, full mode


def laplacian(u, m):
    dx2 = (1.0 / m) ** 2
    rolled = jnp.roll(u, 1, -2) + jnp.roll(u, -1, -2) + jnp.roll(u, 1, -1) + jnp.roll(u, -1, -1)
    return (rolled - 4 * u) / dx2


def reaction(t, y, args):
    u, v = y[0], y[1]
    uuv = u * u * v
    return jnp.stack([A + uuv - (B + 1) * u, B * u - uuv])


def diffusion(t, y, alpha):
    return alpha * laplacian(y, y.shape[-1])


def field(t, y, alpha):
    return reaction(t, y, alpha) + diffusion(t, y, alpha)


def initial(m):
    x = np.arange(m) / m
    xx, yy = np.meshgrid(x, x, indexing="ij")
    return jnp.asarray(np.stack([0.5 + yy, 1.0 + 5.0 * xx]))


def fft_preconditioner(t, y, alpha, gamma_h):
    """`(I - gamma_h alpha lap)^-1`, each species, exactly: the Laplacian is diagonal in
    Fourier space on a periodic grid."""
    m = y.shape[-1]
    k = 2 * np.pi * np.fft.fftfreq(m, d=1.0 / m)
    one_d = (2 * np.cos(k / m) - 2) * m**2
    symbol = jnp.asarray(one_d[:, None] + one_d[None, :])

    def apply(v):
        return jnp.real(jnp.fft.ifft2(jnp.fft.fft2(v) / (1 - gamma_h * alpha * symbol[None])))

    return apply


def odeckpt_solver(name):
    """`(terms, solver)` of an odeckpt run by its label."""
    whole, split = oc.ODETerm(field), oc.MultiTerm(oc.ODETerm(reaction), oc.ODETerm(diffusion))
    krylov = {"GMRES": GMRES, "BiCGStab": BICGSTAB}
    method, linear, *rest = name.split(" ")
    precond = fft_preconditioner if rest else None
    if linear == "dense":
        return whole, oc.Kvaerno5()
    cls = {"Kvaerno5": oc.Kvaerno5, "KenCarp4": oc.KenCarp4}[method]
    terms = whole if method == "Kvaerno5" else split
    return terms, cls(linear_solver=krylov[linear], preconditioner=precond)


RUNS = (
    "Kvaerno5 GMRES",
    "Kvaerno5 GMRES FFT",
    "Kvaerno5 BiCGStab FFT",
    "KenCarp4 GMRES FFT",
    "KenCarp4 BiCGStab FFT",
    "Kvaerno5 dense",
)


def _runs_at(m):
    for name in RUNS:
        if name.endswith("dense") and m > DENSE_MAX:
            continue
        if name.endswith("GMRES") and m > UNPRECONDITIONED_MAX:
            continue
        if "GMRES" in name and m > GMRES_MAX:
            continue
        yield name


def odeckpt_forward(name, checkpoints=None):
    return forward_of(*odeckpt_solver(name), checkpoints)


def forward_of(terms, solver, checkpoints=None):
    """`(y0, alpha) -> (u(T1), steps)`: the timed solve, for any terms and solver."""

    def solve(y0, alpha):
        sol = oc.diffeqsolve(
            terms,
            solver,
            0.0,
            T1,
            1e-4,
            y0,
            alpha,
            stepsize_controller=oc.PIDController(rtol=RTOL, atol=ATOL),
            saveat=oc.SaveAt(t1=True),
            max_steps=20_000,
            adjoint=oc.CheckpointAdjoint(checkpoints=checkpoints),
        )
        stats = sol.stats
        return sol.ys[-1], stats["num_accepted_steps"] + stats["num_rejected_steps"]

    return solve


def diffrax_forward():
    # diffrax's VeryChord (and optimistix's Chord) with a Krylov solver fail to trace in
    # diffrax 0.7.2 (a TypeError: a Jaxpr carried in the root finder's state); full
    # Newton, which re-linearises each iteration, runs.
    root_finder = optx.Newton(rtol=1e-8, atol=1e-10, linear_solver=GMRES)
    solver = dfx.Kvaerno5(root_finder=root_finder)

    def solve(y0, alpha):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field),
            solver,
            0.0,
            T1,
            1e-4,
            y0,
            alpha,
            stepsize_controller=dfx.PIDController(rtol=RTOL, atol=ATOL),
            max_steps=20_000,
        )
        stats = sol.stats
        return sol.ys[-1], stats["num_accepted_steps"] + stats["num_rejected_steps"]

    return solve


def _timed(fn, *args):
    """`(median seconds, last output)` of `REPEATS` calls after a first (compiling) one."""
    out = jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), out


def sparsity(m):
    """The Jacobian's sparsity pattern (both species' stencils and their coupling)."""
    ring = scipy.sparse.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(m, m), format="lil")
    ring[0, m - 1] = ring[m - 1, 0] = 1
    eye = scipy.sparse.identity(m)
    stencil = scipy.sparse.kron(ring, eye) + scipy.sparse.kron(eye, ring)
    coupling = scipy.sparse.identity(m * m)
    return scipy.sparse.bmat([[stencil, coupling], [coupling, stencil]]).astype(bool)


def scipy_bdf(m, rtol, atol):
    """`(seconds, u(1) flattened, evaluations)` of SciPy's BDF with the sparse pattern."""
    rhs = jax.jit(lambda y: field(0.0, y.reshape(2, m, m), ALPHA).reshape(-1))
    y0 = np.asarray(initial(m)).reshape(-1)
    pattern = sparsity(m)
    _ = rhs(y0)
    start = time.perf_counter()
    out = scipy.integrate.solve_ivp(
        lambda t, y: np.asarray(rhs(y)),
        (0.0, T1),
        y0,
        method="BDF",
        rtol=rtol,
        atol=atol,
        jac_sparsity=pattern,
    )
    return time.perf_counter() - start, out.y[:, -1], out.nfev


def pydiffsol_run(m, workdir):
    """`(seconds, u(1) flattened, build seconds)` of pydiffsol's BDF, sparse LU, or
    None where pydiffsol is not installed. The model is DiffSL: the Laplacian and the
    species' selection as sparse matrices read from files (inline, DiffSL compiles
    every entry)."""
    try:
        import pydiffsol as ds
    except ImportError:
        return None
    code = _diffsl(m, workdir)
    start = time.perf_counter()
    ode = ds.Ode(code, matrix_type=ds.faer_sparse, linear_solver=ds.lu)
    build = time.perf_counter() - start
    ode.rtol, ode.atol = RTOL, ATOL
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        sol = ode.solve(np.array([]), T1)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), np.asarray(sol.ys)[:, -1], build


def _tns(path, entries):
    with open(path, "w") as file:
        for i, j, value in entries:
            file.write(f"{int(i) + 1} {int(j) + 1} {float(value)!r}\n")
    return path


def _diffsl(m, workdir) -> str:
    n = m * m
    lap = (scipy.sparse.csr_matrix(sparsity(m).tocsr()[:n, :n], dtype=float) * m**2).tocoo()
    lap.setdiag(-4.0 * m**2)
    lap = lap.tocoo()
    files = {
        "L": (n, n, zip(lap.row, lap.col, lap.data, strict=True)),
        "Su": (n, 2 * n, ((i, i, 1.0) for i in range(n))),
        "Sv": (n, 2 * n, ((i, i + n, 1.0) for i in range(n))),
        "Eu": (2 * n, n, ((i, i, 1.0) for i in range(n))),
        "Ev": (2 * n, n, ((i + n, i, 1.0) for i in range(n))),
        "init": (2 * n, 1, ((i, 0, float(v)) for i, v in enumerate(np.ravel(initial(m))))),
    }
    lines = [f"alpha {{ {ALPHA} }}"]
    for name, (rows, cols, entries) in files.items():
        path = _tns(os.path.join(workdir, f"{name}{m}.tns"), list(entries))
        lines.append(f"{name}_ij {{ (0:{rows}, 0:{cols}): read('{path}') }}")
    lines += [
        "u_i { init_ij }",
        "y_i { Su_ij * u_j }",
        "z_i { Sv_ij * u_j }",
        "Ly_i { L_ij * y_j }",
        "Lz_i { L_ij * z_j }",
        f"fy_i {{ {A} + y_i * y_i * z_i - {B + 1} * y_i + alpha * Ly_i }}",
        f"fz_i {{ {B} * y_i - y_i * y_i * z_i + alpha * Lz_i }}",
        "F_i { Eu_ij * fy_j + Ev_ij * fz_j }",
    ]
    return "\n".join(lines)


def _gradient(name, m):
    """`(seconds, temp bytes, forward seconds)` of the checkpointed gradient at side m."""
    forward = odeckpt_forward(name, checkpoints=16)

    def loss(p):
        y0, alpha = p
        return jnp.sum(forward(y0, alpha)[0][0] ** 2)

    p = (initial(m), jnp.asarray(ALPHA))
    grad = jax.jit(jax.grad(loss))
    seconds, _ = _timed(grad, p)
    plain, _ = _timed(jax.jit(lambda p: loss(p)), p)
    return seconds, temp_bytes(jax.grad(loss), p), plain


def _size_rows(m, workdir, times):
    """The rows of grid side `m`; `times[label][m]` collects seconds for the plot."""
    n = 2 * m * m
    reference = None
    if m <= REFERENCE_MAX:
        _, reference, _ = scipy_bdf(m, 1e-10, 1e-12)

    def error(u):
        return "—" if reference is None else f"{np.max(np.abs(np.ravel(u) - reference)):.1e}"

    rows = []
    if m <= SCIPY_MAX:
        seconds, u, nfev = scipy_bdf(m, RTOL, ATOL)
        times.setdefault("SciPy BDF (sparse Jacobian)", {})[m] = seconds
        rows.append(
            [f"{m}²", str(n), "SciPy BDF (sparse Jacobian)", error(u), f"{nfev} evals", seconds]
        )
    y0, alpha = initial(m), jnp.asarray(ALPHA)
    for name in _runs_at(m):
        seconds, (u, steps) = _timed(jax.jit(odeckpt_forward(name)), y0, alpha)
        label = f"odeckpt {name}"
        times.setdefault(label, {})[m] = seconds
        rows.append([f"{m}²", str(n), label, error(u), f"{int(steps)} steps", seconds])
        print(f"  large_stiff: {m}² {label} {seconds:.3g} s", flush=True)
    if m <= DIFFRAX_MAX:
        seconds, (u, steps) = _timed(jax.jit(diffrax_forward()), y0, alpha)
        label = "diffrax Kvaerno5 GMRES"
        times.setdefault(label, {})[m] = seconds
        rows.append([f"{m}²", str(n), label, error(u), f"{int(steps)} steps", seconds])
    if m <= PYDIFFSOL_MAX:
        out = pydiffsol_run(m, workdir)
        if out is None:
            warn("large_stiff: pydiffsol is not installed; its row is skipped")
        else:
            seconds, u, build = out
            times.setdefault("pydiffsol BDF (sparse LU)", {})[m] = seconds
            label = f"pydiffsol BDF (sparse LU; DiffSL build {build:.0f} s)"
            rows.append([f"{m}²", str(n), label, error(u), "—", seconds])
    return rows


def _ratios(rows):
    """Each row's time over SciPy's and over diffrax's at the same size."""
    by_size = {}
    for row in rows:
        by_size.setdefault(row[0], {})[row[2]] = row[5]
    out = []
    for row in rows:
        peers = by_size[row[0]]
        scipy_s = peers.get("SciPy BDF (sparse Jacobian)")
        diffrax_s = peers.get("diffrax Kvaerno5 GMRES")
        vs_scipy = "—" if scipy_s is None else f"{row[5] / scipy_s:.2f}"
        vs_diffrax = "—" if diffrax_s is None else f"{row[5] / diffrax_s:.2f}"
        out.append([*row[:5], seconds_cell(row[5]), vs_scipy, vs_diffrax])
    return out


def _slope(series, lo, hi):
    """`(slope, first, last)`: the least-squares slope of log time against log N over
    the grid sides of `series` within lo..hi, and the first and last of them."""
    sides = sorted(m for m in series if lo <= m <= hi)
    if len(sides) < 2:
        return None
    x, y = np.array([(np.log(2 * m * m), np.log(series[m])) for m in sides]).T
    return float(np.polyfit(x, y, 1)[0]), sides[0], sides[-1]


def _plot(times, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, series in times.items():
        ms = sorted(series)
        ax.loglog([2 * m * m for m in ms], [series[m] for m in ms], "o-", label=label)
    ax.set_xlabel("unknowns N = 2 m²")
    ax.set_ylabel("forward solve (s)")
    ax.set_title("2-D Brusselator, rtol 1e-6")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------
# 1-D: a banded Jacobian (`jac_sparsity=`), factorised in band storage

BANDED_SIZES = {True: (250, 1000), False: (250, 1000, 4000, 16000)}  # grid points
BANDED_DENSE_MAX = 1000  # unknowns


def banded_field(t, y, alpha):
    """The Brusselator on `(M, 2)` (grid point, species) on [0, 1], u = 1, v = 3 at both
    ends: a band of width 2 with the species interleaved."""
    m = y.shape[0]
    u, v = y[:, 0], y[:, 1]

    def lap(w, end):
        padded = jnp.pad(w, 1, constant_values=end)
        return (padded[2:] + padded[:-2] - 2 * w) * (m + 1) ** 2

    uuv = u * u * v
    du = A + uuv - (B + 1) * u + alpha * lap(u, 1.0)
    dv = B * u - uuv + alpha * lap(v, 3.0)
    return jnp.stack([du, dv], axis=1)


def banded_y0(m):
    x = np.arange(1, m + 1) / (m + 1)
    return jnp.asarray(np.stack([1 + np.sin(2 * np.pi * x), np.full(m, 3.0)], axis=1))


def banded_pattern(m):
    """Each species' neighbours (offsets -2, 0, 2) and the other species at its point."""
    n = 2 * m
    rows = np.arange(n)
    entries = [(rows, rows), (rows, rows ^ 1), (rows[2:], rows[:-2]), (rows[:-2], rows[2:])]
    i, j = (np.concatenate(parts) for parts in zip(*entries, strict=True))
    return scipy.sparse.csr_matrix((np.ones(i.size, bool), (i, j)), shape=(n, n))


def _banded_rows(m):
    n, y0, alpha = 2 * m, banded_y0(m), jnp.asarray(0.02)
    rows = []
    rhs = jax.jit(lambda y: banded_field(0.0, y.reshape(m, 2), alpha).reshape(-1))
    _ = rhs(np.ravel(y0))
    start = time.perf_counter()
    out = scipy.integrate.solve_ivp(
        lambda t, y: np.asarray(rhs(y)),
        (0.0, T1),
        np.ravel(y0),
        method="BDF",
        rtol=RTOL,
        atol=ATOL,
        jac_sparsity=banded_pattern(m),
    )
    scipy_s = time.perf_counter() - start
    rows.append([str(m), str(n), "SciPy BDF (sparse Jacobian)", f"{out.nfev} evals", scipy_s])
    runs = [("Rodas5P", "banded"), ("Kvaerno5", "banded")]
    if n <= BANDED_DENSE_MAX:
        runs += [("Rodas5P", "dense"), ("Kvaerno5", "dense")]
    for method, form in runs:
        cls = {"Rodas5P": oc.Rodas5P, "Kvaerno5": oc.Kvaerno5}[method]
        solver = cls(jac_sparsity=banded_pattern(m)) if form == "banded" else cls()
        solve = forward_of(oc.ODETerm(banded_field), solver)
        seconds, (_, steps) = _timed(jax.jit(solve), y0, alpha)
        label = f"odeckpt {method} ({'jac_sparsity, band LU' if form == 'banded' else 'dense LU'})"
        rows.append([str(m), str(n), label, f"{int(steps)} steps", seconds])
        print(f"  large_stiff: 1-D {m} {label} {seconds:.3g} s", flush=True)
    return [[*r[:4], seconds_cell(r[4]), f"{r[4] / scipy_s:.2f}"] for r in rows]


def run(quick: bool) -> Section:
    import tempfile

    sizes = QUICK_SIZES if quick else FULL_SIZES
    times, rows = {}, []
    with tempfile.TemporaryDirectory() as workdir:
        for m in sizes:
            rows += _size_rows(m, workdir, times)
    table = Table(
        [
            "grid",
            "N",
            "run",
            "max error vs SciPy BDF (rtol 1e-10)",
            "work",
            "forward",
            "/ SciPy BDF",
            "/ diffrax GMRES",
        ],
        _ratios(rows),
        "Forward solve, 2-D Brusselator, rtol 1e-6, atol 1e-8 (median of "
        f"{REPEATS} calls after compilation)",
    )
    m = GRADIENT_SIZE[quick]
    grad_rows = []
    for name in ("KenCarp4 BiCGStab FFT", "Kvaerno5 BiCGStab FFT"):
        seconds, memory, forward = _gradient(name, m)
        y_bytes = 8 * 2 * m * m
        grad_rows.append(
            [
                f"{m}²",
                f"odeckpt {name}",
                seconds_cell(forward),
                seconds_cell(seconds),
                f"{seconds / forward:.2f} (target <= 4)",
                f"{memory / 2**20:.1f} MiB",
                f"{memory / y_bytes:.1f} (target <= 100)",
            ]
        )
    gradient = Table(
        [
            "grid",
            "run",
            "forward",
            "gradient",
            "gradient / forward",
            "gradient memory",
            "memory / |y|",
        ],
        grad_rows,
        "Gradient `d/d(y0, alpha) sum(u(1)^2)`, `CheckpointAdjoint(checkpoints=16)`",
    )
    banded = Table(
        ["grid points", "N", "run", "work", "forward", "/ SciPy BDF"],
        [row for m in BANDED_SIZES[quick] for row in _banded_rows(m)],
        "1-D Brusselator with Dirichlet ends, species interleaved (a band of width 2), "
        f"rtol 1e-6, atol 1e-8 (median of {REPEATS} calls after compilation)",
    )
    notes = [__doc__.split("\n\n", 1)[1].strip()]
    for label, series in times.items():
        fit = _slope(series, 64, 256)
        if fit is not None:
            slope, first, last = fit
            notes.append(
                f"Growth of {label}'s time with N from {first}² to {last}²: N^{slope:.2f}."
            )
    path, rel = plot_path("large_stiff_scaling.png")
    _plot(times, path)
    return Section("Large stiff systems", table, notes, [rel], [gradient, banded])
