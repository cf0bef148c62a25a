"""verl plugin: the suite's objectives as verl policy-loss modes (docs/integrations.md, "verl").

verl imports this module when `actor_rollout_ref.model.external_lib=repro.integrations.verl`
(or VERL_USE_EXTERNAL_MODULES) names it. The import registers `verl_config.REGISTERED` through
verl's own `register_policy_loss`, so `actor_rollout_ref.actor.policy_loss.loss_mode=dfpo_min`
selects DFPO and verl's `ppo_loss` calls it like its own modes. Each mode calls
`repro.objectives.policy_loss`; no formula lives here.

Groups. verl hands a policy loss no group id, and DFPO's weights couple a group's members, so a
micro-batch must hold whole groups and the loss must know them. Two routes:
- uid: `ppo_loss_with_groups` wraps verl's `ppo_loss` (verl 0.9's engine workers pass it the
  whole micro-batch, `uid` column included) and hands the loss the micro-batch's uid groups and
  response tokens (the latter for the cancellation metrics). The import installs it where verl
  reads `ppo_loss` (`install_uid_route`); a worker imports its `external_lib` before it builds
  its loss. A group with fewer than rollout.n rows in the micro-batch is refused.
- rows: where the loss is called outside `ppo_loss` (no uid), rows k*n..k*n+n-1 of a
  micro-batch (n = rollout.n) are taken as group k. That holds only when nothing reorders
  rows: the actor settings that would are refused from the config, and trainer.balance_batch
  (invisible from here) from the data: a block whose advantages do not sum to 0 is not one
  centred group (reordered rows, or an estimator that does not centre: the check command tells
  the two apart from the config; the loss cannot).

`python -m repro.integrations.verl OVERRIDES...` checks a run's overrides before any compute
(verl_check.check_run).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss
from verl.workers.utils import losses as verl_losses

from repro.diagnostics import (
    asym,
    find_shared_nodes,
    residual_full,
    shared_frac,
    token_coefficients,
)
from repro.integrations.verl_check import ADV_SUM_TOL, main, per_response, uncentred_group
from repro.integrations.verl_config import (
    MODES,
    PLUGIN,
    REGISTERED,
    PluginConfigError,
    check_rollout_is,
    check_whole_groups,
    couples_groups,
    objective_config,
)
from repro.objectives import (
    DFPOConfig,
    LossConfig,
    Minibatch,
    Normalisers,
    dfpo_weights,
    policy_loss,
)

# The suite's metric -> its name in verl's metrics dict: verl's own names where verl's losses
# report the same quantity, `actor/dfpo/<metric>` for the rest.
VERL_METRIC_NAMES = {"clip_frac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl"}


@dataclass(frozen=True)
class MicroBatchRows:
    """What the uid route knows of the micro-batch that the loss is computing."""

    group: Tensor  # [B] long: one id per distinct uid
    tokens: Tensor | None  # [B, T] response token ids, None where the micro-batch has none


_MICRO_BATCH: ContextVar[MicroBatchRows | None] = ContextVar("repro_verl_rows", default=None)


def row_groups(mode: str, actor: Any, adv: Tensor) -> Tensor:
    """Group ids from the row order: rows k*n..k*n+n-1 are group k (see the module docstring)."""
    n, rows = actor.get("rollout_n"), adv.numel()
    if not n or rows % n:
        raise PluginConfigError(
            f"loss_mode={mode}: a micro-batch of {rows} rows is not whole groups of "
            f"actor_rollout_ref.rollout.n={n}")
    group = torch.arange(rows, device=adv.device) // n
    a = adv.double().view(-1, n)
    off = a.sum(-1).abs() > ADV_SUM_TOL * a.abs().sum(-1)
    if bool(off.any()):
        k = int(off.nonzero()[0])
        raise PluginConfigError(
            f"loss_mode={mode} reads groups from the row order, but rows {k * n}-{k * n + n - 1} "
            f"of this micro-batch are not one centred group (their advantages sum to "
            f"{float(a[k].sum()):.3g}, not 0): either trainer.balance_batch=True reordered them "
            "or algorithm.adv_estimator does not centre per group (python -m "
            f"{PLUGIN} OVERRIDES names which)")
    return group


def uid_groups(mode: str, actor: Any, rows: MicroBatchRows, adv: Tensor) -> Tensor:
    """The uid route's groups, each whole (rollout.n rows) in this micro-batch and centred."""
    n = actor.get("rollout_n")
    _, counts = torch.unique(rows.group, return_counts=True)
    cut = counts != n
    if bool(cut.any()):
        raise PluginConfigError(
            f"loss_mode={mode}: a group (uid) has {int(counts[cut][0])} of its "
            f"actor_rollout_ref.rollout.n={n} rows in this micro-batch: trainer.balance_batch=True "
            "(verl's default) cuts groups across micro-batches (set it False)")
    off = uncentred_group(adv, rows.group)
    if off is not None:
        raise PluginConfigError(
            f"loss_mode={mode}: a group's (uid) advantages sum to {off[1]:.3g}, not 0: "
            "algorithm.adv_estimator does not centre per group (python -m "
            f"{PLUGIN} OVERRIDES lists the estimators that do)")
    return rows.group


def fold_sequence_weights(cfg: LossConfig, batch: Minibatch, rho: Tensor) -> Minibatch:
    """DFPO with verl's sequence-level rollout weights rho: w~ = T(rho * s, A) per group, so the
    transform still makes sum_i A_i w~_i = 0 (verl's own modes multiply the loss by rho after,
    which would undo it)."""
    if not isinstance(cfg, DFPOConfig) or not cfg.stop_gradient:
        raise PluginConfigError(f"{cfg.name}: rollout importance weights are folded into DFPO's "
                                "detached weights only")
    log_s = batch.seq_log_ratio(cfg.sequence_ratio).detach().double() + torch.log(rho.double())
    w_t, _, _ = dfpo_weights(cfg, log_s, batch.advantages, batch.groups)
    return replace(batch, seq_weight=w_t.detach())


def normalisers(actor: Any) -> Normalisers:
    """verl's global_batch_info (global counts over dp_size ranks) as this rank's normalisers:
    verl divides by the global count and multiplies by dp_size."""
    info = actor.get("global_batch_info") or {}
    dp = float(info.get("dp_size") or 1)

    def per_rank(key: str) -> float | None:
        value = info.get(key)
        return None if value is None else float(value) / dp

    return Normalisers(num_tokens=per_rank("batch_num_tokens"),
                       num_seqs=per_rank("global_batch_size"))


def cancellation(loss: Tensor, log_prob: Tensor, batch: Minibatch,
                 tokens: Tensor | None) -> dict[str, float]:
    """asym, residual_full and shared_frac of this micro-batch (repro.diagnostics), where its
    response tokens and whole groups are known and the loss has a graph to log_prob."""
    if tokens is None or not log_prob.requires_grad or bool((batch.present_groups.sizes < 2).any()):
        return {}
    coef = token_coefficients(loss, log_prob)
    width = batch.mask.shape[1]  # verl pads tokens and log-probs to its own widths
    tokens = torch.nn.functional.pad(tokens[:, :width], (0, max(0, width - tokens.shape[1])))
    nodes = find_shared_nodes(tokens.to(batch.mask.device), batch.mask, batch.group)
    return {"asym": asym(coef, batch.advantages, nodes),
            "residual_full": residual_full(coef, nodes), "shared_frac": shared_frac(nodes)}


def verl_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Under verl's names; NaN (no evidence in this micro-batch) left out of verl's mean."""
    return {VERL_METRIC_NAMES.get(k, f"actor/dfpo/{k}"): float(v)
            for k, v in metrics.items() if not math.isnan(v)}


def verl_policy_loss(mode: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """The verl PolicyLossFn of `mode` (a key of verl_config.MODES)."""
    coupled = couples_groups(mode)

    def loss_fn(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor,
                response_mask: Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
                rollout_is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
        cfg = objective_config(mode, config, loss_agg_mode)
        mask = response_mask.bool()
        adv, varies = per_response(advantages, mask)
        if varies:
            raise PluginConfigError(
                f"loss_mode={mode} takes one advantage per response and these vary along it: "
                "algorithm.adv_estimator=grpo gives one")
        rho = None
        if rollout_is_weights is not None:
            rho, token_level = per_response(rollout_is_weights, mask)
            check_rollout_is(mode, "token" if token_level else "sequence")
        rows = _MICRO_BATCH.get()
        if coupled:
            check_whole_groups(mode, config)
            group = uid_groups(mode, config, rows, adv) if rows else row_groups(mode, config, adv)
        else:  # the groups only feed the metrics here
            group = rows.group if rows else torch.arange(adv.numel())
        batch = Minibatch(log_prob, old_log_prob, mask, adv, group.to(mask.device))
        if rho is not None:
            batch = fold_sequence_weights(cfg, batch, rho)
        loss, metrics = policy_loss(cfg, batch, normalisers(config))
        metrics |= cancellation(loss, log_prob, batch, rows.tokens if rows else None)
        return loss, verl_metrics(metrics)

    loss_fn.__name__ = loss_fn.__qualname__ = f"repro_{mode}"
    loss_fn.__doc__ = f"verl policy loss `{mode}`: repro.objectives' {MODES[mode][0]}."
    return loss_fn


def micro_batch_rows(data: Any) -> MicroBatchRows | None:
    """uid groups (ids in order of first appearance) and response tokens of a verl micro-batch
    TensorDict; None without a uid column."""
    keys = set(data.keys())
    if "uid" not in keys:
        return None
    uids = list(data["uid"])
    index = {uid: i for i, uid in enumerate(dict.fromkeys(uids))}
    tokens = None
    if "responses" in keys:
        tokens = data.select("responses").to_padded_tensor()["responses"]
    return MicroBatchRows(torch.tensor([index[u] for u in uids]), tokens)


_verl_ppo_loss = getattr(verl_losses.ppo_loss, "__wrapped__", verl_losses.ppo_loss)


@functools.wraps(_verl_ppo_loss)
def ppo_loss_with_groups(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> Any:
    """verl's ppo_loss, with the micro-batch's uid groups and tokens handed to this plugin's
    modes (the uid route); verl's own modes see no difference."""
    token = _MICRO_BATCH.set(micro_batch_rows(data))
    try:
        return _verl_ppo_loss(config, model_output, data, dp_group)
    finally:
        _MICRO_BATCH.reset(token)


# The modules that bind verl's `ppo_loss` by name at their import (verl 0.9.1)
PPO_LOSS_USERS = ("verl.workers.engine_workers", "verl.trainer.distillation.losses")


def install_uid_route() -> None:
    """Put ppo_loss_with_groups where verl reads `ppo_loss`: verl's losses module (for modules
    imported after this one) and the modules already imported that bound it by name."""
    verl_losses.ppo_loss = ppo_loss_with_groups
    for name in PPO_LOSS_USERS:
        module = sys.modules.get(name)
        if module is not None:
            module.ppo_loss = ppo_loss_with_groups


def register() -> None:
    """Register REGISTERED as verl loss modes; refuse to replace a mode verl itself has."""
    for mode in REGISTERED:
        known = POLICY_LOSS_REGISTRY.get(mode)
        if known is not None and known.__name__ != f"repro_{mode}":
            raise RuntimeError(f"verl already has a loss mode {mode!r} ({known.__name__})")
        register_policy_loss(mode)(verl_policy_loss(mode))


register()
install_uid_route()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
