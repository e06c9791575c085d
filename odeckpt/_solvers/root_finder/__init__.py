"""How the implicit solvers solve their stage equations: simplified Newton and its
settings.

Modules: `newton` (one stage's iteration, differentiated implicitly), `verychord`
(`AbstractRootFinder`, `VeryChord`), `newton_solver` (`AbstractNewtonSolver`,
`AbstractNewtonRK`, the step's Jacobian). Another root finder goes here; its linear
solves come from `linear/`.
"""
