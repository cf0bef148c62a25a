"""FSDP2 set-up of the TRL engine: the precision recipe (every device) and the CPU shim (CPU only).

Precision recipe (issue 17, defects 1 and 2): the policy is loaded in float32 (the masters and
the AdamW state stay float32, so lr 1e-6 updates are not rounded away as they are in bf16),
`mixed_precision: bf16` in config/accelerate/fsdp2.yaml makes accelerate shard it with a
`MixedPrecisionPolicy`, and `recipe_policy` replaces accelerate's policy (bf16 everywhere,
including the gradient reduction and the module outputs) by: bf16 compute, float32 gradient
reduction, float32 outputs, so the per-token log-probs of TRL's float32 LM head
(`cast_lm_head_to_fp32`) are not rounded to bf16 on their way out of the root module.

CPU shim: accelerate only turns FSDP on for GPU-like devices (`accelerate/state.py`); on CPU it
gives MULTI_CPU over gloo and `prepare` leaves plain parameters. `enable_cpu_fsdp2` initialises
the shared `AcceleratorState` itself, with FSDP and the plugin the launcher's environment
describes, after the GRPOConfig exists (TrainingArguments resets accelerate's state when it
sets up devices) and before the trainer builds its `Accelerator`; accelerate's own FSDP2 prepare
path then runs on gloo (research note cpu_twin.md). This is the only place that touches accelerate's
state, and it does nothing where a GPU is present or FSDP was not asked for.
"""

from __future__ import annotations

import os

import torch


def fsdp_requested() -> bool:
    """Did the launcher (accelerate launch / the twin) ask for FSDP?"""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def ram_efficient_loading() -> bool:
    """Did the launcher ask for FSDP with `fsdp_cpu_ram_efficient_loading` (only the main
    process reads the weights; prepare broadcasts them shard by shard)?"""
    return fsdp_requested() and os.environ.get(
        "FSDP_CPU_RAM_EFFICIENT_LOADING", "false").lower() == "true"


def mixed_precision() -> str:
    """The launcher's mixed precision ('no', 'bf16', ...), as TrainingArguments reads it."""
    return os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()


def enable_cpu_fsdp2() -> bool:
    """On CPU under FSDP env: make accelerate's shared state FSDP before any Accelerator exists.
    Returns whether the shim was applied."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, DistributedType, PartialState
    from accelerate.utils import FullyShardedDataParallelPlugin

    if torch.cuda.is_available() or not fsdp_requested():
        return False
    if PartialState().num_processes < 2:
        return False  # one process: nothing to shard (accelerate launch --cpu runs one)
    Accelerator(cpu=True, mixed_precision=mixed_precision())  # initialises the shared state
    state = AcceleratorState()
    if state.distributed_type == DistributedType.FSDP:
        return True
    if state.distributed_type != DistributedType.MULTI_CPU:
        raise RuntimeError(f"CPU FSDP2 shim: expected accelerate state MULTI_CPU, got "
                           f"{state.distributed_type} (set ACCELERATE_USE_CPU=true under torchrun)")
    plugin = FullyShardedDataParallelPlugin()  # reads the FSDP_* variables of the launcher
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True


def recipe_policy(accelerator) -> None:
    """Give accelerate's FSDP2 plugin the recipe's policy (before `prepare`); a no-op without
    FSDP2 or without mixed precision."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None or plugin.fsdp_version != 2 or accelerator.mixed_precision == "no":
        return
    compute = {"bf16": torch.bfloat16, "fp16": torch.float16}[accelerator.mixed_precision]
    plugin.mixed_precision_policy = recipe_mp_policy(compute)


def recipe_mp_policy(compute: torch.dtype) -> object:
    """The recipe's FSDP2 policy: `compute`-dtype parameters in forward and backward, float32
    gradient reduction and module outputs (also what `repro.plan.measure` traces)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32,
                                output_dtype=torch.float32)


def close_process_group() -> None:
    """Destroy the default process group if this process opened one. A gloo group left open at
    interpreter exit can abort the process from its worker threads ('terminate called without an
    active exception', SIGABRT) after all the work succeeded: CI, 2026-12-04. Every torchrun
    entry (`repro` itself, the twin and preflight workers, the tests' scripts) ends with this."""
    import sys

    dist = sys.modules.get("torch.distributed")  # no torch import for `repro --help`
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
