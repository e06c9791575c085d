"""One step, reversed (`reverse_step`) or replayed for its value only (`replay_step`),
from its recorded decisions."""

import equinox as eqx
import jax
from jax import lax

from odeckpt._core import batch_cond, batched_like, row, tree_add, tree_zeros_like

from .body import LoopBody


def is_diff(x) -> bool:
    """Whether a leaf is differentiated by the checkpointed loop (a floating array)."""
    return eqx.is_inexact_array(x)


def _step_vjp(body: LoopBody, problem, state, decisions):
    """`jax.vjp` of one step (with its recorded decisions) w.r.t. the floating parts
    of the problem and the state."""
    pr_d, pr_s = eqx.partition(problem, is_diff)
    st_d, st_s = eqx.partition(state, is_diff)

    def fn(pr_d, st_d):
        problem, state = eqx.combine(pr_d, pr_s), eqx.combine(st_d, st_s)
        new, record, accepted = body.step(problem, state, decisions)
        new_d, new_s = eqx.partition(new, is_diff)
        rec_d, rec_s = eqx.partition(record, is_diff)
        return (new_d, rec_d), (new_s, rec_s, accepted)

    (new_d, rec_d), vjp_fn, (new_s, rec_s, accepted) = jax.vjp(fn, pr_d, st_d, has_aux=True)
    return eqx.combine(new_d, new_s), eqx.combine(rec_d, rec_s), accepted, vjp_fn


def _emitter_cotangents(body, problem, state, new, record, ct_buffers):
    """Cotangents of the problem and the record from the outputs this step wrote."""
    pr_d, pr_s = eqx.partition(problem, is_diff)
    rec_d, rec_s = eqx.partition(record, is_diff)
    acc = batched_like((tree_zeros_like(pr_d), tree_zeros_like(rec_d)), (state, ct_buffers))
    for e, ct_buf in zip(body.emitters, ct_buffers, strict=True):
        lo, hi = e.span(problem, state, new)

        def pull(j, acc, e=e, ct_buf=ct_buf):
            fn = lambda a, b: e.value(eqx.combine(a, pr_s), eqx.combine(b, rec_s), j)
            _, vjp_fn = jax.vjp(fn, pr_d, rec_d)
            return tree_add(acc, vjp_fn(row(ct_buf, j)))

        acc = lax.fori_loop(lo, hi, pull, acc)
    return acc


def reverse_step(body: LoopBody, problem, state, decisions, ct_new, ct_buffers):
    """Cotangents (problem, state) of step `state -> new` given those of `new` and outputs.

    An accepted step is recomputed and linearised. A rejected one leaves the state
    unchanged but for `t_next`: its VJP is `body.skip`'s, and its candidate is never
    computed (so its NaN or inf, if any, cannot reach a gradient).
    """

    def taped(problem, state, decisions, ct_new, ct_buffers):
        new, record, _, vjp_fn = _step_vjp(body, problem, state, decisions)
        ct_pr_out, ct_rec = _emitter_cotangents(body, problem, state, new, record, ct_buffers)
        ct_pr, ct_st = vjp_fn((ct_new, ct_rec))
        return tree_add(ct_pr, ct_pr_out), ct_st

    def rejected(problem, state, decisions, ct_new, ct_buffers):
        pr_d, pr_s = eqx.partition(problem, is_diff)
        st_d, st_s = eqx.partition(state, is_diff)
        fn = lambda a, b: eqx.partition(
            body.skip(eqx.combine(a, pr_s), eqx.combine(b, st_s), decisions), is_diff
        )[0]
        return jax.vjp(fn, pr_d, st_d)[1](ct_new)

    return batch_cond(
        decisions.accepted, taped, rejected, problem, state, decisions, ct_new, ct_buffers
    )


def replay_step(body: LoopBody, problem, state, decisions):
    """One step replayed from its recorded decisions, for its value only (no
    derivatives): an accepted step is recomputed, a rejected one is `body.skip`ped.

    Used by the backward pass's advances for large states only (`docs/performance.md`,
    "Gradient wall time").
    """

    def taped(problem, state, decisions):
        return body.step(problem, state, decisions)[0]

    return batch_cond(decisions.accepted, taped, body.skip, problem, state, decisions)
