"""Check gradients and Hessians against finite differences: `check_grads`,
`assert_grads_close`, `check_hessian` and `assert_hessian_close`.

The analytic gradient (or Hessian) of the floating-point array leaves of
`args[argnums]` is compared with Richardson-extrapolated central differences, entry by
entry or along random directions; an entry that fails is a `mismatch` or, where the
differences are too noisy to decide, `inconclusive`. See `docs/testing.md`.
"""

from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from . import _fd
from ._fd_eval import RawLeaf, directional_check, full_check
from ._fd_target import make_target
from ._gradreport import GradReport, HessianReport, LeafReport
from ._hess_eval import directional_hessian, full_hessian

__all__ = [
    "GradCheckError",
    "GradReport",
    "HessianCheckError",
    "HessianReport",
    "LeafReport",
    "assert_grads_close",
    "assert_hessian_close",
    "check_grads",
    "check_hessian",
    "default_rtol",
]

default_rtol = _fd.default_rtol


def check_grads(
    fn: Callable[..., PyTree],
    *args: Any,
    argnums: int | Sequence[int] = 0,
    mode: Literal["full", "directional"] = "full",
    num_directions: int = 8,
    order: int = 2,
    rtol: float | None = None,
    atol: float | None = None,
    key: int | jax.Array | None = None,
    ad: Literal["reverse", "forward"] = "reverse",
    cotangent: PyTree | None = None,
    scale: float | None = None,
    batch_size: int | None = None,
) -> GradReport:
    """Compare the gradient of `fn` with finite differences (docs/testing.md).

    Args:
        fn: maps `*args` to a scalar, or to any PyTree of floating arrays (then
            reduced with a cotangent, see `cotangent`).
        *args: the arguments; those in `argnums` are differentiated (their floating
            array leaves), the others are passed unchanged.
        argnums: index or indices of the arguments to differentiate.
        mode: `"full"`: every entry of every leaf; `"directional"`: `num_directions`
            random directions over all leaves at once.
        num_directions: directions in directional mode.
        order: Richardson levels, at least 1: `order + 1` step sizes `h, 2h, …,
            2^order h`, with `h = eps^(1/3) · max(|x|, s)`; `2 (order + 1)`
            evaluations per entry. 1 gives a more pessimistic error estimate (more
            `inconclusive`); see docs/testing.md, "Finite differences".
        rtol: relative tolerance; default `default_rtol(eps) = sqrt(eps)`.
        atol: absolute tolerance; default `rtol` times the largest `|FD|` of the leaf
            (of the directions, in directional mode).
        key: seed for the directions and the cotangent: an `int` or a JAX PRNG key
            (default 0, so results are reproducible).
        ad: `"reverse"` (`jax.grad`, for `CheckpointAdjoint` and the continuous
            adjoints) or `"forward"` (`jax.jacfwd` / `jax.jvp`, for `ForwardMode`).
        cotangent: for a non-scalar output, a PyTree like the output; default a
            standard normal draw from `key`.
        scale: the typical magnitude of the differentiated entries; default per leaf,
            its root mean square (1 if all zero).
        batch_size: evaluate this many perturbed points at once with `vmap`
            (default one at a time, as `fn` is written).

    Returns:
        A `GradReport`; `report.passed` says whether every entry agreed.

    Raises:
        ValueError: for bad `argnums`, `mode`, `ad`, `order`, `num_directions` or a
            `cotangent` not shaped like the output, or nothing to differentiate.
        TypeError: for a non-floating output.
    """
    _check_options("check_grads", mode, ad, order, num_directions)
    rng = _rng(key)  # draws the cotangent (if any), then the directions
    target = make_target(fn, args, argnums, cotangent, rng)
    if mode == "full":
        value, leaves, count = full_check(target, ad, order, scale, batch_size)
    else:
        value, leaves, count = directional_check(
            target, ad, order, num_directions, rng, scale, batch_size
        )
    return GradReport(tuple(_judge(x, rtol, atol) for x in leaves), value, mode, ad, order, count)


def assert_grads_close(fn: Callable[..., PyTree], *args: Any, **kwargs: Any) -> GradReport:
    """`check_grads(fn, *args, **kwargs)`, raising if it did not pass (for pytest).

    Args:
        fn, *args, **kwargs: as for `check_grads` (e.g. `rtol=`, `atol=`, `mode=`).

    Returns:
        The `GradReport`, when it passed.

    Raises:
        GradCheckError: an `AssertionError` whose message is the report's table,
            naming for each failing leaf its worst entries (index, analytic vs FD
            value, FD error estimate, tolerance) and the verdict: `mismatch`,
            `inconclusive` (FD too noisy) or `non-finite`; its `.report` attribute
            is the `GradReport`.
    """
    report = check_grads(fn, *args, **kwargs)
    if not report.passed:
        raise GradCheckError(report)
    return report


def check_hessian(
    fn: Callable[..., PyTree],
    *args: Any,
    argnums: int | Sequence[int] = 0,
    mode: Literal["full", "directional"] = "full",
    num_directions: int = 8,
    order: int = 2,
    rtol: float | None = None,
    atol: float | None = None,
    key: int | jax.Array | None = None,
    ad: Literal["reverse", "forward"] = "reverse",
    cotangent: PyTree | None = None,
    scale: float | None = None,
    batch_size: int | None = None,
) -> HessianReport:
    """Compare the Hessian of `fn` with finite differences of its gradient.

    The analytic Hessian is forward mode over the gradient (`ad` picks the gradient's
    mode); see "Second derivatives" in docs/testing.md.

    Args:
        fn, *args, argnums, cotangent, key, scale, batch_size: as for `check_grads`.
        mode: `"full"`: every entry of the Hessian (`2 (order + 1)` gradient
            evaluations per differentiated entry); `"directional"`: `H v` along
            `num_directions` random directions (`2 (order + 1) num_directions`
            gradient evaluations, and `(order + 2) num_directions` HVPs).
        num_directions: directions in directional mode.
        order: Richardson levels, at least 1, as for `check_grads`.
        rtol: relative tolerance; default `default_rtol(eps) = sqrt(eps)` of the
            coarsest precision among the leaves and the output.
        atol: absolute tolerance; default `rtol` times the largest `|FD|` entry of the
            whole Hessian (of all the `H v`, in directional mode).
        ad: the gradient's mode: `"reverse"` (`jax.grad`; the Hessian is then
            forward over reverse, for `CheckpointAdjoint` and the continuous adjoints)
            or `"forward"` (`jax.jacfwd`; forward over forward, for `ForwardMode`).

    Returns:
        A `HessianReport`; `report.passed` says whether every entry agreed.

    Raises:
        ValueError, TypeError: as for `check_grads`.
    """
    _check_options("check_hessian", mode, ad, order, num_directions)
    rng = _rng(key)
    target = make_target(fn, args, argnums, cotangent, rng)
    if mode == "full":
        value, blocks, count = full_hessian(target, ad, order, scale, batch_size)
    else:
        value, blocks, count = directional_hessian(
            target, ad, order, num_directions, rng, scale, batch_size
        )
    finite = np.concatenate([np.abs(b.fd[np.isfinite(b.fd)]) for b in blocks])
    rtol = _fd.default_rtol(blocks[0].eps) if rtol is None else rtol
    atol = rtol * float(finite.max(initial=0.0)) if atol is None else atol
    return HessianReport(
        tuple(_judge(b, rtol, atol) for b in blocks),
        value,
        mode,
        f"forward-over-{ad}",
        order,
        count,
    )


def assert_hessian_close(fn: Callable[..., PyTree], *args: Any, **kwargs: Any) -> HessianReport:
    """`check_hessian(fn, *args, **kwargs)`, raising if it did not pass (for pytest).

    Returns:
        The `HessianReport`, when it passed.

    Raises:
        HessianCheckError: a `GradCheckError` (so an `AssertionError`) whose message is
            the report's table; its `.report` attribute is the `HessianReport`.
    """
    report = check_hessian(fn, *args, **kwargs)
    if not report.passed:
        raise HessianCheckError(report)
    return report


class GradCheckError(AssertionError):
    """Raised by `assert_grads_close`; `.report` holds the `GradReport`."""

    def __init__(self, report: GradReport):
        super().__init__(f"{report.quantity} check failed\n{report}")
        self.report = report


class HessianCheckError(GradCheckError):
    """Raised by `assert_hessian_close`; `.report` holds the `HessianReport`."""


def _judge(leaf: RawLeaf, rtol: float | None, atol: float | None) -> LeafReport:
    rtol = _fd.default_rtol(leaf.eps) if rtol is None else rtol
    tol, atol = _fd.tolerance(leaf.fd, rtol, atol)
    verdict = _fd.verdicts(leaf.analytic, leaf.fd, leaf.fd_error, tol)
    return LeafReport(
        leaf.path,
        leaf.shape,
        leaf.dtype,
        leaf.analytic,
        leaf.fd,
        leaf.fd_error,
        tol,
        verdict,
        rtol,
        atol,
    )


def _check_options(name, mode, ad, order, num_directions) -> None:
    if mode not in ("full", "directional"):
        raise ValueError(f'`{name}(mode=...)` must be "full" or "directional"; got {mode!r}.')
    if ad not in ("reverse", "forward"):
        raise ValueError(f'`{name}(ad=...)` must be "reverse" or "forward"; got {ad!r}.')
    if not isinstance(order, int) or order < 1:
        raise ValueError(
            f"`{name}(order=...)` must be an integer >= 1 (Richardson levels); got {order!r}."
        )
    if not isinstance(num_directions, int) or num_directions < 1:
        raise ValueError(
            f"`{name}(num_directions=...)` must be a positive integer; got {num_directions!r}."
        )


def _rng(key: int | jax.Array | None) -> np.random.Generator:
    """A NumPy generator from an int seed or a JAX PRNG key (draws stay float64 on host)."""
    if key is None or isinstance(key, int):
        return np.random.default_rng(key or 0)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())
