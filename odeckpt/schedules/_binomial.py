"""Binomial theory of checkpointing: `beta`, repetition numbers, Revolve's costs and split.

Every quantity of `docs/schedules.md` ("Definitions"), computed with saturating
integers so that the traced int32 port makes the same decisions.

References:
    A. Griewank, A. Walther (2000), "Algorithm 799: Revolve: an implementation of
    checkpointing for the reverse or adjoint mode of computational differentiation",
    ACM Trans. Math. Softw. 26(1):19-45.
"""

from __future__ import annotations

import math

SATURATION = 2**30 - 1
"""Cap of the saturating binomials (`revolve_split`, `online_decide`): lengths and step
counts must stay below it, so that the int32 port never overflows."""


def _check_int(name: str, value: object, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def beta(c: int, r: int) -> int:
    """The binomial `beta(c, r) = C(c + r, c)`: steps reversible with c checkpoints and
    r repetitions.

    Args:
        c: number of checkpoints, `c >= 0`.
        r: number of repetitions; `beta(c, r) = 0` for `r < 0`.

    Returns:
        The exact (unbounded) integer.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    _check_int("c", c, 0)
    _check_int("r", r)
    return 0 if r < 0 else math.comb(c + r, c)


def repetition_number(n: int, c: int) -> int:
    """The least r with `beta(c, r) >= n`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        The repetition number r (0 for n <= 1).
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    if c == 1:
        return max(n - 1, 0)
    r, b = 0, 1
    while b < n:
        r += 1
        b = b * (c + r) // r
    return r


def revolve_extra_cost(n: int, c: int) -> int:
    """The fewest plain (non-taped) step evaluations of a reversal, `t(n, c)`.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints (the initial state included), `c >= 1`.

    Returns:
        `r*n - beta(c + 1, r - 1)` with r the repetition number.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve.
    """
    r = repetition_number(n, c)
    return r * n - beta(c + 1, r - 1)


def optimal_total(n: int, c: int) -> int:
    """The offline optimum of a full reversal: `n + t(n, c)` step evaluations.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        Taped plus plain evaluations of the optimal (Revolve) schedule.
    """
    return n + revolve_extra_cost(n, c)


def online_lower_bound(n: int, c: int) -> int:
    """The fewest step evaluations of any forward-then-reverse schedule of n steps.

    A schedule of the execution model (docs/schedules.md) evaluates every step once on the
    forward pass, then runs the backward loop from the checkpoints that survive; this is
    the least total over every choice of surviving checkpoints, i.e. even knowing n in
    advance: `2n + G(n, c)`, with `G` the sum of the n smallest segment marginal costs.

    Args:
        n: number of steps, `n >= 0`.
        c: number of checkpoints, `c >= 1`.

    Returns:
        The bound, `>= optimal_total(n, c) + 1` for `n >= 1`.
    """
    _check_int("n", n, 0)
    _check_int("c", c, 1)
    total, taken, rho = 0, 0, 0
    while taken < n:
        # Marginal costs <= rho: beta(s, rho) in a segment of s snapshots, summed over s.
        upto = min(n, beta(c, rho + 1) - 1)
        total += rho * (upto - taken)
        taken, rho = upto, rho + 1
    return 2 * n + total


def _next_beta(prev: int, s: int, r: int) -> int:
    """`beta(s, r)` from `prev = beta(s, r - 1)`, saturating at `SATURATION`.

    Uses `beta(s, r) = prev + prev*s/r`, the division split so that no intermediate
    exceeds int32 (the same operations run in the traced plan of `odeckpt._checkpointing`).
    """
    quotient, remainder = divmod(prev, r)
    if quotient > (SATURATION - prev) // s:
        return SATURATION
    return min(prev + quotient * s + (remainder * s) // r, SATURATION)


def revolve_split(l: int, s: int) -> int:  # noqa: E741
    """The optimal advance distance m of Revolve: reversing l steps from a checkpoint with
    s snapshots (the checkpoint itself counted), advance m steps and store.

    Reversing the remaining `l - m` steps with `s - 1` snapshots, then the first m with s,
    costs `t(l, s)` in all. The distance follows from O(1) binomials at the repetition
    number r of `(l, s)`, found by a short loop over r with saturating integers.

    Args:
        l: steps to reverse, `2 <= l <= SATURATION`.
        s: snapshots, `s >= 2`.

    Returns:
        m with `1 <= m <= l - 1`.

    References:
        Griewank & Walther (2000), Algorithm 799: Revolve (the `numforw`/`adjust`
        binomial split).
    """
    _check_int("l", l, 2)
    _check_int("s", s, 2)
    if l > SATURATION:
        raise ValueError(f"l must be <= {SATURATION}, got {l}")
    return _split(l, s)


def _split(l: int, s: int) -> int:  # noqa: E741
    """`revolve_split` without the argument checks."""
    # b0..b3 = beta(s, r), beta(s, r-1), beta(s, r-2), beta(s, r-3).
    r, b0, b1, b2, b3 = 0, 1, 0, 0, 0
    while b0 < l:
        r += 1
        b0, b1, b2, b3 = _next_beta(b0, s, r), b0, b1, b2
    big = b1  # beta(s, r-1)
    mid = b1 - b2  # beta(s-1, r-1)
    small = mid - (b2 - b3)  # beta(s-2, r-1)
    if l - big <= small:
        m = b2  # beta(s, r-2)
    elif l - big - mid >= small:
        m = big
    else:
        m = l - mid - small
    return max(m, 1)
