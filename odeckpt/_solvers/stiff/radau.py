"""`RadauIIA5`: the 3-stage Radau IIA method, as in Hairer & Wanner's RADAU5.

See `docs/solver-internals.md`, "Radau IIA", for the stage system, the two ways of
solving it, the error estimate and the measurements behind the choices.
"""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from odeckpt._core import RESULTS
from odeckpt._solvers.base import AbstractAdaptiveSolver, StepOutput
from odeckpt._solvers.linear import dense as la
from odeckpt._solvers.linear.choice import is_dense
from odeckpt._solvers.root_finder.newton import (
    NewtonOptions,
    dense_tangent_solve,
    iterating,
    verdict,
)
from odeckpt._solvers.root_finder.newton_solver import AbstractNewtonSolver

from .radau_tableaux import RADAU_IIA5, RadauTableau

PLAIN_UNKNOWNS = 6
"""Up to this many unknowns `3n`, the stage system is solved whole (see above)."""


class NewtonSystem(eqx.Module):
    """The factorised simplified-Newton matrices of one step (not differentiated).

    Attributes:
        filter: `I - h gamma0 J` (the error filter; the real block when transformed).
        whole: `I - h A (x) J` when solved whole, else `None`.
        pair: `(alpha + i beta) I - h J`, complex, when transformed, else `None`.
    """

    filter: la.Factorisation
    whole: la.Factorisation | None
    pair: la.Factorisation | None


def newton_system(tableau: RadauTableau, jac, h, *, whole: bool) -> NewtonSystem:
    """Factorise the step's Newton matrices from `J` and `h` (see `NewtonSystem`)."""
    n, dtype = jac.shape[0], jac.dtype
    eye = jnp.eye(n, dtype=dtype)
    filter_ = la.factor(la.shifted(jac, h * tableau.gamma0))
    if whole:
        kron = jnp.kron(jnp.asarray(tableau.matrix, dtype), jac)
        return NewtonSystem(filter_, la.factor(jnp.eye(3 * n, dtype=dtype) - h * kron), None)
    _, alpha, beta = tableau.eigenvalues
    pair = lax.complex(alpha * eye - h * jac, beta * eye)
    return NewtonSystem(filter_, None, la.factor(pair))


def newton_increment(tableau: RadauTableau, system: NewtonSystem, h, fields, z):
    """The Newton increment `dz` (3 x n): `(I - h A (x) J) dz = -z + h A F`."""
    a = jnp.asarray(tableau.matrix, z.dtype)
    if system.whole is not None:
        rhs = -z + h * (a @ fields)
        return la.solve(system.whole, rhs.reshape(-1)).reshape(z.shape)
    # (Lambda / h (x) I - I (x) J) dw = T^-1 F - Lambda w / h, with z = T w; scaled by h.
    t = jnp.asarray(tableau.transform, z.dtype)
    t_inv = jnp.asarray(tableau.transform_inverse, z.dtype)
    _, alpha, beta = tableau.eigenvalues
    g, w = t_inv @ fields, t_inv @ z
    real = la.solve(system.filter, h * tableau.gamma0 * g[0] - w[0])  # gamma0 = 1 / lam
    w_pair = lax.complex(w[1], w[2])
    rhs = lax.complex(h * g[1], h * g[2]) - lax.complex(alpha, beta).astype(w_pair.dtype) * w_pair
    pair = la.solve(system.pair, rhs)  # pyright: ignore[reportArgumentType]
    return t @ jnp.stack([real, jnp.real(pair), jnp.imag(pair)])


class _RadauIterate(eqx.Module):
    z: jax.Array
    prev: jax.Array
    eta: jax.Array
    count: jax.Array
    converged: jax.Array
    failed: jax.Array


def stage_fields(flat: la.Flat, times, y0, z):
    """`F_i = f(t_i, y0 + z_i)`, stacked (3 x n)."""
    return jnp.stack([flat.f(t, y0 + zi) for t, zi in zip(times, z, strict=True)])


def radau_newton(tableau, flat: la.Flat, times, h, system, z0, options: NewtonOptions):
    """Simplified Newton on the stage system from `z0`: `(z, converged, iterations)`."""
    dtype, eps = z0.dtype, jnp.finfo(z0.dtype).eps
    rtol = jnp.maximum(jnp.asarray(options.rtol, dtype), 100 * eps)
    # The absolute floor is `eps` (the ESDIRKs' `100 eps`) of the state's RMS: a small
    # component (Robertson's y2 ~ 1e-7 beside O(1) ones) then keeps its accuracy at
    # tight tolerances (at rtol 1e-10 the larger floor cost a 2e-9 relative error).
    atol = jnp.maximum(jnp.asarray(options.atol, dtype), eps * la.rms(flat.y))

    def body(it: _RadauIterate) -> _RadauIterate:
        fields = stage_fields(flat, times, flat.y, it.z)
        dz = newton_increment(tableau, system, h, fields, it.z)
        size = la.rms(dz / (atol + rtol * jnp.abs(flat.y[None] + it.z)))
        eta, converged, failed = verdict(size, it.prev, it.eta, it.count, options.max_iters)
        return _RadauIterate(it.z + dz, size, eta, it.count + 1, converged, failed)

    false = jnp.asarray(False)
    start = _RadauIterate(
        z0, jnp.zeros((), dtype), jnp.ones((), dtype), jnp.asarray(0, jnp.int32), false, false
    )
    it = lax.while_loop(iterating, body, start)
    return it.z, it.converged, it.count


class Extrapolation(eqx.Module):
    """The solver state: the last accepted step's collocation polynomial.

    Attributes:
        rows: `r_j` (3 x n, flat) of `u(theta) = sum_j r_j theta^(j+1)`, the stage
            increments' polynomial over the step (`theta` in `[0, 1]`).
        h: that step's size; 0 before the first step (no polynomial yet).
    """

    rows: jax.Array
    h: jax.Array


def starting_stages(tableau: RadauTableau, h, previous: Extrapolation):
    """The Newton iteration's starting stage increments (`docs/solver-internals.md`, "Radau IIA"):
    the previous polynomial extrapolated to this step's stages, zero without one."""
    rows, dtype = previous.rows, previous.rows.dtype
    ratio = h / jnp.where(previous.h > 0, previous.h, 1)
    theta = 1 + jnp.asarray(tableau.c, dtype) * ratio
    powers = jnp.stack([theta**j - 1 for j in range(1, rows.shape[0] + 1)], axis=1)
    guess = powers @ rows  # u(theta_i) - u(1)
    usable = (previous.h > 0) & jnp.all(jnp.isfinite(guess))
    return jnp.where(usable, guess, jnp.zeros_like(guess))


def solve_stages(tableau, flat: la.Flat, times, h, system, guess, options):
    """The stage increments (3 x n) from the starting `guess` (which does not affect
    derivatives: by the implicit function theorem), and whether the iteration
    converged."""
    n = flat.y.shape[0]
    a = jnp.asarray(tableau.matrix, flat.y.dtype)

    def residual(x):
        z = x.reshape(3, n)
        return (z - h * (a @ stage_fields(flat, times, flat.y, z))).reshape(-1)

    def solve(residual, x0):
        del residual  # the iteration is written against `flat` and `system` directly
        z, converged, count = radau_newton(
            tableau, flat, times, h, system, x0.reshape(3, n), options
        )
        as_float = lambda x: x.astype(x0.dtype)  # float auxiliary outputs
        return z.reshape(-1), (as_float(converged), as_float(count))

    x, (converged, _) = lax.custom_root(
        residual, guess.reshape(-1), solve, dense_tangent_solve, has_aux=True
    )
    return x.reshape(3, n), converged > 0


def error_estimate(tableau: RadauTableau, flat: la.Flat, t0, h, f0, z, system):
    """RADAU5's estimate, filtered twice (`docs/solver-internals.md`, "Radau IIA")."""
    e = jnp.asarray(tableau.error_coeffs, z.dtype)
    stages = e @ z
    gh = h * tableau.gamma0
    first = la.solve(system.filter, gh * f0 + stages)
    return la.solve(system.filter, gh * flat.f(t0, flat.y + first) + stages)


@final
class RadauIIA5(AbstractNewtonSolver, AbstractAdaptiveSolver):
    """Radau IIA of order 5: 3 implicit stages, L-stable, stiffly accurate, stage
    order 3; the method of Hairer & Wanner's RADAU5 and SciPy's `Radau`.

    For stiff problems at tight tolerances (`rtol <= 1e-6`): order 5 from 3 stages, and
    order 3 on very stiff problems where the ESDIRKs keep 2. A step costs one Jacobian,
    two factorisations and 3 evaluations per Newton iteration plus 2 for the error
    estimate; derivatives come from the implicit function theorem (one `3n x 3n` solve per
    step in reverse mode), so every adjoint and forward mode work. Constructed like the
    ESDIRKs (`AbstractNewtonSolver`); keep its Newton tolerances well below the
    controller's. Dense output: the collocation polynomial. See
    `docs/solver-internals.md`, "Radau IIA".

    References:
        E. Hairer & G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed.,
        Springer, 1996, IV.5 (Radau IIA), IV.8 (RADAU5: the transformed Newton
        iteration, the error estimate (8.19)-(8.20)).
    """

    def __check_init__(self):
        if not is_dense(self.linear_solver):
            raise ValueError(
                "`RadauIIA5` solves its coupled stage systems with a dense LU only; got "
                f"`linear_solver={type(self.linear_solver).__name__}(...)`. For a large "
                "system use `Kvaerno5` or `KenCarp4` with `linear_solver="
                "lineax.GMRES(rtol, atol)`."
            )

    def order(self, terms) -> int:
        return RADAU_IIA5.order

    def error_order(self, terms) -> int:
        """4: the estimate compares with an embedded method of order 3, so it is
        `O(h^4)` (RADAU5 takes `err^(1/4)` too)."""
        return RADAU_IIA5.embedded_order + 1

    @property
    def evals_per_step(self) -> int:
        """A lower bound: `f(t0, y0)`, 3 per Newton iteration (at least one), and one
        for the second filtering of the error estimate. (The Jacobian costs `n`
        forward-mode products more.)"""
        return 5

    @property
    def state_rebuildable(self) -> bool:
        """False: the state is the last step's polynomial, which `init_state` cannot rebuild."""
        return False

    def init_state(self, term, t0, y0, args) -> Extrapolation:
        """No polynomial yet: the first step starts its iteration from `z = 0`."""
        y = la.flatten(term, y0, args).y
        return Extrapolation(
            jnp.zeros((len(RADAU_IIA5.c), *y.shape), y.dtype), jnp.zeros((), y.dtype)
        )

    def attempt(self, term, t0, dt, y0, solver_state, args, dense=True) -> StepOutput:
        tableau, flat = RADAU_IIA5, la.flatten(term, y0, args)
        h = dt.astype(flat.y.dtype)
        f0 = flat.f(t0, flat.y)
        frozen = la.flatten(*la.stop_gradients((term, y0, args)))
        jac = la.jacobian(frozen.f, la.stop_gradients(t0), frozen.y)
        whole = 3 * flat.y.shape[0] <= PLAIN_UNKNOWNS
        system = newton_system(tableau, jac, la.stop_gradients(h), whole=whole)
        times = [t0 + c * dt for c in tableau.c]
        options = NewtonOptions(self.rtol, self.atol, self.max_iters)
        guess = starting_stages(tableau, la.stop_gradients(h), la.stop_gradients(solver_state))
        z, converged = solve_stages(tableau, flat, times, h, system, guess, options)
        y1 = jnp.where(converged, flat.y + z[-1], jnp.nan)
        error = error_estimate(tableau, flat, t0, h, f0, z, system)
        error = jnp.where(converged, error, jnp.inf)
        rows = jnp.asarray(tableau.dense, z.dtype) @ z
        coeffs = la.unravel_rows(flat, rows) if dense else None
        state = Extrapolation(la.stop_gradients(rows), la.stop_gradients(h))
        failure = jnp.where(converged, RESULTS.successful, RESULTS.implicit_solve_failed)
        return StepOutput(flat.unravel(y1), flat.unravel(error), state, coeffs, failure)
