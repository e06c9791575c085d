"""Every bad input, and the error it gets: the rows of the table in `docs/errors.md`.

`CASES` is that table as data; `test_docs_table_matches_cases` keeps the two equal, so
the table cannot drift from what the code does.
"""

import pathlib
import re
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest

import odeckpt as oc

DOCS = pathlib.Path(__file__).parents[1] / "docs" / "errors.md"
Y0 = jnp.asarray([1.0, 2.0])

EXCEPTIONS = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "equinox.EquinoxRuntimeError": eqx.EquinoxRuntimeError,
    "jax.errors.JaxRuntimeError": jax.errors.JaxRuntimeError,
}
RUNTIME = ("equinox.EquinoxRuntimeError", "jax.errors.JaxRuntimeError")


class Case(NamedTuple):
    description: str
    exception: str  # a key of EXCEPTIONS
    start: str  # how the message starts
    call: Callable[[], object]


def _decay(t, y, args):
    return -y


def _solve(f=_decay, solver=None, t0=0.0, t1=1.0, dt0=0.1, y0=Y0, **kwargs):
    return oc.diffeqsolve(f, solver or oc.Tsit5(), t0, t1, dt0, y0, **kwargs)


class _NoStep(oc.AbstractSolver):
    def order(self, terms):
        return 1


def _jit(fn, *args):
    """`fn(*args)` under `eqx.filter_jit`, run to completion: traced inputs."""
    return jax.block_until_ready(eqx.filter_jit(fn)(*args))


def _grad(fn, *args):
    return jax.grad(fn)(*args)


def _cubic_decay(t, y, args):
    return -1e3 * y**3


def _nan_after_half(t, y, args):
    return jnp.where(t > 0.5, jnp.nan, -y)


def _too_tight():
    controller = oc.PIDController(rtol=1e-13, atol=1e-13, dtmin=0.05, force_dtmin=False)
    return oc.diffeqsolve(
        lambda t, y, args: jnp.stack([1.5 * y[0] - y[0] * y[1], y[0] * y[1] - 3 * y[1]]),
        oc.Tsit5(),
        0.0,
        10.0,
        0.1,
        jnp.asarray([1.0, 1.0]),
        stepsize_controller=controller,
    )


PID = oc.PIDController(rtol=1e-6, atol=1e-8)
_GMRES = lx.GMRES(rtol=1e-8, atol=1e-10)
F32 = jnp.asarray([1.0], jnp.float32)
NAN_Y0 = {"a": Y0, "b": jnp.asarray([1.0, jnp.nan])}

# The order and wording of these rows is that of docs/errors.md.
STATE = [
    Case(
        "`y0` with a boolean leaf",
        "TypeError",
        "`y0` must hold floating (or integer) arrays; leaf [1] has dtype bool",
        lambda: _solve(y0=(Y0, jnp.asarray([True]))),
    ),
    Case(
        "`y0` mixing float32 and float64 leaves",
        "TypeError",
        "`y0` mixes floating precisions ['float32', 'float64']",
        lambda: _solve(y0={"a": F32, "b": Y0}),
    ),
    Case(
        "`y0` mixing complex64 and float64 leaves",
        "TypeError",
        "`y0` mixes floating precisions ['complex64', 'float64']",
        lambda: _solve(y0={"a": F32.astype(jnp.complex64), "b": Y0}),
    ),
    Case(
        "`y0` with NaN or inf",
        "ValueError",
        "`y0` has NaN or inf values in leaf ['b']; pass a finite `y0`.",
        lambda: _solve(f=lambda t, y, a: jax.tree.map(jnp.negative, y), y0=NAN_Y0),
    ),
    Case(
        "`y0` with NaN or inf, traced",
        "equinox.EquinoxRuntimeError",
        "`y0` has NaN or inf values in leaf y0; pass a finite `y0`. (checked at run time)",
        lambda: _jit(lambda y0: _solve(y0=y0).ys, jnp.asarray([jnp.inf, 1.0])),
    ),
    Case(
        "`y0` with NaN or inf, traced under `jax.jit`",
        "jax.errors.JaxRuntimeError",
        "`y0` has NaN or inf values in leaf y0; pass a finite `y0`. (checked at run time)",
        lambda: jax.block_until_ready(
            jax.jit(lambda y0: _solve(y0=y0).ys)(jnp.asarray([jnp.nan, 1.0]))
        ),
    ),
    Case(
        "`args` with NaN or inf",
        "ValueError",
        "`args` has NaN or inf values in leaf ['k']; pass finite `args`.",
        lambda: _solve(f=lambda t, y, a: -a["k"] * y, args={"k": jnp.inf}),
    ),
    Case(
        "`args` with NaN or inf, traced",
        "equinox.EquinoxRuntimeError",
        "`args` has NaN or inf values in leaf args; pass finite `args`. (checked at run time)",
        lambda: _jit(lambda k: _solve(f=lambda t, y, a: -a * y, args=k).ys, jnp.asarray(jnp.nan)),
    ),
]

VECTOR_FIELD = [
    Case(
        "vector field returns another PyTree structure",
        "ValueError",
        "The vector field must return a PyTree with the structure of `y`; "
        "`f(t0, y0, args)` returned PyTreeDef((*, *)) for `y0` with PyTreeDef(*).",
        lambda: _solve(f=lambda t, y, a: (y, y)),
    ),
    Case(
        "vector field returns a shape that does not broadcast to `y`'s",
        "ValueError",
        "The vector field must return arrays shaped like `y`; for leaf y0 "
        "`f(t0, y0, args)` returned shape (3,), but `y0` has shape (2,).",
        lambda: _solve(f=lambda t, y, a: jnp.ones(3)),
    ),
    Case(
        "vector field returns another floating dtype",
        "TypeError",
        "The vector field must return `y`'s dtype; for leaf ['x'] `f(t0, y0, args)` "
        "returned float64, but `y0` is float32.",
        lambda: _solve(
            f=lambda t, y, a: {"x": y["x"].astype(jnp.float64) * jnp.cos(t)}, y0={"x": F32}
        ),
    ),
    Case(
        "vector field returns something other than arrays",
        "TypeError",
        "The vector field must return arrays; for leaf y0 `f(t0, y0, args)` returned a str.",
        lambda: _solve(f=lambda t, y, a: "fast", y0=jnp.asarray(1.0)),
    ),
    Case(
        "vector field returns complex values for a real `y`",
        "TypeError",
        "The vector field must return `y`'s dtype; for leaf y0 `f(t0, y0, args)` "
        "returned complex128",
        lambda: _solve(f=lambda t, y, a: y.astype(jnp.complex128)),
    ),
    Case(
        "a tuple of terms for a solver that takes one",
        "ValueError",
        "`Tsit5` takes one term, not a tuple of 2 terms: pass one `ODETerm(f)`",
        lambda: _solve(f=(oc.ODETerm(_decay), oc.ODETerm(_decay))),
    ),
    Case(
        "one term for `SemiImplicitEuler()`",
        "ValueError",
        "`SemiImplicitEuler` takes a tuple of 2 terms, `(ODETerm(f), ODETerm(g))` for "
        "`y = (q, p)` with dq/dt = f(t, p, args), dp/dt = g(t, q, args); got ODETerm.",
        lambda: _solve(f=oc.ODETerm(_decay), solver=oc.SemiImplicitEuler()),
    ),
    Case(
        "`SemiImplicitEuler()` with `y0` not a pair",
        "ValueError",
        "`SemiImplicitEuler` needs `y0 = (q0, p0)`, a tuple of 2 PyTrees; got a list of 2.",
        lambda: _solve(f=(_decay, _decay), solver=oc.SemiImplicitEuler(), y0=[Y0, Y0]),
    ),
]

TIMES = [
    Case(
        "`dt0` against the direction of integration",
        "ValueError",
        "`dt0` must be nonzero with the sign of `t1 - t0`; got dt0=-0.1 for t0=0.0, t1=1.0.",
        lambda: _solve(dt0=-0.1),
    ),
    Case(
        "`dt0=0`",
        "ValueError",
        "`dt0` must be nonzero with the sign of `t1 - t0`; got dt0=0.0",
        lambda: _solve(t0=1.0, t1=0.0, dt0=0.0),
    ),
    Case(
        "`dt0` infinite",
        "ValueError",
        "`dt0` must be finite and nonzero with the sign of `t1 - t0`.",
        lambda: _solve(dt0=jnp.inf),
    ),
    Case(
        "`dt0` of the wrong sign or zero, traced",
        "equinox.EquinoxRuntimeError",
        "`dt0` must be finite and nonzero with the sign of `t1 - t0`. (checked at run time)",
        lambda: _jit(lambda dt0: _solve(dt0=dt0).ys, jnp.asarray(-0.1)),
    ),
    Case(
        "`dt0=None` with `ConstantStepSize()`",
        "ValueError",
        "`dt0=None` needs an adaptive controller",
        lambda: _solve(dt0=None),
    ),
    Case(
        "`dt0` with `StepTo(ts)`",
        "ValueError",
        "`StepTo(ts)` fixes the steps itself: pass `dt0=None`.",
        lambda: _solve(stepsize_controller=oc.StepTo(jnp.asarray([0.0, 0.5, 1.0]))),
    ),
    Case("`t1` NaN or inf", "ValueError", "`t1` must be finite.", lambda: _solve(t1=jnp.inf)),
    Case(
        "`t0` NaN or inf, traced",
        "equinox.EquinoxRuntimeError",
        "`t0` must be finite. (checked at run time)",
        lambda: _jit(lambda t0: _solve(t0=t0).ys, jnp.asarray(jnp.nan)),
    ),
    Case(
        "`StepTo(ts)` not from t0 to t1",
        "ValueError",
        "`StepTo(ts=...)` must start at t0 and end at t1; got ts[0]=0.0, ts[-1]=0.8",
        lambda: _solve(dt0=None, stepsize_controller=oc.StepTo(jnp.asarray([0.0, 0.8]))),
    ),
    Case(
        "`StepTo(ts)` not strictly monotone",
        "ValueError",
        "`StepTo(ts=...)` must be strictly monotone from t0 to t1; got ts[2]=0.5 after ts[1]=0.7",
        lambda: _solve(dt0=None, stepsize_controller=oc.StepTo(jnp.asarray([0.0, 0.7, 0.5, 1.0]))),
    ),
    Case(
        "`StepTo(ts)` with fewer than 2 times",
        "ValueError",
        "`StepTo(ts=...)` needs a 1-D array of at least 2 times; got shape (1,)",
        lambda: oc.StepTo(jnp.asarray([0.0])),
    ),
    Case(
        "`StepTo(ts)` not from t0 to t1, traced",
        "equinox.EquinoxRuntimeError",
        "`StepTo(ts=...)` must start at t0 and end at t1. (checked at run time)",
        lambda: _jit(
            lambda ts: _solve(dt0=None, stepsize_controller=oc.StepTo(ts)).ys,
            jnp.asarray([0.0, 0.5, 0.8]),
        ),
    ),
    Case(
        "`StepTo(ts)` not strictly monotone, traced",
        "equinox.EquinoxRuntimeError",
        "`StepTo(ts=...)` must be strictly monotone from t0 to t1. (checked at run time)",
        lambda: _jit(
            lambda ts: _solve(dt0=None, stepsize_controller=oc.StepTo(ts)).ys,
            jnp.asarray([0.0, 0.7, 0.5, 1.0]),
        ),
    ),
    Case(
        "`ClipStepSizeController` around a non-controller",
        "TypeError",
        "`ClipStepSizeController(controller=...)` expects a step-size controller, e.g. "
        "`PIDController(rtol=1e-6, atol=1e-8)`; got float.",
        lambda: oc.ClipStepSizeController(1e-6),
    ),
    Case(
        "`ClipStepSizeController` around `StepTo`",
        "ValueError",
        "`ClipStepSizeController` cannot wrap `StepTo`, which fixes every step itself",
        lambda: oc.ClipStepSizeController(oc.StepTo(jnp.asarray([0.0, 1.0]))),
    ),
    Case(
        "`ClipStepSizeController(store_rejected_steps)` not a positive integer",
        "ValueError",
        "`ClipStepSizeController(store_rejected_steps=...)` must be a positive integer or "
        "None; got 0.",
        lambda: oc.ClipStepSizeController(PID, store_rejected_steps=0),
    ),
    Case(
        "`ClipStepSizeController(step_ts)` not 1-D",
        "ValueError",
        "`ClipStepSizeController(step_ts=...)` must be a 1-D array of times; got shape ().",
        lambda: oc.ClipStepSizeController(PID, step_ts=0.5),
    ),
    Case(
        "`ClipStepSizeController(jump_ts)` complex",
        "TypeError",
        "`ClipStepSizeController(jump_ts=...)` must hold real times; got dtype complex128.",
        lambda: oc.ClipStepSizeController(PID, jump_ts=jnp.asarray([0.5 + 1j])),
    ),
    Case(
        "`ClipStepSizeController(jump_ts)` NaN or inf",
        "ValueError",
        "`ClipStepSizeController(jump_ts=...)` must be finite; got jump_ts[1]=nan.",
        lambda: oc.ClipStepSizeController(PID, jump_ts=[0.5, jnp.nan]),
    ),
    Case(
        "`ClipStepSizeController(jump_ts)` NaN or inf, traced",
        "equinox.EquinoxRuntimeError",
        "`ClipStepSizeController(jump_ts=...)` must be finite. (checked at run time)",
        lambda: _jit(
            lambda j: _solve(stepsize_controller=oc.ClipStepSizeController(PID, jump_ts=j)).ys,
            jnp.asarray([0.5, jnp.nan]),
        ),
    ),
    Case(
        "`t0` or `t1` not a scalar",
        "ValueError",
        "`t0` must be a scalar; got shape (1,).",
        lambda: _solve(t0=jnp.asarray([0.0])),
    ),
    Case(
        "`t0`, `t1` or `dt0` complex",
        "TypeError",
        "`dt0` must be a real number; got dtype complex128.",
        lambda: _solve(dt0=0.1 + 0.0j),
    ),
]

SAVEAT = [
    Case(
        "`SaveAt()` with nothing to save",
        "ValueError",
        "`SaveAt()` saves nothing",
        lambda: oc.SaveAt(),
    ),
    Case(
        "`SaveAt(steps)` negative or not an integer",
        "ValueError",
        "`SaveAt(steps=...)` must be True, False or a non-negative integer n (every n-th "
        "step); got -1.",
        lambda: oc.SaveAt(steps=-1),
    ),
    Case(
        "`SubSaveAt()` with nothing to save",
        "ValueError",
        "`SubSaveAt()` saves nothing",
        lambda: oc.SubSaveAt(fn=lambda t, y, args: y),
    ),
    Case(
        "`SaveAt(subs=...)` with `t0`, `t1`, `ts`, `steps` or `fn`",
        "ValueError",
        "`SaveAt(subs=...)` takes every output from its `SubSaveAt`s",
        lambda: oc.SaveAt(t1=True, subs=oc.SubSaveAt(t0=True)),
    ),
    Case(
        "`SaveAt(subs=...)` holding something else",
        "ValueError",
        "`SaveAt(subs=...)` must be a PyTree of `SubSaveAt`; it holds a str.",
        lambda: oc.SaveAt(subs=[oc.SubSaveAt(t0=True), "t1"]),
    ),
    Case(
        "`SaveAt(fn)` not callable",
        "TypeError",
        "`SaveAt(fn=...)` must be a function `fn(t, y, args)`; got int.",
        lambda: oc.SaveAt(t1=True, fn=3),
    ),
    Case(
        "`SaveAt(fn)` returning a non-array",
        "TypeError",
        "`SaveAt(fn=...)` must return a PyTree of arrays; for leaf [1] `fn(t0, y0, args)` "
        "returned a str.",
        lambda: _solve(saveat=oc.SaveAt(t1=True, fn=lambda t, y, a: (y, "y"))),
    ),
    Case(
        "`SaveAt(fn)` returning integers or booleans",
        "TypeError",
        "`SaveAt(fn=...)` must return floating arrays (unfilled rows are inf); for leaf output "
        "`fn(t0, y0, args)` returned bool.",
        lambda: _solve(saveat=oc.SaveAt(t1=True, fn=lambda t, y, a: y > 0)),
    ),
    Case(
        "`SaveAt(ts)` with NaN or inf",
        "ValueError",
        "`SaveAt(ts=...)` must be finite; got ts[1]=nan.",
        lambda: oc.SaveAt(ts=jnp.asarray([0.1, jnp.nan, 0.9])),
    ),
    Case(
        "`SaveAt(ts)` not monotone",
        "ValueError",
        "`SaveAt(ts=...)` must be monotone (in the direction of integration); "
        "got ts[2]=0.3 after ts[1]=0.5",
        lambda: oc.SaveAt(ts=[0.1, 0.5, 0.3]),
    ),
    Case(
        "`SaveAt(ts)` not 1-D",
        "ValueError",
        "`SaveAt(ts=...)` must be 1-D; got shape (2, 1)",
        lambda: oc.SaveAt(ts=[[0.1], [0.5]]),
    ),
    Case(
        "`SaveAt(ts)` against the direction of integration",
        "ValueError",
        "`SaveAt(ts=...)` must run from t0 towards t1; got ts[1]=0.5 after ts[0]=0.2",
        lambda: _solve(t0=1.0, t1=0.0, dt0=-0.1, saveat=oc.SaveAt(ts=[0.2, 0.5])),
    ),
    Case(
        "`SaveAt(ts)` outside [t0, t1]",
        "ValueError",
        "`SaveAt(ts=...)` must lie within [t0, t1] = [0.0, 1.0]; got ts[1]=1.5.",
        lambda: _solve(saveat=oc.SaveAt(ts=[0.5, 1.5])),
    ),
    Case(
        "`SaveAt(ts)` outside [t0, t1], traced",
        "equinox.EquinoxRuntimeError",
        "`SaveAt(ts=...)` must lie within [t0, t1]. (checked at run time)",
        lambda: _jit(lambda ts: _solve(saveat=oc.SaveAt(ts=ts)).ys, jnp.asarray([0.5, 2.0])),
    ),
    Case(
        "`SaveAt(ts)` against the direction, traced",
        "equinox.EquinoxRuntimeError",
        "`SaveAt(ts=...)` must run from t0 towards t1. (checked at run time)",
        lambda: _jit(lambda ts: _solve(saveat=oc.SaveAt(ts=ts)).ys, jnp.asarray([0.5, 0.2])),
    ),
    Case(
        "`Solution.evaluate` without dense output",
        "ValueError",
        "`Solution.evaluate` needs dense output: pass `saveat=SaveAt(dense=True)`.",
        lambda: _solve().evaluate(0.5),
    ),
    Case(
        "`Solution.derivative` without dense output",
        "ValueError",
        "`Solution.derivative` needs dense output: pass `saveat=SaveAt(dense=True)`.",
        lambda: _solve().derivative(0.5),
    ),
]

OPTIONS = [
    Case(
        "`max_steps` < 1",
        "ValueError",
        "`max_steps` must be a positive integer or None; got 0.",
        lambda: _solve(max_steps=0),
    ),
    Case(
        "`max_steps` not an integer",
        "ValueError",
        "`max_steps` must be a positive integer or None; got 2.5.",
        lambda: _solve(max_steps=2.5),
    ),
    Case(
        "`max_steps=None` with `SaveAt(steps=True)` or `SaveAt(dense=True)`",
        "ValueError",
        "`SaveAt(steps=True)` keeps one row per step, so it needs a bound: pass an integer "
        "`max_steps`",
        lambda: _solve(max_steps=None, adjoint=oc.ForwardMode(), saveat=oc.SaveAt(steps=True)),
    ),
    Case(
        "`max_steps=None` with `CheckpointAdjoint`, in reverse mode",
        "ValueError",
        "`CheckpointAdjoint` cannot run reverse mode through a solve with `max_steps=None`",
        lambda: jax.grad(lambda y0: jnp.sum(_solve(y0=y0, max_steps=None).ys))(Y0),
    ),
    Case(
        "`max_steps=None` with `InterpolatingAdjoint`",
        "ValueError",
        "`InterpolatingAdjoint` needs a bounded loop: pass an integer `max_steps`",
        lambda: _solve(max_steps=None, adjoint=oc.InterpolatingAdjoint()),
    ),
    Case(
        "`max_steps=None` with `DirectAdjoint`",
        "ValueError",
        "`DirectAdjoint` runs a loop of `max_steps` iterations: pass an integer `max_steps`",
        lambda: _solve(max_steps=None, adjoint=oc.DirectAdjoint()),
    ),
    Case(
        "`ImplicitAdjoint` with outputs other than `SaveAt(t1=True)`",
        "ValueError",
        "`ImplicitAdjoint()` differentiates the final (steady) state only: use `SaveAt(t1=True)`",
        lambda: _solve(saveat=oc.SaveAt(ts=[0.5]), adjoint=oc.ImplicitAdjoint()),
    ),
    Case(
        "`rtol` <= 0",
        "ValueError",
        "`PIDController(rtol=...)` must be positive; got 0.0.",
        lambda: _solve(stepsize_controller=oc.PIDController(rtol=0.0, atol=1e-6)),
    ),
    Case(
        "`atol` <= 0",
        "ValueError",
        "`PIDController(atol=...)` must be positive; got -1e-09.",
        lambda: _solve(stepsize_controller=oc.PIDController(rtol=1e-6, atol=-1e-9)),
    ),
    Case(
        "`rtol` NaN",
        "ValueError",
        "`PIDController(rtol=...)` must be positive; got nan.",
        lambda: _solve(stepsize_controller=oc.PIDController(rtol=jnp.nan, atol=1e-6)),
    ),
    Case(
        "`rtol` <= 0, traced",
        "equinox.EquinoxRuntimeError",
        "`PIDController(rtol=...)` must be positive. (checked at run time)",
        lambda: _jit(
            lambda r: _solve(stepsize_controller=oc.PIDController(r, 1e-6)).ys, jnp.asarray(-1.0)
        ),
    ),
    Case(
        "solver without error estimate and an adaptive controller",
        "ValueError",
        "`Euler` has no error estimate, so it cannot be used with `PIDController`",
        lambda: _solve(solver=oc.Euler(), stepsize_controller=PID),
    ),
    Case(
        "`Kvaerno5(root_finder)` not a `VeryChord`",
        "ValueError",
        "`Kvaerno5(root_finder=...)` takes `odeckpt.VeryChord(rtol, atol)`; got str.",
        lambda: oc.Kvaerno5(root_finder="newton"),
    ),  # pyright: ignore
    Case(
        "`Kvaerno5` given both `rtol` and `root_finder`",
        "ValueError",
        "`Kvaerno5(rtol, atol)` and `Kvaerno5(root_finder=...)` both set the Newton "
        "tolerances: pass one of them.",
        lambda: oc.Kvaerno5(rtol=1e-9, root_finder=oc.VeryChord(rtol=1e-7, atol=1e-9)),
    ),
    Case(
        "`Kvaerno5` given both `max_iters` and `root_find_max_steps`",
        "ValueError",
        "`Kvaerno5(max_iters=...)` and `Kvaerno5(root_find_max_steps=...)` are the same "
        "setting: pass one of them.",
        lambda: oc.Kvaerno5(max_iters=5, root_find_max_steps=5),
    ),
    Case(
        "IMEX solver not given `MultiTerm(explicit, implicit)`",
        "ValueError",
        "`KenCarp4` is an IMEX method: it takes `MultiTerm(explicit_term, implicit_term)` "
        "and treats the first term explicitly, the second implicitly; got ODETerm with 1 "
        "term(s).",
        lambda: _solve(solver=oc.KenCarp4()),
    ),
    Case(
        "`VeryChord` tolerance not positive",
        "ValueError",
        "`VeryChord(rtol, atol, kappa)` needs positive values; got rtol=0.0, atol=1e-09",
        lambda: oc.VeryChord(rtol=0.0, atol=1e-9),
    ),
    Case(
        "`linear_solver` not a lineax solver",
        "ValueError",
        "`Kvaerno5(linear_solver=...)` takes a lineax solver, e.g. `lineax.LU()` (dense, the "
        "default) or `lineax.GMRES(rtol=1e-6, atol=1e-9)` (matrix-free); got str.",
        lambda: oc.Kvaerno5(linear_solver="gmres"),
    ),
    Case(
        "`linear_solver` that needs a tagged operator (`CG`, `Cholesky`, `Diagonal`, ...)",
        "ValueError",
        "`Kvaerno5(linear_solver=lineax.CG(...))` needs an operator lineax can treat as "
        "symmetric positive definite",
        lambda: oc.Kvaerno5(linear_solver=lx.CG(rtol=1e-6, atol=1e-9)),
    ),
    Case(
        "`linear_solver` given to the solver and to its `VeryChord`",
        "ValueError",
        "`Kvaerno5(linear_solver=...)` and `Kvaerno5(root_finder=VeryChord(..., "
        "linear_solver=...))` both set the linear solver: pass one of them.",
        lambda: oc.Kvaerno5(
            linear_solver=_GMRES,
            root_finder=oc.VeryChord(rtol=1e-6, atol=1e-9, linear_solver=_GMRES),
        ),
    ),
    Case(
        "`preconditioner` with a dense `linear_solver`",
        "ValueError",
        "`Kvaerno5(preconditioner=...)` serves an iterative linear solver, and "
        "`linear_solver=AutoLinearSolver()` factorises the matrix directly.",
        lambda: oc.Kvaerno5(preconditioner=lambda t, y, args, gamma_h: lambda v: v),
    ),
    Case(
        "`preconditioner` not callable",
        "ValueError",
        "`Kvaerno5(preconditioner=...)` takes a function `(t, y, args, gamma_h) -> "
        "operator`; got int.",
        lambda: oc.Kvaerno5(linear_solver=_GMRES, preconditioner=3),
    ),
    Case(
        "`preconditioner` returning an operator of the wrong shape",
        "ValueError",
        "`preconditioner(t, y, args, gamma_h)` must return an operator from the state's "
        "structure to itself, float64[2]; got one from float64[3] to float64[3].",
        lambda: _solve(
            solver=oc.Kvaerno5(
                linear_solver=_GMRES,
                preconditioner=lambda t, y, a, g: lx.DiagonalLinearOperator(jnp.ones(3)),
            )
        ),
    ),
    Case(
        "`RadauIIA5` with an iterative `linear_solver`",
        "ValueError",
        "`RadauIIA5` solves its coupled stage systems with a dense LU only; got "
        "`linear_solver=GMRES(...)`.",
        lambda: oc.RadauIIA5(linear_solver=_GMRES),
    ),
    Case(
        "`jac_sparsity` not square",
        "ValueError",
        "`Kvaerno5(jac_sparsity=...)` must be a square 2-D pattern, one row and one column "
        "per element of the state; got shape (2, 3).",
        lambda: oc.Kvaerno5(jac_sparsity=np.ones((2, 3), bool)),
    ),
    Case(
        "`jac_sparsity` not a pattern",
        "ValueError",
        "`Kvaerno5(jac_sparsity=...)` takes a boolean array, a SciPy sparse matrix or a JAX "
        "BCOO matrix; got dict.",
        lambda: oc.Kvaerno5(jac_sparsity={"a": 1}),
    ),
    Case(
        "`jac_sparsity` of the wrong size for the state",
        "ValueError",
        "`Kvaerno5(jac_sparsity=...)` must be (2, 2) for a state of 2 elements (in "
        "`jax.flatten_util.ravel_pytree(y0)` order); got shape (3, 3).",
        lambda: _solve(solver=oc.Kvaerno5(jac_sparsity=np.eye(3, dtype=bool))),
    ),
    Case(
        "built-in preconditioner without `jac_sparsity`",
        "ValueError",
        "`Kvaerno5(preconditioner=JacobiPreconditioner(...))` is built from the Jacobian's "
        "entries, which odeckpt finds from its sparsity pattern: pass "
        "`Kvaerno5(jac_sparsity=...)` too",
        lambda: oc.Kvaerno5(linear_solver=_GMRES, preconditioner=oc.JacobiPreconditioner()),
    ),
    Case(
        "`BlockJacobiPreconditioner` blocks not covering the state once",
        "ValueError",
        "`Kvaerno5(preconditioner=BlockJacobiPreconditioner(blocks))`: the blocks must hold "
        "each of the state's 2 elements exactly once; got 2 indices of shape (1, 2).",
        lambda: _solve(
            solver=oc.Kvaerno5(
                linear_solver=_GMRES,
                preconditioner=oc.BlockJacobiPreconditioner(np.asarray([[0, 0]])),
                jac_sparsity=np.ones((2, 2), bool),
            )
        ),
    ),
    Case(
        "Rosenbrock `jac` and `jac_sparsity` together",
        "ValueError",
        "`Rodas5P(jac=..., jac_sparsity=...)`: a given Jacobian is used as it is, so its "
        "sparsity pattern has nothing to do; pass one of them.",
        lambda: oc.Rodas5P(jac=lambda t, y, args: -jnp.eye(2), jac_sparsity=np.eye(2, dtype=bool)),
    ),
    Case(
        "`jac` not a function",
        "ValueError",
        "`Kvaerno5(jac=...)` takes a function `jac(t, y, args)` returning a lineax operator "
        "(or an (n, n) array); got ndarray.",
        lambda: oc.Kvaerno5(jac=np.eye(2)),
    ),
    Case(
        "`jac` returning an array of the wrong shape",
        "ValueError",
        "`jac(t, y, args)` must return a lineax operator on the state's structure or an (2, "
        "2) array for a state of 2 elements (`ravel_pytree(y)`); got shape (3, 3).",
        lambda: _solve(solver=oc.Kvaerno5(jac=lambda t, y, args: jnp.eye(3))),
    ),
    Case(
        "`ButcherTableau` with an implicit diagonal",
        "ValueError",
        "Butcher tableau 'ButcherTableau': implicit tableaux (`a_diagonal`, `c1`) are not "
        "supported",
        lambda: oc.ButcherTableau(
            c=[1.0], b_sol=[0.5, 0.5], b_error=[0.5, -0.5], a_lower=([0.5],), a_diagonal=[0.0, 0.5]
        ),
    ),
    Case(
        "`ButcherTableau` in both spellings",
        "ValueError",
        "Butcher tableau 'ButcherTableau': give either diffrax's fields (c, b_sol, "
        "b_error, a_lower) or odeckpt's",
        lambda: oc.ButcherTableau(c=[1.0], b_sol=[0.5, 0.5], a_lower=([1.0],), order=2),
    ),
    Case(
        "`CheckpointAdjoint(checkpoints)` < 1",
        "ValueError",
        "`CheckpointAdjoint(checkpoints=...)` must be a positive integer or None; got 0.",
        lambda: oc.CheckpointAdjoint(checkpoints=0),
    ),
    Case(
        "`CheckpointAdjoint(memory_budget)` not positive",
        "ValueError",
        "`CheckpointAdjoint(memory_budget=...)` must be a positive number of bytes; got -1.",
        lambda: oc.CheckpointAdjoint(memory_budget=-1),
    ),
    Case(
        "`BacksolveAdjoint(divergence_tol)` not positive",
        "ValueError",
        "`BacksolveAdjoint(divergence_tol=...)` must be a positive number",
        lambda: oc.BacksolveAdjoint(divergence_tol=-1.0),
    ),
    Case(
        "`terms` not callable",
        "TypeError",
        "`diffeqsolve(terms, ...)` needs an `ODETerm(f)` or a callable `f(t, y, args)`; got str.",
        lambda: _solve(f="f"),
    ),
    Case(
        "`solver` of the wrong type",
        "TypeError",
        "`diffeqsolve(solver=...)` expects an `AbstractSolver` (e.g. `odeckpt.Tsit5()`); got str.",
        lambda: _solve(solver="Tsit5"),
    ),
    Case(
        "`AbstractSolver` subclass without a step",
        "TypeError",
        "Can't instantiate abstract class _NoStep",
        lambda: _NoStep(),
    ),
    Case(
        "`stepsize_controller` of the wrong type",
        "TypeError",
        "`diffeqsolve(stepsize_controller=...)` expects an `AbstractStepSizeController`",
        lambda: _solve(stepsize_controller=1e-6),
    ),
    Case(
        "`saveat` of the wrong type",
        "TypeError",
        "`diffeqsolve(saveat=...)` expects an `SaveAt`",
        lambda: _solve(saveat=(0.5,)),
    ),
    Case(
        "`adjoint` of the wrong type",
        "TypeError",
        "`diffeqsolve(adjoint=...)` expects an `AbstractAdjoint`",
        lambda: _solve(adjoint="checkpoint"),
    ),
]

ADJOINTS = [
    Case(
        "continuous adjoint, gradient with respect to `t1`",
        "ValueError",
        "`BacksolveAdjoint` cannot differentiate with respect to `t0`, `t1` or `SaveAt(ts=...)`",
        lambda: _grad(lambda t1: _solve(t1=t1, adjoint=oc.BacksolveAdjoint()).ys.sum(), 1.0),
    ),
    Case(
        "continuous adjoint, gradient with respect to `SaveAt(ts)`",
        "ValueError",
        "`InterpolatingAdjoint` cannot differentiate with respect to `t0`, `t1` or "
        "`SaveAt(ts=...)`",
        lambda: _grad(
            lambda ts: _solve(saveat=oc.SaveAt(ts=ts), adjoint=oc.InterpolatingAdjoint()).ys.sum(),
            jnp.asarray([0.5, 1.0]),
        ),
    ),
    Case(
        "continuous adjoint, gradient through dense output",
        "ValueError",
        "`BacksolveAdjoint` cannot differentiate through `SaveAt(dense=True)` outputs",
        lambda: _grad(
            lambda y0: (
                _solve(y0=y0, saveat=oc.SaveAt(dense=True), adjoint=oc.BacksolveAdjoint())
                .evaluate(0.5)
                .sum()
            ),
            Y0,
        ),
    ),
    Case(
        "continuous adjoint with an adjoint solver that is not a Runge–Kutta method",
        "ValueError",
        "`BacksolveAdjoint(solver=...)` must be a Runge–Kutta solver",
        lambda: oc.BacksolveAdjoint(solver=oc.LeapfrogMidpoint()),
    ),  # pyright: ignore
    Case(
        "continuous adjoint of a forward solver that is not a Runge–Kutta method",
        "ValueError",
        "`InterpolatingAdjoint` solves the adjoint ODE with a Runge–Kutta method",
        lambda: _solve(solver=oc.LeapfrogMidpoint(), adjoint=oc.InterpolatingAdjoint()),
    ),
    Case(
        "continuous adjoint with an adjoint solver's preconditioner function",
        "ValueError",
        "`Kvaerno5(preconditioner=...)` approximates the inverse of `I - gamma h df/dy`",
        lambda: oc.InterpolatingAdjoint(
            solver=oc.Kvaerno5(
                linear_solver=lx.GMRES(rtol=1e-6, atol=1e-9),
                preconditioner=lambda t, y, args, hg: lambda v: v,
            )
        ),
    ),
    Case(
        "continuous adjoint with a non-adaptive adjoint controller",
        "ValueError",
        "`BacksolveAdjoint(stepsize_controller=...)` must be an adaptive controller",
        lambda: oc.BacksolveAdjoint(stepsize_controller=oc.ConstantStepSize()),
    ),
    Case(
        "`BacksolveAdjoint()` of `ReversibleHeun` across `jump_ts`",
        "ValueError",
        "`BacksolveAdjoint()` reconstructs the states of ReversibleHeun backwards with its "
        "inverse step, which cannot cross a jump of the vector field",
        lambda: _grad(
            lambda y0: _solve(
                y0=y0,
                solver=oc.ReversibleHeun(),
                stepsize_controller=oc.ClipStepSizeController(
                    oc.ConstantStepSize(), jump_ts=[0.45]
                ),
                adjoint=oc.BacksolveAdjoint(),
            ).ys.sum(),
            Y0,
        ),
    ),
    Case(
        "`BacksolveAdjoint()` of `ReversibleHeun` with an event",
        "ValueError",
        "`BacksolveAdjoint()` reconstructs the states of ReversibleHeun backwards with its "
        "inverse step, which cannot undo the step an `Event` cut short. Use "
        "`CheckpointAdjoint()`, or `BacksolveAdjoint(solver=Tsit5())` for the continuous "
        "adjoint.",
        lambda: _solve(
            solver=oc.ReversibleHeun(), event=oc.Event(_cond), adjoint=oc.BacksolveAdjoint()
        ),
    ),
    Case(
        "`BacksolveAdjoint()` of `ReversibleHeun`, reconstruction drifted",
        "equinox.EquinoxRuntimeError",
        "`BacksolveAdjoint()`: the gradient through the forward states of ReversibleHeun "
        "reconstructed backwards with its inverse step would be wrong",
        lambda: _grad(
            lambda y0: _solve(
                lambda t, y, a: -5.0 * y,
                solver=oc.ReversibleHeun(),
                y0=y0,
                t1=5.0,
                dt0=0.01,
                max_steps=600,
                adjoint=oc.BacksolveAdjoint(),
            ).ys.sum(),
            Y0,
        ),
    ),
    Case(
        "`ReversibleAdjoint()` of a solver without an inverse step",
        "ValueError",
        "`ReversibleAdjoint()` reconstructs the forward states with the solver's inverse "
        "step, and `Tsit5` has none. Make it reversible with `Reversible(Tsit5())`",
        lambda: _grad(lambda y0: _solve(y0=y0, adjoint=oc.ReversibleAdjoint()).ys.sum(), Y0),
    ),
    Case(
        "`ReversibleAdjoint()`, gradient's estimated error too large",
        "equinox.EquinoxRuntimeError",
        "ReversibleAdjoint: the gradient's estimated error exceeds `gradient_tol`",
        lambda: _grad(
            lambda y0: _solve(
                lambda t, y, a: -50.0 * y,
                solver=oc.Reversible(oc.Tsit5(), max_amplification=None),
                y0=y0,
                t1=5.0,
                dt0=0.05,
                adjoint=oc.ReversibleAdjoint(),
            ).ys.sum(),
            Y0,
        ),
    ),
    Case(
        "`ReversibleAdjoint(gradient_tol)` not positive",
        "ValueError",
        "`ReversibleAdjoint(gradient_tol=...)` must be a positive number",
        lambda: oc.ReversibleAdjoint(gradient_tol=0.0),
    ),
    Case(
        "`Reversible` whose parasitic mode grows",
        "equinox.EquinoxRuntimeError",
        "Parasitic mode growing in the step from t =",
        lambda: _solve(
            lambda t, y, a: -50.0 * y, solver=oc.Reversible(oc.Tsit5()), t1=5.0, dt0=0.05
        ),
    ),
    Case(
        "`Reversible(max_amplification)` not positive",
        "ValueError",
        "`Reversible(max_amplification=...)` must be a positive number or None; got 0.0.",
        lambda: oc.Reversible(oc.Tsit5(), max_amplification=0.0),
    ),
    Case(
        "`Reversible` of a solver that is not an explicit Runge–Kutta method",
        "ValueError",
        "`Reversible(solver=...)` wraps an explicit Runge–Kutta method with an error estimate",
        lambda: oc.Reversible(oc.Euler()),
    ),
    Case(
        "`Reversible(coupling)` outside (0, 1]",
        "ValueError",
        "`Reversible(coupling=...)` must be a number in (0, 1]; got 0.0.",
        lambda: oc.Reversible(oc.Tsit5(), coupling=0.0),
    ),
    Case(
        "`odeckpt.hvp(f, x, v)` with `v` not shaped like `x`",
        "ValueError",
        "`odeckpt.hvp(f, x, v)`: `v` must be shaped like `x` (the same PyTree structure and "
        "leaf shapes); got x: (2,), v: (3,).",
        lambda: oc.hvp(lambda y0: _solve(y0=y0).ys.sum(), Y0, jnp.ones(3)),
    ),
    Case(
        "`jax.grad` with `ForwardMode()` over more scalars than `max_tangents`",
        "ValueError",
        "`jax.grad`/`jax.vjp` of `diffeqsolve` with `adjoint=ForwardMode()` carries one "
        "tangent per differentiated scalar through the solve (forward sensitivities), and "
        "this one differentiates 2 scalars, more than `ForwardMode(max_tangents=1)`.",
        lambda: _grad(
            lambda y0: _solve(y0=y0, adjoint=oc.ForwardMode(max_tangents=1)).ys.sum(), Y0
        ),
    ),
    Case(
        "`ForwardMode(max_tangents)` not a positive integer or None",
        "ValueError",
        "`ForwardMode(max_tangents=...)` must be a positive integer or None; got 0.",
        lambda: oc.ForwardMode(max_tangents=0),
    ),
    Case(
        "`jax.grad` of `jax.grad` with `ForwardMode()` (reverse over reverse)",
        "ValueError",
        "Reverse mode over another derivative through `diffeqsolve` with `adjoint=ForwardMode()`",
        lambda: _grad(
            lambda y0: _grad(lambda y0: _solve(y0=y0, adjoint=oc.ForwardMode()).ys.sum(), y0).sum(),
            Y0,
        ),
    ),
    Case(
        "`jax.jvp` with `CheckpointAdjoint()`",
        "ValueError",
        "`jax.jvp`/`jax.jacfwd`/`jax.linearize` of `diffeqsolve` with "
        "`adjoint=CheckpointAdjoint()`: this adjoint defines reverse mode only",
        lambda: jax.jvp(lambda y0: _solve(y0=y0).ys, (Y0,), (Y0,)),
    ),
    Case(
        "`jax.grad` of `jax.grad` (reverse over reverse)",
        "ValueError",
        "Reverse mode over reverse mode (`jax.grad` or `jax.jacrev` of a function that takes "
        "`jax.grad`/`jax.vjp` through `diffeqsolve`) is not supported with "
        "`adjoint=CheckpointAdjoint()`",
        lambda: _grad(lambda y0: _grad(lambda y0: _solve(y0=y0).ys.sum(), y0).sum(), Y0),
    ),
]

_T = jnp.asarray([0.0, 1.0, 2.0, 3.0])
_Y = jnp.ones(4)

INTERPOLATION = [
    Case(
        "`ts` of an interpolation not 1-D",
        "ValueError",
        "`LinearInterpolation(ts=...)` must be 1-D; got shape (2, 4).",
        lambda: oc.LinearInterpolation(jnp.ones((2, 4)), _Y),
    ),
    Case(
        "`ts` of an interpolation with one time",
        "ValueError",
        "`CubicInterpolation(ts=...)` needs at least 2 times; got 1.",
        lambda: oc.CubicInterpolation(jnp.asarray([0.0]), (_Y[:0],) * 4),
    ),
    Case(
        "complex `ts` of an interpolation",
        "TypeError",
        "`LinearInterpolation(ts=...)` must hold real times; got dtype complex128.",
        lambda: oc.LinearInterpolation(_T.astype(jnp.complex128), _Y),
    ),
    Case(
        "`ts` of an interpolation with NaN",
        "ValueError",
        "`backward_hermite_coefficients(ts=...)` must be finite; got ts[2]=nan.",
        lambda: oc.backward_hermite_coefficients(_T.at[2].set(jnp.nan), _Y),
    ),
    Case(
        "`ts` of an interpolation decreasing",
        "ValueError",
        "`LinearInterpolation(ts=...)` must be increasing; got ts[2]=0.5 after ts[1]=1.0: "
        "sort by time.",
        lambda: oc.LinearInterpolation(jnp.asarray([0.0, 1.0, 0.5, 3.0]), _Y),
    ),
    Case(
        "repeated time in `ts` when filling in missing data",
        "ValueError",
        "`linear_interpolation(ts=...)` must be strictly increasing; got ts[2]=1.0 after "
        "ts[1]=1.0: merge the rows at repeated times.",
        lambda: oc.linear_interpolation(jnp.asarray([0.0, 1.0, 1.0, 3.0]), _Y),
    ),
    Case(
        "traced `ts` not increasing when filling in missing data",
        "equinox.EquinoxRuntimeError",
        "`backward_hermite_coefficients(ts=...)` must be strictly increasing (checked at run time)",
        lambda: _jit(lambda ts: oc.backward_hermite_coefficients(ts, _Y), _T[::-1]),
    ),
    Case(
        "data of another length than `ts`",
        "ValueError",
        "`LinearInterpolation(ts, ys)`: every leaf of `ys` must have 4 entries along its "
        "first axis; leaf ['b'] has shape (3,).",
        lambda: oc.LinearInterpolation(_T, {"a": _Y, "b": _Y[:3]}),
    ),
    Case(
        "cubic coefficients not four PyTrees",
        "ValueError",
        "`CubicInterpolation(ts, coeffs)`: `coeffs` must be a tuple `(d, c, b, a)` of four PyTrees",
        lambda: oc.CubicInterpolation(_T, (_Y[:3], _Y[:3])),
    ),
    Case(
        "cubic coefficients of the wrong length",
        "ValueError",
        "`CubicInterpolation(ts, coeffs)`: every leaf of `coeffs.d` must have 3 entries "
        "along its first axis; leaf coeffs.d has shape (4,).",
        lambda: oc.CubicInterpolation(_T, (_Y, _Y[:3], _Y[:3], _Y[:3])),
    ),
    Case(
        "`deriv0` not structured like the data",
        "ValueError",
        "`backward_hermite_coefficients(deriv0=...)` must have the PyTree structure of `ys`",
        lambda: oc.backward_hermite_coefficients(_T, (_Y,), deriv0=0.0),
    ),
]


def _cond(t, y, args, **kwargs):
    return y[0] - 0.5


EVENTS = [
    Case(
        "`Event(direction)` not shaped like `cond_fn`",
        "ValueError",
        "`Event(direction=...)` must be `None`, a bool, or a PyTree shaped like `cond_fn`",
        lambda: oc.Event([_cond, _cond], direction=[True]),
    ),
    Case(
        "`Event(direction)` leaf not `None` or a bool",
        "ValueError",
        "`Event(direction=...)` leaves must be `None`, `True` or `False`; got 1.",
        lambda: oc.Event(_cond, direction=1),
    ),
    Case(
        "`event` not an `Event`",
        "TypeError",
        "`diffeqsolve(event=...)` expects an `Event` (e.g. `odeckpt.Event(cond_fn)`); got "
        "function.",
        lambda: _solve(event=_cond),
    ),
    Case(
        "`discrete_terminating_event` not an `AbstractDiscreteTerminatingEvent`",
        "TypeError",
        "`diffeqsolve(discrete_terminating_event=...)` expects an "
        "`AbstractDiscreteTerminatingEvent` (e.g. `odeckpt.DiscreteTerminatingEvent(cond_fn)`); "
        "got function.",
        lambda: _solve(discrete_terminating_event=lambda state, **kwargs: True),
    ),
    Case(
        "both `event` and `discrete_terminating_event`",
        "ValueError",
        "`diffeqsolve` takes one of `event=...` and `discrete_terminating_event=...`, not both: "
        "pass the conditions together, `Event(cond_fn=(cond1, cond2))`.",
        lambda: _solve(
            event=oc.Event(lambda t, y, args, **kw: y[0] - 0.5),
            discrete_terminating_event=oc.DiscreteTerminatingEvent(
                lambda state, **kw: state.tprev > 0.5
            ),
        ),
    ),
    Case(
        "event condition returning a vector",
        "ValueError",
        "`Event(cond_fn=...)` conditions must return a real floating or boolean scalar; "
        "condition 0 returned float64[2]. Reduce or cast it.",
        lambda: _solve(event=oc.Event(lambda t, y, args, **kw: y)),
    ),
    Case(
        "event condition returning an integer",
        "ValueError",
        "`Event(cond_fn=...)` conditions must return a real floating or boolean scalar; "
        "condition 1 returned int32[]. Reduce or cast it.",
        lambda: _solve(event=oc.Event([_cond, lambda t, y, args, **kw: jnp.int32(1)])),
    ),
    Case(
        "event with `ReversibleAdjoint()`",
        "ValueError",
        "`ReversibleAdjoint` does not differentiate event times: use `CheckpointAdjoint()`, "
        "`InterpolatingAdjoint(solver=Tsit5())` or `BacksolveAdjoint(solver=Tsit5())` "
        "(reverse mode), or `ForwardMode()`, with `event=...`.",
        lambda: _solve(
            event=oc.Event(_cond), solver=oc.ReversibleHeun(), adjoint=oc.ReversibleAdjoint()
        ),
    ),
    Case(
        "traced NaN `t1` with an event",
        "equinox.EquinoxRuntimeError",
        "`t1` must not be NaN. (checked at run time)",
        lambda: _jit(lambda t1: _solve(t1=t1, event=oc.Event(_cond)).ys, jnp.asarray(jnp.nan)),
    ),
    Case(
        "`steady_state_event()` defaults without an adaptive controller",
        "ValueError",
        "`steady_state_event()` takes `rtol`, `atol` and `norm` from an adaptive controller, "
        "and `ConstantStepSize` is not one",
        lambda: _solve(event=oc.Event(oc.steady_state_event())),
    ),
]

CONTROL_TS = jnp.linspace(0.0, 1.0, 5)
CONTROL_PATH = oc.LinearInterpolation(CONTROL_TS, jnp.stack([CONTROL_TS, CONTROL_TS**2], -1))


def _cde(field=lambda t, y, args: jnp.stack([y, -y], -1), path=CONTROL_PATH, **kwargs):
    return _solve(f=oc.ControlTerm(field, path), **kwargs)


CONTROLS = [
    Case(
        "`ControlTerm` control that is not a path",
        "TypeError",
        "`ControlTerm(vector_field, control)` needs a control path: an `odeckpt.AbstractPath`",
        lambda: oc.ControlTerm(lambda t, y, args: y, 3.0),
    ),
    Case(
        "`ControlTerm` vector field not callable",
        "TypeError",
        "`ControlTerm(vector_field, control)` needs a callable `vector_field(t, y, args)`; "
        "got float.",
        lambda: oc.ControlTerm(2.0, CONTROL_PATH),
    ),
    Case(
        "`ControlTerm` field shaped against its control",
        "ValueError",
        "A `ControlTerm`'s vector field must return, for each leaf of `y`, an array shaped "
        "`y.shape + control.shape`; got shape (2,) for `y` shaped (2,) and a control "
        "increment shaped (2,) (expected (2, 2)).",
        lambda: _cde(field=lambda t, y, args: -y),
    ),
    Case(
        "`ControlTerm` field structured unlike `y`",
        "ValueError",
        "A `ControlTerm`'s vector field must return a PyTree with the structure of `y`",
        lambda: _cde(field=lambda t, y, args: (jnp.stack([y, y], -1),)),
    ),
    Case(
        "`ControlTerm` operator field that cannot take the control",
        "ValueError",
        "A `ControlTerm`'s vector field returned a lineax operator whose `mv` cannot take "
        "the control's increment",
        lambda: _cde(field=lambda t, y, args: lx.DiagonalLinearOperator(jnp.ones(3))),
    ),
    Case(
        "`ControlTerm` path not covering [t0, t1]",
        "ValueError",
        "The control of a `ControlTerm` must be defined over the solve's whole interval [t0, t1]",
        lambda: _cde(t1=2.0),
    ),
    Case(
        "`ControlTerm` path not covering [t0, t1], traced",
        "equinox.EquinoxRuntimeError",
        "The control of a `ControlTerm` must be defined over the solve's whole interval [t0, t1]",
        lambda: _jit(lambda t1: _cde(t1=t1).ys, jnp.asarray(2.0)),
    ),
    Case(
        "`ControlTerm` on a smooth path by increments, continuous adjoint",
        "ValueError",
        "`BacksolveAdjoint` solves the backward ODE of `ControlTerm(f, control).to_ode()` "
        "along the forward solution between steps",
        lambda: _cde(
            path=oc.CubicInterpolation(
                CONTROL_TS, oc.backward_hermite_coefficients(CONTROL_TS, CONTROL_TS[:, None])
            ),
            field=lambda t, y, args: y[:, None],
            adjoint=oc.BacksolveAdjoint(),
        ),
    ),
    Case(
        "`ControlTerm` with a solver carrying state between steps",
        "ValueError",
        "`LeapfrogMidpoint` carries state from one step to the next, which the steps of a "
        "`ControlTerm` cannot share",
        lambda: _cde(solver=oc.LeapfrogMidpoint()),
    ),
    Case(
        "`with_stepsize_controller_tols` of another root finder",
        "TypeError",
        "`with_stepsize_controller_tols(cls)` takes `odeckpt.VeryChord`",
        lambda: oc.with_stepsize_controller_tols(lx.LU),
    ),
    Case(
        "`with_stepsize_controller_tols` without controller tolerances",
        "ValueError",
        "`with_stepsize_controller_tols(VeryChord)()` takes its tolerances from an adaptive "
        "step-size controller; `ConstantStepSize` has none.",
        lambda: _solve(
            solver=oc.Kvaerno3(root_finder=oc.with_stepsize_controller_tols(oc.VeryChord)())
        ),
    ),
]

FAILED = [
    Case(
        "`max_steps` reached",
        "equinox.EquinoxRuntimeError",
        "`max_steps` (20) reached at t = 0.2 of [0, 1]. The maximum number of solver steps",
        lambda: _solve(dt0=0.01, max_steps=20),
    ),
    Case(
        "`max_steps` reached, backwards in time, under `jax.jit`",
        "jax.errors.JaxRuntimeError",
        "`max_steps` (20) reached at t = 0.8 of [1, 0].",
        lambda: jax.block_until_ready(
            jax.jit(lambda y0: _solve(y0=y0, t0=1.0, t1=0.0, dt0=-0.01, max_steps=20).ys)(Y0)
        ),
    ),
    Case(
        "`max_steps` reached, traced `t1`",
        "equinox.EquinoxRuntimeError",
        "`max_steps` (20) reached at t = 0.2 (before `t1`).",
        lambda: _jit(lambda t1: _solve(t1=t1, dt0=0.01, max_steps=20).ys, jnp.asarray(1.0)),
    ),
    Case(
        "step size below `dtmin`",
        "equinox.EquinoxRuntimeError",
        "Step size below `dtmin` at t = 0 of [0, 10]. The step size fell below",
        _too_tight,
    ),
    Case(
        "NaN or inf produced mid-solve",
        "equinox.EquinoxRuntimeError",
        "Non-finite state (NaN or inf) in the step from t = 0.5 of [0, 1].",
        lambda: _solve(f=_nan_after_half),
    ),
    Case(
        "Newton iteration not converging, constant steps",
        "equinox.EquinoxRuntimeError",
        "Newton iteration failed in the step from t = 0 of [0, 1]. An implicit stage's",
        lambda: _solve(
            f=_cubic_decay, solver=oc.Kvaerno3(max_iters=2), dt0=0.5, y0=jnp.asarray([10.0])
        ),
    ),
    Case(
        "Krylov linear solve not converging, constant steps",
        "equinox.EquinoxRuntimeError",
        "Linear solve failed in the step from t = 0 of [0, 1]. An implicit stage's iterative "
        "linear solve",
        lambda: _solve(
            f=lambda t, y, args: jnp.asarray([[-1e3, 1e2], [-1e2, -5e2]]) @ y,
            solver=oc.Kvaerno3(linear_solver=lx.GMRES(rtol=1e-12, atol=1e-14, max_steps=2)),
            dt0=0.5,
        ),
    ),
]

CASES = (
    STATE + VECTOR_FIELD + TIMES + SAVEAT + OPTIONS + ADJOINTS + EVENTS + INTERPOLATION + CONTROLS
) + FAILED


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_bad_input_raises_documented_error(case: Case):
    with pytest.raises(EXCEPTIONS[case.exception]) as info:
        case.call()
    message = str(info.value)
    if case.exception in RUNTIME:  # the text is wrapped in JAX's or equinox's report
        assert case.start in message
    else:
        assert message.startswith(case.start), message


# ----------------------------------------------------------------------------------
# The docs table


_ROW = re.compile(
    r"^\|\s*(?P<description>.+?)\s*\|\s*`(?P<exception>[\w.]+)`\s*\|"
    r"\s*``\s(?P<start>.+)\s``\s*\|$"
)


def docs_rows() -> list[tuple[str, str, str]]:
    """The `(bad input, exception, message start)` rows of every table in the docs."""
    rows = []
    for line in DOCS.read_text().splitlines():
        match = _ROW.match(line.strip())
        if match:
            rows.append((match["description"], match["exception"], match["start"]))
    return rows


def test_docs_table_matches_cases():
    documented = docs_rows()
    expected = [(c.description, c.exception, c.start) for c in CASES]
    missing = [row for row in expected if row not in documented]
    extra = [row for row in documented if row not in expected]
    assert not missing and not extra, f"missing from docs: {missing}\nnot tested: {extra}"
    assert documented == expected  # same order too


HEADERS = ("| Bad input |", "| Failed solve |", "| Code |")


def test_every_table_row_is_parsed():
    lines = DOCS.read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(HEADERS)]
    code_rows = [line for line in rows if line.startswith("| `RESULTS.")]
    assert len(rows) - len(code_rows) == len(docs_rows())


def test_cases_are_distinct():
    assert len({c.description for c in CASES}) == len(CASES)
