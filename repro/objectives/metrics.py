"""Metrics every loss reports, computed the same way for all of them (cheap, no grad)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from repro.objectives.base import Minibatch

if TYPE_CHECKING:
    from torch import Tensor


def common_metrics(batch: Minibatch, weights: Tensor, clipped: Tensor, *,
                   w_shift: float = math.nan) -> dict[str, float]:
    """weights: the effective per-row (or per-token) importance weights the loss used.

    clipped: bool [B, T] of tokens whose gradient the trust region changed. clip_frac is
    token-weighted for every algorithm (verl's convention, also for GSPO). w_shift: DFPO's
    mean |w~/w - 1| (NaN for objectives without an intra-group transform). w_dev: mean |s - 1|
    over the sequences (mean reading), how far the update is off-policy; log_ratio_mean: the
    mean over the sequences of GSPO's log s_i = mean_t (logp - logp_old), the ratio's bias
    (each sequence counts once, whatever its length; ppo_kl is minus the token mean). The
    spread of s is reported under both readings whatever the objective uses, so a run shows
    how far apart the readings are in its own regime.
    """
    import torch

    with torch.no_grad():  # not a decorator: see the package docstring
        mask = batch.mask
        n_tok = mask.sum().clamp_min(1)
        w = weights[mask] if weights.dim() == 2 else weights
        ppo_kl = (torch.where(mask, -batch.token_log_ratio(), 0.0)).sum() / n_tok
        log_s = batch.seq_log_ratio("mean").detach().double()
        return {
            "s_spread": seq_ratio_spread(batch),
            "s_spread_product": seq_ratio_spread(batch, "product"),
            "w_dev": float((log_s.exp() - 1).abs().mean()),
            "log_ratio_mean": float(log_s.mean()),
            "w_shift": w_shift,
            "clip_frac": float((clipped & mask).sum() / n_tok),
            "ppo_kl": float(ppo_kl),
            "w_min": float(w.min()) if w.numel() else 1.0,
            "w_max": float(w.max()) if w.numel() else 1.0,
            "w_mean": float(w.mean()) if w.numel() else 1.0,
            "neg_weight_frac": float((w < 0).double().mean()) if w.numel() else 0.0,
        }


def seq_ratio_spread(batch: Minibatch, reading: str = "mean") -> float:
    """Mean over groups of (max - min) / mean of the sequence ratios s_i within the group.

    The transforms of DFPO act on this spread (they are the identity where all s_i are equal),
    so it says whether an ablation of the transform can change anything: 0 on the first
    minibatch of a rollout batch when the behaviour policy is the trainer's (s = 1 exactly),
    growing with K, the learning rate and any sampler/trainer mismatch. `reading`: which s
    (base.SEQUENCE_RATIOS); float64, so the product reading is finite up to 709 nats.

    It needs whole groups: over a minibatch that cuts groups it is the spread among the members
    present, a group with one row here is left out (it has no spread to measure), and NaN when
    no group has two rows here."""
    import torch

    with torch.no_grad():  # not a decorator: see the package docstring
        s = torch.exp(batch.seq_log_ratio(reading).detach().double())
        groups = batch.present_groups
        spread = (groups.max(s) - groups.min(s)) / groups.mean(s)
        pairs = groups.sizes >= 2
        if not bool(pairs.all()):
            spread = spread[pairs]
        return float(spread.mean()) if spread.numel() else math.nan
