"""Tests for `odeckpt.testing.check_hessian`: Hessians against differences of gradients.

The checker must fail a Hessian that is wrong by 1e-3 relative while the gradient is
exact (planted in the derivative of the gradient), pass correct ones in float32 and
float64, entry by entry and along random directions, over any PyTree, and its
Richardson estimate must match closed forms: plain functions, and a linear ODE whose
solution is a matrix exponential.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc
import odeckpt.testing as oct

PLANTED = 1e-3
DTYPES = [jnp.float32, jnp.float64]
MODES = ["full", "directional"]


def planted_second(f, rel=PLANTED):
    """`f` with an exact gradient whose own derivative is `(1 + rel)` times the true
    one: forward over reverse sees the error, the gradient does not."""

    @jax.custom_jvp
    def wrong_grad(x):
        return jax.grad(f)(x)

    @wrong_grad.defjvp
    def _(primals, tangents):
        value, tangent = jax.jvp(jax.grad(f), primals, tangents)
        return value, tangent * (1 + rel)

    @jax.custom_vjp
    def wrong(x):
        return f(x)

    wrong.defvjp(lambda x: (f(x), x), lambda x, ct: (ct * wrong_grad(x),))
    return wrong


def exp_sin(x):
    return jnp.sum(jnp.exp(x) * jnp.sin(3 * x)) + jnp.sum(x[:-1] ** 2 * x[1:])


def exp_sin_hessian(x):
    """The closed form of `jax.hessian(exp_sin)`."""
    n = x.shape[0]
    diag = np.exp(x) * (6 * np.cos(3 * x) - 8 * np.sin(3 * x))
    diag[:-1] += 2 * x[1:]
    h = np.diag(diag)
    off = 2 * x[:-1]
    h[np.arange(n - 1), np.arange(1, n)] += off
    h[np.arange(1, n), np.arange(n - 1)] += off
    return h


def point(dtype, n=5):
    return jnp.linspace(-1.2, 1.5, n, dtype=dtype)


def _each_once(slow):
    """`(dtype, mode)` cases, those named in `slow` marked slow: each dtype and each
    mode stays in the default run once."""
    cases = []
    for mode in MODES:
        for dtype in DTYPES:
            name = f"{dtype.__name__}-{mode}"
            cases.append(
                pytest.param(dtype, mode, id=name, marks=pytest.mark.slow if name in slow else ())
            )
    return cases


@pytest.mark.parametrize("dtype, mode", _each_once({"float32-full", "float64-directional"}))
def test_planted_hessian_error_is_a_mismatch_while_the_gradient_passes(dtype, mode):
    wrong = planted_second(exp_sin)
    oct.assert_grads_close(wrong, point(dtype), mode=mode)
    with pytest.raises(oct.HessianCheckError, match="mismatch: the Hessian is wrong") as failed:
        oct.assert_hessian_close(wrong, point(dtype), mode=mode)
    (leaf,) = failed.value.report.leaves
    assert leaf.max_abs_error / np.max(np.abs(leaf.fd)) == pytest.approx(PLANTED, rel=0.2)


@pytest.mark.parametrize("dtype, mode", _each_once({"float64-full", "float32-directional"}))
def test_correct_hessians_pass(dtype, mode):
    report = oct.assert_hessian_close(exp_sin, point(dtype), mode=mode)
    assert report.leaves[0].dtype == jnp.dtype(dtype).name


@pytest.mark.parametrize("mode", MODES)
def test_forward_over_forward(mode):
    oct.assert_hessian_close(exp_sin, point(jnp.float64), mode=mode, ad="forward")


@pytest.mark.parametrize("order", [1, 2, 3])
def test_richardson_estimate_matches_the_closed_form(order):
    x = point(jnp.float64, 6)
    report = oct.check_hessian(exp_sin, x, order=order)
    leaf = report.leaves[0]
    fd, exact = leaf.fd.reshape(6, 6), exp_sin_hessian(np.asarray(x))
    actual = np.abs(fd - exact)
    assert np.max(actual) <= 1e-10 * np.max(np.abs(exact))
    # the error bar holds as the verdicts use it (a mismatch needs 3 error bars)
    assert np.all(actual <= 3 * leaf.fd_error.reshape(6, 6))
    np.testing.assert_allclose(leaf.analytic.reshape(6, 6), exact, rtol=1e-13, atol=1e-13)


def test_pytree_blocks_follow_jax_hessian():
    def fn(p):
        return jnp.sum(p["a"] ** 2 * p["b"][0, 0]) + jnp.sum(jnp.sin(p["b"]) * p["a"][0])

    params = {"a": jnp.asarray([0.3, -1.1, 0.8]), "b": jnp.asarray([[0.5], [1.7]])}
    report = oct.assert_hessian_close(fn, params)
    hessian = jax.jit(jax.hessian(fn))(params)
    blocks = {leaf.path: leaf for leaf in report.leaves}
    for row in ("a", "b"):
        for col in ("a", "b"):
            leaf = blocks[f"H[args[0]['{row}'], args[0]['{col}']]"]
            assert leaf.shape == hessian[row][col].shape
            np.testing.assert_allclose(leaf.analytic, np.ravel(hessian[row][col]), rtol=1e-14)


def test_directional_reports_hessian_vector_products():
    x = point(jnp.float64)
    report = oct.check_hessian(exp_sin, x, mode="directional", num_directions=3, key=4)
    leaf = report.leaves[0]
    assert (leaf.path, leaf.shape) == ("Hv[args[0]]", (3, 5))
    assert report.num_evaluations == 2 * 3 * 3
    np.testing.assert_allclose(leaf.fd, leaf.analytic, rtol=1e-8, atol=1e-8)


def test_report_table_names_the_hessian():
    with pytest.raises(AssertionError, match="Hessian check failed") as failed:
        oct.assert_hessian_close(planted_second(exp_sin, 1e-2), point(jnp.float64))
    text = str(failed.value.report)
    assert text.startswith("HessianReport (full, forward-over-reverse-mode analytic")
    assert "H[args[0], args[0]][" in text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "all"}, r"`check_hessian\(mode=...\)` must be"),
        ({"ad": "backward"}, r"`check_hessian\(ad=...\)` must be"),
        ({"order": 0}, r"`check_hessian\(order=...\)` must be an integer >= 1"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        oct.check_hessian(exp_sin, point(jnp.float64), **kwargs)


# ----------------------------------------------------------------------------------
# diffeqsolve: y' = k M y, M a damped rotation, so y(t) = expm(k t M) y0 in closed form

DAMPING, FREQUENCY = 0.4, 1.3
M = np.asarray([[-DAMPING, FREQUENCY], [-FREQUENCY, -DAMPING]])
TS = np.linspace(0.25, 2.0, 8)
WEIGHTS = np.linspace(1.0, 2.0, 16).reshape(8, 2)


def closed_form_loss(k, y0):
    """`Σ w ⊙ y(ts)²` with `expm(k t M) = e^{-a k t} [[cos, sin], [-sin, cos]](w k t)`."""
    angle = FREQUENCY * k * jnp.asarray(TS, k.dtype)
    c, s = jnp.cos(angle), jnp.sin(angle)
    ys = jnp.exp(-DAMPING * k * TS)[:, None] * jnp.stack(
        [c * y0[0] + s * y0[1], -s * y0[0] + c * y0[1]], axis=-1
    )
    return jnp.sum(WEIGHTS * ys**2)


def solve_loss(k, y0, adjoint, field=None):
    field = field or (lambda t, y, k: k * (jnp.asarray(M, y.dtype) @ y))
    sol = oc.diffeqsolve(
        field,
        oc.Tsit5(),
        0.0,
        2.0,
        1 / 32,
        y0,
        k,
        saveat=oc.SaveAt(ts=jnp.asarray(TS)),
        adjoint=adjoint,
    )
    return jnp.sum(jnp.asarray(WEIGHTS, sol.ys.dtype) * sol.ys**2)


def _full(blocks, n_k=1, n_y=2):
    """The 3x3 Hessian in `(k, y0)` from the four blocks of a report."""
    h = [
        [b.reshape(r, c) for b, (r, c) in zip(row, sizes, strict=True)]
        for row, sizes in (
            (blocks[:2], [(n_k, n_k), (n_k, n_y)]),
            (blocks[2:], [(n_y, n_k), (n_y, n_y)]),
        )
    ]
    return np.block(h)


# Each check below compiles the solve's Hessian (forward over reverse through the
# adjoint) and its gradient: a few seconds each, so one runs by default.


@pytest.mark.parametrize(
    "adjoint",
    [
        oc.CheckpointAdjoint(),
        pytest.param(oc.CheckpointAdjoint(checkpoints=4), marks=pytest.mark.slow),
        pytest.param(oc.InterpolatingAdjoint(), marks=pytest.mark.slow),
    ],
    ids=["checkpoint", "checkpoint4", "interpolating"],
)
def test_linear_ode_hessian_passes_and_matches_the_matrix_exponential(adjoint):
    k, y0 = jnp.asarray(0.9), jnp.asarray([1.2, -0.6])
    rtol = 1e-9 if isinstance(adjoint, oc.CheckpointAdjoint) else 1e-6
    report = oct.assert_hessian_close(solve_loss, k, y0, adjoint, argnums=(0, 1), rtol=rtol)
    exact = np.block(
        [[np.asarray(h) for h in row] for row in _hessian_blocks(closed_form_loss, k, y0)]
    )
    for side in ("analytic", "fd"):
        estimate = _full([getattr(leaf, side) for leaf in report.leaves])
        np.testing.assert_allclose(estimate, exact, rtol=0, atol=1e-8 * np.max(np.abs(exact)))


def _hessian_blocks(fn, k, y0):
    h = jax.hessian(fn, argnums=(0, 1))(k, y0)
    return [
        [np.reshape(h[r][c], (np.size(a), np.size(b))) for c, b in enumerate((k, y0))]
        for r, a in enumerate((k, y0))
    ]


@pytest.mark.slow
def test_linear_ode_float32():
    k, y0 = jnp.asarray(0.9, jnp.float32), jnp.asarray([1.2, -0.6], jnp.float32)
    report = oct.assert_hessian_close(
        solve_loss, k, y0, oc.CheckpointAdjoint(), argnums=(0, 1), mode="directional"
    )
    assert {leaf.dtype for leaf in report.leaves} == {"float32"}


@pytest.mark.slow
def test_ode_with_a_planted_second_derivative_fails():
    """A vector field whose nonlinearity has the right value and slope but a curvature
    off by 1%: the gradient check passes, the Hessian check does not."""

    @jax.custom_jvp
    def slope(y):
        return jnp.cos(y)

    @slope.defjvp
    def _(primals, tangents):
        (y,), (dy,) = primals, tangents
        return jnp.cos(y), -1.01 * jnp.sin(y) * dy

    @jax.custom_jvp
    def sine(y):
        return jnp.sin(y)

    sine.defjvp(lambda primals, tangents: (sine(primals[0]), slope(primals[0]) * tangents[0]))

    def field(t, y, k):
        return k * (jnp.asarray(M) @ y) + sine(y)

    k, y0 = jnp.asarray(0.9), jnp.asarray([1.2, -0.6])
    adjoint = oc.CheckpointAdjoint(checkpoints=4)
    loss = lambda k, y0: solve_loss(k, y0, adjoint, field)
    oct.assert_grads_close(loss, k, y0, argnums=(0, 1), rtol=1e-9)
    with pytest.raises(oct.HessianCheckError, match="mismatch: the Hessian is wrong"):
        oct.assert_hessian_close(loss, k, y0, argnums=(0, 1), rtol=1e-9)
