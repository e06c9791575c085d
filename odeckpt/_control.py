"""Controlled differential equations: `ControlTerm` (diffrax's), `dy = f(t, y, args) dX(t)`
for a deterministic control path `X`, and the term a solve steps it as.

A `ControlTerm` handed to `diffeqsolve` is stepped with the increments of its control:
each step from `t0` to `t0 + dt` evaluates `dX = X(t0 + dt) - X(t0)` once and every
stage of the solver applies the vector field to it (`vf_prod(t_i, y_i, args, dX)`), as
diffrax's solvers step a control term. Inside odeckpt every term's `vf` is a rate, so the
step sees the field applied to the step's mean rate `dX / dt`, which is the same scheme
(`_ControlIncrements`). Outside a step (the first step's heuristic, the continuous
adjoints' backward ODE, a derivative with respect to `t1`) the term is the ODE
`dy/dt = f(t, y, args) X'(t)`, which `ControlTerm.to_ode()` also gives.
"""

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np

from odeckpt._core import Args, RealScalarLike, Y, closure_convert
from odeckpt._interpolation import AbstractPath, float_time
from odeckpt._terms import AbstractTerm, ODETerm

_VF = TypeVar("_VF")
_Control = TypeVar("_Control")


def control_prod(vf, control) -> Y:
    """The vector field applied to a control value: `vf.mv(control)` for a lineax operator,
    else leaf by leaf the contraction of a leaf shaped `y_leaf.shape + x_leaf.shape`
    against the control's leaf over the control's dimensions (diffrax's product,
    conjugating the field as it does)."""
    if isinstance(vf, lx.AbstractLinearOperator):
        return vf.mv(control)
    return jax.tree.map(_contract, vf, control)


def _contract(v, x):
    """`tensordot(conj(v), x)` over `x`'s dimensions, in `v`'s dtype (strict promotion
    allows no mixing): a real control on a complex field is cast up, and a complex
    control casts a real field up."""
    v, x = jnp.asarray(v), jnp.asarray(x)
    if x.dtype != v.dtype:
        if jnp.iscomplexobj(x) and not jnp.iscomplexobj(v):
            v = v.astype(x.dtype)
        else:
            x = x.astype(v.dtype)
    return jnp.tensordot(jnp.conj(v), x, axes=x.ndim)


class _CallableToPath(AbstractPath):
    """A control given as a function `(t0, t1) -> increment` (diffrax accepts one), as a
    path on the whole real line. Its derivative at `t` is the forward-mode derivative of
    the increment `fn(t, s)` in `s` at `s = t`."""

    fn: Callable

    def __init__(self, fn: Callable):
        self.fn = fn

    @property
    def t0(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return -jnp.inf

    @property
    def t1(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return jnp.inf

    def evaluate(self, t0, t1=None, left=True):
        del left
        if t1 is None:
            raise ValueError(
                "This control is a function `(t0, t1) -> increment`: it has increments, "
                "not values. Pass an `AbstractPath` (e.g. `LinearInterpolation(ts, xs)`) "
                "to evaluate it at one time."
            )
        return self.fn(t0, t1)

    def derivative(self, t, left=True):
        del left
        t = float_time(t)
        return jax.jvp(lambda s: self.fn(t, s), (t,), (jnp.ones_like(t),))[1]


def as_path(control) -> AbstractPath:
    """`control` as a path: an `AbstractPath` as it is; a callable `(t0, t1) ->
    increment` as diffrax takes one."""
    if isinstance(control, AbstractPath):
        return control
    if callable(control):
        return _CallableToPath(control)
    raise TypeError(
        "`ControlTerm(vector_field, control)` needs a control path: an "
        "`odeckpt.AbstractPath` (an interpolation such as `CubicInterpolation(ts, "
        "coeffs)`, or a subclass of your own with `t0`, `t1` and `evaluate`) or a "
        f"function `(t0, t1) -> increment`; got {type(control).__name__}."
    )


class ControlTerm(AbstractTerm[_VF, _Control]):
    """A controlled term `dy = f(t, y, args) dX(t)`, driven by a path `X` (diffrax's
    `ControlTerm`, for deterministic controls): neural controlled differential equations
    through interpolated time series, and any equation forced by a known signal.

    The vector field returns, for each leaf of `y` shaped `s` and the control's leaf
    shaped `c`, an array shaped `s + c`, contracted against the control's increment over
    `c`; or a lineax operator, applied with its `mv`. `to_ode()` is the ODE
    `dy/dt = f(t, y, args) X'(t)`, which every solver and adjoint takes.

    `diffeqsolve(ControlTerm(f, X), solver, ...)` steps the term itself, as diffrax's
    solvers do: each step from `t0` to `t1` reads the increment `X(t1) - X(t0)` once, and
    each stage applies `f` at the stage to it. That needs the path's values only, and
    its derivative for no step (a one-step solver: the Runge–Kutta, Rosenbrock and
    IMEX methods). Where `X` has kinks (a linear interpolation's knots) pass its knots
    as the controller's `jump_ts`, or steps straddling a kink lose order.

    Trade-off: stepping by increments and `to_ode()` differ by the solver's error (they
    are the same scheme only for a control linear in time); both are differentiable
    under every adjoint, with respect to the field's parameters, `y0` and the path's
    data. The continuous adjoints (`BacksolveAdjoint`, `InterpolatingAdjoint`) solve the
    backward ODE of `to_ode()`.

    Args:
        vector_field: `f(t, y, args)`, returning arrays shaped as above or a lineax
            operator.
        control: an `odeckpt.AbstractPath` (any interpolation, or a subclass of your
            own: `t0`, `t1` and `evaluate`, and `derivative` if not by forward mode),
            or a function `(t0, t1) -> increment` (its derivative, where one is
            needed, is taken by forward mode).

    Example:
        ```python
        ts = jnp.linspace(0.0, 1.0, 11)
        control = odeckpt.LinearInterpolation(ts, jnp.stack([ts, jnp.sin(ts)], -1))
        term = odeckpt.ControlTerm(lambda t, y, args: jnp.stack([y, -y], -1), control)
        odeckpt.diffeqsolve(term, odeckpt.Tsit5(), 0.0, 1.0, 0.05, y0,
                            stepsize_controller=odeckpt.StepTo(ts=ts))
        ```

    References:
        T. Lyons, *Differential equations driven by rough signals*, Rev. Mat.
        Iberoamericana 14 (1998). P. Kidger, J. Morrill, J. Foster & T. Lyons, *Neural
        controlled differential equations for irregular time series*, NeurIPS 2020.
    """

    vector_field: Callable[..., _VF]
    control: AbstractPath

    def __init__(self, vector_field: Callable[..., _VF], control: Any):
        if not callable(vector_field):
            raise TypeError(
                "`ControlTerm(vector_field, control)` needs a callable `vector_field(t, "
                f"y, args)`; got {type(vector_field).__name__}."
            )
        self.vector_field = vector_field
        self.control = as_path(control)

    def vf(self, t: RealScalarLike, y: Y, args: Args) -> _VF:
        """`vector_field(t, y, args)`: arrays shaped `y_leaf.shape + x_leaf.shape`, or a
        lineax operator."""
        return self.vector_field(t, y, args)

    def contr(self, t0: RealScalarLike, t1: RealScalarLike, **kwargs) -> Any:
        """The control's increment `X(t1) - X(t0)`."""
        return self.control.evaluate(t0, t1, **kwargs)

    def prod(self, vf: _VF, control: Any) -> Y:
        """`vf` applied to `control` (`control_prod`)."""
        return control_prod(vf, control)

    def to_ode(self) -> ODETerm:
        """The ODE `dy/dt = f(t, y, args) X'(t)` this term defines, as an `ODETerm`."""
        return ODETerm(_ControlToODE(self))

    def as_ode(self) -> AbstractTerm:
        return self.to_ode()

    @property
    def steps_by_increments(self) -> bool:
        return True

    def controlled(self, y: Y) -> tuple:
        return ((self, y),)

    def reversed_in_time(self, direction: jax.Array) -> AbstractTerm:
        """The term in `tau = direction * t`: the field at `direction * tau`, driven by
        `tau -> X(direction * tau)` (the increments carry the sign)."""
        return ControlTerm(
            _AtTime(self.vector_field, direction), _ReversedPath(self.control, direction)
        )

    def converted_part(self, t0, y0: Y, args: Args) -> AbstractTerm:
        """The term a solve steps (`_ControlIncrements`): the field, the control's
        increments and its derivative, each closure-converted so that gradients reach
        the field's parameters and the path's data."""
        control, tau0 = self.control, float_time(t0)
        return _ControlIncrements(
            field=closure_convert(self.vf, t0, y0, args),
            increment=closure_convert(lambda a, b: control.evaluate(a, b), tau0, tau0),
            derivative=closure_convert(lambda t: control.derivative(t), tau0),
            rate=None,
        )


class _ControlToODE(eqx.Module):
    """`to_ode`'s vector field: `f(t, y, args)` applied to `X'(t)`."""

    control_term: ControlTerm

    def __call__(self, t, y, args):
        control = self.control_term.control.derivative(t)
        return self.control_term.vf_prod(t, y, args, control)


class _AtTime(eqx.Module):
    """`fn(direction * tau, y, args)`."""

    fn: Callable
    direction: jax.Array

    def __call__(self, tau, y, args):
        return self.fn(self.direction * tau, y, args)


class _ReversedPath(AbstractPath):
    """`tau -> X(direction * tau)`: its increments are `X`'s between the mapped times and
    its derivative `direction * X'(direction * tau)`."""

    path: AbstractPath
    direction: jax.Array

    def __init__(self, path: AbstractPath, direction: jax.Array):
        self.path, self.direction = path, direction

    @property
    def t0(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return jnp.minimum(self.direction * self.path.t0, self.direction * self.path.t1)

    @property
    def t1(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return jnp.maximum(self.direction * self.path.t0, self.direction * self.path.t1)

    def evaluate(self, t0, t1=None, left=True):
        if t1 is None:
            return self.path.evaluate(self.direction * t0, left=left)
        return self.path.evaluate(self.direction * t0, self.direction * t1, left=left)

    def derivative(self, t, left=True):
        out = self.path.derivative(self.direction * t, left=left)
        return jax.tree.map(lambda v: (self.direction * v).astype(v.dtype), out)


class _ControlIncrements(AbstractTerm):
    """A `ControlTerm` as a solve holds it: the field, the control's increments and its
    derivative, closure-converted. `for_step(t0, dt)` fixes the step's mean rate
    `(X(t0 + dt) - X(t0)) / dt`, which `vf` then applies the field to (so that `dt` times
    a stage is `vf_prod` of the increment, diffrax's stage); without one, `vf` is the ODE
    `f(t, y, args) X'(t)`."""

    field: Callable
    increment: Callable
    derivative: Callable
    rate: Any

    def vf(self, t, y, args):
        control = self.derivative(t) if self.rate is None else self.rate
        return _like_state(control_prod(self.field(t, y, args), control), y)

    @property
    def steps_by_increments(self) -> bool:
        return True

    def for_step(self, t0, dt) -> AbstractTerm:
        dx = self.increment(t0, t0 + dt)
        safe = jnp.where(dt == 0, jnp.ones_like(dt), dt)
        rate = jax.tree.map(lambda v: v / safe.astype(v.dtype), dx)
        return dataclasses.replace(self, rate=rate)


def _like_state(out, y):
    """The product in `y`'s dtypes where it widened nothing (a real control on a real
    field); a result of another structure is returned as it is."""
    if jax.tree.structure(out) != jax.tree.structure(y):
        return out
    return jax.tree.map(
        lambda o, v: o.astype(v.dtype) if np.result_type(o.dtype, v.dtype) == v.dtype else o,
        out,
        y,
    )


def WeaklyDiagonalControlTerm(vector_field: Callable, control: Any) -> ControlTerm:
    """Deprecated in diffrax, kept for its code: a `ControlTerm` whose field returns the
    diagonal of a square matrix (a PyTree like `y`), multiplied pointwise with the
    control's increment. Warns, and returns `ControlTerm` with a field returning
    `lineax.DiagonalLinearOperator(vector_field(t, y, args))`, which is what to write
    instead."""
    warnings.warn(
        "`WeaklyDiagonalControlTerm` is now deprecated, in favour of combining "
        "`ControlTerm` with a `lineax.AbstractLinearOperator`: write "
        "`ControlTerm(lambda t, y, args: lineax.DiagonalLinearOperator(vector_field(t, y, "
        "args)), control)`.",
        DeprecationWarning,
        stacklevel=2,
    )
    return ControlTerm(_Diagonal(vector_field), control)


class _Diagonal(eqx.Module):
    """`lineax.DiagonalLinearOperator(fn(t, y, args))`."""

    fn: Callable

    def __call__(self, t, y, args):
        return lx.DiagonalLinearOperator(self.fn(t, y, args))
