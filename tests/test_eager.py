"""Eager calls (outside `jax.jit`): one compiled program per call, reused by later
calls under every transformation, from a bounded cache; JAX's persistent
compilation cache across processes (`docs/performance.md`, "Eager calls")."""

import logging
import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import odeckpt as oc

T = 2.0


def _solve(a, y0=None, field=None, adjoint=oc.CheckpointAdjoint()):
    field = field or (lambda t, y, args: -args * y)
    y0 = jnp.ones(2) if y0 is None else y0
    return oc.diffeqsolve(field, oc.Tsit5(), 0.0, T, 0.1, y0, args=a, adjoint=adjoint).ys[0]


def _loss(a, adjoint=oc.CheckpointAdjoint()):
    return jnp.sum(_solve(a, adjoint=adjoint) ** 2)


def _exact_loss_gradient(a):
    return -2 * T * 2 * np.exp(-2 * a * T)  # d/da of 2 exp(-2 a T)


class _Compilations(logging.Handler):
    """Counts XLA compilations (`jax.log_compiles()` records) while it is active."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.names: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Compiling "):
            self.names.append(message.split(" ")[1])

    def __enter__(self):
        self._log = jax.log_compiles()
        self._log.__enter__()
        logging.getLogger("jax").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("jax").removeHandler(self)
        self._log.__exit__(*exc)


def _second_call_compiles(fn, *first, later):
    """Run `fn(*first)`, then count the compilations of `fn(*later)`."""
    jax.block_until_ready(fn(*first))
    with _Compilations() as seen:
        out = jax.block_until_ready(fn(*later))
    return out, seen.names


def test_eager_gradient_reuses_its_programs():
    """`jax.grad` outside `jax.jit`: from the second call on nothing is compiled (nor
    traced: the forward and backward programs come from the cache), and the
    gradient is the closed form's."""
    g, compiled = _second_call_compiles(jax.grad(_loss), 0.5, later=(jnp.asarray(0.7),))
    assert compiled == []
    np.testing.assert_allclose(g, _exact_loss_gradient(0.7), rtol=1e-4)


def test_closure_over_a_traced_value_reuses_the_program():
    """A vector field built afresh each call, closing over the traced parameter (as
    `lambda t, y, args: -a * y` inside the loss): keyed by its code, it reuses the
    programs, and the gradient flows through the closure."""

    def loss(a):
        return jnp.sum(_solve(None, field=lambda t, y, args: -a * y) ** 2)

    g, compiled = _second_call_compiles(jax.grad(loss), 0.5, later=(jnp.asarray(0.7),))
    assert compiled == []
    np.testing.assert_allclose(g, _exact_loss_gradient(0.7), rtol=1e-4)


@pytest.mark.parametrize("mode", ["jvp", "vmap", "hessian", "value_and_grad"])
def test_eager_transformations_reuse_their_programs(mode):
    """`jax.jvp` (of `ForwardMode()`), `jax.vmap`, `jax.hessian` and
    `jax.value_and_grad` outside `jax.jit`: the second call compiles nothing, and the
    values are right."""
    exact = lambda a: 2 * np.exp(-2 * a * T)  # noqa: E731
    if mode == "jvp":
        forward = lambda a: _loss(a, oc.ForwardMode())  # noqa: E731
        fn = lambda a: jax.jvp(forward, (a,), (jnp.ones(()),))[1]  # noqa: E731
        want = _exact_loss_gradient
    elif mode == "vmap":
        fn = jax.vmap(_loss)
        want = exact
    elif mode == "hessian":
        fn = jax.hessian(_loss)
        want = lambda a: 8 * T**2 * np.exp(-2 * a * T)  # noqa: E731
    else:
        fn = lambda a: jax.value_and_grad(_loss)(a)[1]  # noqa: E731
        want = _exact_loss_gradient
    first = jnp.asarray([0.4, 0.5]) if mode == "vmap" else jnp.asarray(0.5)
    later = first + 0.2
    out, compiled = _second_call_compiles(fn, first, later=(later,))
    assert compiled == []
    np.testing.assert_allclose(out, want(np.asarray(later)), rtol=1e-4)


_MUTABLE = np.asarray([0.5, 0.5])


def _mutable_rate(t, y, args):
    return -_MUTABLE * y


def test_a_global_numpy_array_changed_in_place_is_read_afresh():
    """A NumPy array the field names as a global is an input of the program, read at
    every call: a change in place is seen, without compiling again."""
    first = oc.diffeqsolve(_mutable_rate, oc.Tsit5(), 0.0, T, 0.1, jnp.ones(2)).ys[0]
    _MUTABLE[:] = 1.5
    try:
        with _Compilations() as seen:
            second = oc.diffeqsolve(_mutable_rate, oc.Tsit5(), 0.0, T, 0.1, jnp.ones(2)).ys[0]
    finally:
        _MUTABLE[:] = 0.5
    assert seen.names == []
    np.testing.assert_allclose(first, np.exp(-0.5 * T), rtol=1e-5)
    np.testing.assert_allclose(second, np.exp(-1.5 * T), rtol=1e-5)


def test_a_changed_python_number_in_a_closure_compiles_a_new_program():
    """A Python number the field closes over is part of the program: a new value is a
    new program (never the old value's)."""
    for rate in (0.5, 1.5):
        field = lambda t, y, a, rate=rate: -rate * y  # noqa: E731
        y = oc.diffeqsolve(field, oc.Tsit5(), 0.0, T, 0.1, jnp.ones(1)).ys
        np.testing.assert_allclose(y[0], np.exp(-rate * T), rtol=1e-5)


def test_the_cache_is_bounded_and_configurable():
    """`compiled_cache_size(n)` keeps the n most recently used programs."""
    previous = oc.compiled_cache_size()
    try:
        assert oc.compiled_cache_size(2) == 2
        for n in (1, 2, 3):  # three shapes: three programs
            _solve(0.5, y0=jnp.ones(n))
        info = oc.compiled_cache_info()
        assert info["entries"] == 2 and info["size"] == 2
        with _Compilations() as seen:  # the most recent one is still there
            _solve(0.5, y0=jnp.ones(3))
        assert seen.names == []
        oc.compiled_cache_size(0)
        assert oc.compiled_cache_info()["entries"] == 0
        np.testing.assert_allclose(_solve(0.5), np.exp(-0.5 * T), rtol=1e-5)  # none kept
    finally:
        oc.compiled_cache_size(previous)
    for bad in (-1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="integer >= 0"):
            oc.compiled_cache_size(bad)


_SECOND_PROCESS = textwrap.dedent(
    """
    import sys, time
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None
    )
    import jax.numpy as jnp
    import odeckpt as oc
    loss = lambda a: jnp.sum(oc.diffeqsolve(
        lambda t, y, a: -a * y, oc.Tsit5(), 0.0, 2.0, 0.1, jnp.ones(2), args=a,
        stepsize_controller=oc.PIDController(rtol=1e-6, atol=1e-8)).ys ** 2)
    g = jax.grad(loss)(0.5)
    try:  # checked on the host (no callback in the program): still raised, same text
        oc.diffeqsolve(lambda t, y, a: -y, oc.Tsit5(), 0.0, 2.0, 0.1, jnp.ones(2), max_steps=3)
        raised = "none"
    except Exception as error:
        named = "`max_steps` (3) reached" in str(error)
        raised = type(error).__name__ + ("-max_steps" if named else "")
    print(len(hits), float(g), raised)
    """
)


def test_a_second_process_reuses_the_persistent_compilation_cache(tmp_path):
    """With JAX's persistent compilation cache on (two settings), a second process
    loads the first one's compiled programs instead of compiling them, a failing
    solve's too (its failure is then checked on the host, with the same message)."""
    script = tmp_path / "solve.py"
    script.write_text(_SECOND_PROCESS)
    env = dict(os.environ, JAX_PLATFORMS="cpu")

    def run():
        args = [sys.executable, str(script), str(tmp_path / "cache")]
        out = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
        hits, gradient, raised = out.stdout.split()
        assert raised == "EquinoxRuntimeError-max_steps"
        return int(hits), float(gradient)

    first_hits, first = run()
    second_hits, second = run()
    # the gradient's forward and backward programs, and the failing solve's program
    assert first_hits == 0 and second_hits >= 3
    assert second == first
    np.testing.assert_allclose(first, -2 * T * 2 * np.exp(-2 * 0.5 * T), rtol=1e-5)


class _UnhashableField(eqx.Module):
    rates: list = eqx.field(static=True)  # a static field that cannot be hashed

    def __call__(self, t, y, args):
        return -self.rates[0] * y


def test_an_unhashable_static_field_is_compared_by_value():
    """A vector field with an unhashable static part (a list): the program's key
    compares it by value, so a changed value is a new program with its own result."""
    for rate in (0.5, 1.5):
        y = oc.diffeqsolve(_UnhashableField([rate]), oc.Tsit5(), 0.0, T, 0.1, jnp.ones(2)).ys
        np.testing.assert_allclose(y[0], np.exp(-rate * T), rtol=1e-5)


def test_the_environment_sets_the_cache_size():
    """`ODECKPT_COMPILED_CACHE_SIZE` sets the size a process starts with; a value that
    is not a non-negative integer is refused with its name."""
    code = "import odeckpt as oc; print(oc.compiled_cache_size())"

    def run(value):
        env = dict(os.environ, ODECKPT_COMPILED_CACHE_SIZE=value, JAX_PLATFORMS="cpu")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)

    assert run("7").stdout.split() == ["7"]
    refused = run("-1")
    assert refused.returncode != 0 and "ODECKPT_COMPILED_CACHE_SIZE" in refused.stderr
