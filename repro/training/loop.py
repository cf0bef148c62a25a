"""`repro train`: the RL loop, readable top to bottom (cleanrl-style).

Per step: P prompts from the compute-matched stream, G samples each (HF engine, KV cache),
rewards from the evaluator's graders, group advantages, logp_old once per rollout batch (or the
engine's), all at the sampling temperature (logits / T, as TRL does: the policy that sampled;
with `behaviour_temperature` the sampler and logp_old use T_b while the loss scores at T, a
controlled off-policy dose), then K updates on minibatches of whole groups with `policy_loss`
(AdamW, grad-norm clipping, optional k3 KL). Diagnostics come from c = -dL/dlogp of each
update's own loss. One Parquet row per step; checkpoints at `checkpoint_every` steps and at
budget fractions; with `resume=True` a killed run continues from its newest checkpoint and ends
bit-identical on CPU.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from repro.atomic import atomic_dir
from repro.generation.base import SamplingConfig
from repro.generation.hf import HFEngine
from repro.models import load
from repro.engines.core import loss_and_diagnostics
from repro.objectives import AdvantageConfig, group_advantages
from repro.progress import progress
from repro.results import TRAIN_LOG, write_table
from repro.results.schemas import TRAIN_LOG_ADDED, TRAIN_LOG_PREAMBLE
from repro.training.checkpoint import (
    latest_checkpoint,
    load_trainer_state,
    same_run,
    save_checkpoint,
)
from repro.training.config import TrainConfig
from repro.training.export import MANIFEST, frac_label, write_manifest
from repro.training.logprobs import response_logprobs
from repro.training.probes import ProbeSet, kl_between, preamble_drift
from repro.training.rollout import PromptStream, Rewarder, RolloutBatch, rollout


@dataclass
class RunState:
    """What a checkpoint carries besides weights and optimizer: counters, probe baselines, the
    log so far, and which budget fractions were saved at which step."""

    step: int = 0
    gen_cum: int = 0
    flops_cum: float = 0.0
    logodds0: float = math.nan
    prev_ctx: Any = None
    preamble0: Any = None  # the start's PreambleMeasure (tasks with preambles), else None
    log: list[dict[str, Any]] = field(default_factory=list)
    fraction_steps: dict[float, int] = field(default_factory=dict)  # fraction -> step saved


@dataclass
class StepContext:
    """The fixed parts of one run that every step uses (built once in `train`)."""

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


MEAN_KEYS = ("loss", "clip_frac", "ppo_kl", "w_mean", "neg_weight_frac", "s_spread", "asym",
             "residual_full", "freq_energy", "grad_norm", *TRAIN_LOG_ADDED)


def train(
    cfg: TrainConfig, out: Path, *, label: str | None = None, resume: bool = False,
    fingerprint: str = "",
) -> Path:
    """Train into `out`; returns the final policy folder `out/final`.

    `fingerprint` (e.g. the pipeline's source digest) is stored with every checkpoint next to the
    resolved config; `resume` continues only from a checkpoint with the same pair."""
    if cfg.engine == "trl":
        from repro.engines.trl import train_trl

        return train_trl(cfg, out, label=label, resume=resume, fingerprint=fingerprint)
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
    engine and probes of a run: what `train` and `repro bench rl-step` build the same way."""
    model, tok = load(policy)
    model.train()
    ref = load(cfg.model)[0].eval() if cfg.kl_coef > 0 else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    stream = PromptStream(cfg.tasks, cfg.seed, cfg.prompts_per_step,
                          data_dir=Path(cfg.data_dir) if cfg.data_dir else None,
                          sha256_pins=cfg.sha256_pins or None)
    rewarder = Rewarder({stream.specs[n].kind for n in stream.names})
    engine = HFEngine(model, tok, batch_size=cfg.prompts_per_step)
    synthetic = [n for n in stream.names if stream.specs[n].source == "synthetic"]
    probes = ProbeSet(tok, synthetic, cfg.probe_n) if synthetic else None  # real sets: no probes
    ctx = StepContext(cfg, model, tok, ref, opt, cfg.loss_config(), stream, rewarder, engine,
                      sum(p.numel() for p in model.parameters()))
    return ctx, probes


def open_run(cfg: TrainConfig, out: Path, label: str | None, resume: bool,
             fingerprint: str) -> tuple[str, dict[str, Any], Path | None]:
    """(label, identity, checkpoint to resume or None); clears what a fresh run must not mix
    with. Shared by every engine so resume and the scratch layout behave the same."""
    label = label or cfg.algorithm
    identity = {"config": cfg.to_dict(), "label": label, "fingerprint": fingerprint}
    ckpt = latest_checkpoint(out) if resume else None
    if ckpt is not None and not same_run(ckpt, identity):
        print(f"repro train: {ckpt} was written by another config or code version; starting over")
        ckpt = None
    (out / MANIFEST).unlink(missing_ok=True)  # written again when this run completes
    if ckpt is None and (out / "checkpoints").exists():
        shutil.rmtree(out / "checkpoints")  # a fresh run never mixes with an old one's state
    return label, identity, ckpt


def finish_run(out: Path, model, tok, state: RunState, identity: dict[str, Any],
               cfg: TrainConfig, state_dict: dict[str, Any] | None = None) -> Path:
    """Log, final policy, then the manifest (last: a run folder with a manifest is complete).
    Main process only; a sharded model passes its gathered `state_dict`."""
    write_log(out, state.log, cfg)
    final = save_final(out, model, tok, state_dict)
    fraction_steps = {frac_label(f): s for f, s in state.fraction_steps.items()}
    write_manifest(out / MANIFEST, identity | {"steps_done": state.step,
                                                "fraction_steps": fraction_steps})
    return final


def initial_state(probes: ProbeSet | None, model) -> RunState:
    """Counters and probe baselines of a run at step 0."""
    logodds0, ctx0 = probes.measure(model) if probes else (math.nan, None)
    preamble0 = probes.preamble.measure(model) if probes and probes.preamble else None
    return RunState(logodds0=logodds0, prev_ctx=ctx0, preamble0=preamble0)


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
    scored = rollout_stage(ctx, step)
    t1 = time.perf_counter()
    updates = update_stage(ctx, step, scored)
    t2 = time.perf_counter()
    batch, resp_mask = scored.batch, scored.batch.response_mask
    return step_row(ctx.cfg, state, ctx.n_params, ctx.ref is not None, resp_mask.sum(-1),
                    batch.reward, batch.truncated, float(scored.entropy[resp_mask].mean()),
                    scored.zero_adv_frac, updates, t1 - t0, t2 - t1, batch.grader_errors)


def rollout_stage(ctx: StepContext, step: int) -> ScoredRollout:
    """Sample and grade the step's P x G responses, then score them once (logp_old, the
    reference, entropy) and take group advantages. Apart from the updates so that `repro bench
    rl-step` times the two halves of the very step the loop runs."""
    cfg, model, ref = ctx.cfg, ctx.model, ctx.ref
    t_behaviour = cfg.sampling_temperature()
    sampling = SamplingConfig(temperature=t_behaviour, top_p=cfg.top_p, top_k=cfg.top_k,
                              max_new_tokens=cfg.max_new_tokens, n=cfg.group_size,
                              seed=cfg.seed * 1_000_003 + step)
    model.eval()
    batch = rollout(ctx.engine, ctx.stream.at(step), ctx.stream.specs, ctx.rewarder, sampling,
                    want_engine_logp=cfg.behaviour_logprobs == "engine")
    model.train()
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    with torch.no_grad():  # once per rollout batch: the behaviour policy, the entropy at T
        logp_old, entropy = response_logprobs(model, *args, chunk_size=cfg.logprob_chunk,
                                              temperature=cfg.temperature)
        if t_behaviour != cfg.temperature:  # the off-policy dose: the sampler's own policy
            logp_old = response_logprobs(model, *args, chunk_size=cfg.logprob_chunk,
                                         temperature=t_behaviour, with_entropy=False)[0]
        ref_logp = None if ref is None else response_logprobs(
            ref, *args, temperature=cfg.temperature, with_entropy=False)[0]
    if batch.engine_logp is not None:
        logp_old = batch.engine_logp
    adv, adv_info = group_advantages(batch.reward, batch.group, AdvantageConfig(cfg.advantage_scale))
    return ScoredRollout(batch, logp_old, ref_logp, entropy, adv, adv_info["zero_adv_frac"])


def minibatch_rows(cfg: TrainConfig, step: int, batch: RolloutBatch) -> list[tuple[Tensor, int]]:
    """The K minibatches of a step: (row mask, width) each, whole groups in a seeded order."""
    order = torch.randperm(cfg.prompts_per_step, generator=torch.Generator().manual_seed(
        cfg.seed * 1_000_003 + step)).view(cfg.minibatches, -1)
    out = []
    for groups in order:
        rows = torch.isin(batch.group, groups)
        out.append((rows, int(batch.attention_mask[rows].sum(-1).max())))
    return out


def update_stage(ctx: StepContext, step: int, scored: ScoredRollout) -> list[dict[str, float]]:
    """The K optimizer updates on the scored rollout; returns each update's metrics."""
    cfg, model, batch, ref_logp = ctx.cfg, ctx.model, scored.batch, scored.ref_logp
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    updates = []
    for rows, width in minibatch_rows(cfg, step, batch):
        ids, attn, resp = (t[rows, :width] for t in args)
        logp, _ = response_logprobs(model, ids, attn, resp, chunk_size=cfg.logprob_chunk,
                                    temperature=cfg.temperature, with_entropy=False)
        loss, metrics = loss_and_diagnostics(
            ctx.loss_cfg, logp, scored.logp_old[rows, :width], resp, scored.adv[rows],
            batch.group[rows], ids, len(ctx.tok),
            ref_logp=None if ref_logp is None else ref_logp[rows, :width], kl_coef=cfg.kl_coef)
        ctx.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)
        ctx.opt.step()
        updates.append(metrics | {"loss": float(loss.detach()), "grad_norm": float(norm)})
    return updates


def step_row(cfg: TrainConfig, state: RunState, n_params: int, has_ref: bool,
             lengths: Tensor, reward: Tensor, truncated: Tensor, entropy: float,
             zero_adv_frac: float, updates: list[dict[str, float]], time_rollout: float,
             time_update: float, grader_errors: int) -> dict[str, Any]:
    """One TRAIN_LOG row of a rollout step from its rollout stats and its K updates' metrics;
    also advances the token and FLOPs counters in `state`. Shared by every engine, so the log
    schema and the compute accounting cannot drift apart."""
    gen = int(lengths.sum())
    state.gen_cum += gen
    state.flops_cum += 2.0 * n_params * gen * (2 + has_ref) + 6.0 * n_params * gen
    lengths = lengths.double()
    return {
        "gen_tokens": gen, "gen_tokens_cum": state.gen_cum, "flops_cum": state.flops_cum,
        "reward_mean": float(reward.mean()), "reward_std": float(reward.std()),
        "accuracy": float((reward == 1).double().mean()),
        "response_len": float(lengths.mean()), "truncated_frac": float(truncated.double().mean()),
        "entropy": entropy,
        "w_min": min(u["w_min"] for u in updates), "w_max": max(u["w_max"] for u in updates),
        "zero_adv_frac": zero_adv_frac, "lr": cfg.lr,
        "grader_errors": float(grader_errors),
        "time_rollout": time_rollout, "time_update": time_update,
    } | {k: nanmean([u[k] for u in updates]) for k in MEAN_KEYS}


def nanmean(values: list[float]) -> float:
    """Mean of the defined values (diagnostics are NaN on minibatches without shared nodes)."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def probe_row(probes: ProbeSet | None, model, state: RunState) -> dict[str, float]:
    if probes is None:
        return {"logodds": math.nan, "logodds_drift": math.nan, "kl_template": math.nan,
                **dict.fromkeys(TRAIN_LOG_PREAMBLE, math.nan)}
    model.eval()
    logodds, ctx = probes.measure(model)
    preamble = probes.preamble.measure(model) if probes.preamble else None
    model.train()
    row = {"logodds": logodds, "logodds_drift": logodds - state.logodds0,
           "kl_template": kl_between(ctx, state.prev_ctx),
           **preamble_drift(preamble, state.preamble0)}
    state.prev_ctx = ctx
    return row


def checkpoint_due(cfg: TrainConfig, state: RunState) -> bool:
    """Every `checkpoint_every` steps, and once per budget fraction crossed (recorded in
    `state.fraction_steps`, which the export reads back)."""
    step = state.step
    used = step / cfg.steps
    if cfg.token_budget is not None:
        used = max(used, state.gen_cum / cfg.token_budget)
    new = [f for f in cfg.checkpoint_fractions if used >= f and f not in state.fraction_steps]
    state.fraction_steps.update({f: step for f in new})
    return bool(new) or (cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0)


def write_log(out: Path, rows: list[dict[str, Any]], cfg: TrainConfig) -> None:
    if rows:
        write_table(rows, TRAIN_LOG, out / "train_log.parquet", config=cfg.to_dict())


def save_final(out: Path, model, tok, state_dict: dict[str, Any] | None = None) -> Path:
    final = out / "final"
    atomic_dir(final, lambda tmp: (model.save_pretrained(tmp, state_dict=state_dict),
                                   tok.save_pretrained(tmp)))
    return final
