"""GSPO: sequence-level clipped surrogate with the length-normalised ratio s_i.

s_i = exp(mean_t log r_{i,t}); maximise min(s A, clip(s, 1 - eps_low, 1 + eps_high) A) per
sequence. Built in the GSPO-token form (verl's `gspo`): every token carries the value s_i and
the gradient s_i * grad log pi_t, so with seq-mean-token-mean the gradient is exactly the GSPO
paper's (1/B) sum_i 1[unclipped] s_i A_i (1/|y_i|) sum_t grad log pi. Mechanism 2 of the paper:
the coefficient of a shared token depends on the rest of its sequence (s_i and 1/|y_i|).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.objectives.aggregation import Normalisers, aggregate
from repro.objectives.base import LossConfig, Minibatch, require
from repro.objectives.metrics import common_metrics
from repro.objectives.registry import register_algorithm

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class GSPOConfig(LossConfig):
    name = "gspo"

    loss_agg_mode: str = field(
        default="seq-mean-token-mean",
        metadata={"help": "seq-mean-token-mean = one term per sequence (the GSPO paper); "
                  "token-mean weights each sequence by its length (TRL's default loss_type)."},
    )
    eps_low: float = field(
        default=3e-4, metadata={"help": "Lower clip of s (GSPO paper: 3e-4).", "clip": "low"}
    )
    eps_high: float = field(
        default=4e-4, metadata={"help": "Upper clip of s (GSPO paper: 4e-4).", "clip": "high"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.eps_low < 1, self, "eps_low", "must be in (0, 1)")
        require(self.eps_high > 0, self, "eps_high", "must be > 0")


@register_algorithm(GSPOConfig)
def gspo_loss(
    cfg: GSPOConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    import torch

    log_s = batch.seq_log_ratio().detach()
    logp = batch.logp_compute()
    s_tok = torch.exp(log_s[:, None] + logp - logp.detach())  # value s_i, grad s_i * grad logp
    adv = batch.advantages.to(s_tok.dtype)[:, None]
    unclipped = -adv * s_tok
    clipped = -adv * s_tok.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)
    loss = aggregate(torch.maximum(unclipped, clipped), batch.mask, cfg, norm)
    return loss, common_metrics(batch, torch.exp(log_s), clipped > unclipped)
