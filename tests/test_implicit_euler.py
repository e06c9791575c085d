"""`ImplicitEuler`: order, stiff order, the error estimate that drives `PIDController`,
dense output, stiff problems against SciPy's Radau, gradients under every adjoint
against finite differences, replayed steps, `vmap`, float32, complex states, strict
promotion, both time directions, PyTree states, Newton failure, and diffrax's
constructor spellings.

Compilation dominates the run time: the default run compiles about a dozen solves; the
stiff references and the rest of the adjoint matrix are `slow`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
from test_stiff import (
    ROBERTSON_K,
    ROBERTSON_Y0,
    prothero_robinson,
    radau,
    robertson,
    scaled_error,
    van_der_pol,
)

import odeckpt as oc
import odeckpt.testing

slow = pytest.mark.slow
SOLVER = oc.ImplicitEuler()
TIGHT = oc.ImplicitEuler(rtol=1e-13, atol=1e-14)  # Newton far below what FD can see


def fitted_order(hs, errors) -> float:
    return float(np.polyfit(np.log(np.asarray(hs)), np.log(np.asarray(errors)), 1)[0])


def forced(t, y, args):
    """`y' = -k y + sin(w t)` per component (closed form in `forced_exact`)."""
    k, w = (jnp.asarray(x).astype(y.dtype) for x in args)
    return -k * y + jnp.sin(w * jnp.asarray(t).astype(y.dtype))


def forced_exact(t, y0, k, w):
    """`y(t)` of `forced` from `y(0) = y0` (variation of constants)."""
    particular = lambda s: (k * jnp.sin(w * s) - w * jnp.cos(w * s)) / (k**2 + w**2)
    return (y0 - particular(0.0)) * jnp.exp(-k * t) + particular(t)


ARGS = (jnp.asarray(1.3), jnp.asarray(2.0))
Y0 = jnp.array([1.0, -0.5])


def _final(dt0s, t1=2.0, field=forced, y0=Y0, args=ARGS, solver=SOLVER):
    """`y(t1)` for each constant step in `dt0s`, in one `vmap`ped solve."""

    def solve(dt0):
        return oc.diffeqsolve(field, solver, 0.0, t1, dt0, y0, args, max_steps=512).ys[0]

    return np.asarray(jax.jit(jax.vmap(solve))(jnp.asarray(dt0s)))


# ----------------------------------------------------------------------------------
# Accuracy


def test_order_one_with_constant_steps():
    num_steps = np.array([32, 45, 64, 90, 128, 180])
    hs = 2.0 / num_steps
    ys = _final(hs)
    exact = np.asarray(forced_exact(2.0, Y0, 1.3, 2.0))
    errors = np.max(np.abs(ys - exact), axis=1)
    assert abs(fitted_order(hs, errors) - 1) < 0.3


def test_prothero_robinson_keeps_order_one_and_damps_the_stiff_mode():
    """`y' = lam (y - sin t) + cos t` with lam = -1e4 and h |lam| = 220..1250: the stiff
    mode is damped (L-stability) and the error, `O(h / |lam|)`, keeps order 1 with a
    constant 1e4 times smaller than on the non-stiff problem."""
    num_steps = np.array([8, 11, 16, 23, 32, 45])
    ys = _final(1.0 / num_steps, 1.0, prothero_robinson, jnp.zeros(1), -1e4)
    errors = np.abs(ys[:, 0] - np.sin(1.0))
    assert abs(fitted_order(1.0 / num_steps, errors) - 1) < 0.3
    assert np.max(errors) < 1e-4


def test_error_estimate_is_the_local_error():
    """One step from the exact solution: the estimate `h (k1 - k0) / 2` equals the
    actual local error `y1 - y(t0 + h)` up to `O(h^3)` (the trapezoidal rule's error),
    so their ratio is `1 + O(h)` (1.23 at h = 0.04, 1.03 at h = 0.005); `error_order`
    is 2, as diffrax's."""
    h = 0.005
    assert SOLVER.order(None) == 1 and SOLVER.error_order(None) == 2
    t0 = jnp.asarray(0.7)
    y0 = forced_exact(t0, Y0, 1.3, 2.0)
    out = eqx.filter_jit(SOLVER.attempt)(oc.ODETerm(forced), t0, jnp.asarray(h), y0, (), ARGS)
    actual = np.asarray(out.y1) - np.asarray(forced_exact(t0 + h, Y0, 1.3, 2.0))
    np.testing.assert_allclose(np.asarray(out.y_error) / actual, 1.0, atol=10 * h)


@slow
def test_error_estimate_drives_the_controller():
    """With `PIDController` the step follows `sqrt(tol)` (the estimate is `O(h^2)`), so
    10x tighter tolerances take about sqrt(10)x more steps and give sqrt(10)x smaller
    global errors (an order-1 method's global error is the sum of its local errors:
    about the number of steps times the tolerance)."""

    def solve(rtol):
        controller = oc.PIDController(rtol=rtol, atol=rtol * 1e-2)
        sol = oc.diffeqsolve(
            forced, SOLVER, 0.0, 2.0, None, Y0, ARGS, stepsize_controller=controller, max_steps=4096
        )
        return sol.ys[0], int(sol.stats["num_accepted_steps"])

    exact = np.asarray(forced_exact(2.0, Y0, 1.3, 2.0))
    (y_loose, n_loose), (y_tight, n_tight) = solve(1e-4), solve(1e-5)
    assert 2.5 < n_tight / n_loose < 4.0
    e_loose, e_tight = np.max(np.abs(y_loose - exact)), np.max(np.abs(y_tight - exact))
    assert 2.5 < e_loose / e_tight < 4.0
    assert scaled_error(y_tight, exact, 1e-5, 1e-7) <= 2 * n_tight


def test_dense_output_is_linear_between_steps():
    """`SaveAt(ts)` inside a step is the straight line between its end values."""
    ts = jnp.array([0.05, 0.13, 0.37])
    steps = oc.diffeqsolve(
        forced, SOLVER, 0.0, 0.4, 0.1, Y0, ARGS, saveat=oc.SaveAt(steps=True), max_steps=8
    )
    dense = oc.diffeqsolve(forced, SOLVER, 0.0, 0.4, 0.1, Y0, ARGS, saveat=oc.SaveAt(ts=ts))
    grid = np.concatenate([[0.0], np.asarray(steps.ts)[:4]])
    values = np.concatenate([np.asarray(Y0)[None], np.asarray(steps.ys)[:4]])
    expected = np.stack([np.interp(np.asarray(ts), grid, values[:, i]) for i in range(2)], 1)
    np.testing.assert_allclose(dense.ys, expected, rtol=1e-13, atol=1e-15)


def test_backwards_in_time():
    """From `t0 = 2` back to `t1 = 0`: order 1 towards the closed form."""
    num_steps = np.array([40, 80, 160])
    y2 = jnp.asarray(forced_exact(2.0, Y0, 1.3, 2.0))

    def solve(dt0):
        return oc.diffeqsolve(forced, SOLVER, 2.0, 0.0, dt0, y2, ARGS, max_steps=256).ys[0]

    ys = np.asarray(jax.jit(jax.vmap(solve))(-2.0 / jnp.asarray(num_steps, float)))
    errors = np.max(np.abs(ys - np.asarray(Y0)), axis=1)
    assert abs(fitted_order(2.0 / num_steps, errors) - 1) < 0.3


# ----------------------------------------------------------------------------------
# Stiff problems against SciPy's Radau (rtol 1e-12)

# An order-1 method's global error is the sum of its local errors, which the controller
# bounds per step: the global error at `t1` is a multiple of the tolerance that grows
# with the step count (measured: Robertson 106x in 663 steps, Van der Pol 400x in 4292
# steps; diffrax's ImplicitEuler uses the same estimate). The bounds below are those
# multiples with a margin of 2.


@slow
def test_robertson_against_radau():
    rtol, atol = 1e-4, 1e-8
    sol = oc.diffeqsolve(
        robertson,
        SOLVER,
        0.0,
        1e5,
        None,
        jnp.asarray(ROBERTSON_Y0),
        jnp.asarray(ROBERTSON_K),
        max_steps=4096,
        stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
    )
    assert scaled_error(sol.ys[0], radau("robertson", 1e5)[0], rtol, atol) <= 200


@slow
def test_van_der_pol_against_radau():
    tol = 1e-4
    sol = oc.diffeqsolve(
        van_der_pol,
        SOLVER,
        0.0,
        3000.0,
        None,
        jnp.array([2.0, 0.0]),
        1000.0,
        stepsize_controller=oc.PIDController(rtol=tol, atol=tol),
        max_steps=16384,
    )
    assert scaled_error(sol.ys[0], radau("van_der_pol", 3000.0)[0], tol, tol) <= 800


@slow
@pytest.mark.parametrize("name", ["ImplicitEuler", "Kvaerno4"])
def test_global_error_multiple_is_diffrax_s(name):
    """The multiples above belong to the methods, not to this implementation: the same
    solves with diffrax's `ImplicitEuler` (Robertson, rtol 1e-4) and `Kvaerno4` (Van der
    Pol mu = 1000, rtol = atol = 1e-6) end as far from SciPy's Radau, in units of the
    tolerance (to within 10%), or farther."""
    import diffrax

    if name == "ImplicitEuler":
        field, t1, y0, args, rtol, atol = robertson, 1e5, ROBERTSON_Y0, ROBERTSON_K, 1e-4, 1e-8
        ref = radau("robertson", t1)[0]
    else:
        field, t1, y0, args, rtol, atol = van_der_pol, 3000.0, (2.0, 0.0), 1000.0, 1e-6, 1e-6
        ref = radau("van_der_pol", t1)[0]
    errors = {}
    for lib in (oc, diffrax):
        term = diffrax.ODETerm(field) if lib is diffrax else field
        controller = lib.PIDController(rtol=rtol, atol=atol)
        sol = lib.diffeqsolve(
            term,
            getattr(lib, name)(),
            0.0,
            t1,
            None,
            jnp.asarray(y0),
            jnp.asarray(args),
            max_steps=65536,
            stepsize_controller=controller,
        )
        errors[lib] = scaled_error(sol.ys[-1], ref, rtol, atol)
    assert errors[oc] > 1.0  # the global error does exceed the local tolerance
    assert errors[oc] <= 1.1 * errors[diffrax]


# ----------------------------------------------------------------------------------
# Gradients


def _loss(adjoint, solver=TIGHT, dt0=0.05):
    def loss(y0, args):
        sol = oc.diffeqsolve(
            forced,
            solver,
            0.0,
            1.0,
            dt0,
            y0,
            args,
            adjoint=adjoint,
            saveat=oc.SaveAt(ts=jnp.array([0.3, 1.0])),
        )
        return jnp.sum(sol.ys**2)

    return loss


DISCRETE = {
    "checkpoint": (oc.CheckpointAdjoint(), "reverse"),
    "checkpoint-3": (oc.CheckpointAdjoint(checkpoints=3), "reverse"),
    "forward": (oc.ForwardMode(), "forward"),
}


@pytest.mark.parametrize(
    "adjoint",
    ["checkpoint", pytest.param("checkpoint-3", marks=slow), "forward"],
)
def test_gradient_of_the_discrete_solve_against_finite_differences(adjoint):
    """The checkpointed and forward-mode derivatives are those of the computed solve."""
    adjoint, ad = DISCRETE[adjoint]
    odeckpt.testing.assert_grads_close(_loss(adjoint), Y0, ARGS, argnums=(0, 1), ad=ad, rtol=1e-7)


def test_replayed_steps_repeat_the_forward_pass():
    """A step replayed from a checkpoint (solver state rebuilt by `init`) repeats the
    forward one bit for bit: the gradient does not depend on `checkpoints`."""
    grads = [
        jax.jit(jax.grad(_loss(oc.CheckpointAdjoint(checkpoints=c), SOLVER), argnums=(0, 1)))(
            Y0, ARGS
        )
        for c in (None, 3)
    ]
    for other in grads[1:]:
        jax.tree.map(np.testing.assert_array_equal, other, grads[0])


def _exact_loss(y0, args):
    k, w = args
    at = lambda t: forced_exact(t, y0, k, w)
    return jnp.sum(at(0.3) ** 2) + jnp.sum(at(1.0) ** 2)


@pytest.mark.parametrize(
    "cls", [oc.BacksolveAdjoint, pytest.param(oc.InterpolatingAdjoint, marks=slow)]
)
def test_continuous_adjoints_converge_to_the_exact_gradient(cls):
    """With `solver=Tsit5()` for the adjoint ODE: the gradient of the exact solution,
    up to the forward solve's `O(h)` error (h = 0.005 here)."""
    adjoint = cls(solver=oc.Tsit5())
    grad = jax.jit(jax.grad(_loss(adjoint, SOLVER, 0.005), argnums=(0, 1)))(Y0, ARGS)
    exact = jax.grad(_exact_loss, argnums=(0, 1))(Y0, ARGS)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-3), grad, exact)


@slow
def test_vmap_matches_separate_solves():
    y0s = jnp.array([[1.0, -0.5], [0.2, 3.0], [-1.0, 0.0]])
    solve = lambda y0: oc.diffeqsolve(forced, SOLVER, 0.0, 1.0, 0.1, y0, ARGS).ys[0]
    batched = jax.jit(jax.vmap(solve))(y0s)
    for i in range(3):
        np.testing.assert_allclose(batched[i], jax.jit(solve)(y0s[i]), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------------
# Precision, complex and PyTree states, strict promotion


def test_float32_state():
    y0 = Y0.astype(jnp.float32)
    args = (jnp.float32(1.3), jnp.float32(2.0))
    sol = oc.diffeqsolve(forced, SOLVER, 0.0, 2.0, 0.01, y0, args)
    assert sol.ys.dtype == jnp.float32
    exact = np.asarray(forced_exact(2.0, Y0, 1.3, 2.0))
    assert np.max(np.abs(np.asarray(sol.ys[0]) - exact)) < 1e-2  # order 1, h = 0.01


def schrodinger(t, y, args):
    """`y' = -i a y` (holomorphic): `y(t) = y0 exp(-i a t)`."""
    return -1j * jnp.asarray(args).astype(y.dtype) * y


def test_complex_state_against_closed_form():
    """Implicit Euler damps `|y|` by `1 / |1 + i a h|` per step: order 1 in the modulus
    and the phase alike."""
    y0 = jnp.array([1.0 + 0.5j, -0.3j])
    num_steps = np.array([50, 100, 200])

    def solve(dt0):
        return oc.diffeqsolve(schrodinger, SOLVER, 0.0, 1.0, dt0, y0, 2.0, max_steps=256).ys[0]

    ys = np.asarray(jax.jit(jax.vmap(solve))(1.0 / jnp.asarray(num_steps, float)))
    errors = np.max(np.abs(ys - np.asarray(y0) * np.exp(-2j)), axis=1)
    assert abs(fitted_order(1.0 / num_steps, errors) - 1) < 0.3


def test_strict_promotion_with_complex64_and_float32():
    y0, args = jnp.array([1.0 + 0.5j, -0.3j], jnp.complex64), jnp.float32(2.0)

    def loss(y0, args):
        sol = oc.diffeqsolve(
            schrodinger,
            SOLVER,
            0.0,
            1.0,
            0.1,
            y0,
            args,
            adjoint=oc.CheckpointAdjoint(checkpoints=3),
        )
        return jnp.sum(jnp.abs(sol.ys) ** 2)

    with jax.numpy_dtype_promotion("strict"):
        strict = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)
    standard = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)
    assert strict[0].dtype == jnp.complex64 and strict[1].dtype == jnp.float32
    jax.tree.map(np.testing.assert_array_equal, strict, standard)


@slow
def test_pytree_state_matches_flat_state():
    def tree_field(t, y, args):
        flat = forced(t, jnp.stack([y["a"], y["b"][0]]), args)
        return {"a": flat[0], "b": (flat[1],)}

    tree = oc.diffeqsolve(tree_field, SOLVER, 0.0, 1.0, 0.1, {"a": Y0[0], "b": (Y0[1],)}, ARGS)
    flat = oc.diffeqsolve(forced, SOLVER, 0.0, 1.0, 0.1, Y0, ARGS)
    np.testing.assert_allclose(tree.ys["a"], flat.ys[:, 0], rtol=1e-13)
    np.testing.assert_allclose(tree.ys["b"][0], flat.ys[:, 1], rtol=1e-13)


# ----------------------------------------------------------------------------------
# Newton failure and the constructor


@slow
def test_newton_failure_rejects_the_step():
    """One iteration is too few for Van der Pol (mu = 1000) at a step of 0.5: adaptive
    steps shrink until it converges; constant steps end the solve."""
    solver, y0 = oc.ImplicitEuler(max_iters=1), jnp.array([2.0, 0.0])
    constant = oc.diffeqsolve(van_der_pol, solver, 0.0, 1.0, 0.5, y0, 1000.0, throw=False)
    assert int(constant.result) == oc.RESULTS.implicit_solve_failed
    adaptive = oc.diffeqsolve(
        van_der_pol,
        oc.ImplicitEuler(max_iters=2),
        0.0,
        1.0,
        0.5,
        y0,
        1000.0,
        stepsize_controller=oc.PIDController(rtol=1e-3, atol=1e-3),
        max_steps=512,
    )
    assert int(adaptive.stats["num_rejected_steps"]) >= 1
    assert int(adaptive.result) == oc.RESULTS.successful


def test_diffrax_spellings_and_classes():
    """As diffrax's: `root_finder=VeryChord(...)`, `root_find_max_steps`, the tolerances
    replaceable with `eqx.tree_at` (as diffrax's tests do), and the abstract classes
    (implicit and adaptive, not a Runge–Kutta method)."""
    solver = oc.ImplicitEuler(root_finder=oc.VeryChord(rtol=1e-3, atol=1e-6), root_find_max_steps=5)
    assert solver.rtol == 1e-5 and solver.atol == 1e-8 and solver.max_iters == 5
    assert oc.ImplicitEuler().root_find_max_steps == 10
    replaced = eqx.tree_at(lambda s: (s.root_finder.rtol, s.root_finder.atol), SOLVER, (1e-3, 1e-6))
    assert replaced.rtol == 1e-5
    assert isinstance(SOLVER, oc.AbstractImplicitSolver)
    assert isinstance(SOLVER, oc.AbstractAdaptiveSolver)
    assert not isinstance(SOLVER, oc.AbstractRungeKutta)
    with pytest.raises(ValueError, match=r"`ImplicitEuler\(rtol, atol\)` and"):
        oc.ImplicitEuler(rtol=1e-8, root_finder=oc.VeryChord(rtol=1e-3, atol=1e-6))


def test_scipy_radau_on_a_short_stiff_interval():
    """A cheap stiff reference for the default run: Robertson to t = 40 at rtol 1e-4
    (a few hundred steps) within 200x the tolerance of `solve_ivp(Radau, rtol=1e-12)`."""
    f = jax.jit(lambda t, y: robertson(t, y, jnp.asarray(ROBERTSON_K)))
    ref = scipy.integrate.solve_ivp(
        lambda t, y: np.asarray(f(t, y)),
        (0.0, 40.0),
        ROBERTSON_Y0,
        method="Radau",
        rtol=1e-12,
        atol=1e-20,
    ).y[:, -1]
    sol = oc.diffeqsolve(
        robertson,
        SOLVER,
        0.0,
        40.0,
        None,
        jnp.asarray(ROBERTSON_Y0),
        jnp.asarray(ROBERTSON_K),
        max_steps=4096,
        stepsize_controller=oc.PIDController(rtol=1e-4, atol=1e-8),
    )
    assert scaled_error(sol.ys[0], ref, 1e-4, 1e-8) <= 200
