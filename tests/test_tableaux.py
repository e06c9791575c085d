"""Tests for the Butcher tableaux and their validation."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from odeckpt._solvers import EXPLICIT
from odeckpt._solvers.explicit.bosh3 import BOSH3
from odeckpt._solvers.explicit.euler import EULER
from odeckpt._solvers.explicit.heun import HEUN
from odeckpt._solvers.explicit.midpoint import MIDPOINT
from odeckpt._solvers.explicit.tsit5 import TSIT5
from odeckpt._solvers.runge_kutta.order_conditions import (
    condition_defects,
    dense_condition_defects,
    rooted_trees,
    tree_density,
)
from odeckpt._solvers.runge_kutta.tableau import ButcherTableau, evaluate_dense_weights

# Every registered explicit method; a new one is checked here without editing this file.
ALL = [solver.tableau for solver in EXPLICIT]
TABLEAUX = {t.name: t for t in ALL}
EMBEDDED = [t for t in ALL if t.b_err is not None]
DENSE = [t for t in ALL if t.dense is not None]

# Tolerance on a defect relative to the size of the summed terms.
RTOL = 1e-13


def _ids(tableaux):
    return [t.name for t in tableaux]


def _max_defect(defects):
    return max(abs(d) / max(1.0, s) for _, d, s in defects)


def _weight_defects(tableau, weights, order):
    a = tableau.a_matrix()
    return [d for k in range(1, order + 1) for d in condition_defects(a, np.asarray(weights), k)]


# --------------------------------------------------------------------------
# Basic properties
# --------------------------------------------------------------------------


@pytest.mark.parametrize("tableau", ALL, ids=_ids(ALL))
def test_revalidates(tableau):
    rebuilt = dataclasses.replace(tableau)
    assert rebuilt == tableau
    assert rebuilt.stages == len(tableau.c) == len(tableau.b)


def test_stage_counts():
    expected = {
        "EULER": 1,
        "HEUN": 2,
        "MIDPOINT": 2,
        "RALSTON": 2,
        "BOSH3": 4,
        "TSIT5": 7,
        "DOPRI5": 7,
        "DOPRI8": 14,
    }
    counts = {name: TABLEAUX[name].stages for name in expected}
    assert counts == expected


def test_fsal_flags():
    expected = {
        "EULER": False,
        "HEUN": False,
        "MIDPOINT": False,
        "RALSTON": False,
        "BOSH3": True,
        "TSIT5": True,
        "DOPRI5": True,
        "DOPRI8": True,
    }
    flags = {name: TABLEAUX[name].fsal for name in expected}
    assert flags == expected


@pytest.mark.parametrize("tableau", EMBEDDED, ids=_ids(EMBEDDED))
def test_error_orders(tableau):
    assert tableau.embedded_order == tableau.order - 1
    assert tableau.error_estimate_order == tableau.order
    b_hat = np.asarray(tableau.b) - np.asarray(tableau.b_err)
    np.testing.assert_array_equal(tableau.b_hat, b_hat)


def test_no_error_estimate_for_euler():
    assert EULER.b_err is None
    assert EULER.embedded_order is None
    assert EULER.b_hat is None
    assert EULER.error_estimate_order is None


# --------------------------------------------------------------------------
# Rooted trees
# --------------------------------------------------------------------------


def test_rooted_tree_counts():
    # OEIS A000081
    expected = [1, 1, 2, 4, 9, 20, 48, 115]
    assert [len(rooted_trees(n)) for n in range(1, 9)] == expected


@pytest.mark.parametrize("order", range(1, 8))
def test_tree_densities(order):
    tall = ()
    for _ in range(order - 1):
        tall = (tall,)
    bushy = ((),) * (order - 1)
    assert tree_density(tall) == math.factorial(order)
    assert tree_density(bushy) == order
    assert tall in rooted_trees(order)
    assert bushy in rooted_trees(order)


def test_densities_of_small_trees():
    def densities(n):
        return sorted(tree_density(t) for t in rooted_trees(n))

    assert densities(4) == [4, 8, 12, 24]
    assert densities(5) == [5, 10, 15, 20, 20, 30, 40, 60, 120]


# --------------------------------------------------------------------------
# Order conditions
# --------------------------------------------------------------------------


@pytest.mark.parametrize("tableau", ALL, ids=_ids(ALL))
def test_order_conditions_of_solution(tableau):
    defects = _weight_defects(tableau, tableau.b, tableau.order)
    assert _max_defect(defects) <= RTOL
    # The stated order is sharp: some condition of the next order fails.
    a = tableau.a_matrix()
    next_order = condition_defects(a, np.asarray(tableau.b), tableau.order + 1)
    assert max(abs(d) for _, d, _ in next_order) > 1e-8


@pytest.mark.parametrize("tableau", EMBEDDED, ids=_ids(EMBEDDED))
def test_order_conditions_of_embedded_method(tableau):
    defects = _weight_defects(tableau, tableau.b_hat, tableau.embedded_order)
    assert _max_defect(defects) <= RTOL
    a = tableau.a_matrix()
    b_hat = np.asarray(tableau.b_hat)
    next_order = condition_defects(a, b_hat, tableau.embedded_order + 1)
    assert max(abs(d) for _, d, _ in next_order) > 1e-8


def _linear_stages(tableau, z):
    """Stage slopes `k / (lambda y0)` of `y' = lambda y` with `z = h lambda`."""
    s = tableau.stages
    return np.linalg.solve(np.eye(s) - z * tableau.a_matrix(), np.ones(s))


@pytest.mark.parametrize("tableau", ALL, ids=_ids(ALL))
def test_linear_convergence_of_solution(tableau):
    lam = -1.7
    hs = np.array([0.4, 0.2, 0.1, 0.05])
    if tableau.order >= 8:
        hs = 4 * hs  # keep the errors well above rounding
    errs = []
    for h in hs:
        k = lam * _linear_stages(tableau, h * lam)
        errs.append(abs(1 + h * np.dot(tableau.b, k) - np.exp(lam * h)))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert slope > tableau.order + 1 - 0.3


# --------------------------------------------------------------------------
# Dense output
# --------------------------------------------------------------------------


@pytest.mark.parametrize("tableau", DENSE, ids=_ids(DENSE))
def test_dense_endpoints(tableau):
    np.testing.assert_array_equal(evaluate_dense_weights(tableau, 0.0), 0.0)
    np.testing.assert_allclose(evaluate_dense_weights(tableau, 1.0), tableau.b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("tableau", DENSE, ids=_ids(DENSE))
def test_dense_order_conditions(tableau):
    a = tableau.a_matrix()
    dense = np.asarray(tableau.dense)
    for k in range(1, tableau.dense_order + 1):
        assert _max_defect(dense_condition_defects(a, dense, k)) <= RTOL
    # The stated dense order is sharp.
    failing = dense_condition_defects(a, dense, tableau.dense_order + 1)
    assert max(d for _, d, _ in failing) > 1e-8


@pytest.mark.parametrize("tableau", DENSE, ids=_ids(DENSE))
def test_dense_linear_convergence(tableau):
    lam = -2.3
    hs = np.array([0.4, 0.2, 0.1, 0.05])
    thetas = np.linspace(0.0, 1.0, 21)
    weights = evaluate_dense_weights(tableau, thetas)  # (21, s)
    errs = []
    for h in hs:
        k = lam * _linear_stages(tableau, h * lam)
        approx = 1 + h * weights @ k
        errs.append(np.max(np.abs(approx - np.exp(lam * thetas * h))))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert slope > tableau.dense_order + 1 - 0.3


def test_evaluate_dense_weights_shapes():
    assert evaluate_dense_weights(TSIT5, 0.3).shape == (7,)
    assert evaluate_dense_weights(TSIT5, np.zeros((2, 3))).shape == (2, 3, 7)
    np.testing.assert_allclose(
        evaluate_dense_weights(TSIT5, np.array([0.3, 0.6]))[1],
        evaluate_dense_weights(TSIT5, 0.6),
        rtol=1e-14,
        atol=1e-15,
    )


def test_evaluate_dense_weights_without_dense_output():
    plain = dataclasses.replace(HEUN, name="PLAIN", dense=None, dense_order=None)
    with pytest.raises(ValueError, match="'PLAIN' has no dense output"):
        evaluate_dense_weights(plain, 0.5)


def test_hermite_dense_of_bosh3():
    # Cubic Hermite on (y0, y1, f0, f1): h00 y0 + h10 h f0 + h01 y1 + h11 h f1.
    theta = 0.37
    h10 = theta - 2 * theta**2 + theta**3
    h01 = 3 * theta**2 - 2 * theta**3
    h11 = theta**3 - theta**2
    expected = h01 * np.asarray(BOSH3.b)
    expected[0] += h10
    expected[-1] += h11
    np.testing.assert_allclose(evaluate_dense_weights(BOSH3, theta), expected)


# --------------------------------------------------------------------------
# Validation failures
# --------------------------------------------------------------------------


def _bad(base, **changes):
    fields = {"name": "BAD", **changes}
    return lambda: dataclasses.replace(base, **fields)


INVALID = [
    pytest.param(_bad(HEUN, a=((),)), r"'BAD': shape: len\(a\)", id="len-a"),
    pytest.param(_bad(HEUN, a=((), (0.5, 0.5))), r"shape: len\(a\[1\]\)", id="row"),
    pytest.param(_bad(HEUN, c=()), "at least one stage", id="no-stages"),
    pytest.param(_bad(HEUN, b=(1.0,)), r"shape: len\(b\)", id="len-b"),
    pytest.param(_bad(HEUN, b_err=(0.5, -0.5, 0.0)), r"shape: len\(b_err\)", id="len-b-err"),
    pytest.param(_bad(HEUN, dense=((1.0,),)), r"shape: len\(dense\)", id="len-dense"),
    pytest.param(_bad(HEUN, dense=((1.0, -0.5), (0.5,))), "equal length", id="ragged-dense"),
    pytest.param(_bad(HEUN, c=(0.1, 1.0), a=((), (0.9,))), r"first node c\[0\]", id="c0"),
    pytest.param(
        _bad(HEUN, c=(0.0, 0.9)),
        r"row-sum condition c\[1\] == sum\(a\[1\]\)",
        id="row-sum",
    ),
    pytest.param(_bad(HEUN, b=(0.5, 0.6)), r"weight condition sum\(b\) == 1", id="sum-b"),
    pytest.param(_bad(HEUN, b_err=(0.5, -0.4)), r"sum\(b_err\) == 0", id="sum-b-err"),
    pytest.param(
        _bad(HEUN, dense=((1.0, -0.5), (0.0, 0.6))),
        r"dense output condition b_1\(1\) == b\[1\]",
        id="dense-endpoint",
    ),
    pytest.param(
        _bad(HEUN, b=(0.3, 0.7), dense=None, dense_order=None),
        r"order condition for b \(order 2\)",
        id="order-b",
    ),
    pytest.param(
        _bad(BOSH3, order=4, dense=None, dense_order=None),
        r"order condition for b \(order 4\)",
        id="overstated-order",
    ),
    pytest.param(
        _bad(BOSH3, b_err=tuple(np.asarray(BOSH3.b) - (1.0, 0.0, 0.0, 0.0))),
        r"order condition for b_hat \(order 2\)",
        id="order-b-hat",
    ),
    pytest.param(
        _bad(MIDPOINT, dense_order=2),
        r"dense order condition \(order 2\)",
        id="order-dense",
    ),
    pytest.param(_bad(HEUN, order=0), "order must be a positive integer", id="order"),
    pytest.param(
        _bad(HEUN, embedded_order=None),
        "embedded_order must be given if and only if",
        id="error-order-missing",
    ),
    pytest.param(
        _bad(HEUN, embedded_order=2),
        r"embedded_order must be an integer in \[1, 1\]",
        id="error-order-range",
    ),
    pytest.param(
        _bad(HEUN, dense_order=None),
        "dense_order must be given if and only if",
        id="dense-order-missing",
    ),
    pytest.param(
        _bad(HEUN, dense_order=3),
        r"dense_order must be an integer in \[1, 2\]",
        id="dense-order-range",
    ),
    pytest.param(
        _bad(HEUN, b=("x", 0.5)),
        "coefficients must be sequences of numbers",
        id="not-numbers",
    ),
]


@pytest.mark.parametrize(("make", "match"), INVALID)
def test_invalid_tableaux_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_error_message_names_tableau():
    with pytest.raises(ValueError, match="Butcher tableau 'BAD'"):
        _bad(HEUN, b=(0.5, 0.6))()


def test_constructed_from_lists():
    tab = ButcherTableau(
        name="LISTS",
        c=[0, 1],
        a=[[], [1]],
        b=[0.5, 0.5],
        b_err=None,
        order=2,
        embedded_order=None,
        dense=None,
        dense_order=None,
    )
    assert tab.c == (0.0, 1.0)
    assert tab.a == ((), (1.0,))
    assert not tab.fsal


# --------------------------------------------------------------------------
# Agreement with diffrax
# --------------------------------------------------------------------------


# Our tableau's name -> the diffrax solver with the same method.
DIFFRAX = {
    "EULER": "Euler",
    "HEUN": "Heun",
    "MIDPOINT": "Midpoint",
    "RALSTON": "Ralston",
    "BOSH3": "Bosh3",
    "TSIT5": "Tsit5",
    "DOPRI5": "Dopri5",
    "DOPRI8": "Dopri8",
}
IN_DIFFRAX = [t for t in ALL if t.name in DIFFRAX]
EMBEDDED_IN_DIFFRAX = [t for t in EMBEDDED if t.name in DIFFRAX]


def _diffrax_solvers():
    diffrax = pytest.importorskip("diffrax")
    return diffrax, {name: getattr(diffrax, solver)() for name, solver in DIFFRAX.items()}


@pytest.mark.parametrize("tableau", EMBEDDED_IN_DIFFRAX, ids=_ids(EMBEDDED_IN_DIFFRAX))
def test_coefficients_match_diffrax(tableau):
    _, solvers = _diffrax_solvers()
    theirs = solvers[tableau.name].tableau
    np.testing.assert_array_equal(tableau.c, np.concatenate([[0.0], theirs.c]))
    np.testing.assert_array_equal(tableau.b, theirs.b_sol)
    for i, row in enumerate(theirs.a_lower, start=1):
        np.testing.assert_array_equal(tableau.a[i], row)
    # diffrax stores b_hat - b for the two-stage methods; norms are
    # sign-invariant, so only the magnitude matters for step control.
    b_err = np.asarray(tableau.b_err)
    sign = 1.0 if tableau.stages > 2 else -1.0
    np.testing.assert_array_equal(sign * b_err, theirs.b_error)


@pytest.mark.parametrize("tableau", IN_DIFFRAX, ids=_ids(IN_DIFFRAX))
def test_orders_match_diffrax(tableau):
    diffrax, solvers = _diffrax_solvers()
    solver = solvers[tableau.name]
    term = diffrax.ODETerm(lambda t, y, args: y)
    assert solver.order(term) == tableau.order
    if tableau.b_err is not None:
        # The PID controller's exponent denominator.
        assert solver.error_order(term) == tableau.error_estimate_order


@pytest.mark.parametrize("tableau", IN_DIFFRAX, ids=_ids(IN_DIFFRAX))
def test_dense_output_matches_diffrax(tableau):
    _, solvers = _diffrax_solvers()
    solver = solvers[tableau.name]
    rng = np.random.default_rng(1234)
    h, t0 = 0.37, 1.5
    y0 = rng.normal(size=3)
    k = h * rng.normal(size=(tableau.stages, 3))  # stage increments h f_i
    y1 = y0 + np.asarray(tableau.b) @ k
    with jax.enable_x64(True):
        kwargs = {"t0": t0, "t1": t0 + h, "y0": jnp.asarray(y0), "y1": jnp.asarray(y1)}
        if tableau.name != "EULER":
            kwargs["k"] = jnp.asarray(k)
        interp = solver.interpolation_cls(**kwargs)
        for theta in [0.0, 0.1, 0.33, 0.5, 0.8, 1.0]:
            expected = np.asarray(interp.evaluate(t0 + theta * h))
            ours = y0 + evaluate_dense_weights(tableau, theta) @ k
            np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-12)
