"""The continuous adjoints on stiff problems: the adjoint ODE integrated by an implicit
solver (`_adjoints/continuous/implicit_step.py`).

References: the closed form `y(T) = expm(A T) y0` of a stiff linear system (its
gradient by differentiating `expm`), and on Robertson's kinetics `CheckpointAdjoint`'s
gradient of the same discrete solve.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import lineax as lx
import numpy as np
import pytest

import odeckpt as oc

T = 2.0
Y0 = jnp.array([1.0, 0.5, -0.25])
K = jnp.array([1.0, 2.0, 1000.0])
W = jnp.array([1.0, -2.0, 3.0])


def _matrix(k):
    """A stiff linear field (eigenvalues about -1, -3 and -1000), not symmetric."""
    k1, k2, k3 = k
    return jnp.array([[-k1, 0.5 * k2, 0.0], [0.3 * k1, -k2, 0.02 * k3], [0.0, 0.1 * k2, -k3]])


def _field(t, y, k):
    return _matrix(k) @ y


def _exact_loss(k, y0, t0=0.0, t1=T):
    return W @ (jsl.expm(_matrix(k) * (t1 - t0)) @ y0)


def _loss(k, y0, solver, adjoint, t0=0.0, t1=T, rtol=1e-8, atol=1e-10):
    sol = oc.diffeqsolve(
        oc.ODETerm(_field),
        solver,
        t0,
        t1,
        None,
        y0,
        k,
        stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
        adjoint=adjoint,
        max_steps=512,
    )
    return W @ sol.ys[-1]


def _close(got, want, rtol):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=rtol * 1e-2)


_grad = jax.jit(jax.grad(_loss, (0, 1)), static_argnums=(2, 3))
_exact = jax.grad(_exact_loss, (0, 1))


@pytest.mark.parametrize(
    "solver, adjoint",
    [
        (oc.Rodas5P(), oc.InterpolatingAdjoint()),
        (oc.Kvaerno5(), oc.InterpolatingAdjoint(checkpoints=4)),
        pytest.param(oc.RadauIIA5(), oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
        pytest.param(oc.Kvaerno5(), oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
        pytest.param(oc.Rodas5P(), oc.InterpolatingAdjoint(checkpoints=4), marks=pytest.mark.slow),
        pytest.param(oc.ImplicitEuler(), oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
    ],
    ids=lambda x: type(x).__name__,
)
def test_interpolating_adjoint_matches_the_closed_form(solver, adjoint):
    """The gradient of a stiff linear solve against `expm`'s: with the forward solver on
    the adjoint ODE (its default), over the forward pass's step times."""
    first_order = isinstance(solver, oc.ImplicitEuler)
    rtol = 3e-2 if first_order else 1e-5
    tol = {"rtol": 1e-4, "atol": 1e-6} if first_order else {}
    got = jax.grad(_loss, (0, 1))(K, Y0, solver, adjoint, **tol)
    _close(got, _exact(K, Y0), rtol)


def _chain(c, y):
    """A lower-bidiagonal chain `y_i' = -c_i y_i + y_{i-1}`: a pattern that is not
    symmetric, so the adjoint's (transposed) pattern differs from the forward one."""
    return -c * y + jnp.concatenate([jnp.zeros(1, y.dtype), y[:-1]])


C = jnp.array([1.0, 3.0, 10.0, 100.0, 300.0, 1000.0])
CHAIN_Y0 = jnp.array([1.0, -0.5, 0.25, 0.0, 0.5, 1.0])
PATTERN = np.eye(6, dtype=bool) | np.eye(6, k=-1, dtype=bool)


def _chain_matrix(c):
    return -jnp.diag(c) + jnp.eye(6, k=-1)


def _chain_loss(c, y0, solver, adjoint, term=None):
    sol = oc.diffeqsolve(
        term or oc.ODETerm(lambda t, y, c: _chain(c, y)),
        solver,
        0.0,
        1.0,
        None,
        y0,
        c,
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-10),
        adjoint=adjoint,
        max_steps=512,
    )
    return jnp.sum(jnp.arange(1.0, 7.0) * sol.ys[-1])


def _chain_exact(c, y0):
    return jnp.sum(jnp.arange(1.0, 7.0) * (jsl.expm(_chain_matrix(c)) @ y0))


@pytest.mark.parametrize(
    "solver",
    [
        oc.Rodas5P(jac_sparsity=PATTERN),
        pytest.param(
            oc.Kvaerno5(
                linear_solver=lx.GMRES(rtol=1e-10, atol=1e-12),
                preconditioner=oc.JacobiPreconditioner(),
                jac_sparsity=PATTERN,
            ),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            oc.Kvaerno5(linear_solver=lx.GMRES(rtol=1e-10, atol=1e-12)), marks=pytest.mark.slow
        ),
    ],
    ids=["banded", "krylov-jacobi", "krylov"],
)
def test_sparse_and_matrix_free_adjoint_solves(solver):
    """The adjoint ODE's Jacobian is `J^T`: a forward pattern is transposed (a Rosenbrock
    method needs the exact Jacobian, so a wrong pattern would show), and a Krylov
    solve works on the adjoint's products."""
    got = jax.grad(_chain_loss, (0, 1))(C, CHAIN_Y0, solver, oc.InterpolatingAdjoint())
    _close(got, jax.grad(_chain_exact, (0, 1))(C, CHAIN_Y0), 1e-5)


@pytest.mark.parametrize(
    "solver",
    [oc.Kvaerno5(), pytest.param(oc.Rodas5P(jac_sparsity=PATTERN), marks=pytest.mark.slow)],
    ids=["Kvaerno5", "Rodas5P-banded"],
)
def test_backsolve_adjoint_is_right_or_refused(solver):
    """`BacksolveAdjoint` integrates `y` backwards, unstable on a damped stiff system: its
    gradient is right, or refused with its message, never wrong."""
    loss = lambda c, y0: _chain_loss(c, y0, solver, oc.BacksolveAdjoint())
    try:
        got = jax.grad(loss, (0, 1))(C, CHAIN_Y0)
    except Exception as error:  # refused: the backward solve says why
        assert "BacksolveAdjoint" in str(error)
        return
    _close(got, jax.grad(_chain_exact, (0, 1))(C, CHAIN_Y0), 1e-5)


@pytest.mark.slow
def test_imex_adjoint_splits_the_adjoint_ode_as_the_forward_term():
    """`KenCarp4` on `MultiTerm(explicit, implicit)`: the adjoint of each part, each
    treated as the forward pass treats it."""
    explicit = oc.ODETerm(lambda t, y, c: jnp.concatenate([jnp.zeros(1, y.dtype), y[:-1]]))
    implicit = oc.ODETerm(lambda t, y, c: -c * y)
    term = oc.MultiTerm(explicit, implicit)
    adjoint = oc.InterpolatingAdjoint()
    got = jax.grad(_chain_loss, (0, 1))(C, CHAIN_Y0, oc.KenCarp4(), adjoint, term)
    _close(got, jax.grad(_chain_exact, (0, 1))(C, CHAIN_Y0), 1e-5)


def test_vmap_saveat_ts_and_backwards_in_time():
    """Under `jax.vmap`, with `SaveAt(ts=...)` (the cotangents of saved rows join the
    adjoint where the forward pass saved them), backwards in time (`t1 < t0`, the field
    negated so that the same matrix exponential is the answer)."""
    ts = jnp.array([1.5, 1.0, 0.0])

    def loss(k, y0):
        sol = oc.diffeqsolve(
            oc.ODETerm(lambda t, y, k: -_matrix(k) @ y),
            oc.Rodas5P(),
            T,
            0.0,
            None,
            y0,
            k,
            saveat=oc.SaveAt(ts=ts),
            stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-10),
            adjoint=oc.InterpolatingAdjoint(),
            max_steps=512,
        )
        return jnp.sum(W @ sol.ys.T)

    def exact(k, y0):
        return sum(_exact_loss(k, y0, t1=T - t) for t in ts)

    y0s = jnp.stack([Y0, 2 * Y0 + 0.1])
    got = jax.vmap(jax.grad(loss, (0, 1)), in_axes=(None, 0))(K, y0s)
    want = jax.vmap(jax.grad(exact, (0, 1)), in_axes=(None, 0))(K, y0s)
    _close(got, want, 1e-5)


@pytest.mark.slow
def test_float32_and_an_adaptive_backward_controller():
    """In float32 (tolerances to match), and with the backward pass's own controller."""
    k, y0 = K.astype(jnp.float32), Y0.astype(jnp.float32)
    for adjoint in [
        oc.InterpolatingAdjoint(),
        oc.InterpolatingAdjoint(stepsize_controller=oc.PIDController(rtol=1e-5, atol=1e-7)),
    ]:
        got = jax.grad(_loss, (0, 1))(k, y0, oc.Kvaerno5(), adjoint, rtol=1e-5, atol=1e-7)
        assert all(x.dtype == jnp.float32 for x in got)
        _close(got, _exact(K, Y0), 2e-3)


def _robertson(t, y, k):
    k1, k2, k3 = k
    y1, y2, y3 = y
    return jnp.stack([-k1 * y1 + k3 * y2 * y3, k1 * y1 - k2 * y2**2 - k3 * y2 * y3, k2 * y2**2])


@pytest.mark.slow
@pytest.mark.parametrize("solver", [oc.Rodas5P(), oc.Kvaerno5(), oc.RadauIIA5()], ids=str)
def test_robertson_gradient_matches_the_checkpointed_one(solver):
    """Robertson's kinetics to t = 1e5 at rtol 1e-8: within 1e-4 of `CheckpointAdjoint`'s
    gradient (normwise, over the rate constants and over `y0`)."""
    k, y0, w = jnp.array([0.04, 3e7, 1e4]), jnp.array([1.0, 0.0, 0.0]), jnp.array([1.0, 2.0, 3.0])

    def loss(k, y0, adjoint):
        sol = oc.diffeqsolve(
            oc.ODETerm(_robertson),
            solver,
            0.0,
            1e5,
            None,
            y0,
            k,
            stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-12),
            adjoint=adjoint,
            max_steps=4096,
        )
        return w @ sol.ys[-1]

    want = jax.grad(loss, (0, 1))(k, y0, oc.CheckpointAdjoint())
    got = jax.grad(loss, (0, 1))(k, y0, oc.InterpolatingAdjoint())
    for a, b in zip(got, want, strict=True):
        assert float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b)) < 1e-4
