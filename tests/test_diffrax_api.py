"""diffrax's API surface for solvers, terms and results: the abstract solver classes
answer `isinstance` as diffrax's do, `order(terms)` is a method, diffrax's keyword
arguments are accepted, user-defined Runge–Kutta methods are written diffrax's way,
`ODETerm`/`MultiTerm` have diffrax's methods, and `RESULTS` has diffrax's members.

diffrax itself (a test dependency) is the reference for the class answers and orders;
closed forms and odeckpt's built-in solvers are the reference for the numbers."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array

import odeckpt as oc

SHARED = [
    "Euler",
    "Heun",
    "Midpoint",
    "Ralston",
    "Bosh3",
    "Tsit5",
    "Dopri5",
    "Dopri8",
    "ImplicitEuler",
    "Kvaerno3",
    "Kvaerno4",
    "Kvaerno5",
]
MARKERS = [
    "AbstractSolver",
    "AbstractAdaptiveSolver",
    "AbstractImplicitSolver",
    "AbstractItoSolver",
    "AbstractStratonovichSolver",
    "AbstractWrappedSolver",
    "AbstractRungeKutta",
    "AbstractERK",
    "AbstractDIRK",
    "AbstractSDIRK",
    "AbstractESDIRK",
]
TERM = oc.ODETerm(lambda t, y, args: -y)


def _marks(module, solver) -> list[str]:
    return [name for name in MARKERS if isinstance(solver, getattr(module, name))]


# --------------------------------------------------------------------------------------
# Abstract classes and orders
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHARED)
def test_isinstance_answers_match_diffrax(name):
    assert _marks(oc, getattr(oc, name)()) == _marks(diffrax, getattr(diffrax, name)())


@pytest.mark.parametrize("name", SHARED)
def test_orders_are_methods_matching_diffrax(name):
    ours, theirs = getattr(oc, name)(), getattr(diffrax, name)()
    term = diffrax.ODETerm(lambda t, y, args: -y)
    assert ours.order(TERM) == theirs.order(term)
    assert ours.error_order(TERM) == theirs.error_order(term)
    assert ours.strong_order(TERM) is None
    assert ours.term_structure is oc.AbstractTerm


@pytest.mark.parametrize("name", ["Ros3P", "Rodas5P"])
def test_rosenbrock_is_adaptive_not_root_finding(name):
    solver = getattr(oc, name)()
    assert _marks(oc, solver) == ["AbstractSolver", "AbstractAdaptiveSolver"]
    assert solver.order(TERM) == {"Ros3P": 3, "Rodas5P": 5}[name]


class _Wrapped(oc.AbstractWrappedSolver):
    """A wrapper that only forwards: `isinstance` must look through it."""

    solver: oc.AbstractSolver

    def order(self, terms):
        return self.solver.order(terms)

    @property
    def evals_per_step(self):
        return self.solver.evals_per_step

    def init_state(self, term, t0, y0, args):
        return self.solver.init_state(term, t0, y0, args)

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True):
        return self.solver.attempt(term, t0, dt, y0, solver_state, args, dense)


def test_wrapped_solver_answers_for_what_it_wraps():
    wrapped = _Wrapped(oc.Kvaerno5())
    assert isinstance(wrapped, oc.AbstractImplicitSolver)
    assert isinstance(wrapped, oc.AbstractESDIRK)
    assert not isinstance(_Wrapped(oc.Euler()), oc.AbstractAdaptiveSolver)
    controller = oc.PIDController(rtol=1e-8, atol=1e-10)
    sol = oc.diffeqsolve(
        TERM, _Wrapped(oc.Tsit5()), 0.0, 1.0, 0.1, jnp.ones(2), stepsize_controller=controller
    )
    np.testing.assert_allclose(sol.ys[-1], np.exp(-1.0), rtol=1e-7)


def test_half_solver_steps_as_diffrax_does():
    f = lambda t, y, a: -a * y + jnp.sin(t)
    y0, args = jnp.ones(2), 0.7
    ours = oc.diffeqsolve(
        f,
        oc.HalfSolver(oc.Euler()),
        0.0,
        3.0,
        0.1,
        y0,
        args,
        stepsize_controller=oc.PIDController(rtol=1e-4, atol=1e-6),
    )
    theirs = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        diffrax.HalfSolver(diffrax.Euler()),
        0.0,
        3.0,
        0.1,
        y0,
        args,
        stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6),
    )
    for key in ("num_accepted_steps", "num_rejected_steps"):
        assert int(ours.stats[key]) == int(theirs.stats[key])
    np.testing.assert_allclose(ours.ys, theirs.ys, rtol=1e-12)
    assert isinstance(oc.HalfSolver(oc.Kvaerno5()), oc.AbstractImplicitSolver)
    assert oc.HalfSolver(oc.Euler()).error_order(TERM) == 2


@pytest.mark.parametrize("adjoint", ["checkpoint", "forward"])
def test_half_solver_gradient_is_that_of_its_discretisation(adjoint):
    # Constant steps h: each step is two Euler half steps, y1 = (1 - a h / 2)^2 y0.
    n, a = 10, 0.7

    def final(a):
        adj = oc.ForwardMode() if adjoint == "forward" else oc.CheckpointAdjoint()
        sol = oc.diffeqsolve(
            lambda t, y, a: -a * y,
            oc.HalfSolver(oc.Euler()),
            0.0,
            1.0,
            1.0 / n,
            jnp.asarray(1.0),
            a,
            adjoint=adj,
        )
        return sol.ys[-1]

    derivative = jax.jacfwd(final)(a) if adjoint == "forward" else jax.grad(final)(a)
    exact = -((1 - a / (2 * n)) ** (2 * n - 1))  # d/da of (1 - a / (2n))^(2n)
    np.testing.assert_allclose(final(a), (1 - a / (2 * n)) ** (2 * n), rtol=1e-13)
    np.testing.assert_allclose(derivative, exact, rtol=1e-13)


# Each adjoint once, BacksolveAdjoint's backwards in time; the other two cases: slow.
@pytest.mark.parametrize(
    "t1, adjoint",
    [
        pytest.param(2.0, oc.InterpolatingAdjoint(), id="2.0-adjoint0"),
        pytest.param(-2.0, oc.InterpolatingAdjoint(), id="-2.0-adjoint0", marks=pytest.mark.slow),
        pytest.param(2.0, oc.BacksolveAdjoint(), id="2.0-adjoint1", marks=pytest.mark.slow),
        pytest.param(-2.0, oc.BacksolveAdjoint(), id="-2.0-adjoint1"),
    ],
)
def test_half_solver_under_continuous_adjoints(adjoint, t1):
    # The adjoint ODE runs with the wrapped method; y(t1) = y0 exp(-a t1), so
    # d y(t1) / d(y0, a) = (exp(-a t1), -t1 y0 exp(-a t1)), to the solve's tolerance.
    controller = oc.PIDController(rtol=1e-9, atol=1e-9)

    def final(y0, a):
        sol = oc.diffeqsolve(
            lambda t, y, a: -a * y,
            oc.HalfSolver(oc.Tsit5()),
            0.0,
            t1,
            0.1 * jnp.sign(t1),
            y0,
            a,
            adjoint=adjoint,
            stepsize_controller=controller,
        )
        return sol.ys[-1]

    y0, a = jnp.asarray(1.5), jnp.asarray(0.7)
    grads = jax.grad(final, argnums=(0, 1))(y0, a)
    decay = np.exp(-0.7 * t1)
    np.testing.assert_allclose(grads, (decay, -t1 * 1.5 * decay), rtol=1e-6)


# --------------------------------------------------------------------------------------
# diffrax's keyword arguments
# --------------------------------------------------------------------------------------


def _stiff(solver, lam=(-1.0, -1000.0)):
    controller = oc.PIDController(rtol=1e-6, atol=1e-8)
    return oc.diffeqsolve(
        lambda t, y, a: jnp.asarray(lam) * y,
        solver,
        0.0,
        1.0,
        0.01,
        jnp.ones(2),
        stepsize_controller=controller,
    ).ys


@pytest.mark.parametrize(
    "ours, plain",
    [(oc.Tsit5(scan_kind="bounded"), oc.Tsit5()), (oc.Heun(scan_kind="lax"), oc.Heun())],
    ids=["Tsit5", "Heun"],
)
def test_scan_kind_changes_nothing(ours, plain):
    np.testing.assert_array_equal(_stiff(ours, (-1.0, -3.0)), _stiff(plain, (-1.0, -3.0)))


def test_root_finder_sets_the_newton_tolerances():
    given = oc.Kvaerno5(root_finder=oc.VeryChord(rtol=1e-4, atol=1e-6, kappa=0.5))
    assert (given.rtol, given.atol, given.max_iters) == (5e-5, 5e-7, 10)
    # diffrax's test helpers loosen an implicit solver's root finder like this.
    where = lambda s: (s.root_finder.rtol, s.root_finder.atol, s.root_finder.norm)
    loosened = eqx.tree_at(where, oc.Kvaerno5(), (1e-3, 1e-6, lambda x: jnp.sqrt(jnp.mean(x**2))))
    assert (loosened.rtol, loosened.atol) == (1e-3 * 1e-2, 1e-6 * 1e-2)
    exact = np.exp(np.asarray([-1.0, -1000.0]))
    np.testing.assert_allclose(_stiff(loosened)[-1], exact, rtol=1e-4, atol=1e-7)
    same = oc.Kvaerno5(root_find_max_steps=4)
    assert same == oc.Kvaerno5(max_iters=4)
    assert oc.Kvaerno5(scan_kind="lax").scan_kind == "lax"  # accepted, read by nothing


# --------------------------------------------------------------------------------------
# User-defined Runge–Kutta methods, diffrax's way
# --------------------------------------------------------------------------------------

_B = np.array([2 / 9, 1 / 3, 4 / 9, 0.0])


class _BogackiShampine(oc.AbstractERK):
    """Bosh3 written out as diffrax documents a user-defined method."""

    tableau = oc.ButcherTableau(
        c=np.array([1 / 2, 3 / 4, 1.0]),
        b_sol=_B,
        b_error=_B - np.array([7 / 24, 1 / 4, 1 / 3, 1 / 8]),
        a_lower=(np.array([1 / 2]), np.array([0.0, 3 / 4]), _B[:3]),
    )
    interpolation_cls = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 3


class _ThreeEighths(oc.AbstractERK):
    """Kutta's 3/8 rule (order 4), with a zero error estimate, order found from the
    tableau."""

    tableau = oc.ButcherTableau(
        c=np.array([1 / 3, 2 / 3, 1.0]),
        b_sol=np.array([1 / 8, 3 / 8, 3 / 8, 1 / 8]),
        b_error=np.zeros(4),
        a_lower=(np.array([1 / 3]), np.array([-1 / 3, 1.0]), np.array([1.0, -1.0, 1.0])),
    )
    interpolation_cls = diffrax.LocalLinearInterpolation


def test_user_tableau_reads_back_diffrax_fields():
    ours, theirs = _BogackiShampine.tableau, diffrax.Bosh3.tableau
    assert (ours.order, ours.embedded_order, ours.fsal) == (3, 2, True)
    assert ours.num_stages == theirs.num_stages
    np.testing.assert_allclose(ours.b_sol, theirs.b_sol, rtol=1e-15)
    for mine, their in zip(ours.a_lower, theirs.a_lower, strict=True):
        np.testing.assert_allclose(mine, their, rtol=1e-15)
    assert _ThreeEighths.tableau.order == 4
    assert _ThreeEighths().order(TERM) == 4


def _loss(solver, y0, adjoint, t1=2.0, dtype=jnp.float64, adaptive=True):
    f = lambda t, y, a: jnp.stack([y[1], -y[0] - 0.1 * y[1]])
    controller = oc.PIDController(rtol=1e-6, atol=1e-8) if adaptive else oc.ConstantStepSize()
    sol = oc.diffeqsolve(
        f,
        solver,
        0.0,
        t1,
        0.1 if t1 > 0 else -0.1,
        y0.astype(dtype),
        saveat=oc.SaveAt(ts=jnp.linspace(0.0, t1, 5, dtype=dtype)),
        stepsize_controller=controller,
        adjoint=adjoint,
    )
    return jnp.sum(sol.ys**2)


ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint-3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
}
# The default run covers one adjoint; the rest compile for a minute and are `slow`.
ADJOINT_CASES = ["checkpoint"] + [
    pytest.param(name, marks=pytest.mark.slow) for name in ADJOINTS if name != "checkpoint"
]


@pytest.mark.parametrize("adjoint", ADJOINT_CASES)
def test_user_method_equals_builtin_under_every_adjoint(adjoint):
    y0 = jnp.asarray([1.0, 0.5])
    mine = jax.value_and_grad(lambda y: _loss(_BogackiShampine(), y, ADJOINTS[adjoint]))(y0)
    builtin = jax.value_and_grad(lambda y: _loss(oc.Bosh3(), y, ADJOINTS[adjoint]))(y0)
    np.testing.assert_array_equal(mine[0], builtin[0])
    np.testing.assert_allclose(mine[1], builtin[1], rtol=1e-12)


@pytest.mark.parametrize(
    "dtype, t1",
    [
        (jnp.float32, -2.0),
        pytest.param(jnp.float32, 2.0, marks=pytest.mark.slow),
        pytest.param(jnp.float64, 2.0, marks=pytest.mark.slow),
        pytest.param(jnp.float64, -2.0, marks=pytest.mark.slow),
    ],
    ids=["float32-backward", "float32-forward", "float64-forward", "float64-backward"],
)
def test_user_method_forward_mode_vmap_and_directions(dtype, t1):
    y0s = jnp.asarray([[1.0, 0.5], [0.2, -0.3]])
    fwd = oc.ForwardMode()
    loss = lambda s, y: _loss(s, y, fwd, t1, dtype, adaptive=False)
    mine = jax.vmap(jax.jacfwd(lambda y: loss(_BogackiShampine(), y)))(y0s)
    builtin = jax.vmap(jax.jacfwd(lambda y: loss(oc.Bosh3(), y)))(y0s)
    # Bosh3's dense output is the same cubic Hermite, written as stage weights.
    np.testing.assert_allclose(mine, builtin, rtol=1e-5 if dtype == jnp.float32 else 1e-12)
    assert mine.dtype == dtype


def test_user_method_converges_at_its_order():
    # y' = -y + sin t, y(0) = 1: y = 1.5 e^-t + (sin t - cos t) / 2.
    f = lambda t, y, a: -y + jnp.sin(t)
    exact = 1.5 * np.exp(-2.0) + (np.sin(2.0) - np.cos(2.0)) / 2
    errors = [
        abs(
            float(oc.diffeqsolve(f, _ThreeEighths(), 0.0, 2.0, 2.0 / n, jnp.asarray(1.0)).ys[-1])
            - exact
        )
        for n in (16, 32)
    ]
    assert abs(np.log2(errors[0] / errors[1]) - 4) < 0.2


def test_user_method_runs_under_strict_promotion():
    y0 = jnp.asarray([1.0, 0.5], jnp.float32)
    with jax.numpy_dtype_promotion("strict"):
        value = _loss(_BogackiShampine(), y0, oc.ForwardMode(), dtype=jnp.float32)
    assert value.dtype == jnp.float32


# --------------------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------------------


def test_ode_term_has_diffrax_methods():
    term = oc.ODETerm[Array](lambda t, y, args: -y)
    dt = term.contr(0, 1)
    assert dt == 1
    y = jnp.asarray([1.0, 2.0])
    np.testing.assert_array_equal(
        term.vf_prod(0, y, None, 0.5), term.prod(term.vf(0, y, None), 0.5)
    )
    np.testing.assert_array_equal(term.vf_prod(0, y, None, 0.5), -0.5 * y)
    assert term.is_vf_expensive(0, 1, y, None) is False
    assert term.vf_prod(0, 1, None, dt) == -1  # an integer state, as diffrax's test has
    with jax.numpy_dtype_promotion("strict"):
        scaled = term.prod(jnp.ones(2, jnp.float32), jnp.asarray(0.5, jnp.float64))
    assert scaled.dtype == jnp.float32


_SPLIT = oc.MultiTerm(
    oc.ODETerm(lambda t, y, a: -a * y), oc.ODETerm(lambda t, y, a: jnp.cos(t) * y)
)


# Kvaerno5: slow; test_control.py::test_multiterm_with_implicit_and_imex_solvers sums a
# MultiTerm with it (and with Rodas5P)
@pytest.mark.parametrize(
    "solver",
    [
        oc.Tsit5(),
        pytest.param(oc.Kvaerno5(), marks=pytest.mark.slow),
        pytest.param(oc.Rodas5P(), marks=pytest.mark.slow),
    ],
    ids=["Tsit5", "Kvaerno5", "Rodas5P"],
)
def test_multiterm_sums_its_terms(solver):
    # y' = (-a + cos t) y: y(t) = exp(-a t + sin t).
    sol = oc.diffeqsolve(
        _SPLIT,
        solver,
        0.0,
        2.0,
        0.1,
        jnp.asarray([1.0]),
        args=0.5,
        stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-10),
    )
    np.testing.assert_allclose(sol.ys[-1], np.exp(-1.0 + np.sin(2.0)), rtol=1e-6)


@pytest.mark.parametrize("adjoint", ADJOINT_CASES)
def test_multiterm_gradient_under_every_adjoint(adjoint):
    def loss(a):
        sol = oc.diffeqsolve(
            _SPLIT,
            oc.Tsit5(),
            0.0,
            2.0,
            0.1,
            jnp.asarray([1.0]),
            args=a,
            stepsize_controller=oc.PIDController(rtol=1e-8, atol=1e-10),
            adjoint=ADJOINTS[adjoint],
        )
        return sol.ys[-1, 0]

    # d/da exp(-2a + sin 2) = -2 exp(-2a + sin 2)
    np.testing.assert_allclose(jax.grad(loss)(0.5), -2 * np.exp(-1.0 + np.sin(2.0)), rtol=1e-6)


# --------------------------------------------------------------------------------------
# RESULTS
# --------------------------------------------------------------------------------------


def test_results_have_diffrax_members():
    ours = set(oc.RESULTS.__members__)
    assert set(diffrax.RESULTS._name_to_item) <= ours
    assert {"implicit_solve_failed", "nonfinite_state", "invalid_input"} <= ours
    assert oc.RESULTS.nonlinear_divergence == oc.RESULTS.implicit_solve_failed
    assert isinstance(oc.RESULTS[oc.RESULTS.max_steps_reached], str)
    assert oc.RESULTS["max_steps_reached"] is oc.RESULTS.max_steps_reached
    assert oc.RESULTS.successful._value == diffrax.RESULTS.successful._value == 0
    assert oc.RESULTS.max_steps_reached._value == int(oc.RESULTS.max_steps_reached) == 1


def test_results_compare_and_look_up_messages():
    sol = oc.diffeqsolve(TERM, oc.Tsit5(), 0.0, 1.0, 0.01, jnp.ones(2), max_steps=5, throw=False)
    assert sol.result == oc.RESULTS.max_steps_reached
    assert oc.RESULTS[sol.result] == oc.RESULTS.max_steps_reached.message
    assert not oc.is_successful(sol.result) and not oc.is_okay(sol.result)
    assert "max_steps" in oc.RESULTS[jnp.asarray([0, 1])]
    codes = jnp.asarray([oc.RESULTS.successful, oc.RESULTS.event_occurred, oc.RESULTS.singular])
    np.testing.assert_array_equal(oc.is_okay(codes), [True, True, False])
    np.testing.assert_array_equal(oc.is_event(codes), [False, True, False])
    chosen = oc.RESULTS.where(jnp.asarray(False), oc.RESULTS.successful, oc.RESULTS.singular)
    assert chosen == oc.RESULTS.singular
