"""One native RL step, stage by stage, against bare transformers baselines measured alongside.

Each round runs a real step of the loop (`rollout_stage`, `update_stage`, then the probes and a
checkpoint, as `train` does) on the tiny default, and next to it three baselines on the same
inputs: `model.generate` with the same prompts, temperature, budget and G samples per prompt
(torch's multinomial sampling, no per-sample streams); a bare no-grad forward of the whole batch
(the floor of the behaviour pass, logp_old and entropy); and a bare forward + backward of the
same minibatches (full logits, loss = -sum of response log-probs, no optimizer). Which side goes
first alternates by round (A B, B A), so drift in the machine's load falls on both; the report
gives medians and ratios of medians, never absolute thresholds.

Rollout throughput counts rows x decode steps: both sides pay for every row until the longest
one stops, and the two samplers draw different (random) lengths, so counting only the kept
tokens would compare luck. Kept tokens per second are reported beside it.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from repro.atomic import atomic_file
from repro.bench.report import print_rl_step_report
from repro.diagnostics import cancellation_metrics, token_coefficients
from repro.engines.core import loss_and_diagnostics
from repro.engines.native import (
    ScoredRollout,
    StepContext,
    minibatch_rows,
    rollout_stage,
    step_context,
    update_stage,
)
from repro.training.behaviour import lagged_weights
from repro.training.checkpoint import save_checkpoint
from repro.training.config import TrainConfig, check_train_fields, parse_overrides
from repro.training.logprobs import response_logprobs
from repro.training.rollout import chat_prompts
from repro.training.run import initial_state, probe_row

REPO = Path(__file__).resolve().parents[2]
ROLLOUT_RATIO_MIN = 0.9  # acceptance (issue 21): rollout throughput >= 0.9x bare generate
UPDATE_RATIO_MAX = 1.3  # acceptance: update time <= 1.3x bare forward + backward
STAGES = ("generate", "grading", "old_logprobs", "update", "diagnostics", "probes", "checkpoint")


@dataclass
class RLStepBenchConfig:
    """Which step to time (the `train:` block of a pipeline config) and how often."""

    config: str = field(
        default=str(REPO / "config" / "config.yaml"),
        metadata={"help": "Pipeline config whose `train:` block is the step (the tiny default)."},
    )
    model: str = field(
        default=str(REPO / "tests" / "fixtures" / "synth_rule_start"),
        metadata={"help": "Policy to start from (default: the tiny default's committed RL start)."},
    )
    overrides: list[str] = field(
        default_factory=list,
        metadata={"help": "KEY=VALUE overrides of the TrainConfig, e.g. algorithm=gspo."},
    )
    repeats: int = field(
        default=5, metadata={"help": "Timed rounds (steps 1..N, after one untimed warm-up step)."}
    )

    def __post_init__(self) -> None:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(
                f"RLStepBenchConfig.repeats must be an integer >= 1, got {self.repeats!r}")

    def train_config(self) -> TrainConfig:
        """The `train:` block with `model` and the overrides applied, checked as `repro train`."""
        block = (yaml.safe_load(Path(self.config).read_text()) or {}).get("train")
        if not isinstance(block, dict):
            raise ValueError(f"{self.config}: no `train:` mapping to benchmark")
        data = block | {"model": self.model} | parse_overrides(self.overrides)
        check_train_fields(data, f"{self.config} train: ")
        cfg = TrainConfig(**data)
        if cfg.engine != "native":
            raise ValueError(f"engine={cfg.engine!r}: the bench times the native loop's step")
        return cfg


class Clocked:
    """Stands in for `target`: calls of its method `method` add their wall time to `seconds` and
    keep their arguments in `last_args`; every other attribute is the target's."""

    def __init__(self, target: Any, method: str) -> None:
        self.target, self.method, self.seconds, self.last_args = target, method, 0.0, ()

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.last_args = args
        return call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.target, name)
        return self._timed(attr) if name == self.method else attr

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self.target)(*args, **kwargs)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def bare_generate(ctx: StepContext, prompts: list[str]) -> tuple[float, int, int]:
    """(seconds, rows x decode steps, kept tokens) of plain `model.generate` sampling G
    responses per prompt at the step's temperature and budget, untruncated like the loop."""
    cfg, tok, model = ctx.cfg, ctx.tok, ctx.model
    side, tok.padding_side = tok.padding_side, "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    tok.padding_side = side
    model.eval()
    out, seconds = _timed(lambda: model.generate(
        **enc, do_sample=True, temperature=cfg.sampling_temperature(), top_k=0, top_p=1.0,
        max_new_tokens=cfg.max_new_tokens, num_return_sequences=cfg.group_size,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    model.train()
    new = out[:, enc["input_ids"].shape[1]:]
    is_eos = (new == tok.eos_token_id).int()
    kept = int(((is_eos.cumsum(-1) - is_eos) == 0).sum())  # up to and including the first EOS
    return seconds, new.numel(), kept


def bare_forward_backward(ctx: StepContext, step: int, scored: ScoredRollout) -> float:
    """Seconds of forward + backward of the step's K minibatches through the plain model:
    full [B, L, V] logits, loss = -sum of response log-probs; gradients dropped after."""
    batch = scored.batch
    t0 = time.perf_counter()
    for rows, width in minibatch_rows(ctx.cfg, step, batch):
        ids, attn = batch.input_ids[rows, :width], batch.attention_mask[rows, :width]
        resp = batch.response_mask[rows, 1:width]
        logits = ctx.model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        (-(logp * resp).sum()).backward()
    seconds = time.perf_counter() - t0
    ctx.model.zero_grad(set_to_none=True)
    return seconds


def bare_forward(ctx: StepContext, scored: ScoredRollout) -> float:
    """Seconds of one no-grad forward of the whole rollout batch through the plain model (full
    logits, response log-probs gathered): the floor of the behaviour pass (logp_old, entropy)."""
    batch = scored.batch
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = ctx.model(input_ids=batch.input_ids,
                           attention_mask=batch.attention_mask).logits[:, :-1].float()
        torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, 1:, None])
    return time.perf_counter() - t0


def diagnostics_seconds(ctx: StepContext, step: int, scored: ScoredRollout) -> float:
    """Seconds of the diagnostics the update computes (c = -dL/dlogp and the cancellation
    metrics of each minibatch), timed alone on the same minibatches."""
    cfg, batch = ctx.cfg, scored.batch
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    seconds = 0.0
    for rows, width in minibatch_rows(cfg, step, batch):
        ids, attn, resp = (t[rows, :width] for t in args)
        logp, _ = response_logprobs(ctx.model, ids, attn, resp, chunk_size=cfg.logprob_chunk,
                                    temperature=cfg.temperature, with_entropy=False)
        loss, _ = loss_and_diagnostics(ctx.loss_cfg, logp, scored.logp_old[rows, :width], resp,
                                       scored.adv[rows], batch.group[rows], ids, len(ctx.tok),
                                       diagnostics=False)
        t0 = time.perf_counter()
        cancellation_metrics(token_coefficients(loss, logp), ids, resp, batch.group[rows],
                             scored.adv[rows], len(ctx.tok))
        seconds += time.perf_counter() - t0
    return seconds


def run_round(ctx: StepContext, probes: Any, state: Any, step: int, scratch: Path,
              loop_first: bool) -> dict[str, float]:
    """One real step of the loop, stage by stage, and both baselines on its inputs, in the order
    loop-baseline (`loop_first`) or baseline-loop."""
    engine, rewarder = ctx.engine, ctx.rewarder
    prompts = chat_prompts(ctx.tok, ctx.stream.at(step), ctx.stream.specs)
    r: dict[str, float] = {}

    def loop_rollout() -> ScoredRollout:
        gen0, grade0 = engine.seconds, rewarder.seconds
        scored, r["rollout"] = _timed(lambda: rollout_stage(ctx, step, lagged_weights(
            ctx.model, state.lagged, ctx.cfg.staleness)))
        r["generate"], r["grading"] = engine.seconds - gen0, rewarder.seconds - grade0
        return scored

    def bare_rollout() -> None:
        r["bare_generate"], r["bare_positions"], r["bare_kept"] = bare_generate(ctx, prompts)

    if loop_first:
        scored = loop_rollout()
        bare_rollout()
    else:
        bare_rollout()
        scored = loop_rollout()
    r["old_logprobs"] = r["rollout"] - r["generate"] - r["grading"]
    lengths = scored.batch.response_mask.sum(-1)
    r["positions"], r["kept"] = float(len(lengths) * int(lengths.max())), float(lengths.sum())

    def loop_update() -> None:
        r["update"] = _timed(lambda: update_stage(ctx, step, scored))[1]

    def bare_update() -> None:
        r["bare_forward"] = bare_forward(ctx, scored)
        r["bare_fwd_bwd"] = bare_forward_backward(ctx, step, scored)

    for fn in (loop_update, bare_update) if loop_first else (bare_update, loop_update):
        fn()
    r["diagnostics"] = diagnostics_seconds(ctx, step, scored)
    r["probes"] = _timed(lambda: probe_row(probes, ctx.model, state))[1]
    r["checkpoint"] = _timed(lambda: save_checkpoint(
        scratch, step, ctx.model, ctx.tok, ctx.opt, state, {"bench": "rl-step"}, keep=1))[1]
    return r


def run_rl_step_bench(cfg: RLStepBenchConfig, *, show: bool = True,
                      out: Path | None = None) -> dict[str, Any]:
    """Warm up with one step, then `cfg.repeats` timed rounds; print the report, write it as
    JSON to `out` if given, and return it."""
    train_cfg = cfg.train_config()
    torch.manual_seed(train_cfg.seed)
    ctx, probes = step_context(train_cfg, train_cfg.model)
    ctx.engine = Clocked(ctx.engine, "generate")
    ctx.rewarder = Clocked(ctx.rewarder, "__call__")
    state = initial_state(probes, ctx.model)
    rounds = []
    try:
        with tempfile.TemporaryDirectory(prefix="rl-step-bench-") as scratch:
            for step in range(cfg.repeats + 1):  # step 0: warm-up, not reported
                rounds.append(run_round(ctx, probes, state, step, Path(scratch), step % 2 == 1))
    finally:
        ctx.rewarder.close()
    result = summarise(cfg, train_cfg, rounds[1:])
    if show:
        print_rl_step_report(result)
    if out is not None:
        atomic_file(out, lambda tmp: tmp.write_text(json.dumps(result, indent=1) + "\n"))
    return result


def summarise(cfg: RLStepBenchConfig, train_cfg: TrainConfig,
              rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Medians per stage, their shares of the step, and the two ratios of medians."""
    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    stages = {name: med(name) for name in STAGES}
    step_s = med("rollout") + stages["update"] + stages["probes"] + stages["checkpoint"]
    rates = {
        "rollout": med("positions") / med("rollout"),
        "engine_generate": med("positions") / stages["generate"],
        "bare_generate": med("bare_positions") / med("bare_generate"),
        "rollout_kept": med("kept") / med("rollout"),
        "bare_generate_kept": med("bare_kept") / med("bare_generate"),
    }
    rollout_ratio = rates["rollout"] / rates["bare_generate"]
    update_ratio = stages["update"] / med("bare_fwd_bwd")
    return {
        "config": asdict(cfg),
        "train": {k: v for k, v in train_cfg.to_dict().items() if k in (
            "model", "algorithm", "tasks", "prompts_per_step", "group_size", "minibatches",
            "max_new_tokens", "temperature", "logprob_chunk")},
        "env": {"torch": torch.__version__, "threads": torch.get_num_threads()},
        "rounds": rounds,
        "stages_s": stages,
        "rollout_s": med("rollout"),
        "step_s": step_s,
        "shares": {name: s / step_s for name, s in stages.items()},
        "bare_s": {"generate": med("bare_generate"), "forward": med("bare_forward"),
                   "fwd_bwd": med("bare_fwd_bwd")},
        "tokens_per_s": rates,
        "ratios": {
            "rollout_vs_bare_generate": rollout_ratio,
            "engine_generate_vs_bare_generate": rates["engine_generate"] / rates["bare_generate"],
            "old_logprobs_vs_bare_forward": stages["old_logprobs"] / med("bare_forward"),
            "update_vs_bare_fwd_bwd": update_ratio,
        },
        "acceptance": [
            {"name": f"rollout tokens/s >= {ROLLOUT_RATIO_MIN}x bare generate",
             "value": rollout_ratio, "passed": rollout_ratio >= ROLLOUT_RATIO_MIN},
            {"name": f"update time <= {UPDATE_RATIO_MAX}x bare forward + backward",
             "value": update_ratio, "passed": update_ratio <= UPDATE_RATIO_MAX},
        ],
    }
