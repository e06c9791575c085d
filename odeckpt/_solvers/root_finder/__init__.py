"""How the implicit solvers solve their stage equations: simplified Newton and its
settings.

- `newton`: one stage's simplified Newton iteration, differentiated implicitly;
- `verychord`: `AbstractRootFinder`, `VeryChord` (diffrax's name for the settings);
- `newton_solver`: `AbstractNewtonSolver`, `AbstractNewtonRK`: the constructor and
  settings every Newton-based solver shares, and the Newton matrix of a step.

Another root finder goes here beside `newton`; its linear solves come from `linear/`.
"""
