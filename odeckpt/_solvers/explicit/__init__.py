"""The explicit methods, one module per method: the Runge–Kutta ones, each a validated
`ButcherTableau` and a final `AbstractRungeKutta` subclass that names it, and the
partitioned `SemiImplicitEuler` (`semi_implicit_euler.py`), for a tuple of terms.

Their coefficients, error weights and dense output agree with diffrax's tableaux, so an
adaptive solve accepts and rejects the same steps as diffrax's (`docs/solver-internals.md`,
"Explicit Runge–Kutta methods", gives the differences of sign and form).

Adding a method: a new module here (tableau + class, like `bosh3.py`), its class
in the `EXPLICIT` registry of `odeckpt/_solvers/__init__.py` (which the tests
read), and one export line in `odeckpt/__init__.py`. Nothing re-exports from this
package, so this file does not change.
"""
