"""_solvers."""
