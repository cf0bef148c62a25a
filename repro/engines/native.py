"""`repro train engine=native`: the RL loop, readable top to bottom (cleanrl-style).

Per step: P prompts from the compute-matched stream, G samples each (HF engine, KV cache),
rewards from the evaluator's graders, group advantages, logp_old once per rollout batch (or the
engine's), all at the sampling temperature (logits / T, as TRL does: the policy that sampled;
with `behaviour_temperature` the sampler and logp_old use T_b while the loss scores at T, a
controlled off-policy dose; with `sampler_dtype` a bf16 copy of the policy, with `staleness` d
the policy of d steps earlier samples and gives logp_old, realistic ones), then `epochs` passes
of K updates on minibatches of whole groups with `policy_loss` (AdamW, grad-norm clipping,
optional k3 KL). Diagnostics come from
c = -dL/dlogp of each update's own loss. One Parquet row per step; checkpoints at
`checkpoint_every` steps and at budget fractions; with `resume=True` a killed run continues from
its newest checkpoint and ends bit-identical on CPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from repro.engines.core import loss_and_diagnostics
from repro.generation.base import SamplingConfig
from repro.generation.hf import HFEngine
from repro.models import load
from repro.objectives import AdvantageConfig, group_advantages
from repro.progress import progress
from repro.training.behaviour import behaving_as, lagged_weights
from repro.training.checkpoint import RunState, load_trainer_state, save_checkpoint
from repro.training.config import TrainConfig
from repro.training.logprobs import response_logprobs, response_logprobs_and_aux
from repro.training.minibatches import minibatch_orders
from repro.training.probes import ProbeSet
from repro.training.rollout import PromptStream, Rewarder, RolloutBatch, rollout
from repro.training.router import router_aux_coef
from repro.training.run import (
    checkpoint_due,
    finish_run,
    initial_state,
    open_run,
    probe_row,
    prompts_and_probes,
    step_row,
    write_log,
)

# repro train's declaration of this engine (read by repro.training.trainers, not imported)
ENGINE = {"name": "native", "trainer": "train_native", "launch": "python", "env": "cpu",
          "help": "this package's single-process loop, the CPU reference"}


@dataclass
class StepContext:
    """The fixed parts of one run that every step uses (built once in `train_native`)."""

    cfg: TrainConfig
    model: Any
    tok: Any
    ref: Any  # the initial policy when kl_coef > 0, else None
    opt: torch.optim.Optimizer
    loss_cfg: Any
    stream: PromptStream
    rewarder: Rewarder
    engine: HFEngine
    n_params: int
    aux_coef: float  # router load-balancing weight (0.0: dense model, or off)


def train_native(
    cfg: TrainConfig, out: Path, *, label: str | None = None, resume: bool = False,
    fingerprint: str = "",
) -> Path:
    """Train in this process into `out`; returns the final policy folder `out/final`
    (arguments as `repro.engines.registry.train`)."""
    out = Path(out)
    label, identity, ckpt = open_run(cfg, out, label, resume, fingerprint)
    torch.manual_seed(cfg.seed)
    ctx, probes = step_context(cfg, ckpt / "policy" if ckpt else cfg.model)
    model, tok, opt, rewarder = ctx.model, ctx.tok, ctx.opt, ctx.rewarder
    if ckpt is not None:
        state = load_trainer_state(ckpt, opt)
        print(f"repro train: resuming from {ckpt} (step {state.step})")
    else:
        state = initial_state(probes, model)
    bar = progress(cfg.steps, f"train {label}", "step", initial=state.step)
    try:
        for step in range(state.step + 1, cfg.steps + 1):
            if cfg.token_budget is not None and state.gen_cum >= cfg.token_budget:
                break
            row = train_step(ctx, step, state)
            row |= probe_row(probes, model, state)
            row |= {"algorithm": label, "objective": cfg.algorithm, "seed": cfg.seed, "step": step}
            state.log.append(row)
            state.step = step
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", entropy=f"{row['entropy']:.3f}")
            if checkpoint_due(cfg, state):
                save_checkpoint(out, step, model, tok, opt, state, identity,
                                keep=cfg.keep_checkpoints)
                write_log(out, state.log, cfg)
    finally:
        bar.close()
        rewarder.close()
    return finish_run(out, model, tok, state, identity, cfg)


def step_context(cfg: TrainConfig, policy: str | Path) -> tuple[StepContext, ProbeSet | None]:
    """Policy (from `policy`, in train mode), reference, optimizer, prompt stream, graders,
    engine and probes of a run: what `train_native` and `repro bench rl-step` build the same way."""
    model, tok = load(policy)
    model.train()
    ref = load(cfg.model)[0].eval() if cfg.kl_coef > 0 else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    stream, probes = prompts_and_probes(cfg, tok)
    rewarder = Rewarder({stream.specs[n].kind for n in stream.names})
    engine = HFEngine(model, tok, batch_size=cfg.prompts_per_step)
    ctx = StepContext(cfg, model, tok, ref, opt, cfg.objective, stream, rewarder, engine,
                      sum(p.numel() for p in model.parameters()),
                      router_aux_coef(model, cfg.router_aux_loss_coef))
    return ctx, probes


@dataclass
class ScoredRollout:
    """A rollout batch with what every update of the step reads: the behaviour log-probs, the
    reference's, the entropy at T and the group advantages."""

    batch: RolloutBatch
    logp_old: Tensor
    ref_logp: Tensor | None
    entropy: Tensor
    adv: Tensor
    zero_adv_frac: float


def train_step(ctx: StepContext, step: int, state: RunState) -> dict[str, Any]:
    """One rollout batch and its K updates; advances the counters in `state`, returns the row."""
    t0 = time.perf_counter()
    scored = rollout_stage(ctx, step, lagged_weights(ctx.model, state.lagged, ctx.cfg.staleness))
    t1 = time.perf_counter()
    updates = update_stage(ctx, step, scored)
    t2 = time.perf_counter()
    batch, resp_mask = scored.batch, scored.batch.response_mask
    return step_row(ctx.cfg, state, ctx.n_params, ctx.ref is not None, resp_mask.sum(-1),
                    batch.reward, batch.truncated, float(scored.entropy[resp_mask].mean()),
                    scored.zero_adv_frac, updates, t1 - t0, t2 - t1, batch.grader_errors)


def rollout_stage(ctx: StepContext, step: int,
                  behaviour: dict[str, Tensor] | None = None) -> ScoredRollout:
    """Sample and grade the step's P x G responses, then score them once (logp_old, the
    reference, entropy) and take group advantages. The behaviour policy samples and gives
    logp_old: the policy itself, or (`repro.training.behaviour.behaving_as`) `behaviour`'s
    weights (`lagged_weights` under staleness) in `sampler_dtype`. Apart from the updates so
    that `repro bench rl-step` times the two halves of the very step the loop runs."""
    cfg, model, ref = ctx.cfg, ctx.model, ctx.ref
    t_behaviour = cfg.sampling_temperature()
    sampling = SamplingConfig(temperature=t_behaviour, top_p=cfg.top_p, top_k=cfg.top_k,
                              max_new_tokens=cfg.max_new_tokens, n=cfg.group_size,
                              seed=cfg.seed * 1_000_003 + step)
    model.eval()
    own_logp = None
    with behaving_as(model, behaviour, cfg.sampler_dtype) as swapped:
        batch = rollout(ctx.engine, ctx.stream.at(step), ctx.stream.specs, ctx.rewarder,
                        sampling, want_engine_logp=cfg.behaviour_logprobs == "engine")
        args = (batch.input_ids, batch.attention_mask, batch.response_mask)
        if swapped or t_behaviour != cfg.temperature:  # the sampler's own policy
            with torch.no_grad():
                own_logp = response_logprobs(model, *args, chunk_size=cfg.logprob_chunk,
                                             temperature=t_behaviour, with_entropy=False)[0]
    model.train()
    with torch.no_grad():  # once per rollout batch: the current policy's entropy at T
        logp_old, entropy = response_logprobs(model, *args, chunk_size=cfg.logprob_chunk,
                                              temperature=cfg.temperature)
        ref_logp = None if ref is None else response_logprobs(
            ref, *args, temperature=cfg.temperature, with_entropy=False)[0]
    if own_logp is not None:
        logp_old = own_logp.float()
    if batch.engine_logp is not None:
        logp_old = batch.engine_logp
    adv, adv_info = group_advantages(batch.reward, batch.group,
                                     AdvantageConfig(cfg.advantage_scale))
    return ScoredRollout(batch, logp_old, ref_logp, entropy, adv, adv_info["zero_adv_frac"])


def minibatch_rows(cfg: TrainConfig, step: int, batch: RolloutBatch) -> list[tuple[Tensor, int]]:
    """The epochs x K minibatches of a step: (row mask, width) each, whole groups in a seeded
    order; each pass draws the next permutation from the step's generator (pass 1's is the
    single-pass order)."""
    out = []
    for order in minibatch_orders(cfg.seed, step, cfg.prompts_per_step, cfg.minibatches,
                                  passes=cfg.epochs):
        for groups in order:
            rows = torch.isin(batch.group, groups)
            out.append((rows, int(batch.attention_mask[rows].sum(-1).max())))
    return out


def update_stage(ctx: StepContext, step: int, scored: ScoredRollout) -> list[dict[str, float]]:
    """The epochs x K optimizer updates on the scored rollout; returns each update's metrics. An MoE
    policy's router loss, `aux_coef x aux_loss` over the minibatch's attended tokens, is added
    after the objective's loss and diagnostics (`repro.training.router`); `loss` is the
    objective's alone."""
    cfg, model, batch, ref_logp = ctx.cfg, ctx.model, scored.batch, scored.ref_logp
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    updates = []
    for rows, width in minibatch_rows(cfg, step, batch):
        ids, attn, resp = (t[rows, :width] for t in args)
        logp, _, aux = response_logprobs_and_aux(
            model, ids, attn, resp, chunk_size=cfg.logprob_chunk, temperature=cfg.temperature,
            with_entropy=False, router_aux=ctx.aux_coef != 0)
        loss, metrics = loss_and_diagnostics(
            ctx.loss_cfg, logp, scored.logp_old[rows, :width], resp, scored.adv[rows],
            batch.group[rows], ids, len(ctx.tok),
            ref_logp=None if ref_logp is None else ref_logp[rows, :width], kl_coef=cfg.kl_coef)
        metrics |= {"loss": float(loss.detach()),
                    "aux_loss": math.nan if aux is None else float(aux.detach())}
        if aux is not None:
            loss = loss + ctx.aux_coef * aux
        ctx.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)
        ctx.opt.step()
        updates.append(metrics | {"grad_norm": float(norm)})
    return updates
