"""Finite-difference numerics behind `odeckpt.testing`: steps, extrapolation, verdicts.

Plain NumPy in float64; no JAX. The callers evaluate the function; this module
chooses where, and turns the values into derivative estimates (extrapolated
residuals) with error bars: `docs/testing.md`, "Finite differences".
"""

import dataclasses

import numpy as np

VERDICTS = ("ok", "mismatch", "inconclusive", "non-finite")
"""Per-entry outcome: agrees within tolerance; disagrees by more than tolerance plus
`SAFETY` times the FD error estimate (the gradient is wrong); disagrees, but by no
more than that (FD too noisy to decide); NaN or inf in the gradient or the function."""

SAFETY = 3.0
"""How many FD error estimates a difference must exceed (beyond the tolerance) to be
called a `mismatch`. The estimate is itself a difference of noisy values; on
non-smooth functions it falls below the actual error a few times in a hundred, and
would then name noise a wrong gradient."""


def default_rtol(eps: float) -> float:
    """The default relative tolerance for machine epsilon `eps`: `sqrt(eps)`, "half the
    digits" (`docs/testing.md`, "Verdicts and default tolerances")."""
    return float(np.sqrt(eps))


def magnitude(x: np.ndarray, scale: float | None) -> np.ndarray:
    """Each entry's magnitude `max(|x|, s)`, with `s` the leaf's typical magnitude.

    `s` is `scale` if given, else the leaf's root mean square, else 1 for an all-zero
    leaf: an entry at zero is perturbed on the scale of its neighbours.
    """
    if scale is None:
        rms = float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0
        scale = rms if rms > 0 and np.isfinite(rms) else 1.0
    return np.maximum(np.abs(x), scale)


def smallest_step(eps: float) -> float:
    """`eps^(1/3)`, relative to magnitude: where a central difference is most accurate
    (`docs/testing.md`, "Finite differences").
    """
    return eps ** (1 / 3)


def ladder(order: int) -> np.ndarray:
    """Step multipliers `2^order, …, 2, 1`: `order + 1` steps, largest first."""
    return 2.0 ** np.arange(order, -1, -1)


def round_to(values: np.ndarray, dtype) -> np.ndarray:
    """`values` rounded to `dtype`, returned exactly in float64."""
    return np.asarray(values, np.float64).astype(dtype).astype(np.float64)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The extrapolated FD residual and its error bar, per entry (1-D arrays).

    Attributes:
        residual: `ρ(0)`, the estimate of (FD derivative − analytic derivative).
        error: estimated error of `residual`: the larger gap to the extrapolations
            that drop the largest or the smallest step (Ridders), plus the propagated
            rounding of the function values.
    """

    residual: np.ndarray
    error: np.ndarray


def _lagrange_at_zero(s: np.ndarray) -> np.ndarray:
    """Weights `w` (same shape as `s`, levels first) with `p(0) = Σ w_k p(s_k)`."""
    n = s.shape[0]
    weights = np.ones_like(s)
    for k in range(n):
        for j in range(n):
            if j != k:
                weights[k] *= s[j] / (s[j] - s[k])
    return weights


def extrapolate(
    f_plus: np.ndarray, f_minus: np.ndarray, predicted: np.ndarray, delta: np.ndarray, eps: float
) -> Estimate:
    """Richardson-extrapolate central-difference residuals to zero step.

    Args:
        f_plus, f_minus: function values at `x₊`, `x₋`, shape `(levels, m)`.
        predicted: the analytic change `A` between those points, shape `(levels, m)`.
        delta: the normaliser `Δ` (`x₊ − x₋`, or `2t` along a direction), nonzero.
        eps: machine epsilon of the function's output (for the rounding estimate).

    Returns:
        An `Estimate` with arrays of shape `(m,)`.

    Raises:
        ValueError: with fewer than two levels (no error estimate is possible).
    """
    if f_plus.shape[0] < 2:
        raise ValueError(f"Richardson extrapolation needs >= 2 step sizes; got {f_plus.shape[0]}.")
    rho = (f_plus - f_minus - predicted) / delta
    s = np.square(delta)
    weights = _lagrange_at_zero(s)
    residual = np.sum(weights * rho, axis=0)
    rounding = np.sum(np.abs(weights) * eps * (np.abs(f_plus) + np.abs(f_minus)) / np.abs(delta), 0)
    finer = np.sum(_lagrange_at_zero(s[1:]) * rho[1:], axis=0)
    coarser = np.sum(_lagrange_at_zero(s[:-1]) * rho[:-1], axis=0)
    gap = np.maximum(np.abs(residual - finer), np.abs(residual - coarser))
    return Estimate(residual, gap + rounding)


def verdicts(
    analytic: np.ndarray, fd: np.ndarray, fd_error: np.ndarray, tol: np.ndarray
) -> np.ndarray:
    """Classify each entry (see `VERDICTS`); returns an array of strings."""
    err = np.abs(analytic - fd)
    finite = np.isfinite(analytic) & np.isfinite(fd) & np.isfinite(fd_error)
    wrong = err > tol + SAFETY * fd_error
    out = np.where(err <= tol, "ok", np.where(wrong, "mismatch", "inconclusive"))
    return np.where(finite, out, "non-finite").astype(object)


def tolerance(fd: np.ndarray, rtol: float, atol: float | None) -> tuple[np.ndarray, float]:
    """Per-entry tolerance `max(atol, rtol · |fd|)` and the `atol` used.

    `atol=None` means `rtol` times the largest finite `|fd|` in the group (one leaf, or
    all directions): entries much smaller than the group's largest are held to the
    group's scale, which is all that FD can resolve for them.
    """
    if atol is None:
        finite = np.abs(fd[np.isfinite(fd)])
        atol = rtol * float(finite.max()) if finite.size else 0.0
    return np.maximum(atol, rtol * np.abs(fd)), atol
