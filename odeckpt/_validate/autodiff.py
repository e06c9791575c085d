"""Which autodiff modes go through a solve, checked when `diffeqsolve` is traced.

Forward mode through a custom-VJP adjoint and reverse over reverse are refused with a
message naming what works, at trace time or where the tangent meets the guards of
`tangent_guards` (reverse mode through `ForwardMode()` is its own: forward
sensitivities). See `docs/adjoints.md`, "Autodiff modes", for the table, the reasons and
where each refusal is raised.
"""

import functools as ft

import jax
import jax.numpy as jnp

from .tangent_guards import refuse_forward

_FORWARD_THROUGH_VJP = (
    "`jax.jvp`/`jax.jacfwd`/`jax.linearize` of `diffeqsolve` with `adjoint={name}`: this adjoint "
    "defines reverse mode only (a custom VJP, which JAX cannot differentiate in "
    "forward mode). Use `adjoint=ForwardMode()` for `jax.jvp`/`jax.jacfwd` of a solve; "
    "for second derivatives keep `{name}` and put forward mode outside reverse mode: "
    "`jax.hessian(f)`, `jax.jacfwd(jax.grad(f))` or `jax.jvp(jax.grad(f), (x,), (v,))`."
)
_REVERSE_OVER_REVERSE = (
    "Reverse mode over reverse mode (`jax.grad` or `jax.jacrev` of a function that "
    "takes `jax.grad`/`jax.vjp` through `diffeqsolve`) is not supported with "
    "`adjoint={name}`: the outer pass would have to transpose the inner one's forward "
    "and backward loops (`jax.linearize` of such a function is refused with it). Take "
    "second derivatives forward-over-reverse, with the same adjoint and memory: "
    "`jax.jvp(jax.grad(f), (x,), (v,))` (a Hessian-vector product), `jax.hessian(f)` "
    "or `jax.jacfwd(jax.grad(f))`."
)


@ft.cache
def _tracer_types() -> tuple[type, type]:
    """The tracer types `jax.jvp` and `jax.vjp` trace a function with (found once: they
    are JAX's classes, the same for every solve)."""
    seen = []

    def probe(x):
        seen.append(type(x))
        return x

    _ = jax.jvp(probe, (1.0,), (1.0,))
    _ = jax.vjp(probe, 1.0)
    return seen[0], seen[1]


def check_autodiff(adjoint, problem, state0):
    """`(problem, state0)`, unchanged, after checking that the autodiff modes applied
    to them go through `adjoint`; raises `ValueError` naming what works otherwise.
    Their floating leaves pass through an identity that refuses, where JAX would fail
    later (`docs/adjoints.md`, "Autodiff modes"), forward mode and a second reverse pass."""
    forward, reverse = _tracer_types()
    name = f"{type(adjoint).__name__}()"
    if adjoint.forward_mode:  # both modes: `ForwardMode` refuses what it cannot take
        return problem, state0
    leaves = jax.tree.leaves((problem, state0))
    if forward is not reverse and any(isinstance(x, forward) for x in leaves):
        raise ValueError(_FORWARD_THROUGH_VJP.format(name=name))

    forward_message = _FORWARD_THROUGH_VJP.format(name=name)
    return refuse_forward(
        (problem, state0), forward_message, _REVERSE_OVER_REVERSE.format(name=name)
    )


def check_hvp_tangent(x, v):
    """`v` cast to the dtypes of `x`, after checking that it is a tangent at `x` (the
    same PyTree structure and shapes), for `odeckpt.hvp`."""
    x_leaves, x_def = jax.tree.flatten(x)
    v_leaves, v_def = jax.tree.flatten(v)
    shapes = [jnp.shape(leaf) for leaf in x_leaves]
    if x_def != v_def or shapes != [jnp.shape(leaf) for leaf in v_leaves]:
        raise ValueError(
            "`odeckpt.hvp(f, x, v)`: `v` must be shaped like `x` (the same PyTree "
            f"structure and leaf shapes); got x: {jax.tree.map(jnp.shape, x)}, "
            f"v: {jax.tree.map(jnp.shape, v)}."
        )
    cast = [
        jnp.asarray(t, jnp.result_type(leaf)) for leaf, t in zip(x_leaves, v_leaves, strict=True)
    ]
    return jax.tree.unflatten(v_def, cast)
