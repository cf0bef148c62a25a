"""verl's config, read for the plugin's loss modes: which objective each mode is, its settings
taken from verl's actor config, and the settings that would silently break cancellation.

Every check raises `PluginConfigError` with one line that names the verl key. The loss runs the
checks it can see from verl's actor config at its first call; `python -m repro.integrations.verl
OVERRIDES...` composes verl's whole config from the overrides of a `verl.trainer.main_ppo` command
and runs all of them (trainer.balance_batch is not visible from the loss) before any compute.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from repro.objectives import AGG_MODES, LossConfig, get_algorithm, make_config

PLUGIN = "repro.integrations.verl"
ACTOR = "actor_rollout_ref.actor"
LOSS_MODE_KEY = f"{ACTOR}.policy_loss.loss_mode"

# verl loss mode -> (the suite's algorithm, objective overrides): config/config.yaml's catalogue
# entries of the same names (tests/test_verl_plugin.py holds them equal).
MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "gspo": ("gspo", {}),
    "grpo_fix": ("grpo_fix", {}),
    "dfpo_min": ("dfpo", {"transform": "min_replace"}),
    "dfpo_orth": ("dfpo", {"transform": "orth_proj"}),
    "dfpo_min_prod": ("dfpo", {"transform": "min_replace", "sequence_ratio": "product"}),
    "dfpo_orth_prod": ("dfpo", {"transform": "orth_proj", "sequence_ratio": "product"}),
}
# The verl mode that computes the same objective (parity-tested). grpo and gspo are verl's own
# `vanilla` (less its dual clip) and `gspo`, so they are not registered again; grpo_fix is, as
# the paper's name for `cispo` with one symmetric bound.
VERL_EQUIVALENT = {"grpo": "vanilla", "gspo": "gspo", "grpo_fix": "cispo"}
REGISTERED = ("grpo_fix", "dfpo_min", "dfpo_orth", "dfpo_min_prod", "dfpo_orth_prod")
# verl's clip bounds -> the fields of the objectives that clip (DFPO is clip-free)
CLIP_FIELDS = {"grpo": ("eps_low", "eps_high"), "gspo": ("eps_low", "eps_high"),
               "grpo_fix": ("eps",)}


class PluginConfigError(ValueError):
    """A verl setting the plugin refuses; the message is one line and names the key."""


def couples_groups(mode: str) -> bool:
    """Do the mode's per-sequence terms depend on the other members of the group (DFPO)?"""
    return get_algorithm(MODES[mode][0]).couples_groups


def clip_range(actor: Any) -> tuple[float, float]:
    """verl's (clip_ratio_low, clip_ratio_high), each falling back to clip_ratio as verl's do."""
    low, high = actor.get("clip_ratio_low"), actor.get("clip_ratio_high")
    default = actor.get("clip_ratio")
    return (default if low is None else low), (default if high is None else high)


def objective_config(mode: str, actor: Any, loss_agg_mode: str) -> LossConfig:
    """The suite's config for `mode` under verl's actor config (`ActorConfig` or its DictConfig)."""
    algorithm, overrides = MODES[mode]
    if loss_agg_mode not in AGG_MODES:
        raise PluginConfigError(f"{ACTOR}.loss_agg_mode={loss_agg_mode}: loss_mode={mode} takes "
                                f"one of {', '.join(AGG_MODES)}")
    if couples_groups(mode) and loss_agg_mode == "seq-mean-token-mean":
        raise PluginConfigError(
            f"{ACTOR}.loss_agg_mode=seq-mean-token-mean: loss_mode={mode} needs one normaliser for "
            "a whole group, and this mode divides each response by its own length, so shared "
            "tokens stop cancelling (use token-mean)")
    fields = {**overrides, "loss_agg_mode": loss_agg_mode,
              "loss_norm_length": actor.get("loss_scale_factor")}
    low, high = clip_range(actor)
    names = CLIP_FIELDS.get(algorithm, ())
    if len(names) == 1 and low != high:
        raise PluginConfigError(
            f"{ACTOR}.clip_ratio_low={low} != clip_ratio_high={high}: loss_mode={mode} clips "
            "symmetrically (loss_mode=cispo takes two bounds)")
    fields.update(zip(names, (low, high), strict=False))
    try:
        return make_config(algorithm, **fields)
    except ValueError as err:
        raise PluginConfigError(f"loss_mode={mode}: {err}") from None


def check_whole_groups(mode: str, actor: Any) -> None:
    """The actor settings that cut a group across micro-batches, for a mode that couples them."""
    if actor.get("shuffle"):
        raise PluginConfigError(
            f"{ACTOR}.shuffle=True shuffles rows within a mini-batch, which cuts the groups that "
            f"loss_mode={mode} weighs together (set it False)")
    if actor.get("use_dynamic_bsz"):
        raise PluginConfigError(
            f"{ACTOR}.use_dynamic_bsz=True packs micro-batches by token count, which cuts the "
            f"groups that loss_mode={mode} weighs together (set it False)")
    n, micro = actor.get("rollout_n"), actor.get("ppo_micro_batch_size_per_gpu")
    if micro is not None and n and micro % n:
        raise PluginConfigError(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu={micro} is not a multiple of "
            f"actor_rollout_ref.rollout.n={n}: loss_mode={mode} needs whole groups in each "
            "micro-batch")


def check_rollout_is(mode: str, level: str | None) -> None:
    """Rollout importance weights: DFPO folds sequence-level ones into s before its transform;
    token-level ones multiply tokens after it, so two copies of a shared token get the sampler's
    two (numerically different) weights and stop cancelling."""
    if level is None:
        return
    if not couples_groups(mode):
        raise PluginConfigError(
            f"algorithm.rollout_correction.rollout_is={level}: loss_mode={mode} takes no rollout "
            "importance weights (loss_mode=cispo does)")
    if level != "sequence":
        raise PluginConfigError(
            f"algorithm.rollout_correction.rollout_is={level}: loss_mode={mode} takes sequence-"
            "level weights only (folded into s before the transform); token-level ones multiply "
            "tokens after it, so copies of a shared token stop cancelling")


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
    if cfg.algorithm.adv_estimator == "gae":
        raise PluginConfigError(
            f"algorithm.adv_estimator=gae (verl's default) gives per-token advantages; "
            f"loss_mode={mode} takes one per response (algorithm.adv_estimator=grpo)")
    objective = objective_config(mode, actor, actor.loss_agg_mode)
    check_rollout_is(mode, cfg.algorithm.rollout_correction.get("rollout_is"))
    if couples_groups(mode):
        if cfg.trainer.balance_batch:
            raise PluginConfigError(
                f"trainer.balance_batch=True (verl's default) reorders rows across ranks and "
                f"micro-batches, which cuts the groups that loss_mode={mode} weighs together "
                "(set it False)")
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
