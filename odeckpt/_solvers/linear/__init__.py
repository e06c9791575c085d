"""Linear algebra for the implicit and linearly implicit solvers, on the flattened state.

- `dense`: the state flattened to one real vector, Jacobians, and dense LU solves.
- `stage_matrix`: the Newton matrix `I - hg J` as the stage iteration uses it, dense or
  matrix-free (lineax's iterative solvers on Jacobian-vector products).
- `sparsity`: a `jac_sparsity=` pattern, coloured so that the Jacobian costs one
  product per colour.
- `banded`: LU with partial pivoting in band storage (banded patterns).
- `preconditioners`: the built-in Jacobi and block-Jacobi preconditioners.
- `choice`: which `linear_solver` and `preconditioner` a solver may take, and the
  step's Jacobian that builds each stage's Newton matrix from them.
"""
