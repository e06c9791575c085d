"""The explicit methods, one module per method: the Runge–Kutta ones, each a validated
`ButcherTableau` and a final `AbstractRungeKutta` subclass that names it, and the
partitioned `SemiImplicitEuler` (`semi_implicit_euler.py`), for a tuple of terms.

The coefficients, the error weights (up to an irrelevant overall sign for the
two-stage methods) and the dense output polynomials agree with the tableaux of
the `diffrax` library, so that an adaptive integration with the same step size
controller accepts and rejects exactly the same steps and interpolates the
same values. For the two-stage methods diffrax stores `b_hat - b` as error
weights; only the sign differs and error norms are sign invariant. Their diffrax
dense output is a cubic Hermite interpolant that takes the *last stage* (not
`f(t1, y1)`) as the end slope; it is reproduced here as stage weights.

Adaptive controllers use the local order of the error estimate,
`embedded_order + 1`, as the exponent denominator. With
`embedded_order = order - 1` throughout, this equals `order`: exactly what
diffrax's PIDController uses for ODEs (`AbstractSolver.error_order(terms)`
returns `self.order(terms)`).

Adding a method: a new module here (tableau + class, like `bosh3.py`), its class
in the `EXPLICIT` registry of `odeckpt/_solvers/__init__.py` (which the tests
read), and one export line in `odeckpt/__init__.py`. Nothing re-exports from this
package, so this file does not change.
"""
