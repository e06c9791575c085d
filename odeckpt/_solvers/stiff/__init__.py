"""The stiff solvers, each family beside its coefficients: `rosenbrock`, `esdirk`,
`implicit_euler`, `radau` (and their `*_tableaux`).

How each works: `docs/solver-internals.md`; which to use: `docs/solvers.md`, "Stiff
problems".
"""
