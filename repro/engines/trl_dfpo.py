"""DFPOTrainer: TRL 1.16's GRPOTrainer with any of the project's objectives (DFPO by default),
for TRL users (public path: `repro.integrations.trl`) and as the base of the run-layout engine
(`repro.engines.trl_trainer.ReproGRPOTrainer` adds the project's rewards, advantages, seeded
permutation and log sink on top).

What it changes in GRPOTrainer, and why:
- Whole groups. TRL shuffles the rows of each generation batch one by one
  (`shuffle_sequence_dict` in `_prepare_inputs`), which scrambles and splits groups; DFPO
  transforms each group's weights, so here whole groups are permuted instead, and each of the
  K = steps_per_generation / gradient_accumulation_steps optimizer steps of a rollout gets whole
  groups on every process (research note gpu_trainer.md section 13.4).
- Gradient accumulation may cut groups across micro-steps: a no-grad pre-pass at each optimizer
  step computes the objective's group weights (DFPO's w~) over the whole step
  (`core.sequence_weights`), and every micro-step is normalised by the step's global counts.
- The loss and the cancellation diagnostics come from `repro.engines.core.loss_and_diagnostics`
  (`policy_loss`); the diagnostics go into TRL's own metrics (`self._metrics`), so they reach
  `log_history`, wandb, etc. as `objective/*`, `cancellation/*` and `entropy`.
- Advantages are TRL's own (`scale_rewards`, `multi_objective_aggregation` as GRPOConfig says,
  std + 1e-4); the run-layout engine replaces them with `group_advantages`.
- `beta` > 0 adds the project's k3 KL (`repro.objectives.kl`) to the objective.
Refused before the model loads, in one line each: TRL options the loss would silently drop or
that act outside it (`OBJECTIVE_OPTIONS`, TRL's own loss knobs), and layouts that cut a group
across optimizer steps or processes. With K = 1 and num_iterations = 1 every update is
on-policy (s = 1) and DFPO is GRPOTrainer's loss_type="dapo" update: a warning says so.
Private methods overridden or called (tests/test_engine_trl.py's signature snapshot):
`_generate_and_score_completions`, `_prepare_inputs`, `_compute_loss`,
`_get_per_token_logps_and_entropies`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch
from accelerate.utils import gather_object
from torch import Tensor
from trl import GRPOConfig, GRPOTrainer

from repro.diagnostics import CANCELLATION_KEYS, UpdateDiagnostics
from repro.engines.core import global_normalisers, loss_and_diagnostics, sequence_weights
from repro.objectives import LossConfig, get_algorithm, make_config
from repro.training.run import nanmean
from repro.training.trl_options import OBJECTIVE_OPTIONS

# transformers 5.x renamed gradient checkpointing to activation checkpointing; TRL 1.16 still uses
# the old names (its config's default and its trainer's calls), so every run printed four
# FutureWarnings that no setting of the user's can silence. Ignored here, on import, before a
# script builds its GRPOConfig: only these messages, only FutureWarning, only from transformers.
warnings.filterwarnings(
    "ignore", category=FutureWarning, module=r"transformers\.",
    message=r"`(is_)?gradient_checkpointing(_enable|_disable|_kwargs)?` is deprecated and will be "
            r"removed in v6")

PER_ROW = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
           "group", "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps",
           "seq_weight")
# GRPOConfig fields of TRL's own loss: the objective replaces that loss, so a value other than
# TRL's default would be ignored; the objective's config says the same thing here.
TRL_LOSS_OPTIONS = ("loss_type", "epsilon", "epsilon_high", "importance_sampling_level")


def whole_groups(group: Tensor, size: int) -> bool:
    """Does every group id in this micro-batch appear exactly `size` times?"""
    return bool((torch.unique(group, return_counts=True)[1] == size).all())


def split_by_groups(batch: dict[str, Any], order: Tensor) -> list[dict]:
    """The local rollout batch -> one minibatch per row of `order` ([K, n/K] indices into the
    batch's groups in order of appearance), each with its groups' rows in batch order."""
    group = batch["group"]
    ids = torch.unique_consecutive(group.cpu())
    parts = []
    for chosen in order:
        rows = torch.isin(group, ids[chosen].to(group.device)).nonzero()[:, 0]
        parts.append({key: v[rows] if key in PER_ROW and v is not None else v
                      for key, v in batch.items()})
    return parts


def merge_micro_steps(micro: list[dict[str, float]]) -> dict[str, float]:
    """One optimizer step's metrics from its micro-steps: their losses add up (each is its
    share under the step's global normaliser), weights take min/max, the rest a mean."""
    if len(micro) == 1:
        return micro[0]
    merged = {k: nanmean([m[k] for m in micro]) for k in micro[0]}
    merged["loss"] = sum(m["loss"] for m in micro)
    merged["w_min"] = min(m["w_min"] for m in micro)
    merged["w_max"] = max(m["w_max"] for m in micro)
    return merged


def check_dfpo_args(args: Any, objective: LossConfig, *, tools: bool = False) -> None:
    """Refuse, in one line naming the field, a GRPOConfig whose effect the objective's loss would
    drop, or whose layout would cut a group across optimizer steps or processes."""
    for key, (neutral, why) in OBJECTIVE_OPTIONS.items():
        value = getattr(args, key)
        if key == "vllm_importance_sampling_correction" and not args.use_vllm:
            continue  # on by default, active only with vLLM
        if value != neutral:
            raise ValueError(f"GRPOConfig.{key}={value!r} is refused by DFPOTrainer: {why}")
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for key in TRL_LOSS_OPTIONS:
        if getattr(args, key) != defaults[key]:
            raise ValueError(f"GRPOConfig.{key}={getattr(args, key)!r} has no effect under "
                             f"DFPOTrainer, whose loss is objective={objective!r}: leave it at "
                             f"{defaults[key]!r} and set the objective (make_config) instead")
    if args.beta and args.use_bias_correction_kl:
        raise ValueError("GRPOConfig.use_bias_correction_kl=True is refused by DFPOTrainer: "
                         "beta adds the project's k3 KL (repro.objectives.kl), which has no "
                         "importance correction; set use_bias_correction_kl=False")
    size, accum = args.num_generations, args.gradient_accumulation_steps
    rows = args.per_device_train_batch_size * accum
    if rows % size:
        raise ValueError(f"GRPOConfig.per_device_train_batch_size x gradient_accumulation_steps "
                         f"= {rows} rows per process and optimizer step must be a multiple of "
                         f"num_generations={size}: DFPOTrainer keeps each group in one optimizer "
                         "step on one process")
    if args.steps_per_generation % accum:
        raise ValueError(f"GRPOConfig.steps_per_generation={args.steps_per_generation} must be a "
                         f"multiple of gradient_accumulation_steps={accum}: an optimizer step "
                         "would mix two rollouts' groups")
    eval_size = args.num_generations_eval or size
    evaluates = getattr(args.eval_strategy, "value", args.eval_strategy) != "no"
    if evaluates and args.per_device_eval_batch_size % eval_size:
        raise ValueError(f"GRPOConfig.per_device_eval_batch_size={args.per_device_eval_batch_size} "
                         f"must be a multiple of num_generations_eval={eval_size}: an evaluation "
                         "batch would cut a group across processes")
    if tools:
        raise ValueError("DFPOTrainer does not take tools or environment_factory: TRL's tool_mask "
                         "is not wired into the objective's loss")
    if (get_algorithm(objective.name).couples_groups and args.num_iterations == 1
            and args.steps_per_generation == accum):
        warnings.warn(f"DFPOTrainer: steps_per_generation == gradient_accumulation_steps == "
                      f"{accum} and num_iterations == 1, so every update is on-policy (s = 1): "
                      f"{objective.name}'s transform is the identity and the update equals "
                      "GRPOTrainer's (loss_type='dapo' under token-mean); make "
                      "steps_per_generation a multiple K > 1 of gradient_accumulation_steps (K "
                      "updates per rollout) or num_iterations > 1 for it to act", stacklevel=3)


class DFPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss is a project objective (`objective`, default
    `make_config("dfpo")`), over whole groups. Constructed like GRPOTrainer (model id or
    object, reward functions, GRPOConfig, dataset); see the module docstring."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: GRPOConfig | None = None,
                 *more: Any, objective: LossConfig | None = None, **kwargs: Any) -> None:
        if args is None:
            raise ValueError("DFPOTrainer needs args=GRPOConfig(...): its layout "
                             "(per_device_train_batch_size, num_generations, "
                             "steps_per_generation) decides whether groups stay whole")
        objective = make_config("dfpo") if objective is None else objective
        if not isinstance(objective, LossConfig):
            raise ValueError(f"DFPOTrainer objective={objective!r} must be a config from "
                             "repro.objectives.make_config(name, ...)")
        get_algorithm(objective.name)  # an unregistered config is named here
        check_dfpo_args(args, objective, tools=bool(kwargs.get("tools")
                                                    or kwargs.get("environment_factory")))
        super().__init__(model, reward_funcs, args, *more, **kwargs)
        self.loss_cfg = objective
        self._micro: list[dict[str, Any]] | None = None
        self._rollout: dict[str, Any] = {}  # the rollout batch its passes split
        self._orders: list[Tensor] = []  # its minibatch order per pass
        self.diagnostics = True  # the GPU check times the loss with and without them
        self._vocab = len(self.processing_class)
        self._types = max(self._vocab, self.model.config.get_text_config().vocab_size)
        self._pieces = UpdateDiagnostics()  # the update under way's micro-steps
        self._update: list[dict[str, float]] = []  # ... and their metrics
        self._entropy = [0.0, 0]

    @property
    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    def _minibatch_orders(self, n_groups: int, k: int, passes: int) -> list[Tensor]:
        """Per pass over a rollout (`num_iterations`), [K, n_groups/K] local group indices of
        each optimizer step: random permutations from torch's generator, as TRL's row shuffle
        draws its own (TRL shuffles once per rollout; a pass of whole groups draws its own)."""
        return [torch.randperm(n_groups).view(k, -1) for _ in range(passes)]

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        unknown = sorted(set(out) - {*PER_ROW, "num_items_in_batch"})
        if unknown:
            raise ValueError(f"DFPOTrainer: the batch carries {unknown}, which the objective's "
                             "loss does not take (multimodal or tool inputs)")
        n, size = out["completion_ids"].size(0), self._group_size
        start = self.accelerator.process_index * n  # TRL's process-major layout (:2813)
        out["group"] = torch.arange(start, start + n, device=out["completion_ids"].device) // size
        return out

    def _prepare_inputs(self, generation_batch):
        """TRL's version with two changes. (1) Whole groups, permuted by `_minibatch_orders`
        (one order per pass over the rollout), replace TRL's per-row shuffle, so each of the K
        optimizer steps of a rollout holds whole groups (on each process). (2) With gradient
        accumulation (A micro-steps per update), a minibatch is cut into A row chunks that may
        split groups; at its first micro-step a no-grad pre-pass computes the objective's group
        weights over the whole local minibatch under the current policy (`sequence_weights`),
        and every micro-step carries the minibatch's global token and sequence counts, so the
        summed micro-step gradients equal the whole minibatch's. Each micro-step also carries
        `micro` = (index, A): the diagnostics are computed over the whole update at its last
        micro-step."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        accum, per_rollout = self.args.gradient_accumulation_steps, self.args.steps_per_generation
        micro = self._step % per_rollout
        rollout = self._step % (per_rollout * self.num_iterations) == 0
        if rollout or self._buffered_inputs is None:
            self._rollout = self._generate_and_score_completions(generation_batch)
            n_groups = torch.unique_consecutive(self._rollout["group"].cpu()).numel()
            self._orders = self._minibatch_orders(n_groups, per_rollout // accum,
                                                  self.num_iterations)
        if micro == 0 or self._buffered_inputs is None:  # a pass starts: its own order
            this_pass = self._step // per_rollout % self.num_iterations
            self._buffered_inputs = split_by_groups(self._rollout, self._orders[this_pass])
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
        logged apart as `aux_loss` (repro.training.router)."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        group = inputs["group"]
        if (not whole_groups(group, self._group_size) and inputs.get("seq_weight") is None
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
            ref_logp=inputs.get("ref_per_token_logps"), kl_coef=self.beta,
            diagnostics=self.diagnostics, pieces=self._pieces)
        if self.diagnostics and micro == count - 1:
            metrics |= self._pieces.finish(self._vocab, self._types, self._group_size,
                                           self._sum_over_processes)
        policy = float(loss.detach()) / world
        if aux is not None:
            loss = loss + self.router_aux_loss_coef * aux / self.current_gradient_accumulation_steps
        ent = entropy.detach()[mask]
        aux_value = float("nan") if aux is None else float(aux.detach())
        self._record(metrics | {"loss": policy, "aux_loss": aux_value},
                     float(ent.double().sum()), int(ent.numel()))
        if micro == count - 1:
            self._log_update()
        return loss

    def _record(self, metrics: dict[str, float], entropy_sum: float, entropy_n: int) -> None:
        """One micro-step's metrics (its loss share, and the update's diagnostics at its last)."""
        self._update.append(metrics)
        self._entropy[0] += entropy_sum
        self._entropy[1] += entropy_n

    def _log_update(self) -> None:
        """The update's metrics, merged over its micro-steps on every process (a collective),
        into TRL's metrics: TRL's `log` averages them over the logging window."""
        parts = gather_object([(self._update, *self._entropy)])
        merged = merge_micro_steps([m for update, _, _ in parts for m in update])
        metrics = self._metrics["train" if self.model.training else "eval"]
        for key, value in merged.items():
            metrics[f"{'cancellation' if key in CANCELLATION_KEYS else 'objective'}/{key}"].append(
                value)
        metrics["entropy"].append(sum(p[1] for p in parts) / max(sum(p[2] for p in parts), 1))
        self._update, self._entropy = [], [0.0, 0]
