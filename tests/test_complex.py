"""Complex-valued states: every solver, controller, output and adjoint on `y0` with
complex leaves (alone, or beside real ones), against closed forms (the Schrödinger
equation `dy/dt = -i H y` through `expm`; the nonlinear phase rotation
`dy/dt = i a |y|^2 y`, whose modulus stays fixed), SciPy's `solve_ivp` (DOP853, which
takes complex states) and finite differences on the real and imaginary parts.

Conventions checked here: the error norm is the RMS of the modulus `|z|` (diffrax's
`rms_norm`, so adaptive steps match diffrax's step for step); the stiff solvers'
Jacobians are those of the real view `[Re, Im]` (right for non-holomorphic fields too);
`jax.grad` of a real loss at complex `y0`/`args` is JAX's `dL/dRe - i dL/dIm`, the same
under every adjoint.
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
from helpers import ADJOINTS, sampled_matrix

import odeckpt as oc
from odeckpt._controllers import rms_norm
from odeckpt._solvers import EXPLICIT, STIFF
from odeckpt.testing import assert_grads_close

H = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])  # Hermitian
Y0 = np.array([1.0 + 0.2j, 0.5j])
T1 = 1.0


def schrodinger(t, y, args):
    return jnp.asarray(-1j * H, y.dtype) @ y * jnp.asarray(args).astype(y.dtype)


def schrodinger_exact(y0, args, t):
    return scipy.linalg.expm(-1j * args * H * t) @ y0


def phase(t, y, args):
    """Not holomorphic (`|y|^2 = y conj(y)`): `y(t) = y0 exp(i a |y0|^2 t)`."""
    return 1j * jnp.asarray(args).astype(y.dtype) * (jnp.abs(y) ** 2).astype(y.dtype) * y


def phase_exact(y0, args, t):
    return y0 * np.exp(1j * args * np.abs(y0) ** 2 * t)


SOLVERS = {cls.__name__: cls for cls in (*EXPLICIT, *STIFF)}
COMPLEX = {"complex128": jnp.complex128, "complex64": jnp.complex64}
ARGS = 0.7
PID = oc.PIDController(rtol=1e-8, atol=1e-8)


FIELDS = {"schrodinger": (schrodinger, schrodinger_exact), "phase": (phase, phase_exact)}
# The default run: each solver family once in complex128, and complex64 once; the SDIRK
# methods in test_stiff_solvers_use_the_real_jacobian_of_a_nonholomorphic_field.
FAST_CASES = {
    ("Euler", "schrodinger", "complex128"),
    ("Tsit5", "phase", "complex128"),
    ("Tsit5", "schrodinger", "complex64"),
    ("Rodas5P", "schrodinger", "complex128"),
}


def _slow(*names):
    return [pytest.param(name, marks=pytest.mark.slow) for name in names]


def _real(dtype):
    return jnp.finfo(dtype).dtype


def _bound(solver, dtype, h=0.05):
    """The global error of constant steps `h`: `h^order`, or rounding (200 eps: the
    implicit solvers' Newton iterations stop at 100 eps per stage, and those errors add
    up over the steps; Kvaerno4 reaches 122 eps in complex64 on `phase`)."""
    return max(h ** solver.order(oc.ODETerm(schrodinger)), 200 * float(jnp.finfo(dtype).eps))


SOLVER_CASES = [
    pytest.param(
        name,
        field,
        dtype,
        marks=() if case in FAST_CASES else pytest.mark.slow,
        id=f"{name}-{field}-{dtype}",
    )
    for name in SOLVERS
    for field in ("schrodinger", "phase")
    for dtype in COMPLEX
    for case in [(name, field, dtype)]
]


@pytest.mark.parametrize("name, field, dtype", SOLVER_CASES)
def test_every_solver_against_closed_form(name, field, dtype):
    field, exact = FIELDS[field]
    dtype = COMPLEX[dtype]
    solver = SOLVERS[name]()
    y0, args = jnp.asarray(Y0, dtype), jnp.asarray(ARGS, _real(dtype))
    sol = oc.diffeqsolve(field, solver, 0.0, T1, 0.05, y0, args)
    assert sol.ys.dtype == dtype
    error = np.max(np.abs(np.asarray(sol.ys[-1]) - exact(Y0, ARGS, T1)))
    assert error <= _bound(solver, dtype), error


# With the complex Jacobian `df/dy` (right only for holomorphic fields) Ros3P's error on
# the phase problem is 2e-2 at these steps, and with PIDController it exhausts
# max_steps; the real-view Jacobian gives the method's order.
@pytest.mark.parametrize("name", ["Ros3P", "Kvaerno5", *_slow("Rodas5P", "Kvaerno3")])
def test_stiff_solvers_use_the_real_jacobian_of_a_nonholomorphic_field(name):
    sol = oc.diffeqsolve(phase, SOLVERS[name](), 0.0, T1, 0.01, jnp.asarray(Y0), 2.0)
    error = np.max(np.abs(np.asarray(sol.ys[-1]) - phase_exact(Y0, 2.0, T1)))
    assert error <= 10 * 0.01 ** SOLVERS[name]().order(oc.ODETerm(schrodinger)), error


def _mixed_field(t, y, args):
    z, r = y["z"], y["r"]
    dz = -1j * r[0].astype(z.dtype) * z + 0.3 * jnp.conj(z[::-1]) * jnp.sin(t).astype(z.dtype)
    dr = -args * jnp.sum(jnp.abs(z) ** 2, keepdims=True) * r
    return {"z": dz, "r": dr}


def _mixed_numpy(t, v):
    """`_mixed_field` in NumPy on `[z0, z1, r]` (complex), for `solve_ivp`."""
    z, r = v[:2], v[2].real
    dz = -1j * r * z + 0.3 * np.conj(z[::-1]) * np.sin(t)
    return np.concatenate([dz, [-ARGS * np.sum(np.abs(z) ** 2) * r]])


def _mixed_reference(ts):
    v0 = np.concatenate([Y0, [1.5 + 0j]])
    out = scipy.integrate.solve_ivp(
        _mixed_numpy, (0.0, T1), v0, method="DOP853", t_eval=ts, rtol=1e-12, atol=1e-12
    )
    return out.y.T


@pytest.mark.parametrize("name", ["Tsit5", "Kvaerno5", *_slow("Dopri8", "Rodas5P")])
def test_mixed_real_and_complex_leaves_against_scipy(name):
    ts = np.linspace(0.0, T1, 5)
    y0 = {"z": jnp.asarray(Y0), "r": jnp.asarray([1.5])}
    sol = oc.diffeqsolve(
        _mixed_field,
        SOLVERS[name](),
        0.0,
        T1,
        None,
        y0,
        ARGS,
        saveat=oc.SaveAt(ts=ts),
        stepsize_controller=PID,
    )
    assert sol.ys["z"].dtype == jnp.complex128 and sol.ys["r"].dtype == jnp.float64
    expected = _mixed_reference(ts)
    np.testing.assert_allclose(sol.ys["z"], expected[:, :2], rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.ys["r"], expected[:, 2:].real, rtol=0, atol=1e-6)


def test_complex64_beside_float32():
    y0 = {"z": jnp.asarray(Y0, jnp.complex64), "r": jnp.asarray([1.5], jnp.float32)}
    sol = oc.diffeqsolve(_mixed_field, oc.Tsit5(), 0.0, T1, 0.05, y0, np.float32(ARGS))
    assert (sol.ys["z"].dtype, sol.ys["r"].dtype) == (jnp.complex64, jnp.float32)
    expected = _mixed_reference(np.array([T1]))
    np.testing.assert_allclose(sol.ys["z"], expected[:, :2], rtol=0, atol=1e-5)


def test_rms_norm_is_that_of_the_modulus():
    z = jnp.asarray([3 + 4j, 0.0, 1j])
    assert rms_norm(z) == pytest.approx(np.sqrt((25 + 1) / 3), rel=1e-15)
    assert rms_norm((z, jnp.asarray([-2.0]))) == pytest.approx(np.sqrt(30 / 4), rel=1e-15)
    assert rms_norm(z).dtype == jnp.float64


CONTROLLERS = {
    "pid": (PID, 0.05),
    "pi": (oc.PIDController(rtol=1e-7, atol=1e-7, pcoeff=0.3, icoeff=0.3), 0.05),
}


# diffrax warns that its complex support is a work in progress.
@pytest.mark.filterwarnings("ignore:Complex dtype")
# `pid`: slow; `pi` (the same controller, other coefficients) covers the path
@pytest.mark.parametrize(
    "controller, dt0",
    [
        pytest.param(*v, marks=pytest.mark.slow) if k == "pid" else pytest.param(*v)
        for k, v in CONTROLLERS.items()
    ],
    ids=CONTROLLERS.keys(),
)
def test_adaptive_steps_match_diffrax(controller, dt0):
    # The error norm is the RMS of |z|: the same accepted and rejected steps as diffrax.
    kwargs = dict(
        rtol=controller.rtol,
        atol=controller.atol,
        pcoeff=controller.pcoeff,
        icoeff=controller.icoeff,
    )
    y0 = jnp.asarray(Y0)
    sol = oc.diffeqsolve(phase, oc.Tsit5(), 0.0, 3.0, dt0, y0, 2.0, stepsize_controller=controller)
    ref = dfx.diffeqsolve(
        dfx.ODETerm(phase),
        dfx.Tsit5(),
        0.0,
        3.0,
        dt0,
        y0,
        2.0,
        stepsize_controller=dfx.PIDController(**kwargs),
    )
    counts = lambda s: (int(s.stats["num_accepted_steps"]), int(s.stats["num_rejected_steps"]))
    assert counts(sol) == counts(ref)
    np.testing.assert_allclose(sol.ys, ref.ys, rtol=1e-10, atol=1e-12)


def test_step_to():
    steps = np.linspace(0.0, T1, 41)
    sol = oc.diffeqsolve(
        schrodinger,
        oc.Tsit5(),
        0.0,
        T1,
        None,
        jnp.asarray(Y0),
        ARGS,
        stepsize_controller=oc.StepTo(steps),
    )
    assert int(sol.stats["num_steps"]) == 40
    np.testing.assert_allclose(sol.ys[-1], schrodinger_exact(Y0, ARGS, T1), atol=1e-9)


TS = np.linspace(0.0, T1, 4)
SAVEATS = {
    "t0-t1": oc.SaveAt(t0=True, t1=True),
    "ts": oc.SaveAt(ts=TS),
    "steps": oc.SaveAt(steps=True),
    "dense": oc.SaveAt(dense=True),
}


# forwards in time: slow; the backwards cases cover the paths
@pytest.mark.parametrize(
    "direction", [pytest.param(1, marks=pytest.mark.slow), -1], ids=["forward", "backward"]
)
@pytest.mark.parametrize("saveat", SAVEATS.values(), ids=SAVEATS.keys())
def test_every_output_against_closed_form(saveat, direction):
    t0, t1 = (0.0, T1) if direction > 0 else (T1, 0.0)
    if saveat.subs is not None and saveat.subs.ts is not None and direction < 0:
        saveat = oc.SaveAt(ts=TS[::-1])
    y0 = schrodinger_exact(Y0, ARGS, t0)
    sol = oc.diffeqsolve(
        schrodinger,
        oc.Tsit5(),
        t0,
        t1,
        None,
        jnp.asarray(y0),
        ARGS,
        saveat=saveat,
        stepsize_controller=PID,
        max_steps=64,
    )
    if saveat.dense:
        times = np.linspace(t0, t1, 7)
        ys = np.stack([np.asarray(sol.evaluate(t)) for t in times])
    else:
        n = int(sol.stats["num_accepted_steps"]) if saveat.subs.steps else len(sol.ts)
        times, ys = np.asarray(sol.ts[:n]), np.asarray(sol.ys[:n])
    expected = np.stack([schrodinger_exact(Y0, ARGS, t) for t in times])
    assert ys.dtype == np.complex128
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-6)


def _loss(adjoint, saveat, t0=0.0, t1=T1):
    """A real loss of a non-holomorphic solve, of complex `y0` and complex `args`."""

    def field(t, y, args):
        return -1j * args * (jnp.asarray(H) @ y) + 0.3 * jnp.conj(y) * jnp.sin(t).astype(y.dtype)

    # `SaveAt(steps=True)` saves at the step times, which finite differences would see
    # move with an adaptive controller (whose decisions are not differentiated).
    controller, dt0 = (
        (oc.ConstantStepSize(), 0.1 * np.sign(t1 - t0)) if saveat.subs.steps else (PID, None)
    )

    @jax.jit
    def loss(y0, args):
        sol = oc.diffeqsolve(
            field,
            oc.Tsit5(),
            t0,
            t1,
            dt0,
            y0,
            args,
            saveat=saveat,
            stepsize_controller=controller,
            adjoint=adjoint,
            max_steps=64,
        )
        ys = jnp.where(jnp.isfinite(sol.ys), sol.ys, 0)  # `steps`: rows past the last
        return jnp.sum(jnp.abs(ys) ** 2 * jnp.arange(1.0, 3.0)[None]) + jnp.sum(ys.real * ys.imag)

    return loss


# `checkpoint`: slow; `checkpoint_3` (a second checkpoint count) covers the path
FAST_GRADS = {
    ("checkpoint_3", "steps", "backward"),
    ("backsolve", "t0-t1", "backward"),
    ("interpolating", "ts", "forward"),
    ("forward_mode", "t0-t1", "forward"),
}
GRAD_CASES = sampled_matrix(
    FAST_GRADS, adjoint=ADJOINTS, saveat=("t0-t1", "ts", "steps"), direction=("forward", "backward")
)


@pytest.mark.parametrize("adjoint, saveat, direction", GRAD_CASES)
def test_gradients_against_finite_differences(adjoint, saveat, direction):
    # `jax.grad` at complex inputs is `dL/dRe - i dL/dIm`; `assert_grads_close` checks
    # complex leaves as [Re, Im] against finite differences of each part.
    t0, t1 = (0.0, T1) if direction == "forward" else (T1, 0.0)
    out = SAVEATS[saveat]
    if out.subs.ts is not None and direction == "backward":
        out = oc.SaveAt(ts=TS[::-1])
    loss = _loss(ADJOINTS[adjoint], out, t0, t1)
    ad = "forward" if adjoint == "forward_mode" else "reverse"
    # The gradient is that of the accepted step grid (the controller's decisions are
    # not differentiated), which finite differences see move: ~1e-7 here.
    assert_grads_close(
        loss, jnp.asarray(Y0), jnp.asarray(ARGS + 0.1j), argnums=(0, 1), ad=ad, rtol=1e-5, atol=1e-6
    )


def test_jax_convention_for_complex_gradients():
    # jax.grad of |z|^2 through the solve (y(1) = y0 for f = 0) is 2 conj(z).
    y0 = jnp.asarray(Y0)
    grad = jax.grad(
        lambda y: jnp.sum(
            jnp.abs(
                oc.diffeqsolve(
                    lambda t, y, a: jnp.zeros_like(y),
                    oc.Tsit5(),
                    0.0,
                    1.0,
                    0.5,
                    y,
                    saveat=oc.SaveAt(t1=True),
                ).ys
            )
            ** 2
        )
    )(y0)
    np.testing.assert_allclose(grad, 2 * np.conj(Y0), rtol=1e-14)


def test_vmap_over_complex_states():
    y0s = jnp.stack([jnp.asarray(Y0), jnp.asarray(Y0[::-1] * 1j)])
    solve = lambda y0: oc.diffeqsolve(
        schrodinger,
        oc.Tsit5(),
        0.0,
        T1,
        None,
        y0,
        ARGS,
        stepsize_controller=PID,
    ).ys[-1]
    expected = np.stack([schrodinger_exact(np.asarray(y), ARGS, T1) for y in y0s])
    np.testing.assert_allclose(jax.vmap(solve)(y0s), expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "solver",
    [
        oc.Tsit5(),
        pytest.param(oc.Kvaerno5(), marks=pytest.mark.slow),
        pytest.param(oc.Rodas5P(), marks=pytest.mark.slow),
        pytest.param(oc.Kvaerno4(), marks=pytest.mark.slow),
    ],
    ids=["Tsit5", "Kvaerno5", "Rodas5P", "Kvaerno4"],
)
def test_strict_promotion(solver):
    # complex64 states with float32 args against float64 times, under strict promotion.
    y0, args = jnp.asarray(Y0, jnp.complex64), jnp.float32(ARGS)

    def loss(y0, args):
        sol = oc.diffeqsolve(
            schrodinger, solver, 0.0, T1, 0.1, y0, args, adjoint=oc.CheckpointAdjoint(checkpoints=3)
        )
        return jnp.sum(jnp.abs(sol.ys) ** 2)

    with jax.numpy_dtype_promotion("strict"):
        strict = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)
    standard = jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)
    assert strict[0].dtype == jnp.complex64 and strict[1].dtype == jnp.float32
    np.testing.assert_array_equal(strict[0], standard[0])
    np.testing.assert_array_equal(strict[1], standard[1])


def test_first_step_uses_the_modulus():
    # Hairer–Nørsett–Wanner II.4 in NumPy, with norms of |z| (diffrax 0.7 starts at 0.01
    # for `dt0=None`, so it is no reference here).
    rtol = atol = 1e-6
    y0, args = Y0, 2.0
    f = lambda t, y: np.asarray(phase(t, jnp.asarray(y), args))
    norm = lambda x: np.sqrt(np.mean(np.abs(x / (atol + rtol * np.abs(y0))) ** 2))
    f0 = f(0.0, y0)
    d0, d1 = norm(y0), norm(f0)
    h0 = 1e-6 if min(d0, d1) < 1e-5 else 0.01 * d0 / d1
    d2 = norm(f(h0, y0 + h0 * f0) - f0) / h0
    expected = min(
        100 * h0, (0.01 / max(d1, d2)) ** (1 / oc.Tsit5().error_order(oc.ODETerm(schrodinger)))
    )
    controller = oc.PIDController(rtol=rtol, atol=atol)
    sol = oc.diffeqsolve(
        phase,
        oc.Tsit5(),
        0.0,
        T1,
        None,
        jnp.asarray(y0),
        args,
        saveat=oc.SaveAt(steps=True),
        stepsize_controller=controller,
        max_steps=1,
        throw=False,
    )
    assert int(sol.stats["num_accepted_steps"]) == 1  # the first step, accepted
    np.testing.assert_allclose(sol.ts[0], expected, rtol=1e-12)
