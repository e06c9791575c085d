"""`SemiImplicitEuler` on partitioned systems `y = (q, p)` given as a tuple of terms:
order 1 against closed forms, symplecticity (bounded energy error over long times
against explicit Euler's growth), every adjoint (gradients against finite differences
and the exact gradient), replayed steps, `vmap`, both time directions, float32, complex
and PyTree states, strict promotion, `HalfSolver` around it, and what the rest of the
library sees: the whole field `(f(t, p), g(t, q))`.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc
import odeckpt.testing

slow = pytest.mark.slow
SOLVER = oc.SemiImplicitEuler()


def velocity(t, p, args):
    """`dq/dt = p` (unit mass)."""
    return p


def spring(t, q, w):
    """`dp/dt = -w^2 q`: the harmonic oscillator's force."""
    return -(jnp.asarray(w) ** 2).astype(q.dtype) * q


TERMS = (oc.ODETerm(velocity), oc.ODETerm(spring))
W = jnp.asarray(1.7)
Y0 = (jnp.array([1.0, 0.3]), jnp.array([0.0, -0.8]))


def oscillator(t, y0, w):
    """The exact flow of the harmonic oscillator from `y0 = (q0, p0)` at time `t`."""
    q0, p0 = y0
    c, s = jnp.cos(w * t), jnp.sin(w * t)
    return (q0 * c + p0 / w * s, -q0 * w * s + p0 * c)


def fitted_order(hs, errors) -> float:
    return float(np.polyfit(np.log(np.asarray(hs)), np.log(np.asarray(errors)), 1)[0])


def _errors(t0, t1, num_steps, y0=Y0, w=W):
    """Max error at `t1` (both halves) for each step count, in one `vmap`ped solve."""
    exact = oscillator(t1 - t0, y0, w)

    def solve(dt0):
        sol = oc.diffeqsolve(TERMS, SOLVER, t0, t1, dt0, y0, w, max_steps=int(max(num_steps)))
        return sol.ys

    dts = (t1 - t0) / jnp.asarray(num_steps, float)
    qs, ps = jax.jit(jax.vmap(solve))(dts)
    q_err = np.max(np.abs(np.asarray(qs[:, 0]) - np.asarray(exact[0])), axis=1)
    p_err = np.max(np.abs(np.asarray(ps[:, 0]) - np.asarray(exact[1])), axis=1)
    return np.maximum(q_err, p_err)


@pytest.mark.parametrize("t0, t1", [(0.0, 3.0), (3.0, 0.0)], ids=["forward", "backward"])
def test_order_one_against_the_closed_form(t0, t1):
    num_steps = np.array([50, 71, 100, 141, 200])
    errors = _errors(t0, t1, num_steps)
    assert abs(fitted_order(abs(t1 - t0) / num_steps, errors) - 1) < 0.3


def test_diffrax_semi_implicit_euler_case_against_the_closed_form():
    """diffrax's own case: `(ODETerm(-y), ODETerm(y))`, `y0 = (1.0, -0.5)` as Python
    floats, integer times, 100,000 steps: `q' = -p`, `p' = q`, a rotation."""
    terms = (oc.ODETerm(lambda t, y, args: -y), oc.ODETerm(lambda t, y, args: y))
    sol = oc.diffeqsolve(terms, SOLVER, 0, 1, 0.00001, (1.0, -0.5), max_steps=100000)
    q, p = sol.ys
    np.testing.assert_allclose(q[0], np.cos(1) + 0.5 * np.sin(1), atol=1e-5)
    np.testing.assert_allclose(p[0], -0.5 * np.cos(1) + np.sin(1), atol=1e-5)


# ----------------------------------------------------------------------------------
# Symplecticity


def pendulum_force(t, q, args):
    return -jnp.sin(q)


def _pendulum_energy(q, p):
    return 0.5 * p**2 - jnp.cos(q)


def test_energy_error_stays_bounded_on_the_pendulum():
    """10,000 steps of h = 0.1 (about 160 periods): the energy error oscillates at
    `O(h)` with no drift (its range over the last tenth of the run is that of the
    first tenth), where explicit Euler on the same field gains energy every step."""
    y0, ts = (jnp.array([1.2]), jnp.array([0.0])), jnp.linspace(0.0, 1000.0, 1001)[1:]
    terms = (oc.ODETerm(velocity), oc.ODETerm(pendulum_force))
    sol = oc.diffeqsolve(
        terms, SOLVER, 0.0, 1000.0, 0.1, y0, saveat=oc.SaveAt(ts=ts), max_steps=10001
    )
    drift = np.asarray(_pendulum_energy(*sol.ys))[:, 0] - float(_pendulum_energy(*y0)[0])
    assert np.max(np.abs(drift)) < 0.1 * 0.5  # O(h), h = 0.1
    early, late = np.max(np.abs(drift[:100])), np.max(np.abs(drift[-100:]))
    assert late < 1.5 * early

    def whole(t, y, args):
        return (y[1], pendulum_force(t, y[0], args))

    euler = oc.diffeqsolve(whole, oc.Euler(), 0.0, 100.0, 0.1, y0, max_steps=1001)
    assert float(_pendulum_energy(*euler.ys)[0, 0] - _pendulum_energy(*y0)[0]) > 1.0


def test_map_is_symplectic():
    """The Jacobian `M` of one step `(q0, p0) -> (q1, p1)` (a nonlinear force) satisfies
    `M^T J M = J`: the step preserves the symplectic form to rounding."""

    def step(z):
        q, p = z[:2], z[2:]
        terms = (oc.ODETerm(velocity), oc.ODETerm(pendulum_force))
        q1, p1 = oc.diffeqsolve(terms, SOLVER, 0.0, 0.3, 0.3, (q, p), adjoint=oc.ForwardMode()).ys
        return jnp.concatenate([q1[0], p1[0]])

    m = np.asarray(jax.jacfwd(step)(jnp.array([0.4, -1.0, 0.7, 0.2])))
    j = np.block([[np.zeros((2, 2)), np.eye(2)], [-np.eye(2), np.zeros((2, 2))]])
    np.testing.assert_allclose(m.T @ j @ m, j, atol=1e-14)


# ----------------------------------------------------------------------------------
# Gradients


def _loss(adjoint, dt0=0.05):
    def loss(y0, w):
        sol = oc.diffeqsolve(
            TERMS,
            SOLVER,
            0.0,
            1.0,
            dt0,
            y0,
            w,
            adjoint=adjoint,
            saveat=oc.SaveAt(ts=jnp.array([0.4, 1.0])),
        )
        q, p = sol.ys
        return jnp.sum(q**2 * jnp.array([[1.0, 2.0]])) + jnp.sum(q * p)

    return loss


def _exact_loss(y0, w):
    total = 0.0
    for t in (0.4, 1.0):
        q, p = oscillator(t, y0, w)
        total = total + jnp.sum(q**2 * jnp.array([1.0, 2.0])) + jnp.sum(q * p)
    return total


DISCRETE = {
    "checkpoint": (oc.CheckpointAdjoint(), "reverse"),
    "forward": (oc.ForwardMode(), "forward"),
}


@pytest.mark.parametrize("adjoint", ["checkpoint", "forward"])
def test_gradient_of_the_discrete_solve_against_finite_differences(adjoint):
    adjoint, ad = DISCRETE[adjoint]
    odeckpt.testing.assert_grads_close(_loss(adjoint), Y0, W, argnums=(0, 1), ad=ad)


def test_replayed_steps_repeat_the_forward_pass():
    """The gradient does not depend on `checkpoints` (bit for bit)."""
    grads = [
        jax.jit(jax.grad(_loss(oc.CheckpointAdjoint(checkpoints=c)), argnums=(0, 1)))(Y0, W)
        for c in (None, 3)
    ]
    jax.tree.map(np.testing.assert_array_equal, grads[1], grads[0])


@pytest.mark.parametrize(
    "cls", [oc.BacksolveAdjoint, pytest.param(oc.InterpolatingAdjoint, marks=slow)]
)
def test_continuous_adjoints_converge_to_the_exact_gradient(cls):
    """The adjoint ODE of the whole field `(p, -w^2 q)` solved with `Tsit5`: the exact
    gradient, up to the forward solve's `O(h)` error (h = 0.002)."""
    grad = jax.jit(jax.grad(_loss(cls(solver=oc.Tsit5()), 0.002), argnums=(0, 1)))(Y0, W)
    exact = jax.grad(_exact_loss, argnums=(0, 1))(Y0, W)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2), grad, exact)


@slow
def test_vmap_over_initial_states():
    q0s = jnp.array([[1.0, 0.3], [0.0, 2.0], [-1.0, 0.5]])

    def solve(q0):
        return oc.diffeqsolve(TERMS, SOLVER, 0.0, 1.0, 0.1, (q0, Y0[1]), W).ys

    batched = jax.jit(jax.vmap(solve))(q0s)
    single = [solve(q0) for q0 in q0s]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *single)
    jax.tree.map(lambda b, s: np.testing.assert_allclose(b, s, rtol=1e-14), batched, stacked)


# ----------------------------------------------------------------------------------
# Precision, complex and PyTree states, strict promotion


def test_float32_state():
    y0 = jax.tree.map(lambda x: x.astype(jnp.float32), Y0)
    q, p = oc.diffeqsolve(TERMS, SOLVER, 0.0, 1.0, 0.01, y0, jnp.float32(1.7)).ys
    assert q.dtype == p.dtype == jnp.float32
    exact = oscillator(1.0, Y0, W)
    assert np.max(np.abs(np.asarray(q[0]) - np.asarray(exact[0]))) < 0.05  # order 1, h = 0.01


@slow
def test_complex_state_against_the_closed_form():
    """Complex `q`, `p` (a linear field, so the closed form holds): order 1."""
    y0 = (jnp.array([1.0 + 0.5j]), jnp.array([-0.2j]))
    errors = _errors(0.0, 2.0, np.array([100, 200, 400]), y0)
    assert abs(fitted_order(2.0 / np.array([100, 200, 400]), errors) - 1) < 0.3


def test_strict_promotion_with_complex64_and_float32():
    y0, w = (jnp.array([1.0 + 0.5j], jnp.complex64), jnp.array([-0.2j], jnp.complex64)), 1.7

    def loss(y0, w):
        q, p = oc.diffeqsolve(
            TERMS, SOLVER, 0.0, 1.0, 0.1, y0, w, adjoint=oc.CheckpointAdjoint(checkpoints=3)
        ).ys
        return jnp.sum(jnp.abs(q) ** 2 + jnp.abs(p) ** 2)

    with jax.numpy_dtype_promotion("strict"):
        strict = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, jnp.float32(w))
    standard = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, jnp.float32(w))
    assert strict[0][0].dtype == jnp.complex64 and strict[1].dtype == jnp.float32
    jax.tree.map(np.testing.assert_array_equal, strict, standard)


@slow
def test_pytree_halves():
    """`q` and `p` as dicts (a 2-D oscillator): the same numbers as the flat state."""
    to_tree = lambda x: {"x": x[0], "y": x[1]}
    terms = (
        oc.ODETerm(lambda t, p, w: p),
        oc.ODETerm(lambda t, q, w: jax.tree.map(lambda v: -(w**2) * v, q)),
    )
    tree = oc.diffeqsolve(terms, SOLVER, 0.0, 1.0, 0.1, jax.tree.map(to_tree, Y0), W).ys
    flat = oc.diffeqsolve(TERMS, SOLVER, 0.0, 1.0, 0.1, Y0, W).ys
    np.testing.assert_allclose(tree[0]["x"], flat[0][:, 0], rtol=1e-14)
    np.testing.assert_allclose(tree[1]["y"], flat[1][:, 1], rtol=1e-14)


# ----------------------------------------------------------------------------------
# What the rest of the library sees, HalfSolver, diffrax's classes


def test_dense_output_and_derivative_of_the_whole_field():
    """`SaveAt(ts)` inside a step is the straight line between its ends, and
    `Solution.derivative` is that line's slope, `(y1 - y0) / h`."""
    sol = oc.diffeqsolve(
        TERMS,
        SOLVER,
        0.0,
        0.2,
        0.1,
        Y0,
        W,
        saveat=oc.SaveAt(ts=jnp.array([0.03, 0.1]), dense=True),
        max_steps=4,
    )
    q1, p1 = sol.ys
    y1 = jax.tree.map(lambda x: x[1], sol.ys)
    np.testing.assert_allclose(q1[0], Y0[0] + 0.3 * (y1[0] - Y0[0]), rtol=1e-14)
    np.testing.assert_allclose(p1[0], Y0[1] + 0.3 * (y1[1] - Y0[1]), rtol=1e-14)
    dq, dp = sol.derivative(0.05)
    np.testing.assert_allclose(dq, (y1[0] - Y0[0]) / 0.1, rtol=1e-12)
    np.testing.assert_allclose(dp, (y1[1] - Y0[1]) / 0.1, rtol=1e-12)


def test_half_solver_makes_it_adaptive():
    """`HalfSolver(SemiImplicitEuler())` takes the tuple of terms and is driven by
    `PIDController`: at rtol 1e-6 the global error is about 5e-4 (order 1: the local
    errors add up over the ~2,600 steps)."""
    solver = oc.HalfSolver(SOLVER)
    assert solver.term_structure == (oc.AbstractTerm, oc.AbstractTerm)
    assert isinstance(solver, oc.AbstractAdaptiveSolver) and solver.error_order(None) == 2
    sol = oc.diffeqsolve(
        TERMS,
        solver,
        0.0,
        3.0,
        None,
        Y0,
        W,
        max_steps=16384,
        stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-8),
    )
    exact = oscillator(3.0, Y0, W)
    error = max(float(jnp.max(jnp.abs(sol.ys[i][0] - exact[i]))) for i in range(2))
    assert error < 1e-3


def test_classes_and_structure_match_diffrax():
    marks = [
        "AbstractSolver",
        "AbstractAdaptiveSolver",
        "AbstractImplicitSolver",
        "AbstractRungeKutta",
    ]
    ours = [m for m in marks if isinstance(SOLVER, getattr(oc, m))]
    theirs = [m for m in marks if isinstance(diffrax.SemiImplicitEuler(), getattr(diffrax, m))]
    assert ours == theirs == ["AbstractSolver"]
    assert SOLVER.term_structure == (oc.AbstractTerm, oc.AbstractTerm)
    assert SOLVER.order(TERMS) == diffrax.SemiImplicitEuler().order(None) == 1
