"""Second derivatives through `diffeqsolve`, and the autodiff-mode table of
`docs/adjoints.md`: every cell of it is a test here.

Forward-over-reverse (`jax.hessian`, `jax.jacfwd(jax.grad(f))`, `jax.vmap` of
`jax.jvp(jax.grad(f))`) against closed forms: `y' = A y`, `y(t) = expm(A t) y0`, a
quadratic loss of the saved `y`, differentiated twice with respect to `y0` and the
entries of `A` (and `t0`, `t1`, `SaveAt(ts)` where the adjoint differentiates times)
by `jax.hessian` of the matrix exponential. The modes JAX cannot take through an
adjoint raise at trace time, naming what works (`docs/errors.md`).

The default run holds a few representative cells; `-m slow` runs the whole matrix:
modes x adjoints x solvers x `SaveAt`.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import odeckpt as oc

A = np.asarray([[-0.6, 0.9], [-0.7, -0.3]])
Y0 = np.asarray([1.0, 0.5])
T1 = 1.5
TS = np.linspace(0.1, T1, 12)
TOL = 1e-10  # the solve's rtol = atol
REL = 1e-6  # the relative error allowed in a Hessian (max |H - H_ref| / max |H_ref|)
X = np.concatenate([Y0, A.ravel()])  # what the Hessians are taken with respect to


def _adjoint(name: str, solver):
    """The adjoint of a test id; a continuous adjoint of an implicit solver solves the
    adjoint ODE with `Tsit5`."""
    explicit = None if isinstance(solver, oc.AbstractERK) else oc.Tsit5()
    return {
        "checkpoint": lambda: oc.CheckpointAdjoint(),
        "checkpoint4": lambda: oc.CheckpointAdjoint(checkpoints=4),
        "checkpoint32": lambda: oc.CheckpointAdjoint(checkpoints=32),
        "interpolating": lambda: oc.InterpolatingAdjoint(solver=explicit),
        "backsolve": lambda: oc.BacksolveAdjoint(solver=explicit),
        "forward": lambda: oc.ForwardMode(),
    }[name]()


SOLVERS = {"Tsit5": oc.Tsit5, "Dopri8": oc.Dopri8, "Rodas5P": oc.Rodas5P, "Kvaerno5": oc.Kvaerno5}
SAVEATS = {
    "t1": lambda: oc.SaveAt(t1=True),
    "ts": lambda: oc.SaveAt(ts=jnp.asarray(TS)),
    "steps": lambda: oc.SaveAt(steps=True),
}


def _solve(x, solver, adjoint, saveat, t0=0.0, t1=T1):
    y0, a = x[:2], x[2:].reshape(2, 2)
    return oc.diffeqsolve(
        lambda t, y, a: a @ y,
        solver,
        t0,
        t1,
        0.05,
        y0,
        args=a,
        saveat=saveat,
        stepsize_controller=oc.PIDController(rtol=TOL, atol=TOL),
        adjoint=adjoint,
        max_steps=1024,
    )


def _quadratic(ys, ts):
    """Half the sum of squares of the rows saved at finite times (`SaveAt(steps)`
    pads with inf)."""
    keep = jnp.isfinite(ts)
    ys = jnp.where(keep[:, None], ys, 0.0)
    return 0.5 * jnp.sum(ys**2)


def _loss(solver, adjoint, saveat):
    return lambda x: _quadratic(*_outputs(_solve(x, solver, adjoint, saveat)))


def _outputs(sol):
    return sol.ys, sol.ts


def _expm2(m):
    """`expm` of each of the 2x2 matrices `m` (shape (n, 2, 2)) whose eigenvalues are a
    complex pair `s +- i w` (Cayley-Hamilton): `e^s (cos(w) I + sin(w) / w (m - s I))`.
    As smooth as it looks, so `jax.hessian` of it is cheap (that of
    `jax.scipy.linalg.expm` takes a minute to compile); checked against `expm` below."""
    s = 0.5 * (m[:, 0, 0] + m[:, 1, 1])
    det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
    w = jnp.sqrt(det - s**2)
    eye = jnp.eye(2)[None]
    shifted = m - s[:, None, None] * eye
    out = jnp.cos(w)[:, None, None] * eye + (jnp.sin(w) / w)[:, None, None] * shifted
    return jnp.exp(s)[:, None, None] * out


def test_closed_form_is_the_matrix_exponential():
    ms = A[None] * TS[:, None, None]
    reference = np.stack([scipy.linalg.expm(m) for m in ms])
    np.testing.assert_allclose(_expm2(jnp.asarray(ms)), reference, rtol=1e-13)


def _closed_form(ts):
    """The loss as a function of `X`, saving at `ts` (fixed times)."""
    ts = jnp.asarray(ts)

    def loss(x):
        y0, a = x[:2], x[2:].reshape(2, 2)
        ys = jnp.einsum("nij,j->ni", _expm2(a[None] * ts[:, None, None]), y0)
        return 0.5 * jnp.sum(ys**2)

    return loss


def _saved_times(solver, saveat_name):
    """The times the loss reads: `t1`, `TS`, or the solve's own step times."""
    if saveat_name == "t1":
        return np.asarray([T1])
    if saveat_name == "ts":
        return TS
    sol = _solve(jnp.asarray(X), solver, oc.CheckpointAdjoint(), SAVEATS["steps"]())
    ts = np.asarray(sol.ts)
    return ts[np.isfinite(ts)]


def _assert_close(h, ref):
    h, ref = np.asarray(h), np.asarray(ref)
    assert np.all(np.isfinite(h))
    err = np.max(np.abs(h - ref)) / np.max(np.abs(ref))
    assert err <= REL, f"relative error {err:.2e}"


def _hvps(g, x):
    """The Hessian's columns as `jax.vmap` of `jax.jvp(g)` over the unit vectors."""
    return jax.vmap(lambda v: jax.jvp(g, (x,), (v,))[1])(jnp.eye(x.shape[0]))


MODES = {
    "hessian": lambda f, x: jax.hessian(f)(x),
    "jacfwd_grad": lambda f, x: jax.jacfwd(jax.grad(f))(x),
    "vmap_hvp": lambda f, x: _hvps(jax.grad(f), x),
}


def _check_hessian(mode, adjoint_name, solver_name, saveat_name):
    solver = SOLVERS[solver_name]()
    loss = _loss(solver, _adjoint(adjoint_name, solver), SAVEATS[saveat_name]())
    h = jax.jit(lambda x: MODES[mode](loss, x))(jnp.asarray(X))
    ref = jax.hessian(_closed_form(_saved_times(solver, saveat_name)))(jnp.asarray(X))
    _assert_close(h, ref)


REVERSE = ["checkpoint", "checkpoint4", "checkpoint32", "interpolating", "backsolve"]


# ----------------------------------------------------------------------------------
# Default run: a few representative cells


# recomputed steps: slow; test_forward_over_reverse_of_a_compiled_solve_or_gradient
# covers forward over reverse through `CheckpointAdjoint(checkpoints=4)`
@pytest.mark.parametrize(
    "mode, adjoint, solver, saveat",
    [
        pytest.param("hessian", "checkpoint4", "Tsit5", "t1", marks=pytest.mark.slow),
        ("jacfwd_grad", "checkpoint", "Tsit5", "t1"),
        ("vmap_hvp", "interpolating", "Tsit5", "t1"),
        ("hessian", "backsolve", "Tsit5", "t1"),
    ],
)
def test_second_derivatives(mode, adjoint, solver, saveat):
    _check_hessian(mode, adjoint, solver, saveat)


COMPILED_MODES = {
    "hessian_jit": lambda f, x: jax.hessian(jax.jit(f))(x),
    "jacfwd_jit_grad": lambda f, x: jax.jacfwd(jax.jit(jax.grad(f)))(x),
    "vmap_hvp_jit": lambda f, x: _hvps(jax.grad(jax.jit(f)), x),
}


@pytest.mark.parametrize(
    "adjoint",
    [a if a == "checkpoint4" else pytest.param(a, marks=pytest.mark.slow) for a in REVERSE],
)
# `hessian_jit`: slow; `vmap_hvp_jit` covers forward over reverse of a compiled solve
@pytest.mark.parametrize(
    "mode",
    [pytest.param(m, marks=pytest.mark.slow) if m == "hessian_jit" else m for m in COMPILED_MODES],
)
def test_forward_over_reverse_of_a_compiled_solve_or_gradient(mode, adjoint):
    """Forward over reverse around a solve or gradient compiled on its own, outside
    `jax.jit` (the refusal of reverse over reverse there must not catch it)."""
    loss = _loss(oc.Tsit5(), _adjoint(adjoint, oc.Tsit5()), SAVEATS["ts"]())
    h = COMPILED_MODES[mode](loss, jnp.asarray(X))
    _assert_close(h, jax.hessian(_closed_form(TS))(jnp.asarray(X)))


def _time_loss(adjoint):
    """The loss as a function of `(t0, t1, ts)`, saving at `ts` and `t1`."""

    def loss(times):
        t0, t1, ts = times[0], times[1], times[2:]
        sol = _solve(jnp.asarray(X), oc.Tsit5(), adjoint, oc.SaveAt(ts=ts, t1=True), t0, t1)
        return 0.5 * jnp.sum(sol.ys**2)

    return loss


def _time_closed_form(times):
    t0, t1, ts = times[0], times[1], times[2:]
    spans = jnp.concatenate([ts, t1[None]]) - t0
    ys = jnp.einsum(
        "nij,j->ni", _expm2(jnp.asarray(A)[None] * spans[:, None, None]), jnp.asarray(Y0)
    )
    return 0.5 * jnp.sum(ys**2)


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", ["checkpoint", "checkpoint4", "checkpoint32"])
def test_second_derivatives_with_respect_to_times(adjoint):
    times = jnp.asarray([0.05, T1, 0.3, 0.7, 1.1])
    h = jax.jit(jax.hessian(_time_loss(_adjoint(adjoint, oc.Tsit5()))))(times)
    _assert_close(h, jax.hessian(_time_closed_form)(times))


@pytest.mark.parametrize("adjoint", ["interpolating", "backsolve"])
def test_continuous_adjoints_refuse_second_derivatives_in_times(adjoint):
    loss = _time_loss(_adjoint(adjoint, oc.Tsit5()))
    with pytest.raises(ValueError, match="cannot differentiate with respect to `t0`, `t1`"):
        jax.hessian(loss)(jnp.asarray([0.05, T1, 0.3, 0.7, 1.1]))


def test_forward_mode_hessian_is_jacfwd_of_jacfwd():
    loss = _loss(oc.Tsit5(), oc.ForwardMode(), SAVEATS["ts"]())
    h = jax.jit(jax.jacfwd(jax.jacfwd(loss)))(jnp.asarray(X))
    _assert_close(h, jax.hessian(_closed_form(TS))(jnp.asarray(X)))


# The refusals: what each mode raises, naming what to use (`docs/errors.md`)

REFUSED = {
    "grad_grad": (lambda f, x: jax.grad(lambda x: jax.grad(f)(x).sum())(x), "forward-over-reverse"),
    "jacrev_grad": (lambda f, x: jax.jacrev(jax.grad(f))(x), "forward-over-reverse"),
    "jvp": (lambda f, x: jax.jvp(f, (x,), (x,)), r"Use `adjoint=ForwardMode\(\)`"),
    "jacfwd": (lambda f, x: jax.jacfwd(f)(x), r"Use `adjoint=ForwardMode\(\)`"),
    "jacfwd_jacfwd": (lambda f, x: jax.jacfwd(jax.jacfwd(f))(x), r"Use `adjoint=ForwardMode\(\)`"),
}
# Raised where the tangent is evaluated, compiled or batched (forward mode of a
# compiled solve, `jax.linearize`), or where a second pass linearises a compiled solve
# or gradient (`docs/errors.md`): each adjoint once (with `Tsit5`, `SaveAt(ts)`),
# `CheckpointAdjoint()` in the default run.
REFUSED_LATE = {
    "linearize": (lambda f, x: jax.linearize(f, x)[1](x), r"Use `adjoint=ForwardMode\(\)`"),
    "jvp_jit": (lambda f, x: jax.jvp(jax.jit(f), (x,), (x,)), r"Use `adjoint=ForwardMode\(\)`"),
    "jacfwd_jit": (lambda f, x: jax.jacfwd(jax.jit(f))(x), r"Use `adjoint=ForwardMode\(\)`"),
    "grad_grad_jit": (
        lambda f, x: jax.grad(lambda x: jax.grad(jax.jit(f))(x).sum())(x),
        "forward-over-reverse",
    ),
    "grad_jit_grad": (
        lambda f, x: jax.grad(lambda x: jax.jit(jax.grad(f))(x).sum())(x),
        "forward-over-reverse",
    ),
    "linearize_grad": (lambda f, x: jax.linearize(jax.grad(f), x)[1](x), "forward-over-reverse"),
    "linearize_grad_jit": (
        lambda f, x: jax.linearize(jax.grad(jax.jit(f)), x)[1](x),
        "forward-over-reverse",
    ),
}


def _check_refused(mode, adjoint_name, solver_name, saveat_name):
    solver = SOLVERS[solver_name]()
    loss = _loss(solver, _adjoint(adjoint_name, solver), SAVEATS[saveat_name]())
    call, message = {**REFUSED, **REFUSED_LATE}[mode]
    with pytest.raises(ValueError, match=message):
        call(loss, jnp.asarray(X))


@pytest.mark.parametrize("adjoint", REVERSE)
@pytest.mark.parametrize("mode", list(REFUSED))
def test_refused_modes_name_what_works(mode, adjoint):
    _check_refused(mode, adjoint, "Tsit5", "ts")


@pytest.mark.parametrize(
    "adjoint",
    [a if a == "checkpoint" else pytest.param(a, marks=pytest.mark.slow) for a in REVERSE],
)
@pytest.mark.parametrize("mode", list(REFUSED_LATE))
def test_refused_modes_of_a_compiled_solve_name_what_works(mode, adjoint):
    _check_refused(mode, adjoint, "Tsit5", "ts")


REVERSE_MODES = {
    "grad": lambda f, x: jax.grad(f)(x),
    "grad_jit": lambda f, x: jax.grad(jax.jit(f))(x),
    "vmap_grad": lambda f, x: jax.vmap(jax.grad(f))(jnp.stack([x, x])),
    "hessian": lambda f, x: jax.hessian(f)(x),
    "jvp_grad": lambda f, x: jax.jvp(jax.grad(f), (x,), (x,)),
    "grad_grad": lambda f, x: jax.grad(lambda x: jax.grad(f)(x).sum())(x),
    "grad_grad_jit": lambda f, x: jax.grad(lambda x: jax.grad(jax.jit(f))(x).sum())(x),
}


_REVERSE_OVER_REVERSE = ("grad_grad", "grad_grad_jit")


# `grad`: slow; `hessian` (forward over `jax.jacrev`) covers reverse mode seen as such
# through `ForwardMode()`
@pytest.mark.parametrize(
    "mode",
    [
        m
        if m in ("grad_jit", "hessian", "grad_grad_jit")
        else pytest.param(m, marks=pytest.mark.slow)
        for m in REVERSE_MODES
    ],
)
def test_forward_mode_in_reverse_mode(mode):
    """Reverse mode through `ForwardMode()` (forward sensitivities), and forward over
    it, give `CheckpointAdjoint()`'s derivatives; reverse over it is refused naming
    what works."""
    loss = _loss(oc.Tsit5(), oc.ForwardMode(), SAVEATS["ts"]())
    x = jnp.asarray(X)
    if mode in _REVERSE_OVER_REVERSE:
        with pytest.raises(ValueError, match=r"Put forward mode outside: `jax.hessian\(f\)`"):
            REVERSE_MODES[mode](loss, x)
        return
    reference = REVERSE_MODES[mode](_loss(oc.Tsit5(), oc.CheckpointAdjoint(), SAVEATS["ts"]()), x)
    for got, want in zip(
        jax.tree.leaves(REVERSE_MODES[mode](loss, x)), jax.tree.leaves(reference), strict=True
    ):
        _assert_close(got, want)


@pytest.mark.slow
def test_forward_mode_takes_linearize_and_jacfwd_of_jit():
    """`jax.linearize` and `jax.jacfwd` of a compiled solve go through `ForwardMode()`,
    as does `jax.linear_transpose` of the linearised solve (a VJP)."""
    loss = _loss(oc.Tsit5(), oc.ForwardMode(), SAVEATS["ts"]())
    x, v = jnp.asarray(X), jnp.arange(6.0)
    reference = jax.grad(_closed_form(TS))(x)
    _, tangent = jax.linearize(jax.jit(loss), x)
    np.testing.assert_allclose(tangent(v), reference @ v, rtol=REL)
    np.testing.assert_allclose(jax.jacfwd(jax.jit(loss))(x), reference, rtol=REL)
    (cotangent,) = jax.linear_transpose(tangent, x)(1.0)
    np.testing.assert_allclose(cotangent, reference, rtol=REL)


# ----------------------------------------------------------------------------------
# The whole matrix (`-m slow`)


def _interleaved(modes) -> list[tuple[str, str, str, str]]:
    """Every (mode, adjoint, solver, `SaveAt`), ordered so that each run of
    `len(REVERSE) * len(SOLVERS) * len(SAVEATS)` cells covers every adjoint x solver x
    `SaveAt` once, the mode rotating: a run cut short has still seen each of them."""
    cells = itertools.product(
        enumerate(modes), enumerate(REVERSE), enumerate(SOLVERS), enumerate(SAVEATS)
    )
    ordered = sorted(
        cells,
        key=lambda c: (
            (c[0][0] - c[1][0] - c[2][0] - c[3][0]) % len(modes),
            c[3][0],
            c[2][0],
            c[1][0],
        ),
    )
    return [tuple(name for _, name in cell) for cell in ordered]


@pytest.mark.slow
@pytest.mark.parametrize("mode, adjoint, solver, saveat", _interleaved(list(MODES)))
def test_second_derivatives_matrix(mode, adjoint, solver, saveat):
    _check_hessian(mode, adjoint, solver, saveat)


@pytest.mark.slow
@pytest.mark.parametrize("saveat", list(SAVEATS))
@pytest.mark.parametrize("solver", list(SOLVERS))
@pytest.mark.parametrize("mode", list(MODES))
def test_forward_mode_second_derivatives_matrix(mode, solver, saveat):
    """Forward over `ForwardMode()`'s reverse mode (forward sensitivities)."""
    _check_hessian(mode, "forward", solver, saveat)


@pytest.mark.slow
@pytest.mark.parametrize("saveat", list(SAVEATS))
@pytest.mark.parametrize("solver", list(SOLVERS))
@pytest.mark.parametrize("adjoint", REVERSE)
@pytest.mark.parametrize("mode", list(REFUSED))
def test_refused_modes_matrix(mode, adjoint, solver, saveat):
    _check_refused(mode, adjoint, solver, saveat)


def _decay_loss(adjoint, solver):
    def loss(k):
        sol = oc.diffeqsolve(
            lambda t, y, k: -k * y,
            solver,
            0.0,
            1.0,
            0.05,
            jnp.array([1.0, 2.0]),
            k,
            adjoint=adjoint,
            max_steps=64,
        )
        return jnp.sum(sol.ys**2)

    return loss


def test_direct_adjoint_takes_every_mode():
    """`DirectAdjoint` lets JAX differentiate its scan in both modes: forward mode and
    reverse over reverse, which the custom-VJP adjoints refuse, equal the closed form
    `d^m/dk^m 5 exp(-2k)` (Tsit5 at h = 0.05, so to its truncation error)."""
    loss = _decay_loss(oc.DirectAdjoint(), oc.Tsit5())
    k = 0.5
    exact = [5 * np.exp(-2 * k), -10 * np.exp(-2 * k), 20 * np.exp(-2 * k)]
    value, tangent = jax.jvp(loss, (k,), (1.0,))
    np.testing.assert_allclose([value, tangent], exact[:2], rtol=1e-7)
    np.testing.assert_allclose(jax.grad(jax.grad(loss))(k), exact[2], rtol=1e-7)
    np.testing.assert_allclose(jax.hessian(loss)(k), exact[2], rtol=1e-7)


def test_reversible_adjoint_hessian_is_checkpointed_one():
    """Forward-over-reverse through `ReversibleAdjoint`'s reconstruction: its Hessian
    equals `CheckpointAdjoint`'s through the same `Reversible` solver."""
    solver = oc.Reversible(oc.Tsit5())
    h = jax.hessian(_decay_loss(oc.ReversibleAdjoint(), solver))(0.5)
    ref = jax.hessian(_decay_loss(oc.CheckpointAdjoint(), solver))(0.5)
    np.testing.assert_allclose(h, ref, rtol=1e-10)
    with pytest.raises(ValueError, match="ForwardMode"):
        jax.jvp(_decay_loss(oc.ReversibleAdjoint(), solver), (0.5,), (1.0,))


# ----------------------------------------------------------------------------------
# `odeckpt.hvp`


def test_hvp_of_a_pytree_is_jax_hessian_times_v():
    def f(p, scale):
        return scale * jnp.sum(jnp.sin(p["a"]) * p["b"][0] ** 2) + jnp.sum(p["a"] ** 3)

    p = {"a": jnp.asarray([0.3, -1.2, 0.8]), "b": jnp.asarray([[0.5], [1.5]])}
    v = {"a": jnp.asarray([1.0, 0.5, -2.0]), "b": jnp.asarray([[0.3], [-0.4]])}
    got = jax.jit(lambda p, v: oc.hvp(f, p, v, 1.5))(p, v)
    hessian = jax.jit(jax.hessian(f))(p, 1.5)
    for row in p:
        exact = sum(jnp.tensordot(hessian[row][col], v[col], axes=v[col].ndim) for col in p)
        np.testing.assert_allclose(got[row], exact, rtol=1e-14)


@pytest.mark.slow
def test_hvp_is_the_hessian_times_v():
    """Through a checkpointed solve, with a PyTree `x` and undifferentiated `args`."""
    adjoint = oc.CheckpointAdjoint(checkpoints=4)

    def loss(p, scale):
        x = jnp.concatenate([p["y0"], p["a"].ravel()])
        return scale * _quadratic(*_outputs(_solve(x, oc.Tsit5(), adjoint, SAVEATS["ts"]())))

    p = {"y0": jnp.asarray(Y0), "a": jnp.asarray(A)}
    v = {"y0": jnp.asarray([0.3, -1.0]), "a": jnp.asarray([[0.5, 0.2], [-0.7, 1.1]])}
    got = oc.hvp(loss, p, v, 2.0)
    flat_v = np.concatenate([v["y0"], np.ravel(v["a"])])
    exact = 2.0 * np.asarray(jax.hessian(_closed_form(TS))(jnp.asarray(X))) @ flat_v
    flat_got = np.concatenate([got["y0"], np.ravel(got["a"])])
    np.testing.assert_allclose(flat_got, exact, rtol=0, atol=REL * np.max(np.abs(exact)))


def test_hvp_casts_v_to_the_dtypes_of_x():
    got = oc.hvp(lambda x: jnp.sum(x**3), jnp.asarray([1.0, 2.0]), jnp.ones(2, jnp.float32))
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, [6.0, 12.0], rtol=1e-15)
