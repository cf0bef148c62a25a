"""ReproGRPOTrainer: TRL 1.16's GRPOTrainer with the project's rewards, advantages, minibatch
layout and objectives.

TRL supplies what a home-made loop would re-implement: accelerate (FSDP2 / ZeRO), vLLM rollouts
(colocated or a server), HF generate, checkpoint-safe log-prob passes. It owns none of the maths:
- rewards come from the project's graders (a reward function around `Rewarder`),
- advantages from `group_advantages` (TRL hard-codes std + 1e-4),
- the rollout batch is split into K optimizer minibatches of whole groups, permuted by
  (seed, step) exactly as the native loop does (TRL shuffles rows one by one, which scrambles
  and splits groups: research note section 13.4),
- the loss and diagnostics come from `repro.engines.core.loss_and_diagnostics`.
Private methods overridden or called (pinned by tests/test_engine_trl.py's signature snapshot):
`_calculate_rewards`, `_generate_and_score_completions`, `_prepare_inputs`, `_compute_loss`,
`_get_per_token_logps_and_entropies`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from repro.diagnostics import UpdateDiagnostics
from repro.engines.core import global_normalisers, loss_and_diagnostics, sequence_weights
from repro.engines.trl_args import check_grpo_args
from repro.objectives import AdvantageConfig, get_algorithm, group_advantages
from repro.training.config import TrainConfig

PER_ROW = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
           "group", "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps",
           "seq_weight")


def minibatch_order(seed: int, step: int, n_groups: int, k: int) -> Tensor:
    """[K, n_groups/K] group indices of each update: the native loop's permutation."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randperm(n_groups, generator=gen).view(k, -1)


def split_whole_groups(batch: dict[str, Any], k: int, seed: int, step: int) -> list[dict]:
    """The local rollout batch -> K minibatches of whole groups (rows of a group stay together)."""
    group = batch["group"]
    ids = torch.unique_consecutive(group.cpu())
    parts = []
    for chosen in minibatch_order(seed, step, ids.numel(), k):
        rows = torch.isin(group, ids[chosen].to(group.device)).nonzero()[:, 0]
        parts.append({key: v[rows] if key in PER_ROW and v is not None else v
                      for key, v in batch.items()})
    return parts


def whole_groups(group: Tensor, size: int) -> bool:
    """Does every group id in this micro-batch appear exactly `size` times?"""
    return bool((torch.unique(group, return_counts=True)[1] == size).all())


class ReproGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose rewards, advantages, layout and loss are the project's.

    `repro`: the run's TrainConfig. `rollout_step0`: rollout steps done before this trainer
    started (resume). `sink`: receives `rollout(...)` and `update(...)` records for the log.
    """

    def __init__(self, *args: Any, repro: TrainConfig, rollout_step0: int = 0, sink: Any = None,
                 **kwargs: Any) -> None:
        check_grpo_args(kwargs["args"])
        steps = kwargs["args"].steps_per_generation
        if steps != repro.minibatches * kwargs["args"].gradient_accumulation_steps:
            raise ValueError(f"GRPOConfig.steps_per_generation={steps} must be minibatches x "
                             "gradient_accumulation_steps (one rollout per K updates)")
        super().__init__(*args, **kwargs)
        if self.use_vllm:  # TRL's colocate weight sync fails on vLLM's CPU backend
            from repro.engines.vllm_sync import install_cpu_sync

            install_cpu_sync(self.vllm_generation)
        self.repro = repro
        self.loss_cfg = repro.loss_config()
        self.rollout_step0 = rollout_step0
        self.sink = sink
        self._rewards: Tensor | None = None
        self._micro: list[dict[str, Any]] | None = None
        self.diagnostics = True  # the GPU check times the loss with and without them
        self._vocab = len(self.processing_class)
        self._types = max(self._vocab, self.model.config.get_text_config().vocab_size)
        self._pieces = UpdateDiagnostics()  # the update under way's micro-steps

    def get_decay_parameter_names(self, model) -> list[str]:
        """Every parameter decays, as in the native engine's AdamW (HF exempts biases/norms)."""
        return [name for name, _ in model.named_parameters()]

    @property
    def rollout_step(self) -> int:
        """1-based rollout step of the batch being trained on (the native loop's `step`)."""
        return self.rollout_step0 + self._step // self.args.steps_per_generation + 1

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards = super()._calculate_rewards(inputs, prompts, completions,
                                                   completion_ids_list)
        return self._rewards

    def _generate_and_score_completions(self, inputs):
        t0 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return out
        n, size = len(inputs), self.num_generations
        reward = self._rewards[:, 0].double().cpu()  # gathered over processes, process-major
        group = torch.arange(reward.numel()) // size  # TRL's own layout assumption (:2813)
        adv, info = group_advantages(reward, group, AdvantageConfig(self.repro.advantage_scale))
        local = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
        device = out["completion_ids"].device
        out["advantages"] = adv[local].to(device)
        out["group"] = group[local].to(device)
        if self.sink is not None:
            mask = out["completion_mask"]
            eos = torch.tensor(self.eos_token_ids, device=device).view(-1)
            truncated = ~torch.isin(out["completion_ids"], eos).any(-1)
            lengths = self.accelerator.gather(mask.sum(-1)).cpu()
            truncated = self.accelerator.gather(truncated).cpu()
            failures = torch.tensor([getattr(self.reward_funcs[0], "failures", 0)], device=device)
            self.sink.rollout(reward=reward.float(), lengths=lengths, truncated=truncated,
                              zero_adv_frac=info["zero_adv_frac"],
                              grader_errors=int(self.accelerator.gather(failures).sum()),
                              seconds=time.perf_counter() - t0)
        return out

    def _prepare_inputs(self, generation_batch):
        """TRL's version with two changes. (1) Whole groups permuted by (seed, step) replace
        TRL's per-row shuffle, so each of the K optimizer minibatches holds whole groups (on
        each process). (2) With gradient accumulation (A micro-steps per update), a minibatch
        is cut into A row chunks that may split groups; at its first micro-step a no-grad
        pre-pass computes DFPO's weights over the whole local minibatch under the current
        policy (`sequence_weights`), and every micro-step carries the minibatch's global token
        and sequence counts, so the summed micro-step gradients equal the whole minibatch's.
        Each micro-step also carries `micro` = (index, A): the diagnostics are computed over the
        whole update at its last micro-step."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        accum = self.args.gradient_accumulation_steps
        micro = self._step % self.args.steps_per_generation
        if micro == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = split_whole_groups(batch, self.repro.minibatches,
                                                       self.repro.seed, self.rollout_step)
        if micro % accum == 0 or self._micro is None:
            self._micro = self._micro_steps(self._buffered_inputs[micro // accum], accum)
        return self._micro[micro % accum]

    def _micro_steps(self, minibatch: dict[str, Any], accum: int) -> list[dict[str, Any]]:
        mask = minibatch["completion_mask"].bool()
        extra: dict[str, Any] = {"norm": global_normalisers(mask, self._sum_over_processes)}
        if accum > 1:
            extra["seq_weight"] = self._prepass(minibatch, -(-mask.size(0) // accum))
        rows = torch.arange(mask.size(0), device=mask.device).chunk(accum)
        return [{key: v[r] if key in PER_ROW and v is not None else v
                 for key, v in (minibatch | extra).items()} | {"micro": (i, len(rows))}
                for i, r in enumerate(rows)]

    def _sum_over_processes(self, counts: Tensor) -> Tensor:
        if self.accelerator.num_processes == 1:
            return counts
        return self.accelerator.reduce(counts.to(self.accelerator.device), "sum")

    def _prepass(self, minibatch: dict[str, Any], chunk: int) -> Tensor | None:
        """The objective's group weights (DFPO's w~, `sequence_weights`) of the whole local
        minibatch (whole groups) under the current policy. The no-grad forward runs `chunk`
        rows at a time (the micro-step size), so its activation peak is no larger than a
        micro-step's. None, with no forward, for an objective that does not couple a group's
        members."""
        if not get_algorithm(self.loss_cfg.name).couples_groups:
            return None
        ids = torch.cat([minibatch["prompt_ids"], minibatch["completion_ids"]], 1)
        attn = torch.cat([minibatch["prompt_mask"], minibatch["completion_mask"]], 1)
        with torch.no_grad():
            logp = self._get_per_token_logps_and_entropies(
                self.model, ids, attn, minibatch["completion_ids"].size(1), batch_size=chunk)[0]
        old = minibatch.get("old_per_token_logps")
        return sequence_weights(self.loss_cfg, logp, logp if old is None else old,
                                minibatch["completion_mask"].bool(), minibatch["advantages"],
                                minibatch["group"])

    def _compute_loss(self, model, inputs):
        """The micro-step's share of the optimizer step's loss: normalised by the whole step's
        global counts (`norm`), so it is not divided again by the accumulation steps
        (TRL marks its loss `loss_is_scaled_for_ga`). MoE models keep transformers' router
        load-balancing loss as TRL adds it (`router_aux_loss_coef` x aux / accumulation steps,
        averaged over processes by DDP/FSDP), after the objective's loss and diagnostics and
        logged apart as `aux_loss` (repro.training.router); TrainConfig.router_aux_loss_coef
        sets the coefficient (0 drops it)."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        group = inputs["group"]
        if (not whole_groups(group, self.num_generations) and inputs.get("seq_weight") is None
                and get_algorithm(self.loss_cfg.name).couples_groups):
            raise RuntimeError(f"{self.loss_cfg.name}: micro-batch holds partial groups "
                               f"{group.tolist()} and no precomputed weights (seq_weight)")
        logp, entropy, aux = self._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1), completion_ids.size(1),
            compute_entropy=True, compute_aux_loss=self.aux_loss_enabled)
        mask = completion_mask.bool()
        old = inputs.get("old_per_token_logps")
        logp_old = logp.detach() if old is None else old
        world = self.accelerator.num_processes
        norm = inputs.get("norm") or global_normalisers(mask, self._sum_over_processes)
        micro, count = inputs.get("micro", (0, 1))  # no marker: the inputs are a whole update
        if micro == 0:
            self._pieces = UpdateDiagnostics()
        loss, metrics = loss_and_diagnostics(
            self.loss_cfg, logp, logp_old, mask, inputs["advantages"], group, completion_ids,
            self._vocab, norm=norm, world_size=world, seq_weight=inputs.get("seq_weight"),
            ref_logp=inputs.get("ref_per_token_logps"), kl_coef=self.repro.kl_coef,
            diagnostics=self.diagnostics, pieces=self._pieces)
        if self.diagnostics and micro == count - 1:
            metrics |= self._pieces.finish(self._vocab, self._types, self.num_generations,
                                           self._sum_over_processes)
        policy = float(loss.detach()) / world
        if aux is not None:
            loss = loss + self.router_aux_loss_coef * aux / self.current_gradient_accumulation_steps
        if self.sink is not None:
            ent = entropy.detach()[mask]
            self.sink.update(metrics | {"loss": policy, "aux_loss": (
                                 float("nan") if aux is None else float(aux.detach()))},
                             entropy_sum=float(ent.double().sum()), entropy_n=int(ent.numel()))
        return loss
