"""Tests for `odeckpt.testing`: the finite-difference gradient checker.

The checker must fail a gradient that is wrong by 1e-3 relative (planted with
`jax.custom_vjp` / `jax.custom_jvp`) and pass correct ones, in float32 and float64,
entry by entry and along random directions, for plain functions, an equinox MLP and
`diffeqsolve` under every adjoint.
"""

import functools
import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import DECAY

import odeckpt as oc
import odeckpt.testing as oct
from odeckpt.testing import _fd

PLANTED = 1e-3
DTYPES = [jnp.float32, jnp.float64]
MODES = ["full", "directional"]


def product(slow=(), **axes):
    """The cases of stacked `parametrize`s over `axes` (ids joined in the order given),
    those whose id is in `slow` marked `slow`."""
    cases = []
    for values in itertools.product(*axes.values()):
        name = "-".join(getattr(v, "__name__", str(v)) for v in values)
        cases.append(pytest.param(*values, id=name, marks=pytest.mark.slow if name in slow else ()))
    return cases


def planted_vjp(f, rel=PLANTED):
    """`f` whose reverse-mode gradient is `(1 + rel)` times the true one."""

    @jax.custom_vjp
    def wrong(x):
        return f(x)

    def fwd(x):
        return f(x), x

    def bwd(x, ct):
        (grad,) = jax.vjp(f, x)[1](ct)
        return (jax.tree.map(lambda g: g * (1 + rel), grad),)

    wrong.defvjp(fwd, bwd)
    return wrong


def planted_jvp(f, rel=PLANTED):
    """`f` whose forward-mode derivative is `(1 + rel)` times the true one."""

    @jax.custom_jvp
    def wrong(x):
        return f(x)

    @wrong.defjvp
    def _(primals, tangents):
        value, tangent = jax.jvp(f, primals, tangents)
        return value, tangent * (1 + rel)

    return wrong


def poly(x):
    return jnp.sum(x**3 - 2 * x**2 + 0.5 * x)


def exp_sin(x):
    return jnp.sum(jnp.exp(x) * jnp.sin(3 * x))


def log_sum_exp(x):
    return jax.nn.logsumexp(2 * x)


FUNCTIONS = [poly, exp_sin, log_sum_exp]


def point(dtype, n=6):
    return jnp.linspace(-1.2, 1.5, n, dtype=dtype)


# ----------------------------------------------------------------------------------
# The acceptance criterion: a planted 1e-3 error fails, correct gradients pass


# each dtype and each mode once by default; the other two cases: slow
@pytest.mark.parametrize(
    "dtype, mode",
    product({"float64-directional", "float32-full"}, dtype=DTYPES, mode=MODES),
)
def test_planted_vjp_error_is_a_mismatch(dtype, mode):
    with pytest.raises(AssertionError, match="mismatch: the gradient is wrong") as failed:
        oct.assert_grads_close(planted_vjp(exp_sin), point(dtype), mode=mode)
    leaf = failed.value.report.leaves[0]
    assert leaf.max_rel_error == pytest.approx(PLANTED, rel=0.1)


# exp_sin in each dtype and mode; poly and log_sum_exp (the same path): slow
@pytest.mark.parametrize(
    "fn, dtype, mode",
    product(
        {
            f"{fn}-{dtype}-{mode}"
            for fn in ("poly", "log_sum_exp")
            for dtype in ("float32", "float64")
            for mode in MODES
        },
        fn=FUNCTIONS,
        dtype=DTYPES,
        mode=MODES,
    ),
)
def test_correct_gradients_pass(fn, dtype, mode):
    report = oct.assert_grads_close(fn, point(dtype), mode=mode)
    assert report.leaves[0].dtype == jnp.dtype(dtype).name


# each dtype and each mode once by default; the other two cases: slow
@pytest.mark.parametrize(
    "dtype, mode",
    product({"float32-directional", "float64-full"}, dtype=DTYPES, mode=MODES),
)
def test_forward_mode_passes_correct_and_fails_planted_jvp(dtype, mode):
    oct.assert_grads_close(exp_sin, point(dtype), mode=mode, ad="forward")
    with pytest.raises(AssertionError, match="mismatch"):
        oct.assert_grads_close(planted_jvp(exp_sin), point(dtype), mode=mode, ad="forward")


# each dtype and each order once by default; the other two cases: slow
@pytest.mark.parametrize(
    "dtype, order", product({"float64-3", "float32-1"}, dtype=DTYPES, order=[1, 3])
)
def test_richardson_order_passes_correct_and_fails_planted(dtype, order):
    oct.assert_grads_close(log_sum_exp, point(dtype), order=order)
    with pytest.raises(AssertionError, match="mismatch"):
        oct.assert_grads_close(planted_vjp(log_sum_exp), point(dtype), order=order)


def test_directional_mode_catches_error_spread_over_many_parameters():
    x = jr.normal(jr.key(0), (300,), jnp.float64)
    oct.assert_grads_close(log_sum_exp, x, mode="directional")
    with pytest.raises(AssertionError, match="directions: mismatch"):
        oct.assert_grads_close(planted_vjp(log_sum_exp), x, mode="directional")


def test_error_in_one_entry_is_located():
    def loss(params):
        return jnp.sum(jnp.sin(params["w"]) * params["b"][None, :])

    def bwd(params, ct):
        (grad,) = jax.vjp(loss, params)[1](ct)
        return ({"w": grad["w"].at[1, 2].multiply(1 + PLANTED), "b": grad["b"]},)

    wrong = jax.custom_vjp(loss)
    wrong.defvjp(lambda params: (loss(params), params), bwd)
    params = {"w": jnp.arange(12.0).reshape(3, 4) / 10, "b": jnp.ones(4)}
    with pytest.raises(AssertionError, match=r"args\[0\]\['w'\]\[1, 2\]: analytic=") as failed:
        oct.assert_grads_close(wrong, params)
    [failure] = failed.value.report.failures
    assert (failure.path, failure.worst_index) == ("args[0]['w']", (1, 2))
    assert list(failure.verdict).count("mismatch") == 1


# ----------------------------------------------------------------------------------
# The FD error estimate and the verdicts built on it


# log_sum_exp: slow; poly and exp_sin run the same estimate in both dtypes
@pytest.mark.parametrize(
    "fn, dtype",
    product({"log_sum_exp-float32", "log_sum_exp-float64"}, fn=FUNCTIONS, dtype=DTYPES),
)
def test_fd_error_estimate_bounds_the_actual_fd_error(fn, dtype):
    x = point(dtype, 40)
    leaf = oct.check_grads(fn, x).leaves[0]
    exact = np.asarray(jax.jit(jax.grad(fn))(x.astype(jnp.float64)))  # at the same rounded x
    assert np.all(np.abs(leaf.fd - exact) <= leaf.fd_error)


def noisy(x):  # correct gradient; FD sees 1e-9 of noise faster than any step
    return jnp.sum(x**2) + 1e-9 * jax.lax.stop_gradient(jnp.sum(jnp.sin(1e9 * x)))


@pytest.mark.parametrize("mode", MODES)
def test_noisy_function_is_inconclusive_not_a_mismatch(mode):
    with pytest.raises(AssertionError, match="inconclusive: FD too noisy to decide") as failed:
        oct.assert_grads_close(noisy, point(jnp.float64), mode=mode)
    assert set(failed.value.report.leaves[0].verdict) == {"inconclusive"}


def test_tolerance_below_fd_accuracy_is_inconclusive():
    with pytest.raises(AssertionError, match="inconclusive"):
        oct.assert_grads_close(exp_sin, point(jnp.float32), rtol=1e-9, atol=0.0)


@pytest.mark.parametrize(("dtype", "rtol"), [(jnp.float32, 3.45e-4), (jnp.float64, 1.49e-8)])
def test_default_tolerances_follow_the_dtype(dtype, rtol):
    assert oct.default_rtol(float(jnp.finfo(dtype).eps)) == pytest.approx(rtol, rel=1e-2)
    leaf = oct.check_grads(poly, point(dtype)).leaves[0]
    assert leaf.rtol == oct.default_rtol(float(jnp.finfo(dtype).eps))
    assert leaf.atol == pytest.approx(leaf.rtol * np.max(np.abs(leaf.fd)))
    np.testing.assert_array_equal(leaf.tol, np.maximum(leaf.atol, leaf.rtol * abs(leaf.fd)))


def test_explicit_tolerances_are_used():
    leaf = oct.check_grads(poly, point(jnp.float64), rtol=1e-3, atol=0.5).leaves[0]
    assert (leaf.rtol, leaf.atol) == (1e-3, 0.5)


def test_verdicts_table():
    analytic = np.array([1.0, 1.1, 1.02, np.nan, 1.0])
    fd = np.array([1.0, 1.0, 1.0, 1.0, np.inf])
    fd_error = np.array([0.0, 0.01, 0.05, 0.0, 0.0])
    verdict = _fd.verdicts(analytic, fd, fd_error, np.full(5, 0.01))
    assert list(verdict) == ["ok", "mismatch", "inconclusive", "non-finite", "non-finite"]


def test_richardson_is_exact_for_a_quintic():
    # (f(1+h) - f(1-h)) / 2h for f = x^5 is 5 + 10 h^2 + h^4: order 2 removes both terms
    h = np.array([[0.4], [0.2], [0.1]])
    f = lambda x: x**5
    est = _fd.extrapolate(f(1 + h), f(1 - h), 5 * 2 * h, 2 * h, eps=0.0)
    np.testing.assert_allclose(est.residual, 0.0, atol=1e-13)


# ----------------------------------------------------------------------------------
# NaN never passes


def nan_everywhere(x):
    return jnp.sum(jnp.sqrt(x - 10.0))


def nan_off_the_point(x):  # finite at x, NaN at every perturbed point
    return jnp.sum(jnp.where(x == point(x.dtype), x**2, jnp.nan))


def nan_gradient(x):
    return planted_vjp(poly, rel=jnp.nan)(x)


# each source of NaN once and each mode by default; the other three cases: slow
@pytest.mark.parametrize(
    "fn, mode",
    product(
        {"nan_everywhere-full", "nan_off_the_point-directional", "nan_gradient-full"},
        fn=[nan_everywhere, nan_off_the_point, nan_gradient],
        mode=MODES,
    ),
)
def test_nan_fails_loudly(fn, mode):
    with pytest.raises(AssertionError, match="non-finite: NaN or inf") as failed:
        oct.assert_grads_close(fn, point(jnp.float64), mode=mode)
    assert failed.value.report.leaves[0].status == "non-finite"


# ----------------------------------------------------------------------------------
# PyTrees, dtypes, outputs


@functools.cache
def mlp_and_inputs(dtype):
    mlp = eqx.nn.MLP(3, 2, width_size=8, depth=2, activation=jnp.tanh, key=jr.key(0))
    mlp = jax.tree.map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp)
    return mlp, jr.normal(jr.key(1), (4, 3), dtype)


def mlp_loss(model, xs):
    return jnp.mean(jax.vmap(model)(xs) ** 2)


# each dtype and each mode once by default; the other two cases: slow
@pytest.mark.parametrize(
    "dtype, mode", product({"float32-full", "float64-directional"}, dtype=DTYPES, mode=MODES)
)
def test_equinox_mlp(dtype, mode):
    report = oct.assert_grads_close(mlp_loss, *mlp_and_inputs(dtype), mode=mode)
    paths = (
        ["directions"]
        if mode == "directional"
        else [f"args[0].layers[{i}].{name}" for i in range(3) for name in ("weight", "bias")]
    )
    assert [leaf.path for leaf in report.leaves] == paths


@pytest.mark.parametrize("mode", MODES)
def test_float32_leaves_stay_float32_with_x64_enabled(mode):
    def f(params):
        if params["a"].dtype != jnp.float32 or params["b"].dtype != jnp.float64:
            raise TypeError(f"dtypes changed: {jax.tree.map(lambda x: x.dtype, params)}")
        return jnp.sum(params["a"] ** 2) * jnp.sum(jnp.cos(params["b"])).astype(jnp.float32)

    oct.assert_grads_close(f, {"a": point(jnp.float32), "b": point(jnp.float64)}, mode=mode)


def test_each_leaf_is_held_to_its_working_precision():
    # the output is float64: the float32 leaf limits the FD to float32 precision
    params = {"a": point(jnp.float32), "b": point(jnp.float64)}
    leaves = oct.check_grads(lambda p: jnp.sum(p["a"].astype(jnp.float64) * p["b"]), params).leaves
    assert [leaf.dtype for leaf in leaves] == ["float32", "float64"]
    assert [leaf.rtol for leaf in leaves] == [
        oct.default_rtol(float(jnp.finfo(dtype).eps)) for dtype in (jnp.float32, jnp.float64)
    ]


def test_non_array_leaves_are_left_alone():
    params = {"w": point(jnp.float64), "n": 3, "c": 2.0, "idx": jnp.arange(3), "act": jnp.tanh}
    params["none"] = None

    def f(p):
        return p["c"] * jnp.sum(p["act"](p["w"][p["idx"]]) ** p["n"])

    report = oct.assert_grads_close(f, params)
    assert [leaf.path for leaf in report.leaves] == ["args[0]['w']"]


def test_argnums_selects_arguments():
    def f(a, b, c):
        return jnp.sum(a * b) + jnp.sum(c**2)

    x = point(jnp.float64)
    report = oct.assert_grads_close(f, x, x, x, argnums=(0, 2))
    assert [leaf.path for leaf in report.leaves] == ["args[0]", "args[2]"]


def vector_valued(x):
    return {"s": jnp.sin(x), "p": jnp.cumprod(x)[:3]}


@pytest.mark.parametrize("mode", MODES)
def test_vector_output_correct_passes(mode):
    oct.assert_grads_close(vector_valued, point(jnp.float64), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_vector_output_planted_fails(mode):
    with pytest.raises(AssertionError, match="mismatch"):
        oct.assert_grads_close(planted_vjp(vector_valued), point(jnp.float64), mode=mode)


def test_explicit_cotangent_selects_a_jacobian_row():
    x = point(jnp.float64)
    leaf = oct.check_grads(jnp.sin, x, cotangent=jnp.zeros(6).at[2].set(1.0)).leaves[0]
    np.testing.assert_allclose(leaf.analytic, np.where(np.arange(6) == 2, np.cos(x), 0.0))


def test_key_chooses_the_directions():
    x = point(jnp.float64)
    runs = [oct.check_grads(exp_sin, x, mode="directional", key=k) for k in (0, 0, jr.key(3))]
    assert np.array_equal(runs[0].leaves[0].analytic, runs[1].leaves[0].analytic)
    assert not np.allclose(runs[0].leaves[0].analytic, runs[2].leaves[0].analytic)


def test_batch_size_vectorises_the_same_evaluations():
    x = point(jnp.float64)
    one, batched = oct.check_grads(exp_sin, x), oct.check_grads(exp_sin, x, batch_size=5)
    np.testing.assert_allclose(one.leaves[0].fd, batched.leaves[0].fd, rtol=1e-12)
    assert one.num_evaluations == batched.num_evaluations == 6 * 6


def test_report_table():
    text = str(oct.check_grads(lambda p: poly(p["x"]), {"x": point(jnp.float64)}))
    header, columns, row = text.splitlines()
    assert header.endswith("PASSED") and "FD err est" in columns
    assert row.startswith("args[0]['x']") and row.endswith("ok")


# ----------------------------------------------------------------------------------
# diffeqsolve under every adjoint


ADJOINTS = [
    pytest.param(oc.CheckpointAdjoint(), "reverse", id="checkpoint"),
    pytest.param(oc.ForwardMode(), "forward", id="forward"),
    pytest.param(oc.BacksolveAdjoint(), "reverse", id="backsolve"),
    pytest.param(oc.InterpolatingAdjoint(), "reverse", id="interpolating"),
]


def decay(k, y0, adjoint, tol):
    sol = oc.diffeqsolve(
        DECAY.vector_field,
        oc.Tsit5(),
        0.0,
        1.0,
        0.1,
        y0,
        k,
        adjoint=adjoint,
        stepsize_controller=oc.PIDController(rtol=tol, atol=tol),
    )
    return jnp.sum(sol.ys[-1] * jnp.arange(1, 3, dtype=sol.ys.dtype))


# The solve's gradient is taken on its accepted time grid (controller decisions are not
# differentiated; continuous adjoints approximate it), while FD also sees the grid move
# with the parameters: they agree to about 100x the solver's tolerance, hence the rtol.


@pytest.mark.parametrize(("adjoint", "ad"), ADJOINTS)
def test_diffeqsolve_float64(adjoint, ad):
    k, y0 = jnp.asarray(0.7), jnp.asarray([1.3, -0.4])
    oct.assert_grads_close(decay, k, y0, adjoint, 1e-8, argnums=(0, 1), ad=ad, rtol=1e-6)


# float32 under BacksolveAdjoint by default; the other adjoints' float32 cases are slow
# (their paths run in test_diffeqsolve_float64, float32 reverse and forward mode in
# test_diffeqsolve_float32_without_x64 and test_forward_mode_passes_correct_and_fails_planted_jvp)
FLOAT32_ADJOINTS = [
    p if p.id == "backsolve" else pytest.param(*p.values, id=p.id, marks=pytest.mark.slow)
    for p in ADJOINTS
]


@pytest.mark.parametrize(("adjoint", "ad"), FLOAT32_ADJOINTS)
def test_diffeqsolve_float32(adjoint, ad):  # float32 state, float64 time (x64 enabled)
    k, y0 = jnp.asarray(0.7, jnp.float32), jnp.asarray([1.3, -0.4], jnp.float32)
    report = oct.assert_grads_close(decay, k, y0, adjoint, 1e-5, argnums=(0, 1), ad=ad, rtol=1e-3)
    assert [leaf.dtype for leaf in report.leaves] == ["float32", "float32"]


def test_diffeqsolve_float32_without_x64():
    with jax.enable_x64(False):
        k, y0 = jnp.asarray(0.7), jnp.asarray([1.3, -0.4])
        report = oct.assert_grads_close(
            decay, k, y0, oc.CheckpointAdjoint(), 1e-5, argnums=(0, 1), rtol=1e-3
        )
    assert [leaf.dtype for leaf in report.leaves] == ["float32", "float32"]


# ----------------------------------------------------------------------------------
# Input errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "all"}, r"`check_grads\(mode=...\)` must be"),
        ({"ad": "backward"}, r"`check_grads\(ad=...\)` must be"),
        ({"order": 0}, r"`check_grads\(order=...\)` must be an integer >= 1"),
        ({"num_directions": 0}, r"`check_grads\(num_directions=...\)` must be a positive"),
        ({"argnums": 3}, r"`check_grads\(argnums=...\)` must index the 1 positional"),
        ({"cotangent": jnp.ones(2)}, r"`check_grads\(cotangent=...\)` must be shaped like"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        oct.check_grads(jnp.sin, point(jnp.float64), **kwargs)


def test_nothing_to_differentiate_raises():
    with pytest.raises(ValueError, match=r"nothing to differentiate in args\[0\]: no floating"):
        oct.check_grads(lambda x: x**2, 1.5)


@pytest.mark.parametrize(
    ("fn", "x", "match"),
    [(lambda x: jnp.sum(x > 0), jnp.ones(2), "must return a real floating")],
)
def test_unsupported_types_raise(fn, x, match):
    with pytest.raises(TypeError, match=match):
        oct.check_grads(fn, x)
