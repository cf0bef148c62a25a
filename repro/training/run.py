"""Run bookkeeping shared by every engine (native loop, TRL): the scratch layout a run opens and
finishes, one TRAIN_LOG row per rollout step, probe columns, when to checkpoint. One module so
resume, the log schema and the compute accounting cannot drift apart between engines."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torch import Tensor

from repro.atomic import atomic_dir
from repro.models.loader import checkpoint_dtype
from repro.results import TRAIN_LOG, write_table
from repro.results.io import git_revision
from repro.results.schemas import (
    TRAIN_LOG_ADDED,
    TRAIN_LOG_OFFPOLICY,
    TRAIN_LOG_PREAMBLE,
    TRAIN_LOG_ROUTER,
)
from repro.tasks import task_of
from repro.training.checkpoint import RunState, latest_checkpoint, same_run
from repro.training.config import TrainConfig
from repro.training.export import MANIFEST, frac_label, write_manifest
from repro.training.probes import ProbeSet, kl_between, preamble_drift
from repro.training.rollout import PromptStream

MEAN_KEYS = ("loss", "clip_frac", "ppo_kl", "w_mean", "neg_weight_frac", "s_spread", "asym",
             "residual_full", "freq_energy", "grad_norm", *TRAIN_LOG_ADDED,
             *TRAIN_LOG_ROUTER, *TRAIN_LOG_OFFPOLICY)


def prompts_and_probes(cfg: TrainConfig, tok) -> tuple[PromptStream, ProbeSet | None]:
    """The run's prompt stream and, for synthetic tasks, its probes (real sets have none): built
    the same way by every engine, so their prompts and probe numbers agree."""
    stream = PromptStream(cfg.tasks, cfg.seed, cfg.prompts_per_step,
                          data_dir=Path(cfg.data_dir) if cfg.data_dir else None,
                          sha256_pins=cfg.sha256_pins or None)
    synthetic = [task_of(stream.specs[n].generator) for n in stream.names
                 if stream.specs[n].source == "synthetic"]
    return stream, ProbeSet(tok, synthetic, cfg.probe_n) if synthetic else None


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
               cfg: TrainConfig, policy_dir: Path | None = None) -> Path:
    """Log, final policy, then the manifest (last: a run folder with a manifest is complete).
    Main process only; a sharded model passes the `policy_dir` its processes wrote."""
    write_log(out, state.log, cfg)
    final = save_final(out, model, tok, policy_dir)
    fraction_steps = {frac_label(f): s for f, s in state.fraction_steps.items()}
    write_manifest(out / MANIFEST, identity | {"steps_done": state.step,
                                                "fraction_steps": fraction_steps,
                                                "export_dtype": checkpoint_dtype(cfg.model)}
                   | provenance(state.started))
    return final


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def provenance(started: str | None) -> dict[str, Any]:
    """What a manifest records so a study's order is checkable from its data (a pre-registration
    must precede every confirmatory run): the commit the run's code came from, whether the tree
    had uncommitted changes (None: not a git checkout), and when the run started and ended."""
    revision = git_revision()
    return {"git_commit": revision.removesuffix("+dirty"),
            "git_dirty": None if revision == "unknown" else revision.endswith("+dirty"),
            "started": started, "finished": utc_now()}


def initial_state(probes: ProbeSet | None, model) -> RunState:
    """Counters and probe baselines of a run at step 0."""
    logodds0, ctx0 = probes.measure(model) if probes else (math.nan, None)
    preamble0 = probes.preamble.measure(model) if probes and probes.preamble else None
    return RunState(logodds0=logodds0, prev_ctx=ctx0, preamble0=preamble0, started=utc_now())


def step_row(cfg: TrainConfig, state: RunState, n_params: int, has_ref: bool,
             lengths: Tensor, reward: Tensor, truncated: Tensor, entropy: float,
             zero_adv_frac: float, updates: list[dict[str, float]], time_rollout: float,
             time_update: float, grader_errors: int) -> dict[str, Any]:
    """One TRAIN_LOG row of a rollout step from its rollout stats and its K updates' metrics;
    also advances the token and FLOPs counters in `state`. Shared by every engine, so the log
    schema and the compute accounting cannot drift apart."""
    gen = int(lengths.sum())
    state.gen_cum += gen
    # 2N per token to sample, score logp_old and (with KL) the reference; 6N per token for
    # each pass of updates over the rollout (`epochs`)
    state.flops_cum += 2.0 * n_params * gen * (2 + has_ref) + 6.0 * n_params * gen * cfg.epochs
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


def save_final(out: Path, model, tok, policy_dir: Path | None = None) -> Path:
    """`out/final`: the model's save_pretrained, or the folder `policy_dir` moved there."""
    def write(tmp: Path) -> None:
        if policy_dir is not None:
            tmp.rmdir()
            shutil.move(policy_dir, tmp)
        else:
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    final = out / "final"
    atomic_dir(final, write)
    return final
