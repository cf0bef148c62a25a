"""ReproGRPOTrainer: the run-layout engine's trainer, DFPOTrainer (repro.engines.trl_dfpo, which
holds the whole-group layout, the DFPO pre-pass, the loss and the diagnostics) with what makes a
`repro train engine=trl` run comparable with the native engine:
- rewards from the project's graders (a reward function around `Rewarder`, stashed here),
- advantages from `group_advantages` (TRL hard-codes std + 1e-4),
- the K optimizer minibatches of a rollout permuted by (seed, step) exactly as the native loop
  does (`repro.training.minibatches`) instead of torch's global generator,
- every parameter decays (the native AdamW), and the records of the run log (`sink`),
- under `staleness` / `sampler_dtype`, TRL's generation samples as the behaviour policy (the
  weights of d rollouts ago, in bf16: `repro.training.behaviour`, the native engine's rule),
  and the rollout's old log-probs are that policy's, by the native engine's `response_logprobs`.
Private method overridden here besides DFPOTrainer's (tests/test_engine_trl.py's signature
snapshot): `_calculate_rewards`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

from repro.engines.trl_args import check_grpo_args
from repro.engines.trl_dfpo import DFPOTrainer, split_by_groups
from repro.objectives import AdvantageConfig, group_advantages
from repro.training.behaviour import behaving_as, lagged_weights
from repro.training.config import TrainConfig
from repro.training.logprobs import response_logprobs
from repro.training.minibatches import minibatch_orders


def split_whole_groups(batch: dict[str, Any], k: int, seed: int, step: int) -> list[dict]:
    """The local rollout batch -> K minibatches of whole groups in the native loop's order."""
    n_groups = torch.unique_consecutive(batch["group"].cpu()).numel()
    return split_by_groups(batch, minibatch_orders(seed, step, n_groups, k)[0])


class ReproGRPOTrainer(DFPOTrainer):
    """DFPOTrainer whose rewards, advantages and minibatch order are the project's.

    `repro`: the run's TrainConfig. `rollout_step0`: rollout steps done before this trainer
    started (resume). `sink`: receives `rollout(...)` and `update(...)` records for the log.
    `lagged`: the weights of the last `staleness` rollouts (RunState's list, so checkpoints
    carry it; a new list when omitted).
    """

    def __init__(self, *args: Any, repro: TrainConfig, rollout_step0: int = 0, sink: Any = None,
                 lagged: list[dict[str, Tensor]] | None = None, **kwargs: Any) -> None:
        check_grpo_args(kwargs["args"])
        steps = kwargs["args"].steps_per_generation
        if steps != repro.minibatches * kwargs["args"].gradient_accumulation_steps:
            raise ValueError(f"GRPOConfig.steps_per_generation={steps} must be minibatches x "
                             "gradient_accumulation_steps (one rollout per K updates)")
        if kwargs["args"].num_iterations != repro.epochs:
            raise ValueError(f"GRPOConfig.num_iterations={kwargs['args'].num_iterations} must be "
                             f"TrainConfig.epochs={repro.epochs} (passes over each rollout)")
        super().__init__(*args, objective=repro.objective, **kwargs)
        if self.use_vllm:  # TRL's colocate weight sync fails on vLLM's CPU backend
            from repro.engines.vllm_sync import install_cpu_sync

            install_cpu_sync(self.vllm_generation)
        self.repro = repro
        self.rollout_step0 = rollout_step0
        self.sink = sink
        self.lagged = [] if lagged is None else lagged
        self._rewards: Tensor | None = None

    def get_decay_parameter_names(self, model) -> list[str]:
        """Every parameter decays, as in the native engine's AdamW (HF exempts biases/norms)."""
        return [name for name, _ in model.named_parameters()]

    @property
    def rollout_step(self) -> int:
        """1-based rollout step of the batch being trained on (the native loop's `step`)."""
        per_rollout = self.args.steps_per_generation * self.num_iterations
        return self.rollout_step0 + self._step // per_rollout + 1

    def _minibatch_orders(self, n_groups: int, k: int, passes: int) -> list[Tensor]:
        return minibatch_orders(self.repro.seed, self.rollout_step, n_groups, k, passes)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards = super()._calculate_rewards(inputs, prompts, completions,
                                                   completion_ids_list)
        return self._rewards

    def _generate_and_score_completions(self, inputs):
        t0 = time.perf_counter()
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        behind = lagged_weights(self.model, self.lagged, self.repro.staleness)
        with behaving_as(self.model, behind, self.repro.sampler_dtype) as swapped:
            out = super()._generate_and_score_completions(inputs)
            if swapped:
                out["old_per_token_logps"] = self._behaviour_logprobs(out)
        n, size = len(inputs), self.num_generations
        reward = self._rewards[:, 0].double().cpu()  # gathered over processes, process-major
        group = torch.arange(reward.numel()) // size  # TRL's own layout assumption (:2813)
        adv, info = group_advantages(reward, group, AdvantageConfig(self.repro.advantage_scale))
        local = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
        device = out["completion_ids"].device
        out["advantages"] = adv[local].to(device)
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

    def _behaviour_logprobs(self, out: dict[str, Any]) -> Tensor:
        """The rollout's log-probs under the model as it stands (the behaviour policy, inside
        `behaving_as`), by the native engine's path and dtype (`response_logprobs`, float32)."""
        prompt, completion = out["prompt_mask"], out["completion_mask"]
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        response = torch.cat([torch.zeros_like(prompt), completion], 1).bool()
        with torch.no_grad():
            logp = response_logprobs(self.model, ids, torch.cat([prompt, completion], 1),
                                     response, chunk_size=self.repro.logprob_chunk,
                                     temperature=self.repro.temperature, with_entropy=False)[0]
        return logp[:, -completion.size(1):].float()

    def _record(self, metrics: dict[str, float], entropy_sum: float, entropy_n: int) -> None:
        super()._record(metrics, entropy_sum, entropy_n)
        if self.sink is not None:
            self.sink.update(metrics, entropy_sum=entropy_sum, entropy_n=entropy_n)
