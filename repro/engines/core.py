"""The one loss + diagnostics call shared by every training engine (native loop, TRL subclass).

Why one function: the same formula gets different normalisers and batching in each framework
(trl#3823, verl PR #5798). Here every engine hands over one piece of an optimizer minibatch
(a micro-step on one process) together with the minibatch's *global* counts and the world size,
and gets back the loss whose gradient, summed over micro-steps and averaged by DDP/FSDP over
processes, equals `policy_loss` on the whole minibatch in one piece.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from repro.diagnostics import (
    CANCELLATION_KEYS,
    UpdateDiagnostics,
    cancellation_metrics,
    token_coefficients,
)
from repro.objectives import LossConfig, Minibatch, Normalisers, get_algorithm, policy_loss
from repro.objectives.kl import k3_kl_penalty


def loss_and_diagnostics(
    cfg: LossConfig,
    logp: Tensor,
    logp_old: Tensor,
    mask: Tensor,
    adv: Tensor,
    group: Tensor,
    tokens: Tensor,
    vocab_size: int,
    *,
    norm: Normalisers | None = None,
    world_size: int = 1,
    seq_weight: Tensor | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    diagnostics: bool = True,
    pieces: UpdateDiagnostics | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """(loss to backpropagate, metrics) of one micro-step.

    `norm`: the global optimizer minibatch's token/sequence counts (None: this piece is the whole
    minibatch). `world_size`: the loss is multiplied by it to undo the gradient averaging of
    DDP/FSDP (verl's `dp_size` in `agg_loss`). `seq_weight`: DFPO's precomputed weights when a
    group is split (see `sequence_weights`). Diagnostics (CANCELLATION_KEYS)
    come from c = -dL/dlogp of this piece's own loss before the world-size factor; they need
    whole groups in the piece; for a piece of a larger update pass `pieces`, which collects the
    coefficients (the metrics are then NaN here and come from `pieces.finish`).
    """
    mb = Minibatch(logp, logp_old, mask, adv, group, seq_weight=seq_weight)
    loss, metrics = policy_loss(cfg, mb, norm)
    if ref_logp is not None and kl_coef > 0:
        loss = loss + kl_coef * k3_kl_penalty(logp, ref_logp, mask)
    if diagnostics and pieces is not None:
        pieces.add(token_coefficients(loss, logp), tokens, mask, group, adv)
    if diagnostics and pieces is None:
        coef = token_coefficients(loss, logp)
        metrics |= cancellation_metrics(coef, tokens, mask, group, adv, vocab_size)
    else:
        metrics |= dict.fromkeys(CANCELLATION_KEYS, math.nan)
    if world_size != 1:
        loss = loss * world_size
    return loss, metrics


def sequence_weights(
    cfg: LossConfig, logp: Tensor, logp_old: Tensor, mask: Tensor, adv: Tensor, group: Tensor
) -> Tensor | None:
    """The no-grad pre-pass: the algorithm's `group_weights` (DFPO's w~) over whole groups (all
    rows of every group present, e.g. gathered across processes), to be sliced into
    `seq_weight` of each piece. None for objectives that do not couple a group's members
    (their per-sequence terms need no other member). The hook reads s as the loss does (DFPO:
    the config's `sequence_ratio`), so every engine gets the same weights."""
    group_weights = get_algorithm(cfg.name).group_weights
    if group_weights is None:
        return None
    with torch.no_grad():
        mb = Minibatch(logp.detach(), logp_old, mask, adv, group)
        return group_weights(cfg, mb).detach()


def global_normalisers(mask: Tensor, all_reduce_sum=None) -> Normalisers:
    """Token and non-empty-sequence counts of the optimizer minibatch, summed over the pieces
    by `all_reduce_sum` (a function on a 1-D tensor; None = this piece is the whole batch)."""
    counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum()]).to(torch.float64)
    if all_reduce_sum is not None:
        counts = all_reduce_sum(counts)
    n_tok, n_seq = (float(c) for c in counts)
    return Normalisers(num_tokens=max(n_tok, 1.0), num_seqs=max(n_seq, 1.0))
