"""`hvp`: a Hessian-vector product, forward over reverse."""

from collections.abc import Callable
from typing import Any

import jax
from jaxtyping import PyTree

from ._validate import check_hvp_tangent


def hvp(f: Callable[..., Any], x: PyTree, v: PyTree, *args: Any) -> PyTree:
    """The Hessian of the scalar `f(x, *args)` with respect to `x`, applied to `v`.

    Forward over reverse: `jax.jvp(jax.grad(f), (x,), (v,))`, the form every adjoint
    takes (`docs/adjoints.md`, "Autodiff modes"). Through `CheckpointAdjoint(checkpoints=c)`
    it stores the tangent of each checkpoint beside it, so its memory is set by `c`, not
    by `max_steps`; it costs a few gradients. `jax.vmap` it over `v` for several
    products, or use `jax.hessian(f)` for the whole matrix.

    ```python
    def loss(params, data):
        sol = odeckpt.diffeqsolve(term, odeckpt.Tsit5(), 0.0, 1.0, 0.1, y0, params)
        return jnp.sum((sol.ys - data) ** 2)

    hv = odeckpt.hvp(loss, params, direction, data)  # shaped like params
    ```

    Args:
        f: a function of `(x, *args)` returning a real scalar.
        x: where the Hessian is taken: any PyTree of floating arrays.
        v: the direction, shaped like `x` (its leaves are cast to `x`'s dtypes).
        *args: further arguments of `f`, not differentiated.

    Returns:
        `H v`, shaped like `x`.

    Raises:
        ValueError: if `v` is not shaped like `x`.
    """
    v = check_hvp_tangent(x, v)
    return jax.jvp(lambda x: jax.grad(f)(x, *args), (x,), (v,))[1]
