"""Algebraically reversible solvers (`AbstractReversibleSolver`: `reverse_step` undoes a
step), which `ReversibleAdjoint` reverses without storing states.

- `reversible`: `Reversible`, any explicit Runge–Kutta method made reversible;
- `reversible_heun`: `ReversibleHeun`;
- `linearised`: `LinearisedStep`, a step already evaluated and linearised by an inverse
  step, which a replay takes instead of evaluating the step again.
"""
