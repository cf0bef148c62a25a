"""verl's config, read for the plugin's loss modes: which objective each mode is, its settings
taken from verl's actor config, and the settings that would silently break cancellation.

Every check raises `PluginConfigError` with one line that names the verl key. The loss runs the
checks it can see from verl's actor config at its first call; `python -m repro.integrations.verl
OVERRIDES...` (verl_check.check_run) runs them and the trainer-level ones (balance_batch, bypass
mode, the advantage estimator: not visible from the loss) on verl's whole config before any
compute.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from repro.catalogue import objective_of
from repro.objectives import AGG_MODES, LossConfig, get_algorithm, make_config

PLUGIN = "repro.integrations.verl"
ACTOR = "actor_rollout_ref.actor"
LOSS_MODE_KEY = f"{ACTOR}.policy_loss.loss_mode"

# The verl mode that computes the same objective (parity-tested). grpo and gspo are verl's own
# `vanilla` (less its dual clip) and `gspo`, so they are not registered again; grpo_fix is, as
# the paper's name for `cispo` with one symmetric bound.
VERL_EQUIVALENT = {"grpo": "vanilla", "gspo": "gspo", "grpo_fix": "cispo"}
REGISTERED = ("grpo_fix", "dfpo_min", "dfpo_orth", "dfpo_min_prod", "dfpo_orth_prod")


# verl loss mode -> (the suite's algorithm, objective overrides): the run catalogue's entry of
# the same name (repro.catalogue), so a mode is the objective that label's runs train.
MODES: dict[str, tuple[str, dict[str, Any]]] = {
    mode: objective_of(mode) for mode in dict.fromkeys((*VERL_EQUIVALENT, *REGISTERED))}


def clip_fields(algorithm: str) -> tuple[str, ...]:
    """The objective's fields that verl's clip bounds set, (low, high) or (symmetric,), from
    their `clip` metadata (repro.objectives.base.LossConfig); () for a clip-free one (DFPO)."""
    marked = {f.metadata["clip"]: f.name
              for f in dataclasses.fields(get_algorithm(algorithm).config_cls)
              if "clip" in f.metadata}
    return tuple(marked[k] for k in ("both", "low", "high") if k in marked)


class PluginConfigError(ValueError):
    """A verl setting the plugin refuses; the message is one line and names the key."""


def couples_groups(mode: str) -> bool:
    """Do the mode's per-sequence terms depend on the other members of the group (DFPO)?"""
    return get_algorithm(MODES[mode][0]).couples_groups


def accepted_agg_modes(mode: str) -> tuple[str, ...]:
    """The loss_agg_modes the mode takes: the suite's, less seq-mean-token-mean for a mode that
    couples a group (one normaliser per response breaks the cancellation within a group)."""
    return tuple(a for a in AGG_MODES
                 if not (couples_groups(mode) and a == "seq-mean-token-mean"))


def clip_range(actor: Any) -> tuple[float, float]:
    """verl's (clip_ratio_low, clip_ratio_high), each falling back to clip_ratio as verl's do."""
    low, high = actor.get("clip_ratio_low"), actor.get("clip_ratio_high")
    default = actor.get("clip_ratio")
    return (default if low is None else low), (default if high is None else high)


def objective_config(mode: str, actor: Any, loss_agg_mode: str) -> LossConfig:
    """The suite's config for `mode` under verl's actor config (`ActorConfig` or its DictConfig)."""
    algorithm, overrides = MODES[mode]
    if loss_agg_mode not in accepted_agg_modes(mode):
        if loss_agg_mode not in AGG_MODES:
            raise PluginConfigError(f"{ACTOR}.loss_agg_mode={loss_agg_mode}: loss_mode={mode} "
                                    f"takes one of {', '.join(accepted_agg_modes(mode))}")
        raise PluginConfigError(
            f"{ACTOR}.loss_agg_mode=seq-mean-token-mean: loss_mode={mode} needs one normaliser for "
            "a whole group, and this mode divides each response by its own length, so shared "
            f"tokens stop cancelling (use one of {', '.join(accepted_agg_modes(mode))})")
    fields = {**overrides, "loss_agg_mode": loss_agg_mode,
              "loss_norm_length": actor.get("loss_scale_factor")}
    low, high = clip_range(actor)
    names = clip_fields(algorithm)
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
