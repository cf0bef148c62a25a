"""The processes of `repro bench twin`, started by torchrun (see repro/bench/twin.py).

`reference`: one rollout of the TRL engine's trainer, sharded by accelerate's FSDP2 prepare path
(`repro.engines.fsdp`), then each of the K updates' losses as the engine computes them (split
into micro-steps, DFPO's pre-pass, global normalisers), summed over the processes; the main
process recomputes every update's loss in one process, unsharded and in float32, on the gathered
batch (`policy_loss`), and writes both with what the sharding looked like.

`train`: `repro train` itself (the CLI, with its export), rewards replaced by a hash of the
completion: a random-init model never solves a task, so graded rewards would all be 0, every
advantage 0 and nothing would train.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.functional import pad

ROUTER_REL_TOL = 0.01  # the router term's tolerance, relative to the reference's (see below)
OLD_LOGP_NOISE = 0.05  # behaviour log-probs moved off-policy, so ratios and DFPO's w~ act


def hashed(items) -> list[float]:
    return [float(hashlib.sha256(text.encode()).digest()[0] % 2) for text in items]


def _hashed_rewarder(self, items):  # Rewarder.__call__ replacement: (problem, completion) pairs
    self.last_failures = 0
    return hashed([text for _, text in items])


def _hashed_reward(prompts, completions, **_: Any) -> list[float]:  # TRL reward function
    return hashed(completions)


def _padded(parts: list[dict], key: str, left: bool) -> torch.Tensor:
    width = max(p[key].size(1) for p in parts)
    return torch.cat([pad(p[key], (width - p[key].size(1), 0) if left
                          else (0, width - p[key].size(1))) for p in parts])


def _mean_aux(model: Any, parts: list[dict], accum: int) -> float:
    """transformers' router load-balancing loss, as TRL's forward returns it, of every
    process's micro-steps (its minibatch's rows in `accum` chunks, `_micro_steps`' split), in
    float32, averaged: the engine adds `coef x aux / accum` per micro-step and averages the
    processes, so its router term is `coef x` this mean."""
    values = []
    with torch.no_grad():
        for part in parts:
            ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
            attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
            for rows in torch.arange(ids.size(0)).chunk(accum):
                out = model(input_ids=ids[rows], attention_mask=attn[rows],
                            output_router_logits=True)
                values.append(float(out.aux_loss))
    return sum(values) / len(values)


@dataclass
class Sharded:
    """A TRL-engine trainer whose policy accelerate's FSDP2 prepare path has sharded."""

    dist: Any  # accelerate's PartialState
    trainer: Any  # ReproGRPOTrainer, .model prepared
    optimizer: Any  # AdamW at cfg.lr over the prepared (sharded) parameters
    args: Any  # its GRPOConfig
    prompts: list[str]  # the prompt set (P chat-formatted questions)
    shim: bool  # whether the CPU FSDP2 shim was applied


def sharded_trainer(cfg: Any, model_dir: Path, out: Path) -> Sharded:
    """Load `model_dir` in float32 masters (the main process only, under ram-efficient loading),
    build the TRL engine's trainer with hashed rewards, and shard it with the precision recipe
    (shared by the twin's reference and `repro bench gpu`; no `trainer.train()`)."""
    from accelerate import PartialState
    from datasets import Dataset

    from repro.engines.fsdp import (
        enable_cpu_fsdp2,
        mixed_precision,
        ram_efficient_loading,
        recipe_policy,
    )
    from repro.engines.trl_args import build_grpo_config
    from repro.engines.trl_trainer import ReproGRPOTrainer
    from repro.models import load
    from repro.models.loader import MASTER_DTYPE, load_for_sharding

    dist = PartialState()
    if dist.num_processes > 1 and ram_efficient_loading():
        model, tok = load_for_sharding(model_dir, main_process=dist.is_main_process,
                                       dtype=MASTER_DTYPE)
    else:
        model, tok = load(model_dir, dtype=MASTER_DTYPE)
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {i} + {i}?"}],
                                       tokenize=False, add_generation_prompt=True)
               for i in range(cfg.prompts_per_step)]
    args = build_grpo_config(cfg, out=out, world_size=dist.num_processes, steps=1,
                             half_precision=mixed_precision() != "no",
                             use_cpu=not torch.cuda.is_available())
    shim = enable_cpu_fsdp2()  # after GRPOConfig: TrainingArguments resets accelerate's state
    trainer = ReproGRPOTrainer(model=model, processing_class=tok, args=args,
                               reward_funcs=[_hashed_reward], repro=cfg,
                               train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]))
    recipe_policy(trainer.accelerator)
    optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=cfg.lr)  # FSDP2 wants one
    trainer.model, optimizer = trainer.accelerator.prepare(trainer.model, optimizer)
    trainer.model_wrapped = trainer.model
    return Sharded(dist, trainer, optimizer, args, prompts, shim)


def reference(out: Path, model_dir: Path, config: dict[str, Any]) -> None:
    from accelerate.utils import gather_object
    from torch.distributed.tensor import DTensor

    from repro.engines.trl_trainer import split_whole_groups
    from repro.models import load
    from repro.objectives import Minibatch, policy_loss
    from repro.training.config import TrainConfig
    from repro.training.logprobs import response_logprobs
    from repro.training.router import router_aux_coef

    cfg = TrainConfig(**config)
    sharded = sharded_trainer(cfg, model_dir, out.parent)
    dist, trainer, args, prompts, shim = (sharded.dist, sharded.trainer, sharded.args,
                                          sharded.prompts, sharded.shim)
    policy = trainer.model
    # the sharded state at rest (after a forward, FSDP2 leaves the last group unsharded: bf16)
    params = list(policy.parameters())
    sharding = {"dtensor_params": all(isinstance(p, DTensor) for p in params),
                "master_dtypes": sorted({str(p.dtype) for p in params})}
    # this rank's parameter storage (FSDP2's padded shards), beside the fake-mode prediction
    storages = {p.to_local().untyped_storage().data_ptr(): p.to_local().untyped_storage().nbytes()
                for p in params if isinstance(p, DTensor)}
    rank_bytes = gather_object([sum(storages.values())])
    seen: dict[str, str] = {}
    # its weight's dtype inside forward = compute; the last layer has full attention in every
    # architecture (Qwen3-Next's first layers are DeltaNet, its MLPs routed experts)
    layer = policy.model.layers[-1].self_attn.o_proj
    hook = layer.register_forward_pre_hook(lambda m, a: seen.update(compute=str(m.weight.dtype)))
    policy.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    n_local = cfg.prompts_per_step // dist.num_processes
    mine = prompts[dist.process_index * n_local:(dist.process_index + 1) * n_local]
    torch.manual_seed(1 + dist.process_index)  # different samples on each process
    batch = trainer._generate_and_score_completions(
        [{"prompt": p} for p in mine for _ in range(cfg.group_size)])
    gen = torch.Generator().manual_seed(100 + dist.process_index)
    batch["old_per_token_logps"] = batch["old_per_token_logps"] + OLD_LOGP_NOISE * torch.randn(
        batch["old_per_token_logps"].shape, generator=gen)
    result: dict[str, Any] = {"losses_2proc": [], "losses_1proc": [], "tolerance": [],
                              "router_2proc": [], "router_1proc": [], "router_tolerance": [],
                              "rows_nonzero_advantage": [],
                              "whole_groups_per_update": True}
    if dist.is_main_process:
        ref_model = load(model_dir, dtype=torch.float32)[0]  # one process, unsharded, float32
        coef = router_aux_coef(ref_model, cfg.router_aux_loss_coef)  # TRL's rule, independently
    accum = args.gradient_accumulation_steps
    policy_shares: list[float] = []  # the objective's share the engine records per micro-step
    record = trainer._record
    trainer._record = lambda metrics, *rest: (policy_shares.append(metrics["loss"]),
                                              record(metrics, *rest))[1]
    for minibatch in split_whole_groups(batch, cfg.minibatches, cfg.seed, 1):
        policy_shares.clear()
        total = sum(float(trainer._compute_loss(policy, micro).detach())
                    for micro in trainer._micro_steps(minibatch, accum))
        # what the engine added beyond the objective: its router term (0 on a dense model)
        own = total - sum(policy_shares) * dist.num_processes
        total, router = (float(x) for x in trainer.accelerator.reduce(
            torch.tensor([total, own], dtype=torch.float64), "sum"))
        total /= dist.num_processes  # each process's loss carries world x its share
        router /= dist.num_processes
        parts = gather_object([{k: v for k, v in minibatch.items()
                                if isinstance(v, torch.Tensor) and v.dim()}])
        if not dist.is_main_process:
            continue
        ids = torch.cat([_padded(parts, "prompt_ids", True),
                         _padded(parts, "completion_ids", False)], 1)
        p_mask, c_mask = _padded(parts, "prompt_mask", True), _padded(parts, "completion_mask",
                                                                       False)
        attn = torch.cat([p_mask, c_mask], 1)
        resp = torch.cat([torch.zeros_like(p_mask), c_mask], 1).bool()
        logp = response_logprobs(ref_model, ids, attn, resp, temperature=cfg.temperature,
                                 with_entropy=False)[0][:, p_mask.size(1):].requires_grad_()
        group = torch.cat([p["group"] for p in parts])
        counts = torch.unique(group, return_counts=True)[1]
        result["whole_groups_per_update"] &= bool((counts == cfg.group_size).all())
        adv = torch.cat([p["advantages"] for p in parts])
        ref, _ = policy_loss(trainer.loss_cfg, Minibatch(
            logp, _padded(parts, "old_per_token_logps", False), c_mask.bool(), adv, group))
        dlogp = torch.autograd.grad(ref, logp)[0]  # dL/dlogp per token
        # First order: each log-prob computed with bf16 weights and activations is off by about
        # one bf16 unit roundoff u = eps/2 relative to (1 + |logp|); the loss moves by dL/dlogp
        # times that. (Measured errors are ~100x below it; a lost process's share is ~50x above.)
        unit = torch.finfo(torch.bfloat16).eps / 2
        tol = unit * float((dlogp.abs() * (1 + logp.detach().abs())).sum())
        ref_router = coef * _mean_aux(ref_model, parts, accum) if coef else 0.0
        # bf16 routing moves aux by < 2e-4 relative (tiny MoE and Next, fp32 vs bf16 model,
        # 4 seeds each); 1% is 50x that, and a missing or doubled term is 100% off
        router_tol = ROUTER_REL_TOL * abs(ref_router)
        result["losses_2proc"].append(total)
        result["losses_1proc"].append(float(ref) + ref_router)  # like with like: both terms
        result["tolerance"].append(tol + router_tol)
        result["router_2proc"].append(router)
        result["router_1proc"].append(ref_router)
        result["router_tolerance"].append(router_tol)
        result["rows_nonzero_advantage"].append(int(adv.ne(0).sum()))
    hook.remove()
    trainer._record = record
    if dist.is_main_process:
        result |= sharding | {
            "rank_param_bytes": rank_bytes,
            "processes": dist.num_processes, "backend": str(dist.backend), "cpu_shim": shim,
            "distributed_type": str(trainer.accelerator.distributed_type),
            "compute_dtype": seen.get("compute"),
            "mixed_precision_policy": repr(trainer.accelerator.state.fsdp_plugin
                                           .mixed_precision_policy),
            "gradient_accumulation_steps": accum, "minibatches": cfg.minibatches,
        }
        out.write_text(json.dumps(result, indent=1))
    dist.wait_for_everyone()


def train(argv: list[str]) -> None:
    """`repro train --out --config [--export] [--resume]` with hashed rewards, in-process
    through the engine registry (not the CLI: bench sits below it in the import graph)."""
    import argparse

    from repro.engines.registry import train_and_export
    from repro.training import rollout
    from repro.training.config import load_train_config

    parser = argparse.ArgumentParser(prog="twin_worker train")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--export", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    rollout.Rewarder.__call__ = _hashed_rewarder
    train_and_export(load_train_config(args.config, []), args.out, export=args.export,
                     resume=args.resume)


if __name__ == "__main__":
    from repro.engines.fsdp import close_process_group

    if sys.argv[1] == "reference":
        reference(Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4]))
    else:
        train(sys.argv[2:])
    close_process_group()
