"""Per-GPU and per-node memory of the GPU jobs a config plans (train and evaluate), and the one
setting to change when a job cannot fit.

The arithmetic, per train process (FSDP2 full sharding over W = nodes x GPUs per node, the
precision recipe of the paper presets: fp32 masters, bf16 compute, fp32 gradients and AdamW):
masters 4N/W, gradients 4N/W, AdamW m and v 8N/W bytes; the largest FSDP unit gathered
(bf16 parameters and fp32 unsharded gradients, twice for prefetch); activations of one
micro-step (rows x sequence x bytes per token: every layer's saved tensors, or with activation
checkpointing the layer boundaries plus one layer recomputed); the DFPO pre-pass (no-grad
forward of one micro-step's rows, chunked); the rollout engine (vLLM colocated at its memory
utilisation, asleep during the update with sleep mode; or HF generate's KV cache for the whole
local generation batch). Worst case throughout: every sequence at prompt + response budget.
With `kl_coef` > 0, TRL's KL reference: built by every process from the start checkpoint in the
policy's dtype (fp32 masters here; `create_model_from_path`, a whole copy per process in host
memory while it loads), then sharded by `prepare_fsdp` (4N/W on each GPU). The paper presets
set no KL (kl_coef 0: TRL, like the native engine, then builds no reference).
Approximations, not measurements: activation bytes count the tensors autograd saves (no
allocator slack), so RESERVE_GB is kept free on every GPU.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

from repro.plan.hardware import Hardware
from repro.plan.shapes import BF16, Shape
from repro.training.config import TrainConfig

GB = 1e9
RESERVE_GB = 6.0  # CUDA context, NCCL buffers, allocator fragmentation: never planned for use
VLLM_ACT_GB = 2.0  # vLLM's own forward at TRL's max_num_batched_tokens=4096, CUDA graphs
VLLM_ASLEEP_GB = 1.0  # what a sleeping vLLM (level 2: weights and KV cache freed) keeps
PROC_HOST_GB = 10.0  # host memory of one process: Python, torch, CUDA and vLLM runtimes
REFERENCE = "KL reference fp32 (sharded)"
REFERENCE_HOST = "KL reference, loaded whole by every process"
SNAPSHOT = "bench fp32 snapshot of the masters"
RUNTIME_MARGIN = 1.2  # evaluation walltime over the token estimate (load, grading, stragglers)


TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}


class PlanRefusal(ValueError):
    """A job cannot fit: the message is one line naming the config key to change."""


@dataclass
class Phase:
    """One phase of a job (rollout, update, ...): memory items per GPU against a capacity."""

    name: str
    capacity_gb: float
    items: dict[str, float] = field(default_factory=dict)

    @property
    def total_gb(self) -> float:
        return sum(self.items.values())


@dataclass
class JobPlan:
    job: str  # train / evaluate
    model: str
    nodes: int
    gpus_per_node: int
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)
    runtime_min: int | None = None  # evaluate: the walltime to ask for


def _gb(nbytes: float) -> float:
    return nbytes / GB


def trl_args(train: dict[str, Any]) -> dict[str, Any]:
    """The train block's trl_args over TRL's rollout defaults (as the engine builds them)."""
    from repro.engines.trl_args import rollout_defaults

    return rollout_defaults(train.get("trl_args", {})) | train.get("trl_args", {})


def step_layout(train: dict[str, Any], hw: Hardware, world: int) -> tuple[int, int, int, int,
                                                                          bool]:
    """(rows per process and update, accumulation steps, rows per micro-step, tokens per row,
    activation checkpointing) of a train job: what the arithmetic and the tracker both size."""
    args = trl_args(train)
    accum = int(args.get("gradient_accumulation_steps", 1))
    local = train["prompts_per_step"] * train["group_size"] // (train["minibatches"] * world)
    if local % accum:
        raise PlanRefusal(f"config train.trl_args.gradient_accumulation_steps={accum} does not "
                          f"divide the {local} rows per process and update")
    budget = train.get("max_new_tokens", TRAIN_DEFAULTS["max_new_tokens"])
    return (local, accum, local // accum, hw.prompt_tokens + int(budget),
            bool(args.get("gradient_checkpointing", False)))


def train_plan(model: str, shape: Shape, train: dict[str, Any], hw: Hardware,
               world: int, snapshot: bool = False) -> JobPlan:
    """Plan one train job; raise PlanRefusal (one line, naming the key) when it cannot fit.
    `snapshot`: `repro bench gpu`'s fp32 copy of the masters, kept on the GPU through the
    update for its param_change check."""
    from repro.engines.trl_args import check_layout, check_sources

    nodes, per_node = hw.train.nodes, hw.train.gpus_per_node
    p, k = train["prompts_per_step"], train["minibatches"]
    try:
        check_layout(SimpleNamespace(prompts_per_step=p, minibatches=k), world)
    except ValueError as err:
        raise PlanRefusal(f"config train.prompts_per_step: {err} (hardware.train: {nodes} "
                          f"node(s) x {per_node} GPUs)") from None
    try:
        check_sources(SimpleNamespace(**{key: train.get(key, TRAIN_DEFAULTS[key])
                                         for key in ("staleness", "sampler_dtype")}), world)
    except ValueError as err:
        raise PlanRefusal(f"config train.{str(err).removeprefix('TrainConfig.')} "
                          f"(hardware.train: {nodes} node(s) x {per_node} GPUs)") from None
    args = trl_args(train)
    local, _, micro, seq, ckpt = step_layout(train, hw, world)
    n, gpu = shape.params, hw.gpu_memory_gb - RESERVE_GB
    states = {"fp32 masters (sharded)": _gb(4 * n / world),
              "fp32 gradients (sharded)": _gb(4 * n / world),
              "AdamW m, v fp32 (sharded)": _gb(8 * n / world)}
    kl = float(train.get("kl_coef", TRAIN_DEFAULTS["kl_coef"])) > 0
    reference = {REFERENCE: _gb(4 * n / world)} if kl else {}
    unit = max(shape.layer_params * (BF16 + 4), shape.embed_params * (4 + 4))  # fp32 head
    # checkpoint boundaries: each layer's bf16 input (the tracker, repro.plan.measure, finds
    # 0.356 GB a layer at Qwen3-32B's width and 34,816 tokens: bf16, not float32)
    # with checkpointing: every layer's bf16 input, and the recomputed layer's activations
    # with their gradients beside them in its backward (x2; the tracker, repro.plan.measure, at
    # the 32B preset: 22.4 GB of temporaries for 10.4 GB of one layer's activations)
    boundary = shape.layers * shape.hidden * BF16 + 2 * shape.layer_act_bytes_per_token
    act = micro * seq * (boundary if ckpt else shape.act_bytes_per_token)
    prepass = micro * seq * (shape.layer_act_bytes_per_token + 2 * shape.hidden * BF16)
    plan = JobPlan("train", model, nodes, per_node, [], [
        f"per GPU: {hw.gpu_memory_gb} GB less {RESERVE_GB} GB kept free (CUDA context, NCCL, "
        "fragmentation); every sequence at prompt + response budget"])

    rollout = Phase("rollout", gpu, {"fp32 masters (sharded)": states["fp32 masters (sharded)"],
                                     "AdamW m, v fp32 (sharded)":
                                         states["AdamW m, v fp32 (sharded)"]} | reference)
    vllm_resident = 0.0
    if not args.get("use_vllm"):
        rows = local * k  # the whole generation batch of this process, KV cache of full layers
        rollout.items["HF generate KV cache"] = _gb(rows * (seq * shape.kv_bytes_per_token
                                                            + shape.state_bytes_per_seq))
        rollout.items["gathered unit"] = _gb(2 * unit)
        _refuse_over(rollout, "train.trl_args.use_vllm", f"{rows} sequences of {seq} tokens "
                     "through HF generate; set use_vllm: true with vllm_mode: colocate")
    elif args.get("vllm_mode") == "server":
        plan.notes.append("vLLM server mode: its GPUs are outside this job and not planned")
    else:
        util, tp = _vllm_args(args)
        if world % tp or shape.heads % tp:
            raise PlanRefusal(f"config train.trl_args.vllm_tensor_parallel_size={tp} must divide "
                              f"the {world} processes and the {shape.heads} attention heads")
        rollout.items["vLLM (memory utilisation)"] = util * hw.gpu_memory_gb
        _refuse_over(rollout, "train.trl_args.vllm_gpu_memory_utilization",
                     f"vLLM's share {util} of {hw.gpu_memory_gb} GB next to the resident "
                     "training state; lower it")
        weights = _gb(BF16 * n / tp)
        kv = util * hw.gpu_memory_gb - weights - VLLM_ACT_GB
        max_len = args.get("vllm_max_model_length") or shape.max_position_embeddings
        per_seq = _vllm_seq_gb(shape, tp, max_len)
        if kv < per_seq:
            raise PlanRefusal(
                f"config train.trl_args.vllm_gpu_memory_utilization={util}: vLLM keeps "
                f"{kv:.1f} GB per GPU for its KV cache after {weights:.1f} GB of weights at "
                f"tensor parallel {tp}, below one {max_len}-token sequence ({per_seq:.1f} GB); "
                "raise it or vllm_tensor_parallel_size")
        plan.notes.append(f"vLLM colocated, TP {tp}: {weights:.1f} GB weights, "
                          f"{kv:.1f} GB KV cache per GPU, {int(kv // _vllm_seq_gb(shape, tp, seq))}"
                          f" sequences of {seq} tokens at once per TP group")
        asleep = args.get("vllm_enable_sleep_mode", False)
        vllm_resident = VLLM_ASLEEP_GB if asleep else util * hw.gpu_memory_gb
    plan.phases.append(rollout)

    update = Phase("update", gpu, dict(states) | reference)
    update.items["gathered unit (bf16 params, fp32 grads, x2)"] = _gb(2 * unit)
    label = "activations (checkpointed)" if ckpt else "activations (no checkpointing)"
    update.items[f"{label}, {micro} x {seq} tokens"] = _gb(act)
    if vllm_resident:
        update.items["vLLM " + ("asleep" if vllm_resident == VLLM_ASLEEP_GB else "awake")] = \
            vllm_resident
    if snapshot:
        update.items[SNAPSHOT] = _gb(4 * n / world)
    if update.total_gb > gpu:
        _refuse_over(update, *update_knob(ckpt, micro, local, vllm_resident))
    plan.phases.append(update)
    # AdamW's foreach step holds one fp32 temporary the size of the shards (sqrt of v) beside
    # masters, gradients and m, v: measured by the tracker (repro.plan.measure), 15.6 GB of the
    # H200 run's 94.0 GB
    step = Phase("optimizer step (foreach AdamW)", gpu, dict(states) | reference | {
        "AdamW foreach temporary fp32 (sharded)": _gb(4 * n / world)} | {
        k: v for k, v in update.items.items() if k.startswith(("vLLM", SNAPSHOT))})
    _refuse_over(step, "hardware.train.nodes", "shard over more GPUs")
    plan.phases.append(step)
    plan.phases.append(Phase("DFPO pre-pass (no grad)", gpu, dict(states) | {
        "gathered unit (bf16 params, fp32 grads, x2)": _gb(2 * unit),
        f"one layer's activations, {micro} x {seq} tokens": _gb(prepass)}))

    host = Phase("host memory per node", hw.host_memory_gb, {
        f"{per_node} processes' runtimes": per_node * PROC_HOST_GB,
        "full fp32 state on node 0 (load, or save's gather)": _gb(4 * n)}
        | ({REFERENCE_HOST: per_node * _gb(4 * n)} if kl else {}))
    _refuse_over(host, "hardware.host_memory_gb", "node 0 holds the whole model once "
                 "(non-zero ranks load on the meta device)")
    plan.phases.append(host)
    return plan


def update_knob(ckpt: bool, micro: int, local: int, vllm_resident: float) -> tuple[str, str]:
    """(config key, what to do) that shrinks an update that does not fit, in order of cost."""
    if not ckpt:
        return "train.trl_args.gradient_checkpointing", "set it true"
    if micro > 1:
        return "train.trl_args.gradient_accumulation_steps", f"raise it to {local}"
    if vllm_resident > VLLM_ASLEEP_GB:
        return "train.trl_args.vllm_enable_sleep_mode", "set it true"
    return "hardware.train.nodes", "shard over more GPUs"


def eval_plan(model: str, shape: Shape, tokens: int, hw: Hardware) -> JobPlan:
    """Plan one evaluation job (vLLM, tensor parallel over its GPUs) producing `tokens`."""
    from repro.generation.vllm_engine import VLLMEngine

    tp = hw.eval.gpus
    if shape.heads % tp:
        raise PlanRefusal(f"config hardware.eval.gpus={tp} must divide the model's "
                          f"{shape.heads} attention heads (vLLM tensor parallel)")
    util = inspect.signature(VLLMEngine).parameters["gpu_memory_utilization"].default
    weights = _gb(BF16 * shape.params / tp)
    kv = util * hw.gpu_memory_gb - weights - VLLM_ACT_GB
    per_seq = _vllm_seq_gb(shape, tp, shape.max_position_embeddings)
    phase = Phase("generation", util * hw.gpu_memory_gb, {
        f"bf16 weights / TP {tp}": weights, "vLLM forward, CUDA graphs": VLLM_ACT_GB,
        f"KV cache ({kv:.1f} GB; one {shape.max_position_embeddings}-token sequence)": per_seq})
    _refuse_over(phase, "hardware.eval.gpus", "more tensor-parallel GPUs")
    hours = tokens / hw.eval.tokens_per_s / 3600
    plan = JobPlan("evaluate", model, 1, tp, [phase],
                   runtime_min=math.ceil(hours * RUNTIME_MARGIN * 60))
    plan.notes.append(f"{tokens / 1e6:.0f}M response tokens at most, {hours:.1f} h at "
                      f"{hw.eval.tokens_per_s} tokens/s; walltime x{RUNTIME_MARGIN}")
    return plan


def _vllm_args(args: dict[str, Any]) -> tuple[float, int]:
    """vLLM colocate settings the planner needs, given explicitly (TRL's defaults are not
    guessed here: a preset that uses vLLM says how)."""
    for key in ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size"):
        if key not in args:
            raise PlanRefusal(f"config train.trl_args.{key} must be set with use_vllm (the "
                              "planner sizes vLLM from it)")
    return float(args["vllm_gpu_memory_utilization"]), int(args["vllm_tensor_parallel_size"])


def _vllm_seq_gb(shape: Shape, tp: int, tokens: int) -> float:
    """One sequence's KV cache (and linear-attention state) per GPU under vLLM at TP `tp`: KV
    heads split over at most their number of GPUs (replicated beyond)."""
    return _gb(tokens * shape.kv_bytes_per_token / min(tp, shape.kv_heads)
               + shape.state_bytes_per_seq / tp)


def _refuse_over(phase: Phase, key: str, how: str) -> None:
    if phase.total_gb > phase.capacity_gb:
        raise PlanRefusal(f"config {key}: the {phase.name} needs {phase.total_gb:.0f} GB per "
                          f"{'node' if 'host' in phase.name else 'GPU'} of "
                          f"{phase.capacity_gb:.0f} GB ({_largest(phase)}); {how}")


def _largest(phase: Phase) -> str:
    name, gb = max(phase.items.items(), key=lambda kv: kv[1])
    return f"{name}: {gb:.0f} GB"
