"""What verl 0.9.1's trainer does around the loss, read for the plugin's modes: the settings that
replace the loss mode, add another loss to it, or reorder rows, and the advantage estimators
whose advantages are not one per response and centred per group.

Found by reading verl 0.9.1's trainer for every write to `policy_loss.loss_mode` and every
reordering of the batch (docs/integrations.md, "What verl's trainer does"):
- `algorithm.rollout_correction.bypass_mode=True`: `apply_bypass_mode` (rollout_corr_helper.py,
  called from ray_trainer.py's fit) sets `policy_loss.loss_mode = "bypass_mode"`.
- `distillation.enabled=True`: the workers' loss becomes `distillation_ppo_loss`, which adds a
  distillation loss to the policy loss or drops it (`use_task_rewards=False`).
- `trainer.balance_batch=True`: `_balance_batch` reorders rows across ranks and micro-batches,
  except with `actor.use_prefix_grouper=True`, where it balances whole uid groups and keeps
  each contiguous (the only reader of that flag in 0.9.1's trainer and workers).
- `actor.shuffle`, `actor.use_dynamic_bsz` and the micro-batch size
  (verl_config.check_whole_groups).

`python -m repro.integrations.verl OVERRIDES...` runs `check_run` on verl's config composed from
a `verl.trainer.main_ppo` command's overrides, before any compute.

The estimator check calls verl's registered estimator, as ray_trainer's `compute_advantage`
does, on a small synthetic batch and checks the property itself, so an estimator added to
verl's registry is judged by what it computes, not by its name.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from typing import Any

import numpy as np
import torch
from torch import Tensor

from repro.integrations.verl_config import (
    LOSS_MODE_KEY,
    PLUGIN,
    REGISTERED,
    PluginConfigError,
    check_rollout_is,
    check_whole_groups,
    couples_groups,
    objective_config,
)

ADV_SUM_TOL = 1e-4  # |sum_g A| / sum_g |A| above this: not one centred group
GROUPS, N, LENGTH = 3, 4, 6  # the synthetic batch: 3 groups of 4 responses, up to 6 tokens


def per_response(values: Tensor, mask: Tensor) -> tuple[Tensor, bool]:
    """(each row's value at its first response token, whether any row's values vary along its
    response). verl broadcasts an outcome advantage (or a sequence-level weight) to every token
    of the response; 0 for a row without response tokens."""
    first = values.gather(1, mask.int().argmax(-1, keepdim=True)).squeeze(1)
    first = torch.where(mask.any(-1), first, torch.zeros_like(first))
    dev = torch.where(mask, (values - first[:, None]).abs(), torch.zeros_like(values))
    varies = bool((dev > 1e-6 * first.abs()[:, None].clamp_min(1e-6)).any())
    return first, varies


def uncentred_group(adv: Tensor, group: Tensor) -> tuple[int, float] | None:
    """(a group id, its advantage sum) for a group whose advantages do not sum to 0; else None."""
    adv = adv.double()
    for g in torch.unique(group).tolist():
        a = adv[group == g]
        if float(a.sum().abs()) > ADV_SUM_TOL * float(a.abs().sum()):
            return int(g), float(a.sum())
    return None


def synthetic_batch() -> dict[str, Any]:
    """What ray_trainer's compute_advantage hands an estimator, for GROUPS groups of N
    responses of unequal lengths with distinct outcome rewards on their last token."""
    g = torch.Generator().manual_seed(0)
    rows = GROUPS * N
    lengths = torch.randint(2, LENGTH + 1, (rows,), generator=g)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(rows, LENGTH)
    rewards[torch.arange(rows), lengths - 1] = torch.rand(rows, generator=g) + 0.1
    return {"token_level_rewards": rewards, "response_mask": mask,
            "index": np.array([f"uid-{i // N}" for i in range(rows)], dtype=object),
            "values": torch.rand(rows, LENGTH, generator=g),
            "reward_baselines": torch.rand(rows, generator=g),
            "old_log_probs": -torch.rand(rows, LENGTH, generator=g),
            "sum_pi_squared": torch.rand(rows, LENGTH, generator=g), "rollout_is_weights": None}


def estimator_problem(name: str, algorithm: Any) -> str | None:
    """Why verl's estimator `name` does not give one advantage per response centred per group
    (under the run's `algorithm` config), or None when it does."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn(name)
    batch = synthetic_batch()
    known = {**batch, "config": algorithm, "gamma": algorithm.get("gamma", 1.0),
             "lam": algorithm.get("lam", 1.0),
             "norm_adv_by_std_in_grpo": algorithm.get("norm_adv_by_std_in_grpo", True)}
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in known.items() if takes_all or k in params}
    try:
        adv = fn(**kwargs)[0]
    except Exception as err:  # any failure: the check cannot vouch for the estimator
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return f"could not be checked on a synthetic batch ({type(err).__name__}: {text[:80]})"
    mask = batch["response_mask"].bool()
    first, varies = per_response(adv.detach().float(), mask)
    if varies:
        return "gives advantages that vary along a response"
    off = uncentred_group(first, torch.arange(first.numel()) // N)
    if off is not None:
        return f"gives advantages that are not centred per group (a group sums to {off[1]:.3g})"
    return None


def accepted_estimators(algorithm: Any) -> list[str]:
    """verl's registered estimators that pass the check under this algorithm config."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    return [name for name in sorted(ADV_ESTIMATOR_REGISTRY)
            if estimator_problem(name, algorithm) is None]


def check_estimator(mode: str, algorithm: Any) -> None:
    """algorithm.adv_estimator gives one advantage per response, centred per group: what the
    plugin's groups and the cancellation of shared tokens (sum_i A_i = 0) assume."""
    name = str(algorithm.adv_estimator)
    problem = estimator_problem(name, algorithm)
    if problem is not None:
        raise PluginConfigError(
            f"algorithm.adv_estimator={name} {problem}; loss_mode={mode} takes one advantage per "
            f"response, centred per group: {', '.join(accepted_estimators(algorithm))}")


def check_trainer(mode: str, cfg: Any, coupled: bool) -> None:
    """The trainer settings that replace or extend the loss, or reorder rows (module docstring)."""
    if cfg.algorithm.rollout_correction.get("bypass_mode"):
        raise PluginConfigError(
            "algorithm.rollout_correction.bypass_mode=True: verl's trainer then sets "
            f"policy_loss.loss_mode=bypass_mode (apply_bypass_mode), so loss_mode={mode} would "
            "never run (set it False)")
    distillation = cfg.get("distillation") or {}
    if distillation.get("enabled"):
        raise PluginConfigError(
            f"distillation.enabled=True: verl's distillation_ppo_loss adds a distillation loss to "
            f"loss_mode={mode} or replaces it (set it False)")
    if coupled and cfg.trainer.balance_batch and not cfg.actor_rollout_ref.actor.get(
            "use_prefix_grouper"):
        raise PluginConfigError(
            f"trainer.balance_batch=True (verl's default) reorders rows across ranks and "
            f"micro-batches, which cuts the groups that loss_mode={mode} weighs together (set it "
            "False, or actor_rollout_ref.actor.use_prefix_grouper=True: it balances whole groups)")


def check_policy_loss_keys(policy_loss: Any) -> None:
    """A key added under policy_loss (`+...policy_loss.transform=...`) that verl's
    PolicyLossConfig lacks: nothing reads it, so a DFPO setting put there would be ignored."""
    from verl.workers.config import PolicyLossConfig

    valid = [f.name for f in dataclasses.fields(PolicyLossConfig) if not f.name.startswith("_")]
    for key in policy_loss:
        if not str(key).startswith("_") and key not in valid:
            raise PluginConfigError(
                f"actor_rollout_ref.actor.policy_loss.{key}: no such key (valid: "
                f"{', '.join(valid)}); the DFPO variant is chosen by loss_mode "
                f"({', '.join(REGISTERED)})")


def plugin_loaded(cfg: Any) -> bool:
    libs = cfg.actor_rollout_ref.model.get("external_lib") or ""
    modules = os.environ.get("VERL_USE_EXTERNAL_MODULES", "")
    return PLUGIN in str(libs).split(",") or PLUGIN in modules.split(",")


def check_run(cfg: Any) -> str:
    """Every check on verl's composed config (the `ppo_trainer` DictConfig); a summary line."""
    actor = cfg.actor_rollout_ref.actor
    mode = actor.policy_loss.loss_mode
    if mode not in REGISTERED:
        raise PluginConfigError(f"{LOSS_MODE_KEY}={mode} is not one of the plugin's modes "
                                f"({', '.join(REGISTERED)})")
    if not plugin_loaded(cfg):
        raise PluginConfigError(f"the plugin is not loaded: add "
                                f"actor_rollout_ref.model.external_lib={PLUGIN}")
    check_policy_loss_keys(actor.policy_loss)
    check_trainer(mode, cfg, couples_groups(mode))
    check_estimator(mode, cfg.algorithm)
    objective = objective_config(mode, actor, actor.loss_agg_mode)
    check_rollout_is(mode, cfg.algorithm.rollout_correction.get("rollout_is"))
    if couples_groups(mode):
        check_whole_groups(mode, actor)
    return f"ok: loss_mode={mode} is {objective}"


def compose(overrides: list[str]) -> Any:
    """verl's `ppo_trainer` config under command-line overrides, as main_ppo composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def main(argv: list[str]) -> int:
    """`python -m repro.integrations.verl OVERRIDES...`: check a run's overrides, one line out."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        print(check_run(compose(argv)))
    except (ValueError, HydraException, OmegaConfBaseException) as err:  # one line, no traceback
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    return 0
