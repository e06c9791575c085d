"""Linear algebra for the implicit and linearly implicit solvers, on the flattened state.

- `dense`: the state flattened to one real vector, Jacobians, and dense LU solves.

Matrix-free (Krylov) solvers and preconditioners go here beside `dense`.
"""
