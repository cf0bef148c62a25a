"""GRPO-fix: the sign-independent trust region, sg[clip(r, 1-eps, 1+eps)] * A * log pi.

The clipped ratio is a detached coefficient applied whatever the sign of A (CISPO-style, as
verl `cispo` with equal bounds). Two copies of a shared token have the same r, hence the same
coefficient up to A_i, and cancel: the paper's fix of mechanism 1. The paper does not spell out
GRPO-fix's definition; docs/objectives.md says why this reading was chosen.
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
class GRPOFixConfig(LossConfig):
    name = "grpo_fix"

    eps: float = field(default=0.2, metadata={
        "help": "Symmetric clip of the detached ratio to [1-eps, 1+eps].", "clip": "both"})

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.eps < 1, self, "eps", "must be in (0, 1)")


@register_algorithm(GRPOFixConfig)
def grpo_fix_loss(
    cfg: GRPOFixConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    import torch

    ratio = torch.exp(batch.token_log_ratio().detach())
    coef = ratio.clamp(1 - cfg.eps, 1 + cfg.eps) * batch.advantages.to(ratio.dtype)[:, None]
    loss = aggregate(-coef * batch.unit(), batch.mask, cfg, norm)
    outside = (ratio < 1 - cfg.eps) | (ratio > 1 + cfg.eps)
    return loss, common_metrics(batch, ratio, outside)
