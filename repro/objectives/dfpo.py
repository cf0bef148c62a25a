"""DFPO: sequence weights, transformed inside each group under stop-gradient.

w = s (by default GSPO's length-normalised ratio; `sequence_ratio: product` reads s as the
paper's product of token ratios), w~ = T(sg[w], A) per group, and the surrogate
sg[w~_i] * A_i * sum_t log pi_{i,t}: a clip-free, linear intra-group estimator whose gradient
-(1/N) sum_i w~_i A_i sum_t grad log pi restores cancellation of shared tokens whenever
sum_i A_i w~_i = 0 (min_replace, orth_proj) and the normaliser is constant across the group.

Note: with logp_old recomputed at rollout time, s == 1 on the first minibatch of a rollout
batch and every transform is the identity; the transforms act on later minibatches (K > 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.objectives.aggregation import Normalisers, aggregate
from repro.objectives.base import SEQUENCE_RATIOS, LossConfig, Minibatch, require
from repro.objectives.groups import Groups
from repro.objectives.metrics import common_metrics
from repro.objectives.registry import register_algorithm
from repro.objectives.transforms import TRANSFORMS, apply_transform

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class DFPOConfig(LossConfig):
    name = "dfpo"

    transform: str = field(
        default="min_replace",
        metadata={"help": f"Intra-group weight transform, one of {TRANSFORMS}: min_replace "
                  "(Eq. 17), group_mean (cancels, keeps the group's mean weight: control), "
                  "orth_proj (Eq. 18, exact non-negative projection), orth_proj_plain (Eq. 18 "
                  "without the constraint), global_scale (step-size control), identity."},
    )
    stop_gradient: bool = field(
        default=True,
        metadata={"help": "Detach the transformed weights (the paper: essential). False keeps "
                  "their graph, adding A_i n_i grad w~_i (ablation)."},
    )
    sequence_ratio: str = field(
        default="mean",
        metadata={"help": f"How s_i is read from the token ratios, one of {SEQUENCE_RATIOS}: "
                  "mean = GSPO's length-normalised exp(mean_t log r) (the default); product = the "
                  "paper's prod_t r = exp(sum_t log r), in float64 from the log sum. Off-policy, "
                  "the product spreads far more within a group (docs/objectives.md)."},
    )
    weight_clip: tuple[float, float] | None = field(
        default=None,
        metadata={"help": "Optional [lo, hi] clamp of s before the transform; off by default "
                  "(DFPO is clip-free, its trust region is the transform)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.transform in TRANSFORMS, self, "transform", f"must be one of {TRANSFORMS}")
        require(self.sequence_ratio in SEQUENCE_RATIOS, self, "sequence_ratio",
                f"must be one of {SEQUENCE_RATIOS}")
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
    `log_s` carries one (the stop_gradient=False ablation). `log_s` is read as
    `cfg.sequence_ratio` says (`Minibatch.seq_log_ratio(cfg.sequence_ratio)`)."""
    w, s = ratio_and_weight(cfg, log_s)
    w_t = apply_transform(cfg.transform, w, adv.to(w.dtype), groups)
    return w_t, w, s


def ratio_and_weight(cfg: DFPOConfig, log_s: Tensor) -> tuple[Tensor, Tensor]:
    """(w, s): s = exp(log s) and w = s clamped by `weight_clip`. Under the product reading
    log s is a sum over the response, so s is formed in float64 (finite up to 709 nats, where
    float32 stops at 88) and the weights stay float64 through the transform and the loss."""
    import torch

    if cfg.sequence_ratio == "product":
        log_s = log_s.to(torch.float64)
    s = torch.exp(log_s)
    return (s.clamp(*cfg.weight_clip) if cfg.weight_clip else s), s


def dfpo_group_weights(cfg: DFPOConfig, batch: Minibatch) -> Tensor:
    """The registry's `group_weights` hook: w~ of every row over the batch's whole groups, for
    the engines' no-grad pre-pass (what couples DFPO's group members)."""
    log_s = batch.seq_log_ratio(cfg.sequence_ratio)
    w_t, _, _ = dfpo_weights(cfg, log_s, batch.advantages, batch.groups)
    return w_t.detach()


@register_algorithm(DFPOConfig, group_weights=dfpo_group_weights)
def dfpo_loss(
    cfg: DFPOConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    log_s = batch.seq_log_ratio(cfg.sequence_ratio)
    if cfg.stop_gradient:
        log_s = log_s.detach()
    adv = batch.advantages.to(log_s.dtype)
    if batch.seq_weight is None:
        w_t, w, s = dfpo_weights(cfg, log_s, adv, batch.groups)
    elif cfg.stop_gradient:  # precomputed over whole groups (see dfpo_weights)
        w, s = ratio_and_weight(cfg, log_s)
        w_t = batch.seq_weight.to(w.dtype)
    else:
        raise ValueError("DFPOConfig.stop_gradient=False needs the whole group in the minibatch; "
                         "precomputed `seq_weight` carries no graph")
    if cfg.stop_gradient:
        w_t = w_t.detach()
    loss = aggregate(-(w_t * adv)[:, None] * batch.unit(), batch.mask, cfg, norm)
    clipped = (w != s).detach()[:, None].expand_as(batch.mask)
    metrics = common_metrics(batch, w_t.detach(), clipped,
                             w_shift=weight_shift(w_t.detach(), w.detach()))
    metrics["s_min"], metrics["s_max"] = float(s.detach().min()), float(s.detach().max())
    return loss, metrics


def weight_shift(w_t: Tensor, w: Tensor) -> float:
    """mean_i |w~_i / w_i - 1|: how far the transform moved the weights (0 for identity, and
    for min_replace and orth_proj where s is equal within each group). Rows with w = 0 (an
    underflowed product) count as unmoved."""
    import torch

    with torch.no_grad():  # not a decorator: see the package docstring
        live = w > 0
        rel = torch.where(live, w_t / torch.where(live, w, 1.0) - 1, 0.0).abs()
        return float(rel.double().mean()) if rel.numel() else 0.0
