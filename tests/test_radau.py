"""`RadauIIA5`: its coefficients (collocation and order conditions, the Newton
transformation, the error estimator, the dense output), measured orders, agreement
with SciPy's Radau on Robertson and Van der Pol (mu = 1000), gradients under every
adjoint against forward sensitivities and finite differences, and the usual matrix:
`vmap`, float32, both time directions, PyTree and complex states, strict promotion.

The problems and references are `test_stiff.py`'s. The default run exercises each
feature once; the repeats (the second tolerance, the continuous adjoints, float32
gradients) are marked `slow`.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_stiff import (
    LINEAR_A,
    ROBERTSON_DY_DK,
    ROBERTSON_K,
    ROBERTSON_WEIGHTS,
    ROBERTSON_Y0,
    _final_values,
    fitted_order,
    heat,
    linear_forced,
    manufactured,
    pid,
    prothero_robinson,
    radau,
    robertson,
    robertson_tree,
    scaled_error,
    van_der_pol,
)

import odeckpt as oc
from odeckpt._solvers.runge_kutta.order_conditions import order_defects, tree_order
from odeckpt._solvers.stiff import radau as rd, radau_tableaux as rt
from odeckpt.testing import assert_grads_close

slow = pytest.mark.slow
TAB = rt.RADAU_IIA5
SOLVER = oc.RadauIIA5()
TIGHT = oc.RadauIIA5(rtol=1e-13, atol=1e-15)  # Newton far below the step error


# ----------------------------------------------------------------------------------
# Coefficients (no JAX)


def _worst(defects, order):
    return max(abs(d) / max(1.0, s) for tree, d, s in defects if tree_order(tree) == order)


def test_order_is_exactly_5():
    a = TAB.matrix
    defects = order_defects(a, np.zeros((3, 3)), a[-1], 6)
    assert max(_worst(defects, p) for p in range(1, 6)) < 1e-14
    assert _worst(defects, 6) > 1e-6


def test_collocation_conditions():
    """`B(5)`: the quadrature is exact to degree 4; `C(3)`, not `C(4)`: stage order 3;
    `c` are the zeros of the Radau right polynomial `d^2/dx^2 (x^2 (x - 1)^3)`."""
    a, c, b = TAB.matrix, np.asarray(TAB.c), TAB.matrix[-1]
    np.testing.assert_allclose(
        [b @ c ** (k - 1) for k in range(1, 6)], [1 / k for k in range(1, 6)], atol=1e-15
    )
    for k in (1, 2, 3):
        np.testing.assert_allclose(a @ c ** (k - 1), c**k / k, atol=1e-15)
    assert np.max(np.abs(a @ c**3 - c**4 / 4)) > 1e-4
    radau_right = np.polyder(np.polymul([1, 0, 0], np.poly([1, 1, 1])), 2)
    np.testing.assert_allclose(np.sort(np.roots(radau_right)), c, atol=1e-14)


def test_transformation_splits_the_newton_matrix():
    """`T^-1 A^-1 T` is one real eigenvalue and one 2 x 2 rotation block; the real
    eigenvalue of `A` is RADAU5's `gamma0 = 1 / u1`."""
    t, (lam, alpha, beta) = TAB.transform, TAB.eigenvalues
    block = np.linalg.solve(t, np.linalg.inv(TAB.matrix) @ t)
    want = np.array([[lam, 0, 0], [0, alpha, -beta], [0, beta, alpha]])
    np.testing.assert_allclose(block, want, atol=1e-12)
    np.testing.assert_allclose(TAB.gamma0, (6 + 81 ** (1 / 3) - 9 ** (1 / 3)) / 30, rtol=1e-14)


def test_error_estimator_is_an_order_3_embedding():
    """`gamma0 h f0 + sum_i e_i z_i = y_hat - y1` for the 4-stage method with weights
    `(gamma0, b_hat)`: order 3 exactly."""
    alpha = np.zeros((4, 4))
    alpha[1:, 1:] = TAB.matrix
    defects = order_defects(alpha, np.zeros((4, 4)), TAB.embedded_weights, 4)
    assert max(_worst(defects, p) for p in (1, 2, 3)) < 1e-13
    assert _worst(defects, 4) > 1e-4


def test_dense_output_is_the_collocation_polynomial():
    """It passes through the stages and ends at `y1`, and is of order 3 (the stage
    order) at interior points: the order-4 conditions fail there."""
    d, c = TAB.dense, np.asarray(TAB.c)
    np.testing.assert_allclose((c[:, None] ** np.arange(1, 4)) @ d, np.eye(3), atol=1e-12)
    for theta in (0.2, 0.5, 0.9):
        weights = theta ** np.arange(1, 4) @ d @ TAB.matrix
        defects = order_defects(TAB.matrix, np.zeros((3, 3)), weights, 4, theta)
        assert max(_worst(defects, p) for p in (1, 2, 3)) < 1e-13
        assert _worst(defects, 4) > 1e-6


def test_a_wrong_digit_is_caught():
    a = [list(row) for row in TAB.a]
    a[1][0] *= 1 + 1e-9
    with pytest.raises(ValueError, match="RADAU_IIA5: c != row sums of a"):
        dataclasses.replace(TAB, a=tuple(map(tuple, a)))
    with pytest.raises(ValueError, match="the embedded method violates the order-1"):
        dataclasses.replace(TAB, error_weights=(1.0, 0.0, 0.0))


# ----------------------------------------------------------------------------------
# Orders (constant steps, one compilation each)


def test_order_5_on_a_smooth_problem():
    num_steps = [16, 23, 32, 45, 64, 90]
    ys = _final_values(linear_forced, TIGHT, manufactured(0.0), LINEAR_A, 2.0, num_steps)
    errors = np.max(np.abs(np.asarray(ys) - np.asarray(manufactured(2.0))), axis=1)
    assert abs(fitted_order(2.0 / np.asarray(num_steps), errors) - 5) < 0.3


def test_order_3_on_prothero_robinson():
    """Stiffness 1e4 with h |lambda| = 220..1250: the order falls to the stage order 3
    (measured 3.00; 2.98 at lambda = -1e6), where the ESDIRKs fall to 2."""
    num_steps = [8, 11, 16, 23, 32, 45]
    ys = _final_values(prothero_robinson, TIGHT, [0.0], -1e4, 1.0, num_steps)
    errors = np.abs(np.asarray(ys)[:, 0] - np.sin(1.0))
    assert abs(fitted_order(1.0 / np.asarray(num_steps), errors) - 3) < 0.3
    assert np.max(errors) < 1e-8


@slow
def test_dense_output_converges():
    """Between steps the collocation polynomial's error is `O(h^4)` (stage order + 1):
    measured 3.7 (the point's place in its step moves with `h`)."""
    num_steps = [32, 45, 64, 90, 128, 180]
    ts = jnp.array([0.3137, 0.7771, 1.2345, 1.6183, 1.9013])

    def solve(dt0):
        sol = oc.diffeqsolve(
            linear_forced,
            TIGHT,
            0.0,
            2.0,
            dt0,
            jnp.asarray(manufactured(0.0)),
            LINEAR_A,
            saveat=oc.SaveAt(ts=ts),
            max_steps=181,
        )
        return sol.ys

    ys = jax.jit(jax.vmap(solve))(2.0 / jnp.asarray(num_steps, float))
    errors = np.max(np.abs(np.asarray(ys) - np.asarray(jax.vmap(manufactured)(ts))), axis=(1, 2))
    assert fitted_order(2.0 / np.asarray(num_steps), errors) > 3.5


# ----------------------------------------------------------------------------------
# Stiff problems against SciPy's Radau at rtol 1e-12


@pytest.mark.parametrize("rtol", [1e-6, pytest.param(1e-9, marks=slow)])
def test_robertson_matches_scipy(rtol):
    atol = rtol * 1e-4
    solver = oc.RadauIIA5(rtol=rtol * 1e-3, atol=atol * 1e-3)
    sol = oc.diffeqsolve(
        robertson,
        solver,
        0.0,
        1e5,
        None,
        jnp.asarray(ROBERTSON_Y0),
        jnp.asarray(ROBERTSON_K),
        stepsize_controller=pid(rtol, atol),
        max_steps=4096,
    )
    assert scaled_error(sol.ys[0], radau("robertson", 1e5)[0], rtol, atol) <= 1.0


@slow
@pytest.mark.parametrize("tol", [1e-6, 1e-4])
def test_van_der_pol_matches_scipy(tol):
    ts = (500.0, 1500.0, 3000.0)  # the dense output between steps too
    sol = oc.diffeqsolve(
        van_der_pol,
        SOLVER,
        0.0,
        3000.0,
        None,
        jnp.array([2.0, 0.0]),
        1000.0,
        saveat=oc.SaveAt(ts=jnp.asarray(ts)),
        stepsize_controller=pid(tol, tol),
        max_steps=16384,
    )
    assert scaled_error(sol.ys, radau("van_der_pol", 3000.0, ts), tol, tol) <= 1.0


@slow
def test_large_state_uses_the_transformed_system():
    """24 unknowns: the real and complex `n x n` systems, against `expm`."""
    n, rtol, atol = 24, 1e-6, 1e-9
    assert 3 * n > rd.PLAIN_UNKNOWNS
    x = jnp.linspace(0.0, 1.0, n + 2)[1:-1]
    y0 = jnp.sin(jnp.pi * x) + 0.5 * jnp.sin(3 * jnp.pi * x)
    sol = oc.diffeqsolve(
        heat, SOLVER, 0.0, 0.1, None, y0, 1.0, stepsize_controller=pid(rtol, atol), max_steps=1024
    )
    exact = jax.scipy.linalg.expm(0.1 * jax.jacfwd(heat, argnums=1)(0.0, y0, 1.0)) @ y0
    assert scaled_error(sol.ys[0], exact, rtol, atol) <= 1.0


@pytest.mark.parametrize("n", [pytest.param(3, marks=slow), 24])
def test_whole_and_transformed_newton_steps_agree(n):
    """The same increment from the `3n x 3n` matrix and from the split systems (with
    `n > linear.dense.SMALL`, the complex one is factorised by LU)."""
    key1, key2, key3 = jax.random.split(jax.random.key(0), 3)
    jac = -5.0 * jax.random.normal(key1, (n, n)) - 20 * jnp.eye(n)
    fields, z = jax.random.normal(key2, (3, n)), jax.random.normal(key3, (3, n))
    h = jnp.asarray(0.3)

    @jax.jit
    def increments(jac, fields, z):
        return [
            rd.newton_increment(TAB, rd.newton_system(TAB, jac, h, whole=whole), h, fields, z)
            for whole in (False, True)
        ]

    got, expected = increments(jac, fields, z)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    # and it solves (I - h A (x) J) dz = -z + h A F
    lhs = got - h * jnp.asarray(TAB.matrix) @ (got @ jac.T)
    np.testing.assert_allclose(lhs, -z + h * jnp.asarray(TAB.matrix) @ fields, atol=1e-10)


def test_starting_values_extrapolate_the_previous_polynomial():
    """`u(1 + c_i h / h_old) - u(1)` for the old step's polynomial `u`, evaluated here
    with NumPy's polynomial class; zero before the first step."""
    rows = np.asarray(jax.random.normal(jax.random.key(1), (3, 2)))
    previous = rd.Extrapolation(jnp.asarray(rows), jnp.asarray(0.5))
    got = rd.starting_stages(TAB, jnp.asarray(0.2), previous)
    for j in range(2):
        u = np.polynomial.Polynomial(np.concatenate([[0.0], rows[:, j]]))
        expected = u(1 + np.asarray(TAB.c) * 0.2 / 0.5) - u(1.0)
        np.testing.assert_allclose(got[:, j], expected, rtol=1e-13)
    no_step_yet = rd.Extrapolation(previous.rows, jnp.asarray(0.0))
    first = rd.starting_stages(TAB, jnp.asarray(0.2), no_step_yet)
    assert not np.any(np.asarray(first))


def test_the_state_carries_the_accepted_steps_polynomial():
    """After a solve the state holds the last step's collocation polynomial (its dense
    output) and size; a checkpoint must store it (`init` cannot rebuild it)."""
    sol = oc.diffeqsolve(
        van_der_pol,
        SOLVER,
        0.0,
        0.5,
        0.1,
        jnp.array([2.0, 0.0]),
        5.0,
        saveat=oc.SaveAt(t1=True, solver_state=True),
    )
    state = sol.solver_state
    assert not SOLVER.state_rebuildable
    np.testing.assert_allclose(state.h, 0.1, rtol=1e-12)
    # u(1) is the last step's increment y(0.5) - y(0.4); u(0) = 0
    y04 = oc.diffeqsolve(van_der_pol, SOLVER, 0.0, 0.4, 0.1, jnp.array([2.0, 0.0]), 5.0).ys[0]
    np.testing.assert_allclose(np.sum(state.rows, axis=0), sol.ys[0] - y04, rtol=1e-12)


@slow
def test_newton_failure_rejects_the_step():
    """Two iterations are too few for a step of 0.5 on Van der Pol (mu = 1000): the
    controller shrinks the step until Newton converges."""
    solver, y0 = oc.RadauIIA5(max_iters=2), jnp.array([2.0, 0.0])
    adaptive = oc.diffeqsolve(
        van_der_pol,
        solver,
        0.0,
        1.0,
        0.5,
        y0,
        1000.0,
        stepsize_controller=pid(1e-6, 1e-6),
        max_steps=512,
    )
    assert int(adaptive.stats["num_rejected_steps"]) >= 1
    assert int(adaptive.result) == oc.RESULTS.successful


def test_newton_failure_ends_a_constant_step_solve():
    solver, y0 = oc.RadauIIA5(max_iters=2), jnp.array([2.0, 0.0])
    constant = oc.diffeqsolve(
        van_der_pol, solver, 0.0, 1.0, 0.5, y0, 1000.0, max_steps=256, throw=False
    )
    assert int(constant.result) == oc.RESULTS.implicit_solve_failed


def test_constructor_follows_the_esdirks():
    given = oc.RadauIIA5(root_finder=oc.VeryChord(rtol=1e-6, atol=1e-8), root_find_max_steps=4)
    assert (given.rtol, given.atol, given.max_iters) == (1e-8, 1e-10, 4)
    assert (SOLVER.rtol, SOLVER.atol, SOLVER.max_iters) == (1e-10, 1e-12, 10)
    assert isinstance(SOLVER, oc.AbstractImplicitSolver)
    assert isinstance(SOLVER, oc.AbstractAdaptiveSolver)
    assert (SOLVER.order(None), SOLVER.error_order(None)) == (5, 4)
    with pytest.raises(ValueError, match=r"`RadauIIA5\(rtol, atol, max_iters\)` need positive"):
        oc.RadauIIA5(max_iters=0)
    with pytest.raises(ValueError, match=r"`RadauIIA5\(max_iters=...\)` and"):
        oc.RadauIIA5(max_iters=3, root_find_max_steps=3)


# ----------------------------------------------------------------------------------
# Gradients


@slow
@pytest.mark.parametrize("rtol", [1e-6, 1e-8])
def test_robertson_gradient_matches_forward_sensitivities(rtol):
    """d(w . y(1e5))/dk through `CheckpointAdjoint`, within 10x the solve's rtol."""
    atol, solver = rtol * 1e-4, oc.RadauIIA5(rtol=rtol * 1e-3, atol=rtol * 1e-7)

    def loss(k):
        sol = oc.diffeqsolve(
            robertson,
            solver,
            0.0,
            1e5,
            None,
            jnp.asarray(ROBERTSON_Y0),
            k,
            stepsize_controller=pid(rtol, atol),
            max_steps=4096,
        )
        return sol.ys[0] @ jnp.asarray(ROBERTSON_WEIGHTS)

    grad = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(ROBERTSON_K)))
    expected = ROBERTSON_WEIGHTS @ ROBERTSON_DY_DK
    np.testing.assert_array_less(np.abs(grad - expected), 10 * rtol * np.abs(expected))


def _vdp_loss(adjoint, t0=0.0, t1=1.0, dtype=jnp.float64):
    def loss(mu):
        sol = oc.diffeqsolve(
            van_der_pol,
            SOLVER,
            t0,
            t1,
            None,
            jnp.array([2.0, 0.0], dtype),
            mu,
            stepsize_controller=pid(1e-6, 1e-8),
            max_steps=256,
            adjoint=adjoint,
            saveat=oc.SaveAt(ts=jnp.linspace(t0, t1, 4)),
        )
        return jnp.sum(sol.ys**2)

    return loss


@pytest.fixture(scope="module")
def stored_gradient():
    return jax.jit(jax.grad(_vdp_loss(oc.CheckpointAdjoint(checkpoints=None))))(jnp.asarray(5.0))


def test_checkpoints_do_not_change_the_gradient(stored_gradient):
    """Bit for bit: a replayed step repeats the forward step (its starting values come
    from the stored solver state)."""
    replayed = jax.jit(jax.grad(_vdp_loss(oc.CheckpointAdjoint(checkpoints=3))))(jnp.asarray(5.0))
    assert replayed == stored_gradient


@slow
def test_gradient_matches_finite_differences():
    assert_grads_close(_vdp_loss(oc.CheckpointAdjoint()), jnp.asarray(5.0), rtol=1e-5)


@slow
def test_forward_mode_matches_reverse_mode(stored_gradient):
    forward = jax.jit(jax.jacfwd(_vdp_loss(oc.ForwardMode())))(jnp.asarray(5.0))
    assert abs(forward - stored_gradient) <= 1e-10 * abs(stored_gradient)


@pytest.mark.parametrize(
    "adjoint",
    [oc.BacksolveAdjoint(solver=oc.Tsit5()), oc.InterpolatingAdjoint(solver=oc.Tsit5())],
    ids=["backsolve", "interpolating"],
)
@slow
def test_continuous_adjoints_with_an_explicit_adjoint_solver(adjoint, stored_gradient):
    continuous = jax.grad(_vdp_loss(adjoint))(jnp.asarray(5.0))
    assert abs(continuous - stored_gradient) <= 1e-4 * abs(stored_gradient)


@slow
def test_backwards_in_time():
    """From `t = 2` down to `0` on the manufactured solution, with constant and
    adaptive steps; the gradient of a backward solve is the stored-states one."""
    y2, y0 = jnp.asarray(manufactured(2.0)), np.asarray(manufactured(0.0))
    constant = oc.diffeqsolve(linear_forced, TIGHT, 2.0, 0.0, -0.02, y2, LINEAR_A)
    np.testing.assert_allclose(constant.ys[0], y0, atol=1e-10)
    adaptive = oc.diffeqsolve(
        linear_forced, TIGHT, 2.0, 0.0, None, y2, LINEAR_A, stepsize_controller=pid(1e-8, 1e-10)
    )
    assert scaled_error(adaptive.ys[0], y0, 1e-8, 1e-10) <= 1.0
    replayed = jax.grad(_vdp_loss(oc.CheckpointAdjoint(checkpoints=3), t0=1.0, t1=0.0))(5.0)
    stored = jax.grad(_vdp_loss(oc.CheckpointAdjoint(), t0=1.0, t1=0.0))(5.0)
    assert replayed == stored


# ----------------------------------------------------------------------------------
# vmap, float32, PyTree and complex states, strict promotion


def _robertson_final(k, y0=ROBERTSON_Y0, rtol=1e-6, atol=1e-10):
    sol = oc.diffeqsolve(
        robertson,
        SOLVER,
        0.0,
        40.0,
        None,
        jnp.asarray(y0),
        k,
        stepsize_controller=pid(rtol, atol),
        max_steps=1024,
    )
    return sol.ys[0]


@slow
def test_vmap_matches_separate_solves():
    ks = jnp.asarray(ROBERTSON_K)[None] * jnp.array([[1.0, 1, 1], [2.0, 1, 1]])
    batched = jax.jit(jax.vmap(_robertson_final))(ks)
    single = jax.jit(_robertson_final)
    for i in range(ks.shape[0]):
        np.testing.assert_allclose(batched[i], single(ks[i]), rtol=1e-10, atol=1e-16)


@slow
def test_float32():
    y = _robertson_final(
        jnp.asarray(ROBERTSON_K, jnp.float32), np.float32(ROBERTSON_Y0), 1e-4, 1e-8
    )
    assert y.dtype == jnp.float32
    expected = _robertson_final(jnp.asarray(ROBERTSON_K), rtol=1e-10, atol=1e-14)
    assert scaled_error(y, expected, 1e-4, 1e-8) <= 10.0  # measured 2.1 (Kvaerno5's bound)


@slow
def test_float32_gradient():
    loss = _vdp_loss(oc.CheckpointAdjoint(checkpoints=3), dtype=jnp.float32)
    grad = jax.grad(loss)(jnp.asarray(5.0, jnp.float32))
    expected = jax.grad(_vdp_loss(oc.CheckpointAdjoint()))(5.0)
    assert grad.dtype == jnp.float32
    assert abs(grad - expected) <= 1e-3 * abs(expected)


@slow
def test_pytree_state_matches_flat_state():
    k = jnp.asarray(ROBERTSON_K)
    y0 = {"a": jnp.asarray(1.0), "bc": (jnp.asarray(0.0), jnp.asarray(0.0))}
    sol = oc.diffeqsolve(
        robertson_tree,
        SOLVER,
        0.0,
        40.0,
        None,
        y0,
        k,
        stepsize_controller=pid(1e-6, 1e-10),
        max_steps=1024,
    )
    tree = jnp.stack([sol.ys["a"][0], sol.ys["bc"][0][0], sol.ys["bc"][1][0]])
    np.testing.assert_allclose(tree, _robertson_final(k), rtol=1e-12, atol=1e-18)


H = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])


def _phase(t, y, a):
    """Not holomorphic: `y(t) = y0 exp(i a |y0|^2 t)`."""
    return 1j * a * (jnp.abs(y) ** 2).astype(y.dtype) * y


@pytest.mark.parametrize("dtype", [jnp.complex128, pytest.param(jnp.complex64, marks=slow)])
def test_complex_states(dtype):
    """The Jacobian of the real view `[Re, Im]`, as the other stiff solvers."""
    y0 = jnp.asarray([1.0 + 0.2j, 0.5j], dtype)
    sol = oc.diffeqsolve(_phase, SOLVER, 0.0, 1.0, 0.05, y0, 2.0)
    exact = np.asarray(y0) * np.exp(2j * np.abs(np.asarray(y0)) ** 2)
    assert sol.ys.dtype == dtype
    # Newton stops at 100 eps per step: complex64 measured 3.4e-5 (290 eps) in 20 steps.
    bound = max(10 * 0.05**5, 1000 * float(jnp.finfo(dtype).eps))
    assert np.max(np.abs(np.asarray(sol.ys[-1]) - exact)) <= bound


def _promotion_case(dtype):
    def loss(y0, a):
        sol = oc.diffeqsolve(
            lambda t, y, a: -a * y + 0.1 * jnp.sin(t).astype(y.dtype),
            SOLVER,
            0.0,
            1.0,
            0.1,
            y0,
            a,
            stepsize_controller=pid(1e-4, 1e-6),
            adjoint=oc.CheckpointAdjoint(checkpoints=3),
            max_steps=64,
        )
        return jnp.sum(sol.ys**2)

    y0, a = jnp.asarray([1.0, 0.5], dtype), jnp.asarray(0.7, dtype)
    return lambda: jax.value_and_grad(loss, argnums=(0, 1))(y0, a)


@slow
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_strict_promotion_gives_standard_results_bit_for_bit(dtype):
    case = _promotion_case(dtype)
    with jax.numpy_dtype_promotion("standard"):
        expected = case()
    with jax.numpy_dtype_promotion("strict"):
        got = case()
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
