"""The GRPOConfig options a TrainConfig's `trl_args` (engine=trl) may not set: those derived from
TrainConfig fields, and those that would change the objective or the sampling distribution.

Here, beside the config, so that a bad `trl_args` fails when the TrainConfig is built, before any
compute; repro.engines.trl_args guards the GRPOConfig it builds with the same table.
"""

from __future__ import annotations

from typing import Any

# GRPOConfig fields derived from TrainConfig: set them through TrainConfig, not trl_args.
OWNED = (
    "output_dir", "per_device_train_batch_size",
    "steps_per_generation", "generation_batch_size", "num_generations", "num_iterations",
    "max_steps", "num_train_epochs", "learning_rate", "lr_scheduler_type", "warmup_steps",
    "warmup_ratio", "weight_decay", "max_grad_norm", "seed", "data_seed", "shuffle_dataset",
    "temperature", "top_p", "top_k", "max_completion_length", "beta", "loss_type", "epsilon",
    "epsilon_high", "scale_rewards", "importance_sampling_level", "report_to", "logging_steps",
    "save_strategy", "remove_unused_columns", "use_cpu", "cast_lm_head_to_fp32", "optim",
    "router_aux_loss_coef",
    "use_bias_correction_kl",
)

# Options that change the objective: TRL would apply them inside its own loss or mask, which the
# subclass replaces, so they would vanish silently or act outside the objective. Refused by
# DFPOTrainer (any TRL user) as well as by this engine. Each entry: (the neutral value, reason).
OBJECTIVE_OPTIONS: dict[str, tuple[Any, str]] = {
    "vllm_importance_sampling_correction": (
        False, "re-weights or masks sequences by the vLLM/trainer ratio outside the objective"),
    "use_liger_kernel": (False, "swaps Liger kernels into the model's layers (TRL 1.16; "
                         "earlier releases routed the whole loss through Liger, past "
                         "compute_loss), which the objective's loss is not checked against"),
    "top_entropy_quantile": (1.0, "masks the policy gradient of low-entropy tokens"),
    "off_policy_mask_threshold": (None, "masks off-policy sequences out of the loss"),
    "mask_truncated_completions": (False, "drops truncated responses from the loss"),
    "delta": (None, "adds a two-sided clip to the ratio"),
    "entropy_coef": (0.0, "adds an entropy bonus to the loss"),
    "use_adaptive_entropy": (False, "adds an entropy bonus to the loss"),
}

# Options this engine refuses on top, to stay comparable with the native engine (the same
# sampling distribution, no autocast, a fixed KL reference). A TRL user may set them.
ENGINE_ONLY: dict[str, tuple[Any, str]] = {
    "bf16": (False, "autocasts to bf16 (even on CPU): load the model in bf16 instead"),
    "fp16": (False, "autocasts to fp16: load the model in half precision instead"),
    "sync_ref_model": (False, "moves the KL reference during training"),
    "min_p": (None, "changes the sampling distribution away from the native engine's"),
    "repetition_penalty": (1.0, "changes the sampling distribution away from the native engine's"),
    "generation_kwargs": (None, "changes the sampling distribution away from the native engine's"),
}

# Options that change the objective or the sampling distribution; value -> why it is refused.
REFUSED: dict[str, tuple[Any, str]] = OBJECTIVE_OPTIONS | ENGINE_ONLY


def check_trl_args(trl_args: dict[str, Any]) -> None:
    """Refuse, by name, a key TrainConfig sets itself or one that changes the objective."""
    for key in sorted(trl_args):
        if key in OWNED:
            raise ValueError(f"TrainConfig.trl_args.{key} is set from TrainConfig; set the "
                             "TrainConfig field instead")
        if key in REFUSED and trl_args[key] != REFUSED[key][0]:
            raise ValueError(f"TrainConfig.trl_args.{key}={trl_args[key]!r} is refused: "
                             f"{REFUSED[key][1]}")
