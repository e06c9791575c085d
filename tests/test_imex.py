"""The IMEX solvers (`KenCarp3`, `KenCarp4`, `KenCarp5`, `Sil3`) with
`MultiTerm(explicit, implicit)`.

Tableaux against the additive (coloured-tree) order conditions; convergence orders with
fixed steps on a split problem whose parts do not commute; stability where the
explicit part alone blows up; agreement with `solve_ivp(method="Radau", rtol=1e-12)`
on a 1-D reaction–diffusion problem; gradients against finite differences under every
adjoint; bit-for-bit replay from checkpoints; `vmap`, float32, both time directions,
PyTree and complex states, strict promotion.

Compilation dominates the run time (one solver, one compile per test), so the default
run exercises each feature on one solver and the solver matrix is marked `slow`.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate

import odeckpt as oc
import odeckpt.testing
from odeckpt._solvers import IMEX
from odeckpt._solvers.imex import ark_tableaux as tab
from odeckpt._solvers.runge_kutta.order_conditions import additive_defects, coloured_trees

slow = pytest.mark.slow

# `name -> (solver class, order)`; the orders are hard-coded, not read from the tableaux.
ORDERS = {"Sil3": 2, "KenCarp3": 3, "KenCarp4": 4, "KenCarp5": 5}
SOLVERS = {cls.__name__: cls for cls in IMEX}
TIGHT = {"rtol": 1e-12, "atol": 1e-14}  # Newton tolerances that do not show in the orders


def solver_params(fast=("KenCarp4",)):
    return [pytest.param(n, id=n, marks=() if n in fast else (slow,)) for n in ORDERS]


def fitted_order(hs, errors) -> float:
    return float(np.polyfit(np.log(np.asarray(hs)), np.log(np.asarray(errors)), 1)[0])


def scaled_error(y, ref, rtol, atol) -> float:
    """max |y - ref| / (atol + rtol |ref|): at most 1 means within the tolerance."""
    y, ref = np.asarray(y), np.asarray(ref)
    return float(np.max(np.abs(y - ref) / (atol + rtol * np.abs(ref))))


# ----------------------------------------------------------------------------------
# Tableaux (no JAX)

TABLEAUX = [cls.tableau for cls in IMEX]


def test_bicoloured_tree_counts():
    # OEIS A000151: rooted trees with 2 colours of vertex.
    assert [len(coloured_trees(p, 2)) for p in range(1, 6)] == [2, 4, 14, 52, 214]


@pytest.mark.parametrize("t", TABLEAUX, ids=lambda t: t.name)
def test_solution_has_exactly_its_additive_order(t):
    alphas, weights = (t.explicit_matrix, t.implicit_matrix), (t.b_explicit, t.b_implicit)
    defects = additive_defects(alphas, weights, t.order + 1)
    worst = {p: 0.0 for p in range(1, t.order + 2)}
    for tree, defect, _ in defects:
        worst[_size(tree)] = max(worst[_size(tree)], abs(defect))
    assert max(worst[p] for p in range(1, t.order + 1)) < 1e-13
    assert worst[t.order + 1] > 1e-6  # not of higher order


def _size(tree) -> int:
    return 1 + sum(_size(child) for child in tree[1])


@pytest.mark.parametrize("part", ["explicit", "implicit"])
@pytest.mark.parametrize("t", TABLEAUX, ids=lambda t: t.name)
def test_each_part_alone_has_the_order(t, part):
    """One colour: each tableau's own conditions (part of the additive ones)."""
    alpha, b = getattr(t, f"{part}_matrix"), getattr(t, f"b_{part}")
    assert max(abs(d) for _, d, _ in additive_defects((alpha,), (b,), t.order)) < 1e-13


@pytest.mark.parametrize("t", [t for t in TABLEAUX if t.dense], ids=lambda t: t.name)
def test_dense_output_ends_at_y1_and_has_its_order(t):
    np.testing.assert_allclose(t.dense_weights(1.0), t.b_explicit, atol=1e-14)
    w = t.dense_weights(0.37)
    defects = additive_defects((t.explicit_matrix, t.implicit_matrix), (w, w), t.dense_order, 0.37)
    assert max(abs(d) for _, d, _ in defects) < 1e-13


@pytest.mark.parametrize("t", TABLEAUX, ids=lambda t: t.name)
def test_implicit_parts_are_stiffly_accurate_with_an_explicit_first_stage(t):
    assert t.diagonal[0] == 0 and all(g > 0 for g in t.diagonal[1:])
    np.testing.assert_allclose(t.implicit_matrix[-1], t.b_implicit, atol=1e-15)


def test_a_wrong_digit_is_caught():
    # diffrax 0.7.2's KenCarp5 has a_76 = -4269925059573 / 7827059040719 (a mistyped
    # denominator; the paper's is ...749): the order conditions catch it.
    rows = [list(r) for r in tab.KENCARP5.implicit]
    rows[6][5] = -4269925059573 / 7827059040719
    with pytest.raises(ValueError, match="ARK5"):
        dataclasses.replace(tab.KENCARP5, implicit=tuple(tuple(r) for r in rows))


# ----------------------------------------------------------------------------------
# Problems

PENDULUM_A = np.array([[-2.0, 1.0], [0.5, -3.0]])


def pendulum(t, y, args):
    """The explicit part: a forced pendulum (nonlinear)."""
    return jnp.stack([y[1], -jnp.sin(y[0]) + 0.3 * jnp.cos(t).astype(y.dtype)])


def damping(t, y, args):
    """The implicit part: a linear coupling that does not commute with the pendulum."""
    return jnp.asarray(PENDULUM_A, y.dtype) @ y


SPLIT = oc.MultiTerm(oc.ODETerm(pendulum), oc.ODETerm(damping))
SPLIT_Y0 = np.array([1.0, 0.5])


@functools.cache
def split_references(ts: tuple[float, ...]) -> np.ndarray:
    """Rows: the solution of the split problem at `ts` (NumPy field: no JAX dispatch)."""

    def field(t, y):
        return np.array([y[1], -np.sin(y[0]) + 0.3 * np.cos(t)]) + PENDULUM_A @ y

    sol = scipy.integrate.solve_ivp(
        field, (0.0, max(ts)), SPLIT_Y0, method="Radau", rtol=1e-12, atol=1e-14, dense_output=True
    )
    return sol.sol(np.asarray(ts)).T


def split_reference(t1: float) -> np.ndarray:
    return split_references((t1,))[0]


def fisher_kpp(n: int):
    """`u_t = D u_xx + u (1 - u)` on `[0, 1]` with zero-flux ends, `D = 0.1`: the
    reaction explicit, the diffusion (stiff: `4 D n^2` = 410 at n = 32) implicit."""
    lap = np.diag(-2.0 * np.ones(n)) + np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1)
    lap[0, 1] = lap[-1, -2] = 2.0
    diffusion = 0.1 * (n - 1) ** 2 * lap
    x = np.linspace(0.0, 1.0, n)
    u0 = np.exp(-50.0 * x**2)
    reaction = oc.ODETerm(lambda t, u, args: u * (1 - u))
    term = oc.MultiTerm(reaction, oc.ODETerm(lambda t, u, args: args @ u))
    return term, u0, diffusion


@functools.cache
def fisher_kpp_reference(n: int, ts: tuple[float, ...]) -> np.ndarray:
    """Rows: the solution at `ts`."""
    _, u0, d = fisher_kpp(n)
    sol = scipy.integrate.solve_ivp(
        lambda t, u: d @ u + u * (1 - u),
        (0.0, ts[-1]),
        u0,
        method="Radau",
        rtol=1e-12,
        atol=1e-14,
        jac=lambda t, u: d + np.diag(1 - 2 * u),
        t_eval=ts,
    )
    return sol.y.T


# ----------------------------------------------------------------------------------
# Orders, stiffness, accuracy


@pytest.mark.parametrize("name", solver_params())
def test_order_with_fixed_steps_on_a_non_commuting_split(name):
    solver, order = SOLVERS[name](**TIGHT), ORDERS[name]
    num_steps = {2: [32, 45, 64, 90], 3: [16, 23, 32, 45]}.get(order, [8, 11, 16, 23])

    def solve(dt0):
        sol = oc.diffeqsolve(SPLIT, solver, 0.0, 2.0, dt0, jnp.asarray(SPLIT_Y0), max_steps=91)
        return sol.ys[0]

    ys = jax.jit(jax.vmap(solve))(2.0 / jnp.asarray(num_steps, float))
    errors = np.max(np.abs(np.asarray(ys) - split_reference(2.0)), axis=1)
    assert abs(fitted_order(2.0 / np.asarray(num_steps), errors) - order) < 0.3


@pytest.mark.parametrize("name", solver_params(fast=("KenCarp3",)))
def test_stable_where_the_explicit_method_blows_up(name):
    """Prothero–Robinson, `y' = cos t + lambda (y - sin t)`, lambda = -1e4: the stiff
    relaxation implicit, the forcing explicit. With h |lambda| = 500 an explicit method
    of the same order overflows; the IMEX method follows `y = sin t`."""
    term = oc.MultiTerm(
        oc.ODETerm(lambda t, y, args: jnp.cos(t) * jnp.ones_like(y)),
        oc.ODETerm(lambda t, y, args: -1e4 * (y - jnp.sin(t))),
    )
    y0 = jnp.zeros(1)
    imex = oc.diffeqsolve(term, SOLVERS[name](), 0.0, 2.0, 0.05, y0)
    assert abs(float(imex.ys[0, 0]) - np.sin(2.0)) < 1e-3
    explicit = oc.diffeqsolve(term, oc.Dopri5(), 0.0, 2.0, 0.05, y0, throw=False)
    assert not np.isfinite(explicit.ys[0, 0]) or abs(explicit.ys[0, 0]) > 1e10


@pytest.mark.parametrize("name", solver_params())
def test_reaction_diffusion_matches_radau(name):
    term, u0, d = fisher_kpp(32)
    rtol, atol = 1e-6, 1e-9
    sol = oc.diffeqsolve(
        term,
        SOLVERS[name](),
        0.0,
        2.0,
        None,
        jnp.asarray(u0),
        jnp.asarray(d),
        stepsize_controller=oc.PIDController(rtol=rtol, atol=atol),
    )
    # The controller bounds local errors; the global error may reach a few times that
    # (Sil3 more: its error estimate compares two solutions of order 2; measured 16x).
    factor = 30.0 if name == "Sil3" else 10.0
    assert scaled_error(sol.ys[0], fisher_kpp_reference(32, (2.0,))[0], rtol, atol) <= factor


# Observed order at times inside steps: the solution's `p`, or the interpolant's local
# order `q + 1` if lower (KenCarp's own dense output: q = 2 for KenCarp3, 3 for
# KenCarp4/5; Sil3's cubic Hermite: 3).
DENSE_ORDERS = {"Sil3": 2, "KenCarp3": 3, "KenCarp4": 4, "KenCarp5": 4}


@pytest.mark.parametrize("name", solver_params(fast=("KenCarp5",)))
def test_dense_output_converges_between_steps(name):
    """Saved at the same fraction (0.37) of a step whatever the step size."""
    solver = SOLVERS[name](**TIGHT)
    num_steps = np.array([11, 16, 23, 32, 45]) * (4 if name == "Sil3" else 1)
    tss = (np.floor(np.outer(num_steps, [0.15, 0.4, 0.65, 0.85])) + 0.37) * (
        2.0 / num_steps[:, None]
    )

    def solve(dt0, ts):
        sol = oc.diffeqsolve(
            SPLIT,
            solver,
            0.0,
            2.0,
            dt0,
            jnp.asarray(SPLIT_Y0),
            saveat=oc.SaveAt(ts=ts),
            max_steps=181,
        )
        return sol.ys

    ys = jax.jit(jax.vmap(solve))(2.0 / jnp.asarray(num_steps, float), jnp.asarray(tss))
    reference = split_references(tuple(tss.ravel())).reshape(*tss.shape, 2)
    errors = np.max(np.abs(np.asarray(ys) - reference), axis=(1, 2))
    assert abs(fitted_order(2.0 / num_steps, errors) - DENSE_ORDERS[name]) < 0.3


# ----------------------------------------------------------------------------------
# Gradients and transformations


def _loss(args, solver, adjoint, t0=0.0, t1=1.0, controller=None, dt0=0.05):
    """A smooth loss of the split problem with parameters in both parts."""
    term = oc.MultiTerm(
        oc.ODETerm(lambda t, y, a: a[0] * jnp.stack([y[1], -jnp.sin(y[0])])),
        oc.ODETerm(lambda t, y, a: a[1] * (jnp.asarray(PENDULUM_A, y.dtype) @ y)),
    )
    sol = oc.diffeqsolve(
        term,
        solver,
        t0,
        t1,
        dt0,
        jnp.asarray(SPLIT_Y0, args.dtype),
        args,
        stepsize_controller=controller or oc.ConstantStepSize(),
        saveat=oc.SaveAt(ts=jnp.linspace(t0, t1, 3)),
        adjoint=adjoint,
    )
    return jnp.sum(sol.ys**2)


ARGS = np.array([1.0, 0.7])
PID = oc.PIDController(rtol=1e-9, atol=1e-11)
ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint_3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(solver=oc.Tsit5()),
    "interpolating": oc.InterpolatingAdjoint(solver=oc.Tsit5()),
}


@pytest.mark.parametrize(
    "adjoint", [a if a == "checkpoint" else pytest.param(a, marks=slow) for a in ADJOINTS]
)
@pytest.mark.parametrize("direction", [1, pytest.param(-1, marks=slow)])
def test_gradient_against_finite_differences(adjoint, direction):
    """The discrete gradient (fixed steps) for the checkpointed adjoint; the continuous
    adjoints approximate the exact one, so they get tight adaptive steps."""
    continuous = adjoint in ("backsolve", "interpolating")
    kwargs = dict(
        t0=direction * 0.0,
        t1=direction * 1.0,
        dt0=direction * 0.05,
        controller=PID if continuous else None,
    )
    loss = functools.partial(
        _loss, solver=oc.KenCarp3(**TIGHT), adjoint=ADJOINTS[adjoint], **kwargs
    )
    odeckpt.testing.assert_grads_close(loss, jnp.asarray(ARGS), rtol=1e-5 if continuous else 1e-7)


@pytest.mark.parametrize("name", solver_params(fast=()))
def test_replay_from_checkpoints_gives_the_stored_gradient_bit_for_bit(name):
    solver, pid = SOLVERS[name](), oc.PIDController(rtol=1e-6, atol=1e-8)
    stored = jax.jit(jax.grad(lambda a: _loss(a, solver, oc.CheckpointAdjoint(), controller=pid)))
    replayed = jax.jit(
        jax.grad(lambda a: _loss(a, solver, oc.CheckpointAdjoint(checkpoints=3), controller=pid))
    )
    np.testing.assert_array_equal(stored(jnp.asarray(ARGS)), replayed(jnp.asarray(ARGS)))


@slow
def test_forward_mode_matches_reverse_mode():
    solver = oc.KenCarp3()
    reverse = jax.grad(lambda a: _loss(a, solver, oc.CheckpointAdjoint(), controller=PID))
    forward = jax.jacfwd(lambda a: _loss(a, solver, oc.ForwardMode(), controller=PID))
    np.testing.assert_allclose(forward(jnp.asarray(ARGS)), reverse(jnp.asarray(ARGS)), rtol=1e-10)


@slow
def test_vmap_matches_separate_solves():
    solver = oc.KenCarp4()
    batch = jnp.stack([jnp.asarray(ARGS), 1.5 * jnp.asarray(ARGS)])
    loss = lambda a: _loss(a, solver, oc.CheckpointAdjoint(), controller=PID)
    batched = jax.vmap(jax.value_and_grad(loss))(batch)
    separate = jax.lax.map(jax.value_and_grad(loss), batch)
    np.testing.assert_allclose(batched[0], separate[0], rtol=1e-12)
    np.testing.assert_allclose(batched[1], separate[1], rtol=1e-10)


@slow
def test_float32():
    term, u0, d = fisher_kpp(16)
    sol = oc.diffeqsolve(
        term,
        oc.KenCarp4(),
        0.0,
        1.0,
        None,
        jnp.asarray(u0, jnp.float32),
        jnp.asarray(d, jnp.float32),
        stepsize_controller=oc.PIDController(rtol=1e-4, atol=1e-6),
    )
    assert sol.ys.dtype == jnp.float32
    assert scaled_error(sol.ys[0], fisher_kpp_reference(16, (1.0,))[0], 1e-4, 1e-6) <= 10.0


@slow
def test_pytree_and_complex_states_against_closed_form():
    """`y = {"z": z, "x": x}`: `z' = i omega z` explicit, `-2 z` implicit (complex), and
    `x' = z.real`-free decay `x' = -x` split across both parts."""
    term = oc.MultiTerm(
        oc.ODETerm(lambda t, y, a: {"z": 3j * y["z"], "x": -0.25 * y["x"]}),
        oc.ODETerm(lambda t, y, a: {"z": -2.0 * y["z"], "x": -0.75 * y["x"]}),
    )
    y0 = {"z": jnp.array([1.0 + 0.5j]), "x": jnp.array([2.0, 3.0])}
    sol = oc.diffeqsolve(
        term,
        oc.KenCarp5(),
        0.0,
        1.0,
        None,
        y0,
        stepsize_controller=oc.PIDController(rtol=1e-9, atol=1e-11),
    )
    np.testing.assert_allclose(sol.ys["z"][0], np.exp(-2 + 3j) * (1 + 0.5j), rtol=1e-7)
    np.testing.assert_allclose(sol.ys["x"][0], np.exp(-1.0) * np.array([2.0, 3.0]), rtol=1e-7)


@slow
def test_strict_promotion_gives_standard_results_bit_for_bit():
    def run():
        loss = lambda a: _loss(
            a,
            oc.KenCarp3(),
            oc.CheckpointAdjoint(checkpoints=3),
            controller=oc.PIDController(rtol=1e-5, atol=1e-7),
        )
        return jax.value_and_grad(loss)(jnp.asarray(ARGS, jnp.float32))

    with jax.numpy_dtype_promotion("standard"):
        expected = run()
    with jax.numpy_dtype_promotion("strict"):
        got = run()
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype == jnp.float32
        np.testing.assert_array_equal(g, e)


# ----------------------------------------------------------------------------------
# The term's parts


def test_parts_survive_time_reversal_and_closure_conversion():
    """A backward solve wraps the term; each part keeps its own field (reversed)."""
    calls = []
    term = oc.MultiTerm(
        oc.ODETerm(lambda t, y, a: (calls.append("explicit"), -y)[1]),
        oc.ODETerm(lambda t, y, a: (calls.append("implicit"), -2.0 * y)[1]),
    )
    sol = oc.diffeqsolve(term, oc.KenCarp3(), 1.0, 0.0, -0.1, jnp.array([1.0]))
    np.testing.assert_allclose(sol.ys[0, 0], np.exp(3.0), rtol=1e-3)
    assert {"explicit", "implicit"} <= set(calls)


def test_a_scalar_part_broadcasts_as_in_diffrax():
    term = oc.MultiTerm(oc.ODETerm(lambda t, y, a: 0), oc.ODETerm(lambda t, y, a: -y))
    sol = oc.diffeqsolve(term, oc.KenCarp3(), 0.0, 1.0, 0.1, jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(sol.ys[0], np.exp(-1.0) * np.array([1.0, 2.0]), rtol=1e-4)


def test_diffrax_term_structure_and_settings():
    solver = oc.KenCarp4(root_finder=oc.VeryChord(rtol=1e-7, atol=1e-9), root_find_max_steps=7)
    assert solver.term_structure == oc.MultiTerm[tuple[oc.AbstractTerm, oc.AbstractTerm]]
    assert isinstance(solver, oc.AbstractImplicitSolver)
    assert isinstance(solver, oc.AbstractAdaptiveSolver)
    assert solver.max_iters == 7 and solver.order(None) == 4
    loose = eqx.tree_at(lambda s: s.root_finder.rtol, solver, 1e-3)  # as diffrax's tests do
    assert loose.rtol == pytest.approx(1e-5)
