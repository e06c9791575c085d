"""The stiff solvers, each family beside its coefficients.

- `rosenbrock` (`rosenbrock_tableaux`): `AbstractRosenbrock`, `Ros3P`, `Rodas5P`:
  linearly implicit, one Jacobian and one LU factorisation per step;
- `esdirk` (`esdirk_tableaux`): `AbstractESDIRK`, `Kvaerno3`, `Kvaerno4`, `Kvaerno5`:
  stages solved one at a time by simplified Newton (`root_finder/`);
- `implicit_euler`: `ImplicitEuler`, one Newton-solved stage;
- `radau` (`radau_tableaux`): `RadauIIA5`, three stages solved together in a transformed
  Newton iteration.

The Newton iteration, the solvers' shared settings (`AbstractNewtonSolver`) and the
linear algebra live in `root_finder/` and `linear/`.
"""
