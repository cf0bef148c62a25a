"""Group-relative advantages (GRPO): A_i = (R_i - mean_g R) / (std_g R + eps).

Cancellation of shared tokens rests on exact centring, sum_{i in g} A_i = 0, so the arithmetic
runs in float64 and groups whose rewards are all equal get exactly A = 0 (no division noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.objectives.base import require
from repro.objectives.groups import Groups

if TYPE_CHECKING:
    from torch import Tensor

SCALES = ("group", "none")


@dataclass
class AdvantageConfig:
    """How sequence rewards become advantages."""

    scale: str = field(
        default="group",
        metadata={"help": "'group': divide by the group's unbiased std (GRPO, verl default); "
                  "'none': mean-centring only (Dr.GRPO)."},
    )
    eps: float = field(
        default=1e-6, metadata={"help": "Added to the std before dividing (verl: 1e-6)."}
    )

    def __post_init__(self) -> None:
        require(self.scale in SCALES, self, "scale", f"must be one of {SCALES}")
        require(self.eps > 0, self, "eps", "must be > 0")


def group_advantages(
    reward: Tensor, group: Tensor, cfg: AdvantageConfig | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Per-row advantages [B] (float32) and {'zero_adv_frac': share of zero-variance groups}."""
    import torch

    cfg = cfg or AdvantageConfig()
    if reward.dim() != 1 or reward.shape != group.shape:
        raise ValueError(
            f"`reward` must be 1-D with the shape of `group`; got reward {tuple(reward.shape)}, "
            f"group {tuple(group.shape)}"
        )
    if not bool(torch.isfinite(reward).all()):
        raise ValueError("`reward` contains NaN or inf")
    groups = Groups.from_ids(group)
    r = reward.to(torch.float64)
    centred = r - groups.broadcast(groups.mean(r))
    constant = groups.max(r) == groups.min(r)  # [n]: zero variance, so A = 0 exactly
    if cfg.scale == "group":
        var = groups.sum(centred * centred) / (groups.sizes - 1).to(torch.float64)
        centred = centred / groups.broadcast(var.sqrt() + cfg.eps)
    adv = torch.where(groups.broadcast(constant), torch.zeros_like(centred), centred)
    zero_adv_frac = float(constant.double().mean()) if groups.n else 0.0
    return adv.to(torch.float32), {"zero_adv_frac": zero_adv_frac}
