"""Helpers that build the coefficients of the explicit tableaux (`explicit/`): error
weights, cubic Hermite dense output as stage weights, and continuous weights expanded
exactly from factored polynomials."""

from fractions import Fraction


def error_weights(b, b_hat) -> tuple[float, ...]:
    """`b - b_hat`, elementwise in floating point."""
    return tuple(float(x) - float(y) for x, y in zip(b, b_hat, strict=True))


def hermite_dense(b, first: int, last: int) -> tuple[tuple[float, ...], ...]:
    """Cubic Hermite interpolant written as continuous stage weights.

    Interpolates `y0`, `y1 = y0 + h sum b_i k_i` and the slopes `k[first]` at
    `theta = 0` and `k[last]` at `theta = 1`:
    `b_i(theta) = d_i theta + (3 b_i - 2 d_i - e_i) theta**2
    + (d_i + e_i - 2 b_i) theta**3`, where `d` and `e` are the indicator
    vectors of the stages `first` and `last`. When stage `last` is
    `f(t1, y1)` this is the classical (third order) Hermite interpolant.
    """
    rows = []
    for i, bi in enumerate(b):
        d = 1.0 if i == first else 0.0
        e = 1.0 if i == last else 0.0
        rows.append((d, 3 * bi - 2 * d - e, d + e - 2 * bi))
    return tuple(rows)


def _poly_mul(p: list[Fraction], q: list[Fraction]) -> list[Fraction]:
    """Product of two ascending coefficient lists."""
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, x in enumerate(p):
        for j, y in enumerate(q):
            out[i + j] += x * y
    return out


def factored_weight(scale: str, *factors: tuple[str, ...]) -> tuple[float, ...]:
    """Expand `scale * prod(factor)` exactly; drop the constant coefficient.

    Each factor is an ascending coefficient tuple of decimal strings, e.g.
    `("-1.2", "1")` for `theta - 1.2`. The expansion is done in exact
    rational arithmetic and rounded to floats once.
    """
    poly = [Fraction(scale)]
    for factor in factors:
        poly = _poly_mul(poly, [Fraction(x) for x in factor])
    if poly[0] != 0:
        raise ValueError("a continuous weight must vanish at theta = 0")
    return tuple(float(x) for x in poly[1:])
