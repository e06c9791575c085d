"""`jac_sparsity=` on the implicit solvers: the colouring, the Jacobian from one product
per colour (dense and banded LU), and the built-in preconditioners it feeds.

Against the dense path without a pattern (the same discrete scheme: only how its
matrices are formed changes) and a high-accuracy SciPy solve: values, gradients under
every adjoint that takes implicit solvers, `jax.vmap` with float32, both time
directions, PyTree and complex states; no `n x n` buffer on the banded path; bad
patterns refused.
"""

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
import scipy.integrate
import scipy.sparse
from jax.experimental import sparse as jsparse

import odeckpt as oc
import odeckpt.testing
from odeckpt._solvers.linear.sparsity import Pattern, sparsity_for

slow = pytest.mark.slow

TOLS = {"rtol": 1e-8, "atol": 1e-10}
GMRES = lx.GMRES(rtol=1e-10, atol=1e-12, restart=20, max_steps=200)


# ----------------------------------------------------------------------------------
# The colouring


@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=slow) for s in range(1, 4)])
def test_colouring_recovers_every_entry(seed):
    """On random patterns: no two columns of a colour share a row, and the products
    with the seeds give every entry back (dense, diagonal and blocks)."""
    rng = np.random.default_rng(seed)
    n = 37 + 10 * seed
    a = scipy.sparse.random(n, n, 0.08, random_state=seed).toarray() + np.diag(rng.normal(size=n))
    sparsity = sparsity_for("X", Pattern("X", a != 0), jnp.zeros(n))
    for colour in range(sparsity.ncolours):
        columns = np.flatnonzero(sparsity.colours == colour)
        assert np.all((a[:, columns] != 0).sum(axis=1) <= 1)
    values = sparsity.values(sparsity.products(lambda v: jnp.asarray(a) @ v, jnp.float64))
    np.testing.assert_array_equal(np.asarray(sparsity.dense(values)), a)
    np.testing.assert_array_equal(np.asarray(sparsity.diagonal(values)), np.diag(a))
    index = rng.permutation(n)[: (n // 3) * 3].reshape(-1, 3)
    want = np.stack([a[np.ix_(i, i)] for i in index])
    np.testing.assert_array_equal(np.asarray(sparsity.blocks(values, index)), want)


def test_stencil_colours_do_not_grow_with_the_grid():
    counts = [
        sparsity_for("X", Pattern("X", _pattern_2d(m)), jnp.zeros(2 * m * m)).ncolours
        for m in (8, 16, 32)
    ]
    assert max(counts) <= 16  # a 6-point row: at least 6, bounded whatever the grid


@pytest.mark.parametrize("kind", ["bool", "scipy", "bcoo", "float"])
def test_pattern_forms_agree(kind):
    dense = _pattern_1d(6)
    given = {
        "bool": dense,
        "scipy": scipy.sparse.csr_matrix(dense),
        "bcoo": jsparse.BCOO.fromdense(jnp.asarray(dense, jnp.float32)),
        "float": dense.astype(float),
    }[kind]
    assert Pattern("X", given) == Pattern("X", dense)


def test_complex_elements_expand_to_their_real_parts():
    """A complex element is two real unknowns, coupled both ways, in every entry of its
    row and column."""
    pattern = np.eye(3, dtype=bool) | np.eye(3, k=1, dtype=bool)
    sparsity = sparsity_for("X", Pattern("X", pattern), (jnp.zeros(1), jnp.zeros(2, complex)))
    got = np.asarray(sparsity.dense(jnp.ones(sparsity.rows.size))) != 0
    # real positions: element 0 -> 0; element 1 -> 1, 2; element 2 -> 3, 4
    want = np.zeros((5, 5), bool)
    for i, j in zip(*np.nonzero(pattern), strict=True):
        for p in ((0,), (1, 2), (3, 4))[i]:
            for q in ((0,), (1, 2), (3, 4))[j]:
                want[p, q] = True
    np.testing.assert_array_equal(got, want | np.eye(5, dtype=bool))


# ----------------------------------------------------------------------------------
# Problems: a 1-D Brusselator with Dirichlet ends (banded, species interleaved) and a
# periodic one with a PyTree state (coloured, not banded)


def _pattern_1d(m, periodic=False):
    """Two interleaved species `(u_0, v_0, u_1, v_1, ...)`: a band of width 2."""
    n = 2 * m
    out = np.zeros((n, n), bool)
    for i in range(n):
        for j in (i - 2, i, i + 2, i ^ 1):
            if periodic or 0 <= j < n:
                out[i, j % n] = True
    return out


def _pattern_2d(m):
    ring = (
        np.eye(m, dtype=bool)
        | np.roll(np.eye(m, dtype=bool), 1, 0)
        | np.roll(np.eye(m, dtype=bool), -1, 0)
    )
    stencil = np.kron(ring, np.eye(m, dtype=bool)) | np.kron(np.eye(m, dtype=bool), ring)
    coupling = np.eye(m * m, dtype=bool)
    return np.block([[stencil, coupling], [coupling, stencil]])


M = 40  # grid points of the banded problem: 80 unknowns


def banded_field(t, y, args):
    """Brusselator on `(M, 2)` (grid point, species), zero-flux-free Dirichlet ends."""
    alpha, b = args
    u, v = y[:, 0], y[:, 1]
    lap = lambda w: (
        (jnp.pad(w, 1, constant_values=1.0)[2:] + jnp.pad(w, 1, constant_values=1.0)[:-2] - 2 * w)
        * (M + 1) ** 2
    )
    uuv = u * u * v
    return jnp.stack(
        [1.0 + uuv - (b + 1) * u + alpha * lap(u), b * u - uuv + alpha * lap(v)], axis=1
    )


def banded_y0(dtype=jnp.float64):
    x = jnp.arange(1, M + 1) / (M + 1)
    return jnp.stack([1 + jnp.sin(2 * jnp.pi * x), jnp.full(M, 3.0)], axis=1).astype(dtype)


BANDED_ARGS = (jnp.asarray(0.02), jnp.asarray(3.0))


def _banded_solve(solver, y0=None, args=BANDED_ARGS, t0=0.0, t1=1.0, **kwargs):
    y0 = banded_y0() if y0 is None else y0
    kwargs.setdefault("stepsize_controller", oc.PIDController(**TOLS))
    dt0 = 1e-3 if t1 > t0 else -1e-3
    return oc.diffeqsolve(oc.ODETerm(banded_field), solver, t0, t1, dt0, y0, args, **kwargs)


def _close(a, b, rtol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=rtol)


def test_the_banded_problem_is_banded():
    sparsity = sparsity_for("X", Pattern("X", _pattern_1d(M)), banded_y0())
    from odeckpt._solvers.linear.stage_matrix import direct_format

    assert (sparsity.lower, sparsity.upper) == (2, 2) and direct_format(sparsity).banded


SOLVERS = {
    "Kvaerno5": oc.Kvaerno5,
    "Kvaerno3": oc.Kvaerno3,
    "ImplicitEuler": oc.ImplicitEuler,
    "Rodas5P": oc.Rodas5P,
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=slow) for n in ("Kvaerno5", "Rodas5P", "Kvaerno3", "ImplicitEuler")],
)
def test_banded_matches_dense_and_scipy(name):
    loose = (
        {"stepsize_controller": oc.PIDController(rtol=1e-4, atol=1e-6)}
        if name == "ImplicitEuler"
        else {}
    )
    banded = _banded_solve(SOLVERS[name](jac_sparsity=_pattern_1d(M)), **loose)
    dense = _banded_solve(SOLVERS[name](), **loose)
    _close(banded.ys, dense.ys, 1e-9)
    assert int(banded.stats["num_steps"]) == int(dense.stats["num_steps"])
    if name == "ImplicitEuler":
        return
    rhs = lambda t, y: np.asarray(
        banded_field(t, jnp.asarray(y).reshape(M, 2), BANDED_ARGS)
    ).ravel()
    ref = scipy.integrate.solve_ivp(
        rhs, (0, 1), np.ravel(banded_y0()), method="Radau", rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(np.ravel(banded.ys[-1]), ref.y[:, -1], rtol=1e-6, atol=1e-6)


ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint-3": oc.CheckpointAdjoint(checkpoints=3),
    "direct": oc.DirectAdjoint(),
}


def _banded_loss(solver, adjoint):
    def loss(p):
        y0, args = p
        sol = _banded_solve(
            solver, y0=y0, args=args, t1=0.5, adjoint=adjoint, saveat=oc.SaveAt(t1=True)
        )
        return jnp.sum(sol.ys[-1] ** 2)

    return loss


@pytest.mark.parametrize(
    "adjoint",
    ["checkpoint", pytest.param("checkpoint-3", marks=slow), pytest.param("direct", marks=slow)],
)
def test_banded_gradients_match_dense(adjoint):
    """The stage derivatives solve with the banded factors (transposed in reverse
    mode): the dense path's gradient."""
    p = (banded_y0(), BANDED_ARGS)
    dense = jax.jit(jax.grad(_banded_loss(oc.Kvaerno5(), ADJOINTS[adjoint])))(p)
    banded = jax.jit(
        jax.grad(_banded_loss(oc.Kvaerno5(jac_sparsity=_pattern_1d(M)), ADJOINTS[adjoint]))
    )(p)
    _close(banded, dense, 1e-8)


@slow
def test_banded_forward_mode_and_rosenbrock_gradient():
    p = (banded_y0(), BANDED_ARGS)
    tangent = jax.tree.map(jnp.ones_like, p)

    def jvp(solver):
        loss = _banded_loss(solver, oc.ForwardMode())
        return jax.jit(lambda p: jax.jvp(loss, (p,), (tangent,))[1])(p)

    np.testing.assert_allclose(
        jvp(oc.Kvaerno5(jac_sparsity=_pattern_1d(M))), jvp(oc.Kvaerno5()), rtol=1e-8
    )
    grad = lambda solver: jax.jit(jax.grad(_banded_loss(solver, oc.CheckpointAdjoint())))(p)
    _close(grad(oc.Rodas5P(jac_sparsity=_pattern_1d(M))), grad(oc.Rodas5P()), 1e-8)


@slow
def test_banded_gradient_against_finite_differences():
    loss = _banded_loss(oc.Kvaerno3(jac_sparsity=_pattern_1d(M)), oc.CheckpointAdjoint())
    odeckpt.testing.assert_grads_close(
        lambda args: loss((banded_y0(), args)), BANDED_ARGS, rtol=1e-6
    )


@slow
def test_banded_vmap_float32_and_reverse_time():
    solver = oc.Kvaerno5(jac_sparsity=_pattern_1d(M))
    batch = jnp.stack([banded_y0(jnp.float32), 1.1 * banded_y0(jnp.float32)])
    loose = oc.PIDController(rtol=1e-4, atol=1e-6)
    out = jax.vmap(
        lambda y: (
            _banded_solve(solver, y0=y, stepsize_controller=loose, saveat=oc.SaveAt(t1=True)).ys
        )
    )(batch)
    assert out.dtype == jnp.float32
    one = _banded_solve(
        oc.Kvaerno5(), y0=batch[1], stepsize_controller=loose, saveat=oc.SaveAt(t1=True)
    ).ys
    _close(out[1], one, 1e-4)
    # Backwards in time: `-f` from 0 to -0.3 is `f` from 0 to 0.3.
    ahead = _banded_solve(solver, t1=0.3).ys[-1]
    negated = lambda t, y, args: -banded_field(-t, y, args)
    back = oc.diffeqsolve(
        oc.ODETerm(negated),
        solver,
        0.0,
        -0.3,
        -1e-3,
        banded_y0(),
        BANDED_ARGS,
        stepsize_controller=oc.PIDController(**TOLS),
    ).ys[-1]
    _close(back, ahead, 1e-6)


def _has_square_buffer(compiled_text: str, n: int) -> bool:
    import re

    shapes = re.findall(r"[fsucb]\w*\[([\d,]+)\]", compiled_text)
    return any([int(d) for d in dims.split(",")].count(n) >= 2 for dims in shapes)


def test_no_dense_matrix_on_the_banded_path():
    def compiled(solver):
        loss = _banded_loss(solver, oc.CheckpointAdjoint())
        return jax.jit(jax.grad(loss)).lower((banded_y0(), BANDED_ARGS)).compile().as_text()

    assert not _has_square_buffer(compiled(oc.Kvaerno5(jac_sparsity=_pattern_1d(M))), 2 * M)
    assert _has_square_buffer(compiled(oc.Kvaerno5()), 2 * M)


# ----------------------------------------------------------------------------------
# A periodic pattern (coloured, factorised densely) on a PyTree state, and the built-in
# preconditioners

N = 12
PARAMS = (jnp.asarray(0.02), jnp.asarray(3.0))


def periodic_field(t, y, args):
    (u, v), (alpha, b) = y, args
    lap = lambda w: (jnp.roll(w, 1) + jnp.roll(w, -1) - 2 * w) * N**2
    uuv = u * u * v
    return 1.0 + uuv - (b + 1) * u + alpha * lap(u), b * u - uuv + alpha * lap(v)


def periodic_y0():
    x = jnp.arange(N) / N
    return 1.0 + 0.5 * jnp.sin(2 * jnp.pi * x), 3.0 + 0.3 * jnp.cos(2 * jnp.pi * x)


def periodic_pattern():
    """`(u, v)` in `ravel_pytree` order: u's N elements, then v's."""
    ring = (
        np.eye(N, dtype=bool)
        | np.roll(np.eye(N, dtype=bool), 1, 0)
        | np.roll(np.eye(N, dtype=bool), -1, 0)
    )
    return np.block([[ring, np.eye(N, dtype=bool)], [np.eye(N, dtype=bool), ring]])


def _periodic_solve(solver, args=PARAMS, **kwargs):
    kwargs.setdefault("stepsize_controller", oc.PIDController(**TOLS))
    return oc.diffeqsolve(
        oc.ODETerm(periodic_field), solver, 0.0, 1.0, 1e-3, periodic_y0(), args, **kwargs
    )


def _periodic_loss(solver, adjoint=None):
    def loss(args):
        kwargs = {} if adjoint is None else {"adjoint": adjoint}
        sol = _periodic_solve(solver, args=args, saveat=oc.SaveAt(t1=True), **kwargs)
        return sum(jnp.sum(x[-1] ** 2) for x in sol.ys)

    return loss


GRID_BLOCKS = np.arange(2 * N).reshape(2, N).T  # (u_i, v_i): one block per grid point
PRECONDITIONED = {
    "coloured dense": lambda: oc.Kvaerno5(jac_sparsity=periodic_pattern()),
    "Jacobi": lambda: oc.Kvaerno5(
        linear_solver=GMRES,
        preconditioner=oc.JacobiPreconditioner(),
        jac_sparsity=periodic_pattern(),
    ),
    "block Jacobi": lambda: oc.Kvaerno5(
        linear_solver=GMRES,
        preconditioner=oc.BlockJacobiPreconditioner(GRID_BLOCKS),
        jac_sparsity=periodic_pattern(),
    ),
    "KenCarp block Jacobi": None,
    "Rodas5P block Jacobi": lambda: oc.Rodas5P(
        linear_solver=GMRES,
        preconditioner=oc.BlockJacobiPreconditioner(GRID_BLOCKS),
        jac_sparsity=periodic_pattern(),
    ),
}
del PRECONDITIONED["KenCarp block Jacobi"]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=() if n == "coloured dense" else (slow,)) for n in PRECONDITIONED],
)
def test_coloured_and_preconditioned_match_dense(name):
    solver = PRECONDITIONED[name]()
    base = oc.Rodas5P() if name.startswith("Rodas5P") else oc.Kvaerno5()
    _close(_periodic_solve(solver).ys, _periodic_solve(base).ys, 1e-7)
    grad = jax.jit(jax.grad(_periodic_loss(solver)))(PARAMS)
    _close(grad, jax.jit(jax.grad(_periodic_loss(base)))(PARAMS), 1e-6)


@slow
def test_preconditioners_cut_krylov_iterations():
    """Block Jacobi on the reaction's blocks: fewer steps failing their capped Krylov
    solve than without a preconditioner (the solution is the same)."""
    capped = lx.GMRES(rtol=1e-8, atol=1e-10, restart=4, max_steps=8)
    stiff = (jnp.asarray(0.02), jnp.asarray(3.0))
    plain = _periodic_solve(oc.Kvaerno5(linear_solver=capped), args=stiff)
    block = oc.BlockJacobiPreconditioner(GRID_BLOCKS)
    good = _periodic_solve(
        oc.Kvaerno5(linear_solver=capped, preconditioner=block, jac_sparsity=periodic_pattern()),
        args=stiff,
    )
    assert int(good.stats["num_rejected_steps"]) <= int(plain.stats["num_rejected_steps"])
    assert int(good.stats["num_steps"]) <= int(plain.stats["num_steps"])


@slow
def test_block_size_on_consecutive_elements_and_complex_state():
    """`BlockJacobiPreconditioner(2)` on a `(points, species)` state; a complex state
    (each element's real and imaginary parts share its block)."""
    solver = oc.Kvaerno5(
        linear_solver=GMRES,
        preconditioner=oc.BlockJacobiPreconditioner(2),
        jac_sparsity=_pattern_1d(M),
    )
    _close(_banded_solve(solver).ys, _banded_solve(oc.Kvaerno5()).ys, 1e-7)

    def rhs(t, y, args):
        return (-1.0 + 5.0j) * (jnp.roll(y, 1) + jnp.roll(y, -1) - 2 * y) * 0.5 - y * (
            1 + 0.1 * jnp.abs(y) ** 2
        )

    y0 = jnp.exp(2j * jnp.pi * jnp.arange(N) / N) + 0.5
    ring = (
        np.eye(N, dtype=bool)
        | np.roll(np.eye(N, dtype=bool), 1, 0)
        | np.roll(np.eye(N, dtype=bool), -1, 0)
    )
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
    want = get(oc.Kvaerno5())
    _close(get(oc.Kvaerno5(jac_sparsity=ring)), want, 1e-8)
    block = oc.Kvaerno5(
        linear_solver=GMRES, preconditioner=oc.BlockJacobiPreconditioner(1), jac_sparsity=ring
    )
    _close(get(block), want, 1e-7)


@slow
def test_imex_sparsity_is_the_implicit_terms():
    """For KenCarp the pattern is the implicit term's (here the diffusion alone)."""

    def reaction(t, y, args):
        (u, v), (_, b) = y, args
        return 1.0 + u * u * v - (b + 1) * u, b * u - u * u * v

    def diffusion(t, y, args):
        (u, v), (alpha, _) = y, args
        lap = lambda w: (jnp.roll(w, 1) + jnp.roll(w, -1) - 2 * w) * N**2
        return alpha * lap(u), alpha * lap(v)

    ring = (
        np.eye(N, dtype=bool)
        | np.roll(np.eye(N, dtype=bool), 1, 0)
        | np.roll(np.eye(N, dtype=bool), -1, 0)
    )
    pattern = np.kron(np.eye(2, dtype=bool), ring)
    terms = oc.MultiTerm(oc.ODETerm(reaction), oc.ODETerm(diffusion))
    get = lambda solver: (
        oc.diffeqsolve(
            terms,
            solver,
            0.0,
            1.0,
            1e-3,
            periodic_y0(),
            PARAMS,
            stepsize_controller=oc.PIDController(**TOLS),
        ).ys
    )
    _close(get(oc.KenCarp4(jac_sparsity=pattern)), get(oc.KenCarp4()), 1e-9)
    jacobi = oc.KenCarp4(
        linear_solver=GMRES, preconditioner=oc.JacobiPreconditioner(), jac_sparsity=pattern
    )
    _close(get(jacobi), get(oc.KenCarp4()), 1e-7)


@slow
def test_a_pattern_missing_entries_gives_wrong_matrices_not_silence():
    """A pattern that omits entries the field has: the Newton matrix is wrong, so the
    iterations converge slowly or not at all; the solution, which Newton's residual
    fixes, still matches where it converges."""
    incomplete = np.eye(2 * N, dtype=bool)
    sol = _periodic_solve(oc.Kvaerno5(jac_sparsity=incomplete), throw=False)
    dense = _periodic_solve(oc.Kvaerno5())
    if sol.result == oc.RESULTS.successful:
        _close(sol.ys, dense.ys, 1e-5)


def test_pattern_of_the_wrong_size_is_refused_before_compiling():
    solver = oc.Kvaerno5(jac_sparsity=np.eye(2 * N + 1, dtype=bool))
    with pytest.raises(ValueError, match=r"must be \(24, 24\) for a state of 24 elements"):
        jax.jit(lambda: _periodic_solve(solver).ys).lower()


# ----------------------------------------------------------------------------------
# User Jacobians (`jac=`)


def banded_jacobian(t, y, args):
    """The banded problem's exact `df/dy` as a lineax operator on `(M, 2)` states."""
    alpha, b = args
    u, v = y[:, 0], y[:, 1]

    def lap(w):  # the Dirichlet values are constants: they drop from the derivative
        return (jnp.pad(w, 1)[2:] + jnp.pad(w, 1)[:-2] - 2 * w) * (M + 1) ** 2

    def mv(d):
        du, dv = d[:, 0], d[:, 1]
        first = (2 * u * v - (b + 1)) * du + u * u * dv + alpha * lap(du)
        second = (b - 2 * u * v) * du - u * u * dv + alpha * lap(dv)
        return jnp.stack([first, second], axis=1)

    return lx.FunctionLinearOperator(mv, jax.ShapeDtypeStruct(y.shape, y.dtype))


def diffusion_only_jacobian(t, y, args):
    """An approximate Jacobian: the diffusion's alone."""
    alpha, _ = args

    def mv(d):
        lap = lambda w: jnp.pad(w, ((1, 1), (0, 0)))[2:] + jnp.pad(w, ((1, 1), (0, 0)))[:-2] - 2 * w
        return alpha * lap(d) * (M + 1) ** 2

    return lx.FunctionLinearOperator(mv, jax.ShapeDtypeStruct(y.shape, y.dtype))


@pytest.mark.parametrize(
    "linear_solver",
    [pytest.param(None, marks=slow), pytest.param(GMRES, marks=slow)],
    ids=["dense", "gmres"],
)
def test_user_jacobian_matches_autodiff(linear_solver):
    """`jac=` as a lineax operator, exact or approximate (it steers Newton only): the
    same solution and gradient as the Jacobian from `f`."""
    kw = {} if linear_solver is None else {"linear_solver": linear_solver}
    want = _banded_solve(oc.Kvaerno5(**kw))
    exact = _banded_solve(oc.Kvaerno5(jac=banded_jacobian, **kw))
    _close(exact.ys, want.ys, 1e-9)
    approximate = _banded_solve(oc.Kvaerno5(jac=diffusion_only_jacobian, **kw))
    _close(approximate.ys, want.ys, 1e-6)
    p = (banded_y0(), BANDED_ARGS)
    grad = lambda solver: jax.jit(jax.grad(_banded_loss(solver, oc.CheckpointAdjoint())))(p)
    _close(grad(oc.Kvaerno5(jac=banded_jacobian, **kw)), grad(oc.Kvaerno5(**kw)), 1e-8)


@slow
def test_rosenbrock_user_jacobian_operator_and_its_check():
    """A Rosenbrock method uses `jac` in its result: an operator works dense and
    matrix-free, and a wrong one is caught by its check."""
    want = _banded_solve(oc.Rodas5P()).ys
    _close(_banded_solve(oc.Rodas5P(jac=banded_jacobian)).ys, want, 1e-9)
    _close(_banded_solve(oc.Rodas5P(jac=banded_jacobian, linear_solver=GMRES)).ys, want, 1e-8)
    with pytest.raises(Exception, match="disagrees with the derivative"):
        _banded_solve(oc.Rodas5P(jac=diffusion_only_jacobian, linear_solver=GMRES))


@slow
def test_hessian_vector_products_match_dense():
    """Forward over reverse (`odeckpt.hvp`) through the checkpointed adjoint: the
    Krylov and banded paths give the dense path's second derivatives."""

    def loss_of_args(solver):
        loss = _banded_loss(solver, oc.CheckpointAdjoint(checkpoints=4))
        return lambda args: loss((banded_y0(), args))

    direction = (jnp.asarray(1.0), jnp.asarray(-0.5))

    def hvp(solver):
        return jax.jit(lambda a: oc.hvp(loss_of_args(solver), a, direction))(BANDED_ARGS)

    dense = hvp(oc.Kvaerno3())
    _close(hvp(oc.Kvaerno3(linear_solver=GMRES)), dense, 1e-7)
    _close(hvp(oc.Kvaerno3(jac_sparsity=_pattern_1d(M))), dense, 1e-8)
    _close(hvp(oc.Rodas5P(linear_solver=GMRES)), hvp(oc.Rodas5P()), 1e-7)
