"""`diffeqsolve` end to end: directions, outputs, PyTrees, dtypes, and JAX transformations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DECAY, FORCED, HARMONIC, LOTKA_VOLTERRA, exact, reference

import odeckpt as oc

TIGHT = oc.PIDController(rtol=1e-10, atol=1e-10)


def _solve(problem, t0, t1, dt0, y0=None, args=None, **kwargs):
    """A jitted Tsit5 solve (jit compiles faster than eager dispatch of every op)."""
    y0 = jnp.asarray(problem.y0) if y0 is None else y0
    args = problem.args if args is None else args

    @jax.jit
    def solve(y0, args):
        return oc.diffeqsolve(problem.vector_field, oc.Tsit5(), t0, t1, dt0, y0, args, **kwargs)

    return solve(y0, args)


# ----------------------------------------------------------------------------------
# Direction of integration


# constant steps: slow; test_backwards_solve_is_the_mirrored_forward_solve covers the path
@pytest.mark.parametrize(
    "controller, dt0",
    [
        pytest.param(oc.ConstantStepSize(), -0.01, marks=pytest.mark.slow),
        (TIGHT, -0.1),
        (TIGHT, None),
    ],
    ids=["constant", "pid", "pid-dt0=None"],
)
def test_backwards_in_time_matches_closed_form(controller, dt0):
    problem = HARMONIC  # its closed form holds for negative times too
    ts = jnp.linspace(-0.5, -5.0, 10)
    sol = _solve(
        problem,
        0.0,
        -5.0,
        dt0,
        saveat=oc.SaveAt(ts=ts, t1=True, dense=True),
        stepsize_controller=controller,
    )
    np.testing.assert_array_equal(sol.ts, np.append(ts, -5.0))
    expected = reference(problem, np.append(ts, -5.0))
    np.testing.assert_allclose(sol.ys, expected, rtol=0, atol=1e-7)
    tq = jnp.asarray([-0.123, -2.5, -4.99])
    np.testing.assert_allclose(sol.evaluate(tq), reference(problem, tq), rtol=0, atol=1e-7)


def _mirrored(vector_field):
    """`g(s, y) = -f(-s, y)`: the ODE of `y(-s)`, integrated forwards in `s`."""
    return lambda s, y, args: -vector_field(-s, y, args)


@pytest.mark.parametrize("controller", [oc.ConstantStepSize(), TIGHT], ids=["constant", "pid"])
def test_backwards_solve_is_the_mirrored_forward_solve(controller):
    # Time-dependent and nonlinear: a wrong sign on t or on f shows up.
    problem = FORCED
    ts = jnp.asarray([0.7, 2.0, 4.5])
    backward = oc.diffeqsolve(
        problem.vector_field,
        oc.Tsit5(),
        1.0,
        -5.0,
        -0.05,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=oc.SaveAt(ts=-ts, steps=True),
        stepsize_controller=controller,
    )
    forward = oc.diffeqsolve(
        _mirrored(problem.vector_field),
        oc.Tsit5(),
        -1.0,
        5.0,
        0.05,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=oc.SaveAt(ts=ts, steps=True),
        stepsize_controller=controller,
    )
    assert backward.stats["num_steps"] == forward.stats["num_steps"]
    # The same arithmetic up to XLA's fusion of the sign flips (ulps). Constant steps
    # keep that at round-off; adaptive step sizes amplify it through the cancellation
    # in the error estimate (1e-16 in the stages, ~1e-10 in the step sizes), so there
    # only the states at the fixed `ts` (the first three rows) are compared.
    constant = isinstance(controller, oc.ConstantStepSize)
    tol, rows = (1e-13, slice(None)) if constant else (1e-8, slice(0, 3))
    # Unfilled `steps` rows are +inf in both directions (as diffrax pads them).
    assert np.isposinf(backward.ts[-1]) and np.isposinf(forward.ts[-1])
    mirrored = jnp.where(jnp.isfinite(forward.ts), -forward.ts, forward.ts)
    np.testing.assert_allclose(backward.ts, mirrored, rtol=tol, atol=tol)
    np.testing.assert_allclose(backward.ys[rows], forward.ys[rows], rtol=tol, atol=tol)


def test_forward_then_backward_recovers_y0():
    problem = LOTKA_VOLTERRA
    there = _solve(problem, 0.0, 5.0, 0.1, stepsize_controller=TIGHT)
    back = _solve(problem, 5.0, 0.0, -0.1, y0=there.ys[-1], stepsize_controller=TIGHT)
    np.testing.assert_allclose(there.ys[-1], reference(problem, [5.0])[0], rtol=1e-8)
    np.testing.assert_allclose(back.ys[-1], problem.y0, rtol=1e-8)


# ----------------------------------------------------------------------------------
# Outputs


SAVEAT_CASES = [
    dict(t0=True),
    dict(t1=True),
    dict(ts=True),
    dict(steps=True),
    dict(t0=True, ts=True, t1=True),
    dict(t0=True, steps=True, t1=True),
    dict(ts=True, steps=True),
    dict(t0=True, ts=True, steps=True, t1=True),
]


# `ts` with `steps`: slow; `t0-ts-steps-t1` covers the interleaving
@pytest.mark.parametrize(
    "which",
    [
        pytest.param(c, marks=pytest.mark.slow) if c == dict(ts=True, steps=True) else c
        for c in SAVEAT_CASES
    ],
    ids=["-".join(c) for c in SAVEAT_CASES],
)
def test_saveat_layout(which):
    # Four constant steps of 0.25 on [0, 1]; max_steps=6 leaves two unused step rows.
    problem = DECAY
    ts = np.array([0.1, 0.5, 0.9])
    saveat = oc.SaveAt(
        t0=which.get("t0", False),
        t1=which.get("t1", False),
        steps=which.get("steps", False),
        ts=jnp.asarray(ts) if which.get("ts") else None,
    )
    sol = oc.diffeqsolve(
        problem.vector_field,
        oc.Dopri5(),
        0.0,
        1.0,
        0.25,
        jnp.asarray(problem.y0),
        problem.args,
        saveat=saveat,
        max_steps=6,
    )
    # As diffrax lays them out: t0, then the save-time and step rows in time order, then
    # t1 (which `steps=True` saves as its last step), then the unused step rows.
    parts = {"ts": list(ts), "steps": [0.25, 0.5, 0.75, 1.0]}
    rows = sorted(t for key in ("ts", "steps") if key in which for t in parts[key])
    first = [0.0] if "t0" in which else []
    last = [1.0] if "t1" in which and "steps" not in which else []
    unused = [np.inf, np.inf] if "steps" in which else []
    expected_ts = np.array(first + rows + last + unused)
    np.testing.assert_allclose(sol.ts, expected_ts, rtol=1e-15, atol=0)
    finite = np.isfinite(expected_ts)
    assert sol.ys.shape == (len(expected_ts), 2)
    assert np.all(np.isinf(np.asarray(sol.ys)[~finite]))
    expected_ys = reference(problem, expected_ts[finite])
    np.testing.assert_allclose(np.asarray(sol.ys)[finite], expected_ys, rtol=1e-5)


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize("direction", [pytest.param(1.0, marks=pytest.mark.slow), -1.0])
def test_empty_save_times_save_no_rows(direction):
    problem = DECAY
    t0, t1 = (0.0, 1.0) if direction > 0 else (1.0, 0.0)

    def solve(y0, saveat):
        return oc.diffeqsolve(
            problem.vector_field,
            oc.Tsit5(),
            t0,
            t1,
            0.1 * direction,
            y0,
            problem.args,
            saveat=saveat,
        )

    y0 = jnp.asarray(problem.y0)
    alone = solve(y0, oc.SaveAt(ts=jnp.zeros((0,))))
    assert alone.ts.shape == (0,) and alone.ys.shape == (0, 2)
    both = solve(y0, oc.SaveAt(t0=True, ts=[], t1=True))
    only = solve(y0, oc.SaveAt(t0=True, t1=True))
    np.testing.assert_array_equal(both.ts, [t0, t1])
    np.testing.assert_array_equal(both.ys, only.ys)
    grad = jax.grad(lambda y0: jnp.sum(solve(y0, oc.SaveAt(ts=[], t1=True)).ys))(y0)
    expected = jax.grad(lambda y0: jnp.sum(solve(y0, oc.SaveAt(t1=True)).ys))(y0)
    np.testing.assert_array_equal(grad, expected)


@pytest.mark.parametrize(
    "controller, dt0",
    [(oc.ConstantStepSize(), 0.1), (oc.ConstantStepSize(), -0.1), (TIGHT, None)],
    ids=["constant", "constant-negative-dt0", "pid-dt0=None"],
)
def test_empty_interval_returns_y0(controller, dt0):
    problem = DECAY
    sol = _solve(
        problem,
        1.5,
        1.5,
        dt0,
        stepsize_controller=controller,
        saveat=oc.SaveAt(t0=True, ts=jnp.asarray([1.5]), t1=True, dense=True),
    )
    assert sol.result == oc.RESULTS.successful
    assert int(sol.stats["num_steps"]) == 0
    np.testing.assert_array_equal(sol.ts, [1.5, 1.5, 1.5])
    np.testing.assert_array_equal(sol.ys, np.stack([problem.y0] * 3))
    np.testing.assert_array_equal(sol.evaluate(1.5), problem.y0)


def _pytree_field(t, y, rates):
    return {"a": -rates["a"] * y["a"], "b": (-rates["b"] * y["b"][0], -rates["c"] * y["b"][1])}


def test_pytree_state():
    y0 = {"a": jnp.array([1.0, -2.0]), "b": (jnp.arange(6.0).reshape(3, 2), jnp.asarray(3.0))}
    rates = {"a": 0.5, "b": jnp.array([[0.1, 0.2]]), "c": 2.0}
    ts = jnp.asarray([0.5, 1.0, 2.0])
    sol = oc.diffeqsolve(
        _pytree_field,
        oc.Tsit5(),
        0.0,
        2.0,
        None,
        y0,
        rates,
        saveat=oc.SaveAt(ts=ts, dense=True),
        stepsize_controller=TIGHT,
    )
    assert jax.tree.structure(sol.ys) == jax.tree.structure(y0)
    decay = lambda y, k: (
        y[None] * jnp.exp(-jnp.reshape(k, (1,) + k.shape) * jnp.reshape(ts, (-1,) + (1,) * y.ndim))
    )
    expected = {
        "a": decay(y0["a"], jnp.full(2, 0.5)),
        "b": (
            decay(y0["b"][0], jnp.broadcast_to(rates["b"], (3, 2))),
            decay(y0["b"][1], jnp.asarray(2.0)),
        ),
    }
    jax.tree.map(
        lambda x, e: np.testing.assert_allclose(x, e, rtol=1e-8, atol=1e-12), sol.ys, expected
    )
    at_one = jax.tree.map(lambda e: e[1], expected)
    jax.tree.map(
        lambda x, e: np.testing.assert_allclose(x, e, rtol=1e-8, atol=1e-12),
        sol.evaluate(1.0),
        at_one,
    )


# float32 twice: constant steps slow; the adaptive case covers the path
@pytest.mark.parametrize(
    "controller, dt0",
    [
        pytest.param(oc.ConstantStepSize(), 0.01, marks=pytest.mark.slow),
        (oc.PIDController(rtol=1e-5, atol=1e-6), None),
    ],
    ids=["constant", "pid"],
)
def test_float32_state_stays_float32(controller, dt0):
    problem = DECAY
    y0 = jnp.asarray(problem.y0, dtype=jnp.float32)
    ts = jnp.asarray([0.5, 1.0])
    subs = [oc.SubSaveAt(ts=ts), oc.SubSaveAt(steps=True), oc.SubSaveAt(t1=True)]
    sol = _solve(
        problem,
        0.0,
        2.0,
        dt0,
        y0=y0,
        stepsize_controller=controller,
        saveat=oc.SaveAt(subs=subs, dense=True),
    )
    assert [ys.dtype for ys in sol.ys] == [jnp.float32] * 3
    assert sol.evaluate(0.3).dtype == jnp.float32
    np.testing.assert_allclose(sol.ys[0], reference(problem, ts), rtol=1e-4)
    np.testing.assert_allclose(sol.ys[2][0], reference(problem, [2.0])[0], rtol=1e-4)


# ----------------------------------------------------------------------------------
# Transformations


def _lv_solve(y0, args):
    return oc.diffeqsolve(
        LOTKA_VOLTERRA.vector_field,
        oc.Tsit5(),
        0.0,
        10.0,
        0.1,
        y0,
        args,
        saveat=oc.SaveAt(ts=jnp.linspace(1.0, 10.0, 10)),
        stepsize_controller=oc.PIDController(rtol=1e-7, atol=1e-7),
    )


def _lv_args(scale=1.0):
    return tuple(jnp.asarray(a * scale) for a in LOTKA_VOLTERRA.args)


def test_jit_matches_eager():
    y0, args = jnp.asarray(LOTKA_VOLTERRA.y0), _lv_args()
    eager = _lv_solve(y0, args)
    jitted = jax.jit(_lv_solve)(y0, args)
    np.testing.assert_allclose(jitted.ys, eager.ys, rtol=1e-14, atol=1e-14)
    assert int(jitted.stats["num_steps"]) == int(eager.stats["num_steps"])


# batched `args`: slow; batched `y0` covers the path
@pytest.mark.parametrize("over", ["y0", pytest.param("args", marks=pytest.mark.slow)])
def test_vmap_matches_each_solve(over):
    y0s = jnp.asarray([[1.0, 1.0], [2.0, 0.5], [0.5, 3.0]])
    argss = [_lv_args(s) for s in (1.0, 0.8, 1.3)]
    single = jax.jit(_lv_solve)  # one compilation for the three unbatched solves
    if over == "y0":
        batched = jax.vmap(_lv_solve, in_axes=(0, None))(y0s, argss[0])
        singles = [single(y0, argss[0]) for y0 in y0s]
    else:
        stacked = jax.tree.map(lambda *a: jnp.stack(a), *argss)
        batched = jax.vmap(_lv_solve, in_axes=(None, 0))(y0s[0], stacked)
        singles = [single(y0s[0], args) for args in argss]
    steps = [int(s.stats["num_steps"]) for s in singles]
    assert len(set(steps)) == 3  # each element takes its own steps
    np.testing.assert_array_equal(batched.stats["num_steps"], steps)
    np.testing.assert_allclose(batched.ys, jnp.stack([s.ys for s in singles]), rtol=1e-12)


def _decay_y1(y0, k):
    return oc.diffeqsolve(
        DECAY.vector_field, oc.Tsit5(), 0.0, 2.0, 0.1, y0, k, stepsize_controller=TIGHT
    ).ys[-1]


def test_grad_matches_closed_form():
    y0, k = jnp.asarray(DECAY.y0), jnp.asarray(0.7)
    loss = lambda y0, k: jnp.sum(_decay_y1(y0, k) ** 2)
    exact_loss = lambda y0, k: jnp.sum(exact(DECAY, 2.0, y0, k) ** 2)
    grads = jax.grad(loss, argnums=(0, 1))(y0, k)
    expected = jax.grad(exact_loss, argnums=(0, 1))(y0, k)
    # d y(2) / d y0 = exp(-2k); d y(2) / dk = -2 y0 exp(-2k)
    np.testing.assert_allclose(expected[0], 2 * y0 * np.exp(-2.8), rtol=1e-14)
    np.testing.assert_allclose(grads[0], expected[0], rtol=1e-8)
    np.testing.assert_allclose(grads[1], expected[1], rtol=1e-8)


def test_jacobian_matches_matrix_exponential():
    problem = HARMONIC
    jac = jax.jacrev(
        lambda y0: _solve(problem, 0.0, 3.0, 0.1, y0=y0, stepsize_controller=TIGHT).ys[-1]
    )
    expected = jax.jacfwd(lambda y0: exact(problem, 3.0, y0))(jnp.asarray(problem.y0))
    np.testing.assert_allclose(jac(jnp.asarray(problem.y0)), expected, rtol=0, atol=1e-8)


def test_plain_callable_equals_odeterm():
    problem = LOTKA_VOLTERRA
    args = (problem.vector_field, oc.Tsit5(), 0.0, 3.0, 0.1, jnp.asarray(problem.y0))
    kwargs = dict(args=problem.args, stepsize_controller=TIGHT, saveat=oc.SaveAt(steps=True))
    plain = oc.diffeqsolve(*args, **kwargs)
    term = oc.diffeqsolve(oc.ODETerm(args[0]), *args[1:], **kwargs)
    np.testing.assert_array_equal(plain.ts, term.ts)
    np.testing.assert_array_equal(plain.ys, term.ys)


def test_grad_through_closure_over_traced_value():
    y0 = jnp.asarray(DECAY.y0)

    def loss(k):
        # The vector field closes over the traced `k` instead of taking it as args.
        sol = oc.diffeqsolve(
            lambda t, y, args: -k * y,
            oc.Tsit5(),
            0.0,
            2.0,
            0.1,
            y0,
            saveat=oc.SaveAt(ts=jnp.asarray([1.0, 2.0])),
            stepsize_controller=TIGHT,
        )
        return sol.ys.sum()

    k = 0.7
    # sum over t in {1, 2} of sum(y0) exp(-k t): derivative -sum(y0) sum(t exp(-k t))
    expected = -np.sum(DECAY.y0) * (np.exp(-k) + 2 * np.exp(-2 * k))
    np.testing.assert_allclose(loss(k), np.sum(DECAY.y0) * (np.exp(-k) + np.exp(-2 * k)), rtol=1e-8)
    np.testing.assert_allclose(jax.grad(loss)(k), expected, rtol=1e-8)


# 7 and 1000: slow; 1 and 256 cover the comparisons, 257 the binary search
@pytest.mark.parametrize(
    "num_ts",
    [
        1,
        pytest.param(7, marks=pytest.mark.slow),
        256,
        257,
        pytest.param(1000, marks=pytest.mark.slow),
    ],
)
def test_save_times_are_counted_like_a_binary_search(num_ts):
    """Few save times are counted by comparing with all of them, many by binary search;
    both must agree with `searchsorted`, repeated times and ties included."""
    from odeckpt._integrator import count_at_or_before

    ts = jnp.sort(jnp.round(jax.random.uniform(jax.random.key(num_ts), (num_ts,)) * 20) / 20)
    probes = jnp.concatenate([ts, ts + 1e-3, ts - 1e-3, jnp.asarray([-1.0, 2.0])])
    got = jax.vmap(lambda t: count_at_or_before(ts, t))(probes)
    want = jnp.searchsorted(ts, probes, side="right")
    np.testing.assert_array_equal(got, want)


def test_many_save_times():
    y0 = jnp.asarray([1.0])
    many = jnp.linspace(0.0, 1.0, 300)
    sol = oc.diffeqsolve(
        lambda t, y, a: -y,
        oc.Tsit5(),
        0.0,
        1.0,
        0.1,
        y0,
        saveat=oc.SaveAt(ts=many),
        stepsize_controller=TIGHT,
    )
    np.testing.assert_allclose(sol.ys[:, 0], jnp.exp(-many), rtol=1e-7)


# forwards in time: slow; the backwards case covers the path
@pytest.mark.parametrize("t0, t1", [pytest.param(0.0, 1.0, marks=pytest.mark.slow), (1.0, 0.0)])
def test_integer_y0_solves_in_the_time_dtype(t0, t1):
    """`y0=1` (diffrax's first example) solves `y' = -y` in the time dtype; an integer
    leaf beside float32 leaves takes float32."""
    dt0 = 0.1 if t1 > t0 else -0.1
    sol = oc.diffeqsolve(lambda t, y, a: -y, oc.Tsit5(), t0, t1, dt0, 1)
    assert sol.ys.dtype == jnp.float64
    np.testing.assert_allclose(sol.ys, [np.exp(t0 - t1)], rtol=1e-6)
    y0 = (jnp.ones(2, jnp.float32), jnp.arange(3))
    sol = oc.diffeqsolve(lambda t, y, a: jax.tree.map(jnp.negative, y), oc.Tsit5(), t0, t1, dt0, y0)
    assert [y.dtype for y in sol.ys] == [jnp.float32, jnp.float32]
    np.testing.assert_allclose(sol.ys[1][0], np.arange(3) * np.exp(t0 - t1), rtol=1e-5)


def test_saveat_steps_takes_diffraxs_integer_spelling():
    assert oc.SaveAt(steps=True).subs.steps == 1
    assert oc.SaveAt(steps=False, t1=True).subs.steps == 0
    assert oc.SaveAt(steps=np.True_).subs.steps == 1


@pytest.mark.parametrize("controller", [oc.ConstantStepSize(), oc.PIDController(1e-8, 1e-8)])
def test_unbounded_forward_solve_under_the_default_adjoint(controller):
    """`max_steps=None` with `CheckpointAdjoint` runs the solve unbounded (the same steps
    as a bounded one), also under `jax.jit` and `jax.vmap`; reverse mode is refused
    (`test_bad_inputs`)."""

    def solve(k, max_steps):
        return oc.diffeqsolve(
            lambda t, y, k: -k * y,
            oc.Tsit5(),
            0.0,
            2.0,
            0.01,
            jnp.ones(2),
            k,
            stepsize_controller=controller,
            max_steps=max_steps,
        ).ys

    ks = jnp.asarray([0.5, 1.5])
    unbounded = jax.jit(jax.vmap(lambda k: solve(k, None)))(ks)
    bounded = jax.vmap(lambda k: solve(k, 4096))(ks)
    np.testing.assert_array_equal(unbounded, bounded)
    np.testing.assert_allclose(unbounded[:, 0, 0], np.exp(-2 * np.asarray(ks)), rtol=1e-6)


# the other checkpoint count: slow; `store-all` covers the path
@pytest.mark.parametrize(
    "adjoint",
    [
        oc.CheckpointAdjoint(),
        pytest.param(oc.CheckpointAdjoint(checkpoints=2), marks=pytest.mark.slow),
        oc.InterpolatingAdjoint(),
        oc.BacksolveAdjoint(),
    ],
    ids=["store-all", "c=2", "interpolating", "backsolve"],
)
def test_python_int_in_args_under_grad_allow_int(adjoint):
    """`args=(k, n)` with a Python int `n`, differentiated with `allow_int=True` (as
    diffrax's tests do): `n`'s cotangent is float0, `k`'s the closed form."""

    def loss(args):
        # `n` arrives as an int64 array (`jax.grad` converts it): cast it explicitly.
        field = lambda t, y, a: -a[0] * jnp.asarray(a[1], y.dtype) * y
        sol = oc.diffeqsolve(field, oc.Tsit5(), 0.0, 1.0, 0.01, jnp.ones(2), args, adjoint=adjoint)
        return jnp.sum(sol.ys)

    dk, dn = jax.grad(loss, allow_int=True)((2.0, 3))
    assert dn.dtype == jax.dtypes.float0
    np.testing.assert_allclose(dk, -2 * 3 * np.exp(-6.0), rtol=1e-6)
