"""Built-in preconditioners for the matrix-free Newton matrix `I - gamma h J`, formed
from the Jacobian's entries that a `jac_sparsity=` pattern's colouring gives (one
forward-mode product per colour, once per step): Jacobi (the diagonal) and block Jacobi
(dense diagonal blocks, e.g. the species at one grid point of a reaction–diffusion
system).

See `docs/stiff.md`, "Preconditioners", and `docs/solver-internals.md`, "Linear
solvers".
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np

from .sparsity import Sparsity


class AbstractPreconditioner(eqx.Module):
    """A preconditioner odeckpt builds from the Jacobian's entries; needs the solver's
    `jac_sparsity`."""

    @abc.abstractmethod
    def inverse(self, sparsity: Sparsity, values: jax.Array, hg) -> lx.AbstractLinearOperator:
        """The approximate inverse of `I - hg J` on the flat real state, from `J`'s
        nonzero `values` on `sparsity`."""

    def check(self, name: str, sparsity: Sparsity) -> None:
        """Refuse a setting that does not fit the state (at trace time)."""

    def for_adjoint_ode(self, n: int, integrates_y: bool) -> "AbstractPreconditioner":
        """This preconditioner on a continuous adjoint's adjoint ODE, whose state is `a`
        (`n` elements, the forward state's layout) or `(y, a)` (`2 n`): itself, read
        from the transposed Jacobian's entries. A subclass whose setting names state
        elements says where they are in `(y, a)`."""
        return self


class JacobiPreconditioner(AbstractPreconditioner):
    """`diag(I - gamma h J)^-1`: cheap, and enough where the stiffness is local (fast
    kinetics, each unknown's own decay), not where it couples unknowns (diffusion).

    Needs the solver's `jac_sparsity=` (its colouring gives the diagonal in as many
    products as colours)."""

    def inverse(self, sparsity, values, hg) -> lx.AbstractLinearOperator:
        diagonal = 1 - jnp.asarray(hg, values.dtype) * sparsity.diagonal(values)
        return lx.DiagonalLinearOperator(1 / diagonal)


class BlockJacobiPreconditioner(AbstractPreconditioner):
    """The inverses of the diagonal blocks of `I - gamma h J`, each factorised densely
    once per step: the standard preconditioner for reaction–diffusion, with one block
    per grid point coupling its species (the reaction's stiffness), leaving the
    diffusion's to the Krylov method.

    Args:
        blocks: an integer `b`: consecutive blocks of `b` elements of the state in
            `jax.flatten_util.ravel_pytree(y0)` order (a state shaped `(points,
            species)`); or an integer array `(number of blocks, block size)` of those
            element indices (for a state shaped `(species, points)`,
            `np.arange(y0.size).reshape(species, points).T`). Every element must be in
            exactly one block.

    Needs the solver's `jac_sparsity=`. A complex element counts as its real and
    imaginary parts, both in its block.
    """

    blocks: int | tuple = eqx.field(static=True)

    def __init__(self, blocks):
        if isinstance(blocks, int | np.integer):
            if blocks < 1:
                raise ValueError(
                    f"`BlockJacobiPreconditioner(blocks)` needs a positive block size; "
                    f"got {blocks}."
                )
            self.blocks = int(blocks)
            return
        index = np.asarray(blocks)
        if index.ndim != 2 or not np.issubdtype(index.dtype, np.integer):
            raise ValueError(
                "`BlockJacobiPreconditioner(blocks)` takes a block size or an integer "
                "array `(number of blocks, block size)` of element indices; got "
                f"{type(blocks).__name__} of shape {np.shape(blocks)}."
            )
        self.blocks = tuple(map(tuple, index.tolist()))

    def _index(self, name: str, sparsity: Sparsity) -> np.ndarray:
        """`(b, s)` indices on the flat real state."""
        elements = sparsity.elements
        count = elements[0].size
        if isinstance(self.blocks, int):
            if count % self.blocks:
                raise ValueError(
                    f"`{name}(preconditioner=BlockJacobiPreconditioner({self.blocks}))`: "
                    f"the state's {count} elements are not a whole number of blocks of "
                    f"{self.blocks}."
                )
            index = np.arange(count).reshape(-1, self.blocks)
        else:
            index = np.asarray(self.blocks, np.int64)
        if not np.array_equal(np.sort(index.ravel()), np.arange(count)):
            raise ValueError(
                f"`{name}(preconditioner=BlockJacobiPreconditioner(blocks))`: the blocks "
                f"must hold each of the state's {count} elements exactly once; got "
                f"{index.size} indices of shape {index.shape}."
            )
        first, last = elements
        if np.array_equal(first, last):
            return first[index]
        complex_ = first != last
        if not np.all(complex_[index] == complex_[index[:, :1]]):
            raise ValueError(
                f"`{name}(preconditioner=BlockJacobiPreconditioner(blocks))`: a block "
                "mixes real and complex elements; put them in separate blocks."
            )
        return np.concatenate([first[index], last[index]], axis=1)

    def check(self, name, sparsity) -> None:
        _ = self._index(name, sparsity)

    def for_adjoint_ode(self, n: int, integrates_y: bool) -> "BlockJacobiPreconditioner":
        """The same blocks of `a`; on `(y, a)` also of `y` (consecutive blocks of `b`
        elements stay consecutive blocks of `2 n`)."""
        if isinstance(self.blocks, int) or not integrates_y:
            return self
        index = np.asarray(self.blocks, np.int64)
        return BlockJacobiPreconditioner(np.concatenate([index, index + n]))

    def inverse(self, sparsity, values, hg) -> lx.AbstractLinearOperator:
        index = self._index("BlockJacobiPreconditioner", sparsity)
        blocks = sparsity.blocks(values, index)
        eye = jnp.eye(index.shape[1], dtype=values.dtype)
        inverses = jnp.linalg.inv(eye[None] - jnp.asarray(hg, values.dtype) * blocks)
        flat = index.ravel()

        def apply(v):
            out = jnp.einsum("bij,bj->bi", inverses, v[index])
            return jnp.zeros_like(v).at[flat].set(out.ravel(), unique_indices=True)

        structure = jax.ShapeDtypeStruct((sparsity.n,), values.dtype)
        return lx.FunctionLinearOperator(apply, structure)
