"""What every Runge–Kutta method is built from: diffrax's classes, the tableaux, and the
order conditions that check them.

- `base`: `AbstractRungeKutta`, `AbstractERK`, `AbstractDIRK`, `AbstractSDIRK`,
  `AbstractExplicitSolver`, and the one generic explicit step (`rk_step`);
- `tableau`: `ButcherTableau`, validated against the order conditions when defined;
- `multi_tableau`: diffrax's `MultiButcherTableau` (a tableau per term) and the additive
  explicit step of an `AbstractRungeKutta` defined with one;
- `order_conditions`: rooted trees, elementary weights, the (additive) order conditions,
  and the checks every tableau of the package raises with;
- `coefficients`: helpers that build the explicit tableaux' error and dense weights.

The methods live with their family: `explicit/`, `stiff/`, `imex/`, `reversible/`.
"""
