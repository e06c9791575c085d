"""What every Runge–Kutta method is built from: diffrax's classes, the tableaux, and the
order conditions that check them.

Modules: `base` (the abstract classes and `rk_step`), `tableau`, `multi_tableau`,
`order_conditions`, `coefficients` (helpers for error and dense weights). The methods
live with their family: `explicit/`, `stiff/`, `imex/`, `reversible/`.
"""
