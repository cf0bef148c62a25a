"""Memory measured, not computed (issue 48): a train job's step traced in fake mode by torch's
own tracker, per rank and per stage, on a CPU and with no memory allocated.

The model is built on the meta device and moved with `to_empty(device="cpu")` under
`FakeTensorMode` (fake CUDA tensors need a CUDA build of torch; fake CPU tensors do not, and
kernel choice can differ by device: see docs/gpu.md). Every layer, then the root, is
`fully_shard`ed over a fake process group (`FakeStore`, backend "fake") of the job's world size
with the recipe's policy (`repro.engines.fsdp.recipe_mp_policy`), as accelerate's FSDP2 prepare
path does; `FSDPMemTracker` follows the all-gathers, reshards and reduce-scatters. A micro-step
runs the forward with activation checkpointing as configured, the response tokens through the
project's chunked head (`token_logprobs_and_entropy`, with the entropy TRL asks for), then the
backward of DFPO's loss (`policy_loss`); an update ends with a foreach AdamW step.

What the tracker needs to tell the truth (tests/test_plan_measure.py tests those marked *):
- * DTensor propagates shapes by running ops on fake full-size tensors, which the tracker
  counted as the optimizer's: AdamW steps the local shards instead (`_local_params`);
- * `to_empty` unties a tied head: `tie_weights()` again;
- * `reset_mod_stats()` after every micro-step (a second forward is refused otherwise);
- the chunked head runs inside the root's forward (as TRL's fused head patches it), so FSDP2
  unshards `lm_head` (the tracker fails when a unit's forward never runs);
- * no attention mask and no position ids: every row is at the full budget (the planner's worst
  case), which transformers on a GPU sees as an all-ones mask and drops; a fake mask cannot be
  read, so transformers would build a 4-D mask (and sdpa would lose GQA);
- * nor the position ids the model builds itself (`_rows_not_packed`): read as packed rows, they
  made a [rows, 1, L, L] mask that real tensors never build, and it skewed the extrapolation;
- DFPO's loss reads values (its metrics are floats): its gradient comes from real tensors.
* An op without a fake kernel raises `UntraceableOp` naming the op and the module it ran in.
"""

from __future__ import annotations

import contextlib
import re
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

GB = 1e9
WARM_TOKENS = 64  # response tokens of the warm-up micro-step (`StepSpec.warm`)
STAGES = ("forward + backward", "optimizer step")


class UntraceableOp(RuntimeError):
    """An op of the model has no fake (meta) kernel: the message names the op and the module."""


@dataclass(frozen=True)
class StepSpec:
    """One train job's step as the tracker runs it (a config.json's fields, and the job)."""

    fields: dict[str, Any]  # config.json's, model_type included
    world: int = 1  # FSDP2 processes (fake ranks)
    rows: int = 1  # rows per micro-step and process
    prompt: int = 2048  # prompt tokens of a row
    response: int = 32768  # response tokens of a row
    micro_steps: int = 1  # gradient accumulation steps per update
    updates: int = 1  # optimizer steps traced (the first allocates AdamW's state)
    checkpointing: bool = True
    snapshot: bool = False  # `repro bench gpu`'s fp32 copy of the masters (param_change)
    real: bool = False  # real CPU tensors instead of fake ones (tests: fake against real)
    warm: bool = False  # a short micro-step and step first: the traced one sees a steady state
    seed: int = 0


@dataclass
class Measured:
    """Per-rank peak bytes of one traced step: per stage, per tracker category."""

    layers: int
    stages: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    extrapolated_from: tuple[int, int] | None = None

    def peak(self) -> tuple[str, dict[str, int]]:
        """(stage, categories) of the highest total."""
        return max(self.stages.items(), key=lambda kv: kv[1].get("Total", 0))


def measure_step(spec: StepSpec) -> Measured:
    """Trace `spec`'s step; peaks per stage and category on rank 0 (every rank is alike)."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode

    t0 = time.perf_counter()
    mode = contextlib.nullcontext() if spec.real else FakeTensorMode(allow_non_fake_inputs=True)
    try:
        mesh = _fake_mesh(spec.world)
        model = _build(spec.fields, "cpu" if spec.real else "meta")
        with mode:
            if not spec.real:  # to_empty gives each module its own tensor: tie them again
                model.to_empty(device="cpu")
                model.tie_weights()
            opt = _shard(model, mesh, spec.checkpointing)
            stages = _trace(model, opt, spec)
    finally:  # the fake group is this process's default group only while tracing
        if dist.is_initialized() and dist.get_backend() == "fake":
            dist.destroy_process_group()
    return Measured(layers=spec.fields["num_hidden_layers"], stages=stages,
                    seconds=time.perf_counter() - t0)


# Categories that grow with the layers (each layer's shards, optimizer state and checkpoint
# boundary); the others are one or two units' buffers or one layer's recompute, the same at any
# depth (Qwen3-32B's preset at 4 and 6 layers: unsharded parameters, all-gather, reduce-scatter
# and temporaries equal to the byte).
PER_LAYER = ("Sharded Param", "Sharded Grad", "OptState", "Activation")


def measure_extrapolated(spec: StepSpec, few: tuple[int, int]) -> Measured:
    """`measure_step` at `few` layer counts; the `PER_LAYER` categories extrapolated linearly to
    the config's layer count, the others as the deeper trace has them."""
    n = spec.fields["num_hidden_layers"]
    if n in few:
        return measure_step(spec)
    a, b = (measure_step(StepSpec(**{**vars(spec), "fields": spec.fields | {
        "num_hidden_layers": k}})) for k in few)
    out = Measured(layers=n, seconds=a.seconds + b.seconds, extrapolated_from=few)
    for stage, cats in b.stages.items():
        low = a.stages[stage]
        out.stages[stage] = {c: round(v + (v - low.get(c, 0)) * (n - few[1]) / (few[1] - few[0]))
                             if c in PER_LAYER else v for c, v in cats.items() if c != "Total"}
        out.stages[stage]["Total"] = sum(out.stages[stage].values())
    return out


def _fake_mesh(world: int) -> Any:
    """A CPU device mesh over a fake process group of `world` ranks (this process is rank 0)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("repro.plan.measure needs its own (fake) process group; this process "
                           "already has one")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    return init_device_mesh("cpu", (world,))  # outside fake mode: it reads tensors' values


def _build(fields: dict[str, Any], device: str) -> Any:
    """transformers' model for `fields` on `device` (meta: nothing allocated), fp32 masters."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in fields.items() if k not in ("dtype", "torch_dtype")}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _shard(model: Any, mesh: Any, checkpointing: bool) -> Any:
    """Checkpointing as transformers sets it, then FSDP2 per layer and root with the recipe's
    policy (`repro.engines.fsdp.recipe_mp_policy`: bf16 compute, fp32 reduction and outputs)
    over fp32 masters; a foreach AdamW over the shards."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from repro.engines.fsdp import recipe_mp_policy

    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = recipe_mp_policy(torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    _score_in_forward(model)
    return torch.optim.AdamW(_local_params(model), lr=1e-6, foreach=True)


def _local_params(model: Any) -> list[Any]:
    """Each FSDP2 parameter's local shard as a parameter sharing its storage, for AdamW.

    The engine's AdamW steps the DTensors, which run the same foreach kernels on these shards;
    but DTensor first propagates shapes by running each op on full-size tensors, under the fake
    mode here, and the tracker counted those as the optimizer's (+3.2x the full fp32 model at
    world 4 on a probe). Stepping the shards directly is the same arithmetic, shard by shard."""
    import torch

    return [torch.nn.Parameter(p.to_local(), requires_grad=True) for p in model.parameters()]


def _link_grads(model: Any, opt: Any) -> None:
    """The shards' gradients (FSDP2's reduce-scattered DTensors) seen by the shard parameters."""
    params = opt.param_groups[0]["params"]
    for full, local in zip(model.parameters(), params, strict=True):
        local.grad = None if full.grad is None else full.grad.to_local()


def _score_in_forward(model: Any) -> None:
    """The model's forward returns the response tokens' log-probs through the chunked head, as
    TRL's fused head patches it: the root's FSDP2 hooks then unshard `lm_head` around it."""
    from repro.training.logprobs import token_logprobs_and_entropy

    def forward(self: Any, input_ids: Any, prompt: int, **_: Any) -> Any:
        hidden = self.model(input_ids=input_ids, use_cache=False).last_hidden_state
        h = hidden[:, prompt - 1:-1].reshape(-1, hidden.size(-1))
        targets = input_ids[:, prompt:].reshape(-1)
        logp, _ = token_logprobs_and_entropy(h, self.lm_head.weight, targets, with_entropy=True)
        return logp.view(input_ids.size(0), -1)

    model.forward = types.MethodType(forward, model)


def _trace(model: Any, opt: Any, spec: StepSpec) -> dict[str, dict[str, int]]:
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    gen = torch.Generator().manual_seed(spec.seed)
    length = spec.prompt + spec.response
    ids = torch.randint(0, model.config.vocab_size, (spec.rows, length), generator=gen)
    grad = _loss_grad(spec.rows, spec.response, spec.micro_steps)
    tracker = FSDPMemTracker(model, opt)
    tracker.track_inputs((ids,))
    stages = {s: {} for s in STAGES}
    with tracker, _naming_the_op(model), _rows_not_packed():
        if spec.snapshot:  # param_change's fp32 copy, taken before the updates
            kept = [p.to_local().detach().clone() for p in model.parameters()]
        if spec.warm:  # gradients and AdamW's state resident, cheaply: a short micro-step
            short = ids[:, :spec.prompt + min(spec.response, WARM_TOKENS)]
            model(short, prompt=spec.prompt).backward(grad[:, :short.size(1) - spec.prompt])
            tracker.reset_mod_stats()
            _link_grads(model, opt)
            opt.step()  # the gradients stay: the traced micro-step accumulates onto them
            _take_peak(tracker, {})
        for _ in range(spec.updates):
            for _ in range(spec.micro_steps):
                model(ids, prompt=spec.prompt).backward(grad)
                tracker.reset_mod_stats()
            _take_peak(tracker, stages["forward + backward"])
            _link_grads(model, opt)
            opt.step()
            opt.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
            _take_peak(tracker, stages["optimizer step"])
        if spec.snapshot:
            del kept
    return stages


def _loss_grad(rows: int, response: int, micro_steps: int) -> Any:
    """dL/dlogp of DFPO's loss (`policy_loss`, Min-Replace, seq_weight precomputed as the
    pre-pass gives it) for one micro-step, on real tensors: the loss reads values (its metrics
    are floats), which fake tensors cannot give. Its own tensors are rows x response floats,
    left out of the trace; the model's backward runs from this gradient."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from repro.objectives import Minibatch, get_algorithm, policy_loss

    with unset_fake_temporarily():
        logp = torch.full((rows, response), -1.0, requires_grad=True)
        ones = torch.ones(rows)
        batch = Minibatch(logp, logp.detach() - 0.01, torch.ones(rows, response, dtype=torch.bool),
                          ones, torch.zeros(rows, dtype=torch.long), seq_weight=ones)
        cfg = get_algorithm("dfpo").config_cls(transform="min_replace")
        (policy_loss(cfg, batch)[0] / micro_steps).backward()
        return logp.grad


def _take_peak(tracker: Any, into: dict[str, int]) -> None:
    """Fold the tracker's peak since the last call into `into` (max by total), then restart
    the peak at the current state (the tracker keeps one peak per `with`: private fields)."""
    snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
    cats = {getattr(k, "value", str(k)): int(v) for k, v in snap.items()}
    if cats.get("Total", 0) > into.get("Total", -1):
        into.clear()
        into.update(cats)
    tracker._peak_mem_snap = tracker.get_tracker_snapshot()
    tracker._peak_mem = {d: s["Total"] for d, s in tracker._peak_mem_snap.items()}


@contextlib.contextmanager
def _rows_not_packed() -> Iterator[None]:
    """transformers' packed-rows check reads the position ids the model builds (an arange); fake
    ones cannot be read, so it took the rows as packed and built a [rows, 1, L, L] mask (1.21 GB
    at 34,816 tokens; sdpa then also drops GQA) that real tensors never build. Held by the
    full-attention layers' checkpoints, it was live at the 80B preset's 8-layer peak, not its
    4-layer one, and the extrapolation made it 0.30 GB a layer (docs/gpu.md). The check answers
    for fake position ids what real ones give: not packed."""
    from torch._subclasses.fake_tensor import FakeTensor
    from transformers import masking_utils

    real = masking_utils.find_packed_sequence_indices

    def check(position_ids: Any) -> Any:
        return None if isinstance(position_ids, FakeTensor) else real(position_ids)

    masking_utils.find_packed_sequence_indices = check
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = real


@contextlib.contextmanager
def _naming_the_op(model: Any) -> Any:
    """An op fake mode cannot run (no fake kernel, or an output shape that depends on values)
    becomes `UntraceableOp` naming the op and the innermost module it ran in (a forward stack
    kept by global module hooks that an exception leaves in place)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    names = {id(m): name or "model" for name, m in model.named_modules()}
    stack: list[str] = []

    def enter(module: Any, _: Any) -> None:
        if id(module) in names:
            stack.append(names[id(module)])

    def leave(module: Any, _: Any, __: Any) -> None:  # returns None: the output is kept
        if id(module) in names and stack:
            stack.pop()

    hooks = [register_module_forward_pre_hook(enter), register_module_forward_hook(leave)]
    try:
        yield
    except (UnsupportedOperatorException, DataDependentOutputException,
            DynamicOutputShapeException, NotImplementedError, RuntimeError) as err:
        text = str(err)
        if type(err) is RuntimeError and "fake impl" not in text:
            raise
        named = re.search(r"CustomOpDef\((.+?)\)", text)
        op = getattr(err, "func", None) or (named.group(1) if named else text.splitlines()[0])
        where = stack[-1] if stack else "model"
        raise UntraceableOp(f"op {op} has no fake-mode kernel (in module {where}); "
                            f"{type(err).__name__}") from None
    finally:
        for hook in hooks:
            hook.remove()


def job_spec(config: dict[str, Any], key: str, train: dict[str, Any] | None = None) -> StepSpec:
    """The train job of catalogue model `key` (with the `train` block given, else the config's)
    as the tracker runs it: the preset's world,
    rows per micro-step, prompt and response tokens and checkpointing (`step_layout`, the
    arithmetic's own). One full micro-step and step after a short warm one: the steady state
    of accumulation (every sharded gradient and AdamW's state resident), which costs a fake
    trace per op, not per token, so one full-length pass instead of four."""
    from repro.plan.hardware import Hardware
    from repro.plan.memory import step_layout
    from repro.plan.shapes import read_config

    entry, hw = config["models"][key], Hardware.of(config["hardware"])
    fields = entry["config"] if "config" in entry else read_config(entry["id"])
    world = hw.train.world
    _, _, micro, seq, ckpt = step_layout(config["train"] if train is None else train, hw, world)
    return StepSpec(dict(fields), world=world, rows=micro, prompt=hw.prompt_tokens,
                    response=seq - hw.prompt_tokens, micro_steps=1, updates=1,
                    checkpointing=ckpt, warm=True)


def few_layers(fields: dict[str, Any]) -> tuple[int, int]:
    """Layer counts to trace and extrapolate from: whole periods of the layer layout (Qwen3-Next:
    `full_attention_interval` layers; dense: 2), at least 4 layers. With 2 layers FSDP2's
    prefetch had no unit to gather at the peak: 2 and 4 dense layers extrapolated Qwen3-32B's
    all-gather buffers to 30 GB, where 4 and 6 layers hold 0.98 GB each."""
    period = fields.get("full_attention_interval", 4) if fields["model_type"] == "qwen3_next" \
        else 2
    first = -(-4 // period) * period
    return first, first + period


def compare_lines(plan: Any, measured: Measured, world: int) -> list[str]:
    """The tracker's per-rank peaks per stage beside the arithmetic's phase for it (update;
    optimizer step), in GB; the arithmetic's include a sleeping vLLM, the tracker's do not."""
    phases = {p.name.split(" (")[0]: p.total_gb for p in plan.phases}
    arithmetic = {STAGES[0]: phases["update"], STAGES[1]: phases["optimizer step"]}
    how = (f"layers extrapolated linearly from {measured.extrapolated_from[0]} and "
           f"{measured.extrapolated_from[1]} traced" if measured.extrapolated_from
           else f"all {measured.layers} layers traced")
    lines = [f"  measured (FSDPMemTracker, fake mode, rank 0 of {world}; {how}; "
             f"{measured.seconds:.0f} s)"]
    for stage, cats in measured.stages.items():
        lines.append(f"    {stage:<36} {cats.get('Total', 0) / GB:8.1f} GB   arithmetic "
                     f"{arithmetic[stage]:6.1f} GB")
        lines += [f"      {name:<34} {b / GB:8.2f}" for name, b in cats.items()
                  if name != "Total" and b]
    return lines


def refuse_over_measured(plan: Any, measured: Measured, spec: StepSpec, local: int) -> None:
    """PlanRefusal, naming the knob (`update_knob`), when the tracked peak plus what the tracker
    does not see (a sleeping vLLM; RESERVE_GB kept free) exceeds the GPU."""
    from repro.plan.memory import PlanRefusal, update_knob

    update = next(p for p in plan.phases if p.name == "update")
    vllm = sum(gb for name, gb in update.items.items() if name.startswith("vLLM"))
    stage, cats = measured.peak()
    total = cats["Total"] / GB + vllm
    if total > update.capacity_gb:
        key, how = update_knob(spec.checkpointing, spec.rows, local, vllm)
        raise PlanRefusal(f"config {key}: the {stage} peaks at {total:.0f} GB per GPU measured "
                          f"(tracker in fake mode, {vllm:.0f} GB of it vLLM) of "
                          f"{update.capacity_gb:.0f} GB; {how}")
