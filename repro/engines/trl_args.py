"""TrainConfig -> trl.GRPOConfig, set field by field, and the guards of the trainer's arguments.

Why explicit: GRPOConfig's defaults silently change the objective or the comparison with the
native engine (research note gpu_trainer.md section 13.5): bf16 autocast even on CPU, a linear
lr decay, a shuffled prompt order, seed 42, vLLM importance-sampling correction, entropy
masking... Every field that matters is set here from TrainConfig, and every TRL option that
would change the objective is refused by name before any compute (in `trl_args` when the
TrainConfig is built: repro.training.trl_options; here again for direct users of the trainer,
`check_grpo_args`). Gradient (activation)
checkpointing is off by default (TRL turns it on; it doubles CPU step time) and allowed: it
recomputes the same activations, so the objective and its gradients are unchanged, and the
paper presets need it to fit (repro plan).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from repro.training.config import TrainConfig
from repro.training.trl_options import REFUSED

TRL_VERSION = "1.16.0"  # the private methods the subclass overrides are pinned to this release


def check_layout(cfg: TrainConfig, world_size: int) -> None:
    """Refuse a layout where a process would hold part of a group in a micro-step: each of the
    K optimizer minibatches has P/K whole groups, spread over the processes, so P/K must be a
    multiple of the number of processes (research note R1). Without that, DFPO would need the
    cross-process pre-pass, which this engine does not run."""
    per_update = cfg.prompts_per_step // cfg.minibatches
    if per_update % world_size:
        fits = cfg.minibatches * world_size * -(-per_update // world_size)
        raise ValueError(
            f"TrainConfig.prompts_per_step/minibatches = {cfg.prompts_per_step}/"
            f"{cfg.minibatches} = {per_update} groups per update cannot be split into whole "
            f"groups over num_processes={world_size}; make it a multiple of the process count "
            f"(e.g. prompts_per_step {fits})")


def check_sources(cfg: Any, world_size: int) -> None:
    """Refuse, under several processes, the off-policy sources that swap the behaviour policy's
    weights (`repro.training.behaviour`): that swap does not handle FSDP2's shards (whose bf16
    compute is already a bf16 sampler). `cfg`: what has TrainConfig's `staleness` and
    `sampler_dtype`."""
    for key, off in (("staleness", 0), ("sampler_dtype", None)):
        if world_size > 1 and getattr(cfg, key) != off:
            raise ValueError(f"TrainConfig.{key}={getattr(cfg, key)!r} runs on one process under "
                             f"engine=trl, not num_processes={world_size}")


def check_grpo_args(args: Any) -> None:
    """Refuse a GRPOConfig that changes the objective (also guards direct users of the class)."""
    for key, (neutral, why) in REFUSED.items():
        value = getattr(args, key, neutral)
        if key == "generation_kwargs" and value == {}:
            continue
        if value != neutral:
            raise ValueError(f"GRPOConfig.{key}={value!r} is refused by ReproGRPOTrainer: {why}")
    for key, want in (("shuffle_dataset", False), ("lr_scheduler_type", "constant")):
        value = getattr(args, key)
        value = getattr(value, "value", value)  # SchedulerType enum -> str
        if value != want:
            raise ValueError(f"GRPOConfig.{key}={value!r} is refused by ReproGRPOTrainer: "
                             f"the native engine's layout needs {want!r}")


def build_grpo_config(cfg: TrainConfig, *, out: Path, world_size: int, steps: int,
                      half_precision: bool, use_cpu: bool) -> Any:
    """GRPOConfig for `steps` rollout steps: `epochs` passes (TRL's num_iterations: TRL then
    computes old_per_token_logps once per rollout, before the first update) of K optimizer
    minibatches of P*G/K rows per rollout,
    each spread over the processes in whole groups and, with `trl_args.
    gradient_accumulation_steps` = A > 1, cut into A micro-steps per process (DFPO then runs
    its pre-pass). `half_precision`: the launcher computes in bf16/fp16 (float32 masters), so
    TRL's LM head and log-softmax run in float32 (`cast_lm_head_to_fp32`)."""
    from trl import GRPOConfig

    check_layout(cfg, world_size)
    check_sources(cfg, world_size)
    accum = int(cfg.trl_args.get("gradient_accumulation_steps", 1))
    local = cfg.prompts_per_step * cfg.group_size // (cfg.minibatches * world_size)
    if accum < 1 or local % accum:
        raise ValueError(f"TrainConfig.trl_args.gradient_accumulation_steps={accum} must be >= 1 "
                         f"and divide the {local} rows per process and update")
    fields: dict[str, Any] = {
        "output_dir": str(out / "trl"), "per_device_train_batch_size": local // accum,
        "gradient_accumulation_steps": accum,
        "steps_per_generation": cfg.minibatches * accum,
        "num_generations": cfg.group_size, "num_iterations": cfg.epochs,
        "max_steps": steps * cfg.minibatches * cfg.epochs, "learning_rate": cfg.lr,
        "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": cfg.weight_decay,
        "max_grad_norm": cfg.grad_clip or math.inf, "seed": cfg.seed, "data_seed": cfg.seed,
        "shuffle_dataset": False, "temperature": cfg.temperature, "top_p": cfg.top_p,
        "top_k": cfg.top_k, "max_completion_length": cfg.max_new_tokens, "beta": cfg.kl_coef,
        "report_to": [], "logging_steps": 1, "save_strategy": "no",
        "remove_unused_columns": False, "use_cpu": use_cpu, "bf16": False, "fp16": False,
        "gradient_checkpointing": False, "vllm_importance_sampling_correction": False,
        "cast_lm_head_to_fp32": half_precision, "disable_tqdm": True,
        "log_completions": False, "dataloader_num_workers": 0, "optim": "adamw_torch",
        "router_aux_loss_coef": cfg.router_aux_loss_coef,  # None: the model config's (TRL)
        "use_bias_correction_kl": False,  # the k3 KL is the project's (DFPOTrainer refuses it)
    }
    return GRPOConfig(**(fields | rollout_defaults(cfg.trl_args) | cfg.trl_args))


def rollout_defaults(trl_args: dict[str, Any]) -> dict[str, Any]:
    """Rollout engine defaults: vLLM colocated on the training GPUs sleeps between rollouts
    (frees its KV cache for the update), which TRL leaves off; server mode (`trl vllm-serve`
    on its own node, for multi-node runs) and HF generate need nothing. A missing `vllm_mode`
    is TRL's default (colocate). Sleep mode is asked for only where vLLM's platform has it
    (CUDA, ROCm, XPU; not CPU). Explicit trl_args win.

    The workflow calls this at parse time (the memory planner), so TRL, whose config module
    loads transformers' Trainer and peft (~5 s), is imported only for its `vllm_mode` default.
    """
    if not trl_args.get("use_vllm"):
        return {}
    if "vllm_mode" in trl_args:
        mode = trl_args["vllm_mode"]
    else:
        from trl import GRPOConfig

        mode = GRPOConfig.vllm_mode  # the dataclass default: TRL's own
    if mode == "colocate" and sleep_mode_available():
        return {"vllm_enable_sleep_mode": True}
    return {}


def sleep_mode_available() -> bool:
    """vLLM's answer for this machine's platform; False without vLLM (TRL then refuses
    `use_vllm` itself, naming the missing package)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_sleep_mode_available())
