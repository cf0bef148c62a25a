"""DFPO: GSPO sequence weights, transformed inside each group under stop-gradient.

w = s (GSPO length-normalised ratios), w~ = T(sg[w], A) per group, and the surrogate
sg[w~_i] * A_i * sum_t log pi_{i,t}: a clip-free, linear intra-group estimator whose gradient
-(1/N) sum_i w~_i A_i sum_t grad log pi restores cancellation of shared tokens whenever
sum_i A_i w~_i = 0 (min_replace, orth_proj) and the normaliser is constant across the group.

Note: with logp_old recomputed at rollout time, s == 1 on the first minibatch of a rollout
batch and every transform is the identity; the transforms act on later minibatches (K > 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from repro.objectives.aggregation import Normalisers, aggregate
from repro.objectives.base import LossConfig, Minibatch, require
from repro.objectives.groups import Groups
from repro.objectives.metrics import common_metrics
from repro.objectives.registry import register_algorithm
from repro.objectives.transforms import TRANSFORMS, apply_transform


@dataclass
class DFPOConfig(LossConfig):
    name = "dfpo"

    transform: str = field(
        default="min_replace",
        metadata={"help": f"Intra-group weight transform, one of {TRANSFORMS}: min_replace (Eq. 17), "
                  "orth_proj (Eq. 18, exact non-negative projection), orth_proj_plain (Eq. 18 "
                  "without the constraint), global_scale (step-size control), identity."},
    )
    stop_gradient: bool = field(
        default=True,
        metadata={"help": "Detach the transformed weights (the paper: essential). False keeps "
                  "their graph, adding A_i n_i grad w~_i (ablation)."},
    )
    weight_clip: tuple[float, float] | None = field(
        default=None,
        metadata={"help": "Optional [lo, hi] clamp of s before the transform; off by default "
                  "(DFPO is clip-free, its trust region is the transform)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.transform in TRANSFORMS, self, "transform", f"must be one of {TRANSFORMS}")
        if self.weight_clip is not None:
            self.weight_clip = tuple(self.weight_clip)  # YAML gives lists
            lo, hi = self.weight_clip if len(self.weight_clip) == 2 else (-1.0, -1.0)
            require(0 <= lo < hi, self, "weight_clip", "must be [lo, hi] with 0 <= lo < hi")


def dfpo_weights(
    cfg: DFPOConfig, log_s: Tensor, adv: Tensor, groups: Groups
) -> tuple[Tensor, Tensor, Tensor]:
    """(w~, w, s) per sequence from log s_i, A_i and whole groups.

    Split from the loss so that a caller whose minibatch holds only part of a group (a group
    split across micro-steps or processes) can gather (group, log s, A) of the whole group
    first, compute w~ here without grad, and pass it as `Minibatch.seq_weight`: the gradient is
    then the same as with the whole group in one minibatch. Returns w~ with its graph when
    `log_s` carries one (the stop_gradient=False ablation)."""
    s = torch.exp(log_s)
    w = s.clamp(*cfg.weight_clip) if cfg.weight_clip else s
    w_t = apply_transform(cfg.transform, w, adv.to(w.dtype), groups)
    return w_t, w, s


@register_algorithm(DFPOConfig)
def dfpo_loss(
    cfg: DFPOConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    log_s = batch.seq_log_ratio()
    if cfg.stop_gradient:
        log_s = log_s.detach()
    adv = batch.advantages.to(log_s.dtype)
    if batch.seq_weight is None:
        w_t, w, s = dfpo_weights(cfg, log_s, adv, batch.groups)
    elif cfg.stop_gradient:  # precomputed over whole groups (see dfpo_weights)
        s = torch.exp(log_s)
        w = s.clamp(*cfg.weight_clip) if cfg.weight_clip else s
        w_t = batch.seq_weight.to(w.dtype)
    else:
        raise ValueError("DFPOConfig.stop_gradient=False needs the whole group in the minibatch; "
                         "precomputed `seq_weight` carries no graph")
    if cfg.stop_gradient:
        w_t = w_t.detach()
    loss = aggregate(-(w_t * adv)[:, None] * batch.unit(), batch.mask, cfg, norm)
    clipped = (w != s).detach()[:, None].expand_as(batch.mask)
    metrics = common_metrics(batch, w_t.detach(), clipped)
    metrics["s_min"], metrics["s_max"] = float(s.detach().min()), float(s.detach().max())
    return loss, metrics
