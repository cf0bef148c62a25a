"""GRPO: token-level PPO-clip surrogate with group-relative advantages.

Per token, maximise min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = pi/pi_old. This is
verl's `vanilla` policy loss without dual clip and TRL's `loss_type` family at token level.
Mechanism 1 of the paper: whether a token's gradient is zeroed depends on the sign of A, so two
copies of a shared token stop cancelling once its ratio leaves the clip range.
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
class GRPOConfig(LossConfig):
    name = "grpo"

    eps_low: float = field(
        default=0.2, metadata={"help": "Lower clip: r >= 1 - eps_low.", "clip": "low"}
    )
    eps_high: float = field(default=0.27, metadata={
        "help": "Upper clip: r <= 1 + eps_high (clip-higher, DAPO-style).", "clip": "high"})

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.eps_low < 1, self, "eps_low", "must be in (0, 1)")
        require(self.eps_high > 0, self, "eps_high", "must be > 0")


@register_algorithm(GRPOConfig)
def grpo_loss(
    cfg: GRPOConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    import torch

    ratio = torch.exp(batch.token_log_ratio())
    adv = batch.advantages.to(ratio.dtype)[:, None]
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)
    loss = aggregate(torch.maximum(unclipped, clipped), batch.mask, cfg, norm)
    return loss, common_metrics(batch, ratio.detach(), clipped > unclipped)
