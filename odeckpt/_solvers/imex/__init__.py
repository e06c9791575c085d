"""The implicit-explicit (IMEX) additive Runge–Kutta methods, for
`MultiTerm(explicit, implicit)`.

- `ark`: `AbstractIMEX`, `KenCarp3`, `KenCarp4`, `KenCarp5`, `Sil3`;
- `ark_tableaux`: their `ImexTableau`s, checked against the additive order conditions.
"""
