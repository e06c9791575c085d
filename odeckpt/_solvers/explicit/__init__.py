"""The explicit methods, one module per method (a validated `ButcherTableau` and a final
class naming it), and the partitioned `SemiImplicitEuler`.

Nothing re-exports from this package: a new method touches its own module, the
`EXPLICIT` registry and the exports (`docs/architecture.md`, "Where to add"). How they
agree with diffrax's tableaux: `docs/solver-internals.md`, "Explicit Runge–Kutta
methods".
"""
