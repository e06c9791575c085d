"""The Newton-based implicit solvers with an iterative, matrix-free `linear_solver`
(`lineax.GMRES`, `lineax.BiCGStab`) and a `preconditioner`.

Against a high-accuracy SciPy solve and the dense-LU path: values and gradients under
every adjoint that takes implicit solvers, `jax.vmap`, float32, both time directions,
PyTree and complex states; no `n x n` buffer in the compiled gradient; a failing Krylov
solve rejects the step or names itself; bad settings refused when written.
"""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
import scipy.integrate

import odeckpt as oc
import odeckpt.testing

slow = pytest.mark.slow

N = 12  # grid points per species
PARAMS = (jnp.asarray(0.02), jnp.asarray(3.0))  # (diffusion, B) of the Brusselator
GMRES = lx.GMRES(rtol=1e-10, atol=1e-12)
BICGSTAB = lx.BiCGStab(rtol=1e-10, atol=1e-12)
TOLS = {"rtol": 1e-7, "atol": 1e-9}


def _laplacian(u, dx):
    return (jnp.roll(u, 1) + jnp.roll(u, -1) - 2 * u) / dx**2


def brusselator(t, y, args):
    """1-D periodic Brusselator on a PyTree state `(u, v)`: stiff through diffusion."""
    (u, v), (alpha, b) = y, args
    dx = 1.0 / N
    uuv = u * u * v
    du = 1.0 + uuv - (b + 1) * u + alpha * _laplacian(u, dx)
    dv = b * u - uuv + alpha * _laplacian(v, dx)
    return du, dv


def reaction(t, y, args):
    (u, v), (_, b) = y, args
    uuv = u * u * v
    return 1.0 + uuv - (b + 1) * u, b * u - uuv


def diffusion(t, y, args):
    (u, v), (alpha, _) = y, args
    return alpha * _laplacian(u, 1.0 / N), alpha * _laplacian(v, 1.0 / N)


def initial(dtype=jnp.float64):
    x = jnp.arange(N) / N
    u = 1.0 + 0.5 * jnp.sin(2 * jnp.pi * x)
    v = 3.0 + 0.3 * jnp.cos(2 * jnp.pi * x)
    return u.astype(dtype), v.astype(dtype)


def term_for(solver):
    if isinstance(solver, oc.AbstractIMEX):
        return oc.MultiTerm(oc.ODETerm(reaction), oc.ODETerm(diffusion))
    return oc.ODETerm(brusselator)


def solve(solver, y0=None, args=PARAMS, t0=0.0, t1=1.0, dt0=1e-3, **kwargs):
    y0 = initial() if y0 is None else y0
    kwargs.setdefault("stepsize_controller", oc.PIDController(**TOLS))
    dt0 = dt0 if t1 > t0 else -dt0
    return oc.diffeqsolve(term_for(solver), solver, t0, t1, dt0, y0, args=args, **kwargs)


def scipy_reference(t1=1.0):
    def rhs(t, y):
        u, v = brusselator(t, (y[:N], y[N:]), PARAMS)
        return np.concatenate([u, v])

    y0 = np.concatenate(initial())
    out = scipy.integrate.solve_ivp(rhs, (0.0, t1), y0, method="Radau", rtol=1e-12, atol=1e-14)
    return out.y[:N, -1], out.y[N:, -1]


def _close(a, b, rtol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=rtol)


SOLVERS = {
    "Kvaerno3": lambda **kw: oc.Kvaerno3(**kw),
    "Kvaerno4": lambda **kw: oc.Kvaerno4(**kw),
    "Kvaerno5": lambda **kw: oc.Kvaerno5(**kw),
    "ImplicitEuler": lambda **kw: oc.ImplicitEuler(**kw),
    "KenCarp3": lambda **kw: oc.KenCarp3(**kw),
    "KenCarp4": lambda **kw: oc.KenCarp4(**kw),
    "KenCarp5": lambda **kw: oc.KenCarp5(**kw),
    "Sil3": lambda **kw: oc.Sil3(**kw),
    "Ros3P": lambda **kw: oc.Ros3P(**kw),
    "Rodas5P": lambda **kw: oc.Rodas5P(**kw),
}
# the IMEX path runs in the forward-mode and preconditioner tests
FAST = ("Kvaerno5",)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in FAST else (slow,)) for n in SOLVERS]
)
def test_matrix_free_matches_dense_and_scipy(name):
    """GMRES gives the dense path's solution (to the Krylov tolerance) and SciPy's (to
    the step tolerance; implicit Euler, order 1, at a looser one)."""
    loose = name in ("ImplicitEuler", "Sil3", "Ros3P")
    kwargs = {"stepsize_controller": oc.PIDController(rtol=1e-3, atol=1e-5)} if loose else {}
    krylov = solve(SOLVERS[name](linear_solver=GMRES), **kwargs)
    dense = solve(SOLVERS[name](), **kwargs)
    _close(krylov.ys, dense.ys, 1e-7)
    want = scipy_reference()
    got = jax.tree.map(lambda x: x[-1], krylov.ys)
    _close(got, want, 3e-2 if loose else 1e-5)


@slow
def test_bicgstab_and_verychord_spelling():
    """`BiCGStab` works as GMRES does, and diffrax's spelling (the root finder's
    `linear_solver`) is the same setting."""
    chord = oc.VeryChord(rtol=1e-8, atol=1e-10, linear_solver=BICGSTAB)
    assert oc.Kvaerno3(root_finder=chord) == oc.Kvaerno3(linear_solver=BICGSTAB)
    assert oc.Kvaerno3(root_finder=chord).linear_solver == BICGSTAB
    _close(solve(oc.Kvaerno3(root_finder=chord)).ys, solve(oc.Kvaerno3()).ys, 1e-7)


ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint-3": oc.CheckpointAdjoint(checkpoints=3),
    "direct": oc.DirectAdjoint(),
}
SLOW_ADJOINTS = ("checkpoint-3", "direct")  # the same stage derivative as "checkpoint"


def _loss(solver, adjoint):
    def loss(p):
        y0, args = p
        sol = solve(solver, y0=y0, args=args, adjoint=adjoint, saveat=oc.SaveAt(t1=True))
        u, v = sol.ys
        return jnp.sum(u[-1] ** 2) + jnp.sum(jnp.sin(v[-1]))

    return loss


@pytest.mark.parametrize(
    "adjoint", [pytest.param(a, marks=(slow,) if a in SLOW_ADJOINTS else ()) for a in ADJOINTS]
)
def test_gradients_match_dense(adjoint):
    """Reverse mode through the transposed Krylov solve, its preconditioner transposed
    too, gives the dense path's gradient."""
    p = (initial(), PARAMS)
    dense = jax.jit(jax.grad(_loss(oc.Kvaerno3(), ADJOINTS[adjoint])))(p)
    solver = oc.Kvaerno3(linear_solver=GMRES, preconditioner=_jacobi)
    krylov = jax.jit(jax.grad(_loss(solver, ADJOINTS[adjoint])))(p)
    _close(krylov, dense, 1e-7)


@slow
def test_forward_mode_matches_dense():
    p = (initial(), PARAMS)
    tangent = jax.tree.map(jnp.ones_like, p)

    def jvp(solver):
        loss = _loss(solver, oc.ForwardMode())
        return jax.jit(lambda p: jax.jvp(loss, (p,), (tangent,))[1])(p)

    np.testing.assert_allclose(jvp(oc.KenCarp3(linear_solver=GMRES)), jvp(oc.KenCarp3()), rtol=1e-7)


@slow
def test_gradient_against_finite_differences():
    loss = _loss(oc.KenCarp3(linear_solver=GMRES), oc.CheckpointAdjoint())
    odeckpt.testing.assert_grads_close(lambda args: loss((initial(), args)), PARAMS, rtol=1e-6)


@slow
def test_vmap_and_float32():
    """A batch of initial states under `jax.vmap`, in float32."""
    solver = oc.Kvaerno3(linear_solver=lx.GMRES(rtol=1e-5, atol=1e-6))
    y0 = initial(jnp.float32)
    batch = jax.tree.map(lambda x: jnp.stack([x, 1.1 * x]), y0)
    out = jax.vmap(lambda y: solve(solver, y0=y, saveat=oc.SaveAt(t1=True)).ys)(batch)
    assert jax.tree.leaves(out)[0].dtype == jnp.float32
    for i in range(2):
        row = lambda tree, i=i: jax.tree.map(lambda x: x[i], tree)
        one = solve(oc.Kvaerno3(), y0=row(batch), saveat=oc.SaveAt(t1=True))
        _close(row(out), one.ys, 1e-4)


@slow
def test_reverse_time():
    """A diffusion solved forward, then backwards from its end: back to the start."""

    def rhs(t, y, args):
        return diffusion(t, y, args)

    args = (0.002, 0.0)
    term, y0 = oc.ODETerm(rhs), initial()
    tight = oc.PIDController(rtol=1e-9, atol=1e-11)
    gmres = oc.Kvaerno3(linear_solver=GMRES)
    end = oc.diffeqsolve(term, gmres, 0.0, 0.5, 1e-3, y0, args, stepsize_controller=tight).ys
    end = jax.tree.map(lambda x: x[-1], end)
    back = oc.diffeqsolve(term, gmres, 0.5, 0.0, -1e-3, end, args, stepsize_controller=tight)
    _close(jax.tree.map(lambda x: x[-1], back.ys), y0, 1e-6)


@slow
def test_complex_state():
    """A complex state (its real view is what the Krylov solver sees)."""

    def rhs(t, y, args):
        return (-1.0 + 5.0j) * _laplacian(y, 1.0 / N) * 1e-2 - y

    y0 = jnp.exp(2j * jnp.pi * jnp.arange(N) / N) + 0.5
    get = lambda solver: (
        oc.diffeqsolve(
            oc.ODETerm(rhs),
            solver,
            0.0,
            1.0,
            1e-3,
            y0,
            stepsize_controller=oc.PIDController(**TOLS),
        ).ys
    )
    _close(get(oc.Kvaerno3(linear_solver=GMRES)), get(oc.Kvaerno3()), 1e-7)


def _jacobi(t, y, args, gamma_h):
    """The inverse of the diagonal of `I - gamma_h J` (diffusion's and reaction's)."""
    (u, v), (alpha, b) = y, args
    d = alpha * 2 * N**2
    du = 1 - gamma_h * (2 * u * v - (b + 1) - d)
    dv = 1 - gamma_h * (-(u * u) - d)
    return lx.DiagonalLinearOperator((1 / du, 1 / dv))


@slow
def test_preconditioner_as_a_function():
    """A preconditioner given as a plain linear function (the gradient tests give a
    lineax operator) leaves the solution as it is: it changes how the Krylov solve
    gets there."""

    def as_function(t, y, args, gamma_h):
        return lambda v: _jacobi(t, y, args, gamma_h).mv(v)

    imex = oc.KenCarp3(linear_solver=BICGSTAB, preconditioner=as_function)
    _close(solve(imex).ys, solve(oc.KenCarp3()).ys, 1e-7)


@slow
def test_rosenbrock_gradient():
    """A Rosenbrock step differentiates through its own Krylov solves (lineax's rules:
    the operator's derivative, the preconditioned solve transposed)."""
    p = (initial(), PARAMS)
    precond = oc.Rodas5P(linear_solver=GMRES, preconditioner=_jacobi)
    grad = jax.jit(jax.grad(_loss(precond, oc.CheckpointAdjoint())))(p)
    dense = jax.jit(jax.grad(_loss(oc.Rodas5P(), oc.CheckpointAdjoint())))(p)
    _close(grad, dense, 1e-7)


def _has_square_buffer(compiled_text: str, n: int) -> bool:
    """Whether the compiled program holds an array with two axes of length `n` (a
    checkpoint store is `(steps, n)`: one)."""
    shapes = re.findall(r"[fsucb]\w*\[([\d,]+)\]", compiled_text)
    return any([int(d) for d in dims.split(",")].count(n) >= 2 for dims in shapes)


@pytest.mark.parametrize("name", ["Kvaerno3", pytest.param("Rodas5P", marks=slow)])
def test_no_dense_matrix_in_the_compiled_gradient(name):
    """On the matrix-free path no `n x n` array exists, forward or backward (with the
    dense path, for contrast, one does)."""
    n = 200

    def rhs(t, y, args):
        return args * (jnp.roll(y, 1) + jnp.roll(y, -1) - 2 * y) * n**2 - y**3

    def compiled(solver):
        def loss(p):
            y0, a = p
            sol = oc.diffeqsolve(
                oc.ODETerm(rhs), solver, 0.0, 0.1, 1e-3, y0, a, saveat=oc.SaveAt(t1=True)
            )
            return jnp.sum(sol.ys**2)

        p = (jnp.cos(jnp.linspace(0, 6, n)), jnp.asarray(1e-3))
        return jax.jit(jax.grad(loss)).lower(p).compile().as_text()

    assert not _has_square_buffer(compiled(SOLVERS[name](linear_solver=GMRES)), n)
    if name == "Kvaerno3":
        assert _has_square_buffer(compiled(oc.Kvaerno3()), n)


def test_failing_linear_solve_rejects_the_step_or_names_itself():
    """A Krylov solve capped below what large steps need fails their Newton iteration:
    adaptive steps are rejected and retried smaller, and the solve ends as the dense
    path's; constant steps end the solve with the linear solve's failure, named."""
    stiffer = (jnp.asarray(0.5), PARAMS[1])
    gmres = lx.GMRES(rtol=1e-8, atol=1e-10, max_steps=4, restart=4)
    capped = oc.Kvaerno3(linear_solver=gmres)
    sol = solve(capped, args=stiffer)
    dense = solve(oc.Kvaerno3(), args=stiffer)
    assert int(sol.stats["num_rejected_steps"]) > int(dense.stats["num_rejected_steps"])
    _close(sol.ys, dense.ys, 1e-6)
    constant = {"stepsize_controller": oc.ConstantStepSize(), "dt0": 0.05, "args": stiffer}
    assert solve(capped, throw=False, **constant).result == oc.RESULTS.breakdown
    with pytest.raises(eqx.EquinoxRuntimeError, match="Linear solve failed"):
        solve(capped, **constant)


def test_cg_is_refused_through_verychord_too():
    """`VeryChord` checks its own `linear_solver` (the other bad settings are rows of
    `docs/errors.md`, in `test_bad_inputs.py`)."""
    with pytest.raises(ValueError, match="symmetric positive definite"):
        oc.VeryChord(rtol=1e-6, atol=1e-6, linear_solver=lx.Cholesky())


def test_preconditioner_of_the_wrong_shape_is_refused_before_compiling():
    def wrong(t, y, args, gamma_h):
        return lx.DiagonalLinearOperator((jnp.ones(N), jnp.ones(N + 1)))

    with pytest.raises(ValueError, match="from the state's structure to itself"):
        jax.jit(lambda: solve(oc.Kvaerno5(linear_solver=GMRES, preconditioner=wrong)).ys).lower()
