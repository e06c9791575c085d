"""`ClipStepSizeController`: steps landing on `step_ts`, restarting past `jump_ts`.

The reference problem is dosing at fixed times: `dy/dt = -k y + dose(t)`, with `dose`
piecewise constant (`doses[i]` between the jump times). Its solution is in closed form
piece by piece, `y(t) = d/k + (y(s) - d/k) exp(-k (t - s))`, in either time direction;
its gradients are those of the closed form (JAX's derivatives of a few exponentials),
and the gradient with respect to a jump time is also checked against central finite
differences of the solve itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

JUMPS = (1.0, 2.5)
T_END = 4.0
Y0, K, DOSES = 1.0, 0.7, (1.0, 2.0, 0.5)
TOL = 1e-9


def _dose(t, doses, jumps):
    before = [t < jnp.asarray(j, t.dtype) for j in jumps]
    return jnp.where(before[0], doses[0], jnp.where(before[1], doses[1], doses[2]))


def _field(t, y, args):
    k, doses, jumps = args
    return -k * y + _dose(t, doses, jumps).astype(y.dtype)


def _closed(y0, k, doses, jumps, t0=0.0, t1=T_END):
    """y(t1) from y(t0) = y0, piece by piece between the jumps, either direction."""
    forward = t1 >= t0
    edges = [t0, *(j for j in (jumps if forward else jumps[::-1])), t1]
    pieces = list(range(len(doses))) if forward else list(range(len(doses)))[::-1]
    y = y0
    for i, d in zip(range(len(edges) - 1), [doses[p] for p in pieces], strict=True):
        h = edges[i + 1] - edges[i]
        y = d / k + (y - d / k) * jnp.exp(-k * h)
    return y


def _solve(
    y0,
    k,
    doses,
    jumps=JUMPS,
    *,
    inner=None,
    adjoint=None,
    backwards=False,
    dt0=None,
    solver=None,
    saveat=None,
    max_steps=256,
):
    inner = oc.PIDController(rtol=1e-10, atol=1e-10) if inner is None else inner
    controller = oc.ClipStepSizeController(inner, jump_ts=jnp.stack(jumps))
    t0, t1 = (T_END, 0.0) if backwards else (0.0, T_END)
    dt0 = None if dt0 is None else (-dt0 if backwards else dt0)
    return oc.diffeqsolve(
        _field,
        oc.Tsit5() if solver is None else solver,
        t0,
        t1,
        dt0,
        y0,
        (k, doses, jumps),
        stepsize_controller=controller,
        adjoint=oc.CheckpointAdjoint() if adjoint is None else adjoint,
        saveat=oc.SaveAt(t1=True) if saveat is None else saveat,
        max_steps=max_steps,
    )


def _params(dtype=jnp.float64):
    return (jnp.asarray(Y0, dtype), jnp.asarray(K, dtype), jnp.asarray(DOSES, dtype))


def _reference(backwards):
    t0, t1 = (T_END, 0.0) if backwards else (0.0, T_END)
    loss = lambda p: _closed(*p, JUMPS, t0, t1)
    return jax.value_and_grad(loss)(_params())


ADJOINTS = {
    "checkpoint": oc.CheckpointAdjoint(),
    "checkpoint-3": oc.CheckpointAdjoint(checkpoints=3),
    "backsolve": oc.BacksolveAdjoint(),
    "interpolating": oc.InterpolatingAdjoint(),
    "interpolating-3": oc.InterpolatingAdjoint(checkpoints=3),
}
INNER = {
    "pid": (oc.PIDController(rtol=1e-10, atol=1e-10), None),
    # 0.03 divides neither jump: the clipped steps are extra steps off the grid
    "constant": (oc.ConstantStepSize(), 0.03),
}


def _check_value_and_grad(adjoint, inner, backwards, tol):
    controller, dt0 = INNER[inner]

    def loss(p):
        sol = _solve(*p, inner=controller, adjoint=ADJOINTS[adjoint], backwards=backwards, dt0=dt0)
        return sol.ys[0]

    value, grads = jax.value_and_grad(loss)(_params())
    ref_value, ref_grads = _reference(backwards)
    np.testing.assert_allclose(value, ref_value, rtol=tol)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)


# Constant steps of 0.03 with Tsit5: 5th order, error ~1e-9 of y.
_TOL = {"pid": 1e-7, "constant": 1e-7}


# The second checkpoint counts: slow (`checkpoint` and `interpolating` cover the paths);
# `backsolve`: slow, test_dosing_gradients_constant_and_backwards covers it (backwards).
@pytest.mark.parametrize(
    "adjoint",
    [
        a if a in ("checkpoint", "interpolating") else pytest.param(a, marks=pytest.mark.slow)
        for a in ADJOINTS
    ],
)
def test_dosing_gradients_every_adjoint(adjoint):
    """Forward, adaptive: value and gradients (y0, k, doses) against the closed form."""
    _check_value_and_grad(adjoint, "pid", False, _TOL["pid"])


@pytest.mark.parametrize(
    ("adjoint", "inner", "backwards"),
    [("checkpoint-3", "constant", True), ("backsolve", "pid", True)],
)
def test_dosing_gradients_constant_and_backwards(adjoint, inner, backwards):
    """Constant steps wrapped in the clip, and solves backwards in time (jump times
    given in the user's time)."""
    _check_value_and_grad(adjoint, inner, backwards, _TOL[inner])


@pytest.mark.slow
@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize("adjoint", ADJOINTS)
def test_dosing_gradients_matrix(adjoint, inner, backwards):
    _check_value_and_grad(adjoint, inner, backwards, _TOL[inner])


def test_without_jump_ts_the_answer_is_worse():
    """The reference check has teeth: constant steps over the jumps, unclipped, miss
    the closed form by far more than the tolerance above."""
    p = _params()
    sol = oc.diffeqsolve(_field, oc.Tsit5(), 0.0, T_END, 0.03, p[0], (*p[1:], JUMPS))
    assert abs(float(sol.ys[0]) - float(_closed(*p, JUMPS))) > 1e-5


# forwards in time: slow; the backwards case and test_gradient_with_respect_to_the_jump_time
# cover the path
@pytest.mark.parametrize("backwards", [pytest.param(False, marks=pytest.mark.slow), True])
def test_forward_mode_jvp(backwards):
    p, tangent = _params(), (jnp.asarray(0.3), jnp.asarray(-0.5), jnp.asarray([0.2, 1.0, -1.0]))
    t0, t1 = (T_END, 0.0) if backwards else (0.0, T_END)

    def solve(p):
        return _solve(*p, adjoint=oc.ForwardMode(), backwards=backwards).ys[0]

    _, out = jax.jvp(solve, (p,), (tangent,))
    _, ref = jax.jvp(lambda p: _closed(*p, JUMPS, t0, t1), (p,), (tangent,))
    np.testing.assert_allclose(out, ref, rtol=1e-7)


@pytest.mark.parametrize(
    "adjoint", ["checkpoint", pytest.param("checkpoint-3", marks=pytest.mark.slow), "forward"]
)
def test_gradient_with_respect_to_the_jump_time(adjoint):
    """The dose time is traced: the forcing and `jump_ts` read the same variable. The
    solve's steps end just before it and start just after it as it moves, which gives
    the jump's sensitivity; checked against the closed form and finite differences."""
    p = _params()

    def solve(tau):
        jumps = (tau, jnp.asarray(JUMPS[1]))
        chosen = oc.ForwardMode() if adjoint == "forward" else ADJOINTS[adjoint]
        return _solve(*p, jumps, adjoint=chosen).ys[0]

    tau = jnp.asarray(JUMPS[0])
    if adjoint == "forward":
        grad = jax.jvp(solve, (tau,), (jnp.asarray(1.0),))[1]
    else:
        grad = jax.grad(solve)(tau)
    ref = jax.grad(lambda tau: _closed(*p, (tau, JUMPS[1])))(tau)
    eps, solve = 1e-5, jax.jit(solve)
    fd = (solve(tau + eps) - solve(tau - eps)) / (2 * eps)
    np.testing.assert_allclose(grad, ref, rtol=1e-7)
    np.testing.assert_allclose(fd, ref, rtol=1e-5)


@pytest.mark.parametrize(
    ("adjoint", "backwards"),
    [
        ("checkpoint", False),
        pytest.param("checkpoint-3", True, marks=pytest.mark.slow),
        pytest.param("direct", False, marks=pytest.mark.slow),
        ("forward", True),
    ],
)
def test_gradient_with_respect_to_a_discontinuity_in_step_ts(adjoint, backwards):
    """The dose time given as `step_ts` (not `jump_ts`): steps land on it, and the
    landing step's last stage sees the dose after it. Its error is kept small by
    small steps, and so is its derivative, since the steps before the time move in
    proportion with it: the derivative equals the closed form's and central finite
    differences of the solve (with the landing step alone stretching, it was off by
    `b_7 (f(j+) - f(j-))`, O(1))."""
    p = _params()
    t0, t1 = (T_END, 0.0) if backwards else (0.0, T_END)

    def solve(tau):
        inner = oc.PIDController(rtol=1e-10, atol=1e-10)
        controller = oc.ClipStepSizeController(inner, step_ts=jnp.stack([tau, jnp.asarray(2.5)]))
        chosen = {"forward": oc.ForwardMode(), "direct": oc.DirectAdjoint()}.get(adjoint)
        return oc.diffeqsolve(
            _field,
            oc.Tsit5(),
            t0,
            t1,
            None,
            p[0],
            (p[1], p[2], (tau, 2.5)),
            stepsize_controller=controller,
            max_steps=512,
            adjoint=ADJOINTS[adjoint] if chosen is None else chosen,
        ).ys[0]

    tau = jnp.asarray(JUMPS[0])
    if adjoint == "forward":
        grad = jax.jvp(solve, (tau,), (jnp.asarray(1.0),))[1]
    else:
        grad = jax.grad(solve)(tau)
    ref = jax.grad(lambda tau: _closed(*p, (tau, JUMPS[1]), t0, t1))(tau)
    eps, solve = 1e-5, jax.jit(solve)
    fd = (solve(tau + eps) - solve(tau - eps)) / (2 * eps)
    np.testing.assert_allclose(grad, ref, rtol=1e-6)
    np.testing.assert_allclose(fd, ref, rtol=1e-4)


@pytest.mark.parametrize("adjoint", ["backsolve", "interpolating"])
def test_continuous_adjoints_refuse_jump_time_gradients(adjoint):
    p = _params()

    def solve(tau):
        return _solve(*p, (tau, jnp.asarray(JUMPS[1])), adjoint=ADJOINTS[adjoint]).ys[0]

    with pytest.raises(ValueError, match="cannot differentiate with respect to `t0`"):
        jax.grad(solve)(jnp.asarray(JUMPS[0]))


@pytest.mark.parametrize(
    "adjoint", [pytest.param("checkpoint", marks=pytest.mark.slow), "interpolating"]
)
def test_vmap_over_doses_and_jump_times(adjoint):
    """Batched doses and batched jump times: each element as solved alone."""
    y0, k, _ = _params()
    doses = jnp.asarray([[1.0, 2.0, 0.5], [0.0, 3.0, 1.0]])
    taus = jnp.asarray([1.0, 1.5])

    def loss(doses, tau):
        jumps = (tau, jnp.asarray(JUMPS[1]))
        return _solve(y0, k, doses, jumps, adjoint=ADJOINTS[adjoint]).ys[0]

    values, grads = jax.vmap(jax.value_and_grad(loss))(doses, taus)
    closed = lambda d, tau: _closed(y0, k, d, (tau, JUMPS[1]))
    ref_values, ref_grads = jax.vmap(jax.value_and_grad(closed))(doses, taus)
    np.testing.assert_allclose(values, ref_values, rtol=1e-7)
    np.testing.assert_allclose(grads, ref_grads, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(
    ("promotion", "inner"),
    [
        pytest.param("standard", "pid", marks=pytest.mark.slow),
        ("strict", "pid"),
        # float32 twice: slow; `pid` covers the path (and
        # test_dosing_gradients_constant_and_backwards the clipped constant steps)
        pytest.param("strict", "constant", marks=pytest.mark.slow),
    ],
)
def test_float32(promotion, inner):
    p = _params(jnp.float32)
    jumps = (jnp.asarray(JUMPS[0], jnp.float32), jnp.asarray(JUMPS[1], jnp.float32))
    controller, dt0 = INNER[inner]
    if inner == "pid":
        controller = oc.PIDController(rtol=1e-5, atol=1e-5)
    with jax.numpy_dtype_promotion(promotion):
        loss = lambda p: _solve(*p, jumps, inner=controller, dt0=dt0).ys[0]
        value, grads = jax.value_and_grad(loss)(p)
    assert value.dtype == jnp.float32
    ref_value, ref_grads = _reference(False)
    np.testing.assert_allclose(value, ref_value, rtol=1e-4)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4)


def test_jumps_cost_fewer_steps_and_steps_stop_just_before():
    p = _params()
    saveat = oc.SaveAt(steps=True)
    clipped = _solve(*p, inner=oc.PIDController(rtol=1e-6, atol=1e-6), saveat=saveat)
    plain = oc.diffeqsolve(
        _field,
        oc.Tsit5(),
        0.0,
        T_END,
        None,
        p[0],
        (*p[1:], JUMPS),
        stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-6),
    )
    assert 2 * int(clipped.stats["num_steps"]) < int(plain.stats["num_steps"])
    for j in JUMPS:
        assert np.nextafter(j, -np.inf) in np.asarray(clipped.ts)


# forwards in time: slow; the backwards cases cover the path
@pytest.mark.parametrize("backwards", [pytest.param(False, marks=pytest.mark.slow), True])
@pytest.mark.parametrize("inner", INNER)
def test_step_ts_are_landed_on(inner, backwards):
    controller, dt0 = INNER[inner]
    t0, t1 = (5.0, 0.0) if backwards else (0.0, 5.0)
    dt0 = None if dt0 is None else (-0.3 if backwards else 0.3)
    clip = oc.ClipStepSizeController(controller, step_ts=[3.0, 4.05, 9.0])
    sol = oc.diffeqsolve(
        lambda t, y, args: -0.2 * y,
        oc.Tsit5(),
        t0,
        t1,
        dt0,
        1.0,
        stepsize_controller=clip,
        saveat=oc.SaveAt(steps=True),
    )
    ts = np.asarray(sol.ts)
    assert 3.0 in ts and 4.05 in ts
    done = np.isfinite(ts)
    np.testing.assert_allclose(sol.ys[done], np.exp(-0.2 * (ts[done] - t0)), rtol=1e-4)


def test_constant_steps_keep_their_grid():
    """Around a clipped step, constant steps keep their grid of equal steps."""
    clip = oc.ClipStepSizeController(oc.ConstantStepSize(), step_ts=[0.25, 0.27])
    sol = oc.diffeqsolve(
        lambda t, y, args: -y,
        oc.Euler(),
        0.0,
        1.0,
        0.1,
        1.0,
        stepsize_controller=clip,
        saveat=oc.SaveAt(steps=True),
    )
    ts = np.asarray(sol.ts)
    expected = np.sort(np.concatenate([np.arange(1, 11) / 10, [0.25, 0.27]]))
    np.testing.assert_allclose(ts[np.isfinite(ts)], expected, rtol=1e-15)


def test_unsorted_and_outside_times_and_nesting_agree():
    """Times in any order, times outside the interval (ignored), and one clip inside
    another: the same steps as the plain list."""
    p = _params()
    pid = oc.PIDController(rtol=1e-8, atol=1e-8)
    args = (*p[1:], JUMPS)
    controllers = [
        oc.ClipStepSizeController(pid, jump_ts=[1.0, 2.5]),
        oc.ClipStepSizeController(pid, jump_ts=[7.0, 2.5, -3.0, 1.0]),
        oc.ClipStepSizeController(oc.ClipStepSizeController(pid, jump_ts=[2.5]), jump_ts=[1.0]),
    ]
    sols = [
        oc.diffeqsolve(
            _field,
            oc.Tsit5(),
            0.0,
            T_END,
            None,
            p[0],
            args,
            stepsize_controller=c,
            saveat=oc.SaveAt(steps=True),
        )
        for c in controllers
    ]
    for sol in sols[1:]:
        np.testing.assert_array_equal(sol.ts, sols[0].ts)
        np.testing.assert_array_equal(sol.ys, sols[0].ys)


def test_restart_just_after_a_jump():
    """The running controller: a step ending just before a jump restarts just after
    it, with `made_jump`; one ending elsewhere restarts where it ended."""
    clip = oc.ClipStepSizeController(oc.PIDController(rtol=1e-6, atol=1e-6), jump_ts=[1.0])
    running = clip.for_solve(jnp.asarray(0.0), jnp.asarray(2.0), None, 1.0)
    before = jnp.nextafter(jnp.asarray(1.0), -jnp.inf)
    start, made_jump = running.restart(before)
    assert start == jnp.nextafter(jnp.asarray(1.0), jnp.inf) and made_jump
    start, made_jump = running.restart(jnp.asarray(0.5))
    assert start == 0.5 and not made_jump


def test_pid_controller_with_times_is_a_clip():
    """diffrax 0.7's `PIDController(step_ts=..., jump_ts=...)`."""
    ts = jnp.asarray([3.0, 4.0])
    plain = oc.PIDController(rtol=1e-4, atol=1e-6)
    clip = oc.PIDController(rtol=1e-4, atol=1e-6, step_ts=ts, jump_ts=ts)
    assert isinstance(plain, oc.PIDController)
    assert not isinstance(plain, oc.ClipStepSizeController)
    assert isinstance(clip, oc.ClipStepSizeController)
    assert isinstance(clip, oc.AbstractAdaptiveStepSizeController)
    assert isinstance(plain, oc.AbstractAdaptiveStepSizeController)
    assert not isinstance(oc.ConstantStepSize(), oc.AbstractAdaptiveStepSizeController)
    assert clip.controller == plain and (clip.rtol, clip.atol) == (1e-4, 1e-6)
    np.testing.assert_array_equal(clip.step_ts, ts)
    np.testing.assert_array_equal(clip.jump_ts, ts)


def test_implicit_solver_with_a_jump():
    clip = oc.ClipStepSizeController(oc.PIDController(rtol=1e-6, atol=1e-6), jump_ts=JUMPS)
    p = _params()
    sol = oc.diffeqsolve(
        _field, oc.Kvaerno5(), 0.0, T_END, 0.01, p[0], (*p[1:], JUMPS), stepsize_controller=clip
    )
    np.testing.assert_allclose(sol.ys[0], _closed(*p, JUMPS), rtol=1e-5)


def test_jump_at_t1_in_float32():
    """A jump at a large float32 t1: the last step still lands on t1."""
    t1 = jnp.asarray(1e3, jnp.float32)
    clip = oc.ClipStepSizeController(oc.PIDController(rtol=1e-6, atol=1e-6), jump_ts=t1[None])
    sol = oc.diffeqsolve(
        lambda t, y, args: -y,
        oc.Heun(),
        jnp.asarray(0.0, jnp.float32),
        t1,
        jnp.asarray(0.01, jnp.float32),
        jnp.asarray(1.0, jnp.float32),
        stepsize_controller=clip,
        saveat=oc.SaveAt(ts=t1[None]),
    )
    assert sol.ts is not None and sol.ts[0] == t1


def test_t0_just_before_a_jump():
    """A solve starting on the float before a jump (e.g. continuing one that stopped
    there) steps past it and finishes."""
    jump = 0.98
    clip = oc.ClipStepSizeController(oc.PIDController(rtol=1e-6, atol=1e-6), jump_ts=[jump])
    t0 = np.nextafter(jump, -np.inf)
    sol = oc.diffeqsolve(
        lambda t, y, args: jnp.where(t < jump, 0.0, 1.0) * jnp.ones_like(y),
        oc.Heun(),
        t0,
        1.2,
        None,
        jnp.zeros(2),
        stepsize_controller=clip,
        max_steps=100,
    )
    np.testing.assert_allclose(sol.ys[0], 1.2 - jump, rtol=1e-6)
