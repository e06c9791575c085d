"""The saved outputs in the continuous adjoint's backward pass: their marks.

Each `SubSaveAt`'s rows become a `Marks` list: at a row's time the sweep adds the row's
cotangent `c` pulled back to `y`, `(d fn / dy)^T c`, to `a` (and `BacksolveAdjoint`
re-anchors `y` there). The parts reaching `args` and the arrays `fn` holds do not
depend on the adjoint ODE and are summed over the rows at once.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from odeckpt._core import Y, materialize, tree_add
from odeckpt._integrator import Integrator, Problem, SaveLayout, State, count_at_or_before

from .sweep import Marks


class SavedCotangents(eqx.Module):
    """One `SubSaveAt`'s output cotangents (`None`: zero or not saved).

    Attributes:
        ts: of its `SaveAt(ts=...)` rows.
        steps: of its `SaveAt(steps=n)` rows (their values; times get none).
    """

    ts: Y | None
    steps: Y | None


class SavedPullback(eqx.Module):
    """What the outputs give the backward pass.

    Attributes:
        marks: one `Marks` per kind of row of each `SubSaveAt`.
        g: their cotangent of `theta` through the `fn`s (added to the sweep's `g`).
        saves: their cotangent of `Problem.saves` (the arrays the `fn`s hold).
        t_end: the cotangent of the time the solve ended through the `fn`s' own time
            argument, at step rows saved there (which move with it when an `Event`
            ended the solve; earlier step rows and save times do not move).
    """

    marks: list
    g: object
    saves: object
    t_end: jax.Array


class _MarkedRows(eqx.Module):
    """Rows of one kind of one `SubSaveAt`, with what the pullback needs."""

    times: jax.Array  # internal times, ascending (inf pads)
    lo: jax.Array
    hi: jax.Array
    y: Y  # the forward `y` at each row (the buffer itself when `fn` is `save_y`)
    ct: Y | None  # the rows' cotangents, or None
    steps: bool = eqx.field(static=True, default=False)  # step rows (else save times)


def saved_pullback(
    integrator: Integrator,
    problem: Problem,
    state0: State,
    final: State,
    values: tuple,
    cts: tuple[SavedCotangents, ...],
    split: tuple,
    anchors: bool,
) -> SavedPullback:
    """The marks of every saved row, and the cotangents through the `fn`s.

    Args:
        values: `(outputs, saved_y)`: the loop's output buffers and the tape's buffers
            of `y` (`Integrator.state_emitters`), each an `Outputs` record.
        split: `(theta, static, saves_theta, saves_static)`: the differentiated and
            static parts of `(term, args)` and of `Problem.saves`.
        anchors: the marks carry the forward `y` (for `BacksolveAdjoint`).
    """
    theta, static, saves_theta, saves_static = split
    marks, g = [], jax.tree.map(jnp.zeros_like, theta)
    ct_saves = jax.tree.map(jnp.zeros_like, saves_theta)
    t_end = jnp.zeros((), final.t.dtype)
    for k, layout in enumerate(integrator.saves):
        for rows in _rows(k, layout, problem, state0, final, values, cts[k]):
            jump = rows.ct
            if rows.ct is not None and not layout.saves_y:
                ct_times, jump, dg, dsaves = _through_fn(k, rows, final, split)
                g, ct_saves = tree_add(g, dg), tree_add(ct_saves, dsaves)
                if rows.steps:
                    at_end = rows.times == final.t
                    t_end = t_end + jnp.sum(jnp.where(at_end, ct_times, 0)).astype(t_end.dtype)
            elif rows.ct is not None:
                jump = materialize(rows.ct, rows.y)
            anchor = rows.y if anchors else None
            marks.append(Marks(rows.times, rows.lo, rows.hi, jump, anchor))
    return SavedPullback(marks, g, ct_saves, t_end)


def _rows(k: int, layout: SaveLayout, problem, state0, final, values, ct: SavedCotangents):
    """The `_MarkedRows` of `SubSaveAt` `k`: its save-time rows, then its step rows."""
    outputs, saved_y = values
    own, of_state = outputs.subs[k], saved_y.subs[k]
    source = own if layout.saves_y else of_state
    out = []
    if own.ts is not None:
        ts = problem.saves[k].ts
        lo, hi = count_at_or_before(ts, state0.t), count_at_or_before(ts, final.t)
        out.append(_MarkedRows(ts, lo, hi, source.ts, ct.ts))
    if own.steps is not None:
        step_ts, _ = own.steps
        zero = jnp.asarray(0, jnp.int32)
        out.append(
            _MarkedRows(
                step_ts,
                zero,
                final.num_accepted // layout.steps,
                source.steps[1],
                ct.steps,
                steps=True,
            )
        )
    return out


def _through_fn(k: int, rows: _MarkedRows, final: State, split: tuple):
    """`(times, jump, g, saves)`: the rows' cotangents pulled back through `fn` (one VJP
    of `fn` over every row): per row with respect to its time and `y`, summed over the
    rows with respect to `theta` and to the arrays `fn` holds. Rows not written are
    read at the final `y` with a zero cotangent."""
    theta, static, saves_theta, saves_static = split
    index = jnp.arange(rows.times.shape[0], dtype=jnp.int32)
    valid = (index >= rows.lo) & (index < rows.hi)

    def masked(x, fill):
        keep = valid.reshape((-1,) + (1,) * (x.ndim - 1))
        return jnp.where(keep, x, jnp.broadcast_to(fill, x.shape))

    y = jax.tree.map(masked, rows.y, final.y)
    times = jnp.where(valid, rows.times, final.t)

    def observed(times, y, theta, saves_theta):
        args = eqx.combine(theta, static)[1]
        fn = eqx.combine(saves_theta, saves_static)[k].fn
        return jax.vmap(lambda t, y: fn(t, y, args))(times, y)

    out, vjp_fn = jax.vjp(observed, times, y, theta, saves_theta)
    ct = jax.tree.map(lambda c: masked(c, jnp.zeros_like(c)), materialize(rows.ct, out))
    return vjp_fn(ct)
