"""verl policy-loss plugin: the suite's objectives under verl's own loss registry.

Importing this module registers, with `verl.trainer.ppo.core_algos.register_policy_loss`, the
loss modes in `LOSS_MODES` (select one with `actor_rollout_ref.actor.policy_loss.loss_mode`).
verl imports it inside its workers through `actor_rollout_ref.model.external_lib=
repro.integrations.verl` or `VERL_USE_EXTERNAL_MODULES=repro.integrations.verl`. Each mode
calls `repro.objectives.policy_loss`, the one source of the formulas; this file only maps
verl's arguments onto a `Minibatch` and a config (docs/integrations.md, "verl").

verl passes no group id to a policy loss. DFPO couples a group's members, so the groups are
read from row order: row i belongs to group i // rollout_n (the actor config's `rollout_n`,
which verl fills from `actor_rollout_ref.rollout.n`). That holds only when nothing reorders or
cuts the rows of a rollout batch: `trainer.balance_batch=False`, `actor.shuffle=False`,
`actor.use_dynamic_bsz=False` and micro-batches of whole groups. The modes that do not couple
groups (repro_grpo, repro_gspo, grpo_fix) use the groups for metrics only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from repro.objectives import (
    LossConfig,
    Minibatch,
    Normalisers,
    get_algorithm,
    make_config,
    policy_loss,
)

if TYPE_CHECKING:
    from torch import Tensor

# verl loss_mode -> (repro algorithm, fixed config fields). The clip ranges come from verl's
# actor config (clip_ratio_low / clip_ratio_high), the aggregation from its loss_agg_mode.
LOSS_MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "dfpo_min": ("dfpo", {"transform": "min_replace"}),
    "dfpo_orth": ("dfpo", {"transform": "orth_proj"}),
    "dfpo_min_prod": ("dfpo", {"transform": "min_replace", "sequence_ratio": "product"}),
    "dfpo_orth_prod": ("dfpo", {"transform": "orth_proj", "sequence_ratio": "product"}),
    "grpo_fix": ("grpo_fix", {}),
    "repro_grpo": ("grpo", {}),
    "repro_gspo": ("gspo", {}),
}
# repro metric -> verl metric key (verl's own losses report these three under actor/).
VERL_METRICS = {"clip_frac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl"}


def clip_ratios(config: Any) -> tuple[float, float]:
    """(low, high) as verl's vanilla/gspo/cispo losses read them: the per-side value, else
    `clip_ratio`."""
    low = config.get("clip_ratio_low")
    high = config.get("clip_ratio_high")
    default = config.get("clip_ratio", 0.2)
    return (default if low is None else low), (default if high is None else high)


def loss_config(mode: str, loss_agg_mode: str, config: Any) -> LossConfig:
    """The repro config for a verl loss mode, with verl's clip range and aggregation (verl's
    `token-sum` is no mode of the suite: make_config refuses it, naming the options)."""
    algorithm, fixed = LOSS_MODES[mode]
    fields: dict[str, Any] = {"loss_agg_mode": loss_agg_mode,
                              "loss_norm_length": config.get("loss_scale_factor"), **fixed}
    low, high = clip_ratios(config)
    if algorithm in ("grpo", "gspo"):
        fields.update(eps_low=low, eps_high=high)
    elif algorithm == "grpo_fix":
        if low != high:
            raise ValueError("loss_mode=grpo_fix clips symmetrically: set actor_rollout_ref.actor."
                             f"clip_ratio_low == clip_ratio_high, got {low} and {high}")
        fields["eps"] = low
    return make_config(algorithm, **fields)


def sequence_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """[B, T] token advantages -> [B], refusing token-level advantages (GAE): every objective
    here takes one advantage per sequence."""
    import torch

    first = mask.to(torch.int64).argmax(-1, keepdim=True)  # first response token of each row
    per_seq = advantages.gather(-1, first)
    if bool(((advantages - per_seq).abs() * mask).amax() > 0):
        raise ValueError("the repro loss modes need one advantage per sequence (algorithm."
                         "adv_estimator=grpo), got advantages that vary along a response")
    return per_seq.squeeze(-1) * mask.any(-1)


def group_ids(batch_size: int, config: Any, couples: bool) -> Tensor:
    """Group of each row from row order: i // rollout_n (see the module docstring)."""
    import torch

    n = int(config.get("rollout_n") or 1)
    if couples and (n < 2 or batch_size % n):
        raise ValueError(f"a DFPO loss needs whole groups in row order: the micro-batch has "
                         f"{batch_size} rows, not a multiple of actor_rollout_ref.rollout.n={n} "
                         "(set trainer.balance_batch=False, actor.use_dynamic_bsz=False, "
                         "ppo_micro_batch_size_per_gpu a multiple of rollout.n)")
    return torch.arange(batch_size) // n


def verl_loss(mode: str, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor,
              response_mask: Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
              rollout_is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """One verl policy-loss call for `mode`, computed by repro.objectives.policy_loss."""
    couples = get_algorithm(LOSS_MODES[mode][0]).couples_groups
    if couples and loss_agg_mode == "seq-mean-token-mean":
        raise ValueError(f"loss_mode={mode} refuses actor_rollout_ref.actor.loss_agg_mode="
                         "seq-mean-token-mean: its per-sequence 1/|y_i| breaks DFPO's "
                         "cancellation of shared tokens")
    if rollout_is_weights is not None:
        raise ValueError(f"loss_mode={mode} refuses rollout_is_weights (algorithm."
                         "rollout_correction): per-token weights break the objective's "
                         "per-sequence coefficients (and DFPO's cancellation)")
    cfg = loss_config(mode, loss_agg_mode, config)
    mask = response_mask.bool()
    batch = Minibatch(logp=log_prob, logp_old=old_log_prob, mask=mask,
                      advantages=sequence_advantages(advantages, mask),
                      group=group_ids(log_prob.shape[0], config, couples))
    info = config.get("global_batch_info") or {}
    norm = Normalisers(num_tokens=info.get("batch_num_tokens"),
                       num_seqs=info.get("global_batch_size"))
    loss, metrics = policy_loss(cfg, batch, norm)
    # verl's agg_loss multiplies by dp_size to undo FSDP's gradient averaging over ranks.
    loss = loss * info.get("dp_size", 1)
    out = {VERL_METRICS.get(k, f"dfpo/{k}"): v for k, v in metrics.items() if not math.isnan(v)}
    out.setdefault("actor/pg_clipfrac_lower", 0.0)
    return loss, out


def register() -> None:
    """Register every mode of LOSS_MODES with verl's policy-loss registry (idempotent)."""
    from functools import partial

    from verl.trainer.ppo.core_algos import register_policy_loss

    for mode in LOSS_MODES:
        register_policy_loss(mode)(partial(verl_loss, mode))


register()
