"""Loss aggregation: per-token losses [B, T] -> one scalar, with verl's mode names.

The normaliser is part of the algorithm: a shared token cancels only if every member of its
group gets the same normaliser. token-mean, seq-mean-token-sum and seq-mean-token-sum-norm
satisfy that; seq-mean-token-mean (divide by |y_i|) does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.objectives.base import LossConfig

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Normalisers:
    """Global counts for a minibatch that is split into micro-batches or across ranks.

    Leave a field None to use this tensor's own count. With gradient accumulation, pass the
    global minibatch's counts so that the summed micro-batch losses equal the minibatch loss
    (verl's `global_batch_info`).
    """

    num_tokens: float | None = None  # response tokens in the global minibatch
    num_seqs: float | None = None  # non-empty responses in the global minibatch


def aggregate(
    loss_mat: Tensor, mask: Tensor, cfg: LossConfig, norm: Normalisers | None = None
) -> Tensor:
    """Reduce a per-token loss matrix under `cfg.loss_agg_mode`; padding never contributes."""
    import torch

    norm = norm or Normalisers()
    masked = torch.where(mask, loss_mat, torch.zeros_like(loss_mat))
    mode = cfg.loss_agg_mode
    if mode == "token-mean":
        n_tok = norm.num_tokens if norm.num_tokens is not None else mask.sum().clamp_min(1)
        return masked.sum() / n_tok
    lengths = mask.sum(-1)
    n_seq = norm.num_seqs if norm.num_seqs is not None else (lengths > 0).sum().clamp_min(1)
    if mode == "seq-mean-token-mean":
        return (masked.sum(-1) / lengths.clamp_min(1)).sum() / n_seq
    if mode == "seq-mean-token-sum":
        return masked.sum() / n_seq
    if mode == "seq-mean-token-sum-norm":
        l_norm = cfg.loss_norm_length or mask.shape[-1]
        return masked.sum() / (n_seq * l_norm)
    raise ValueError(f"unknown loss_agg_mode {mode!r}")
