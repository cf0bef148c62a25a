"""SFT warm start (`repro sft`): teacher-forced training on synthetic demonstrations.

RL from a random policy gets no reward and hence no signal, so every RL run starts from this
checkpoint: a model that solves a fair share, but not all, of its training problems (groups with
mixed rewards are the ones that carry gradient). The demonstrations use the two equally correct
surface forms half-and-half, so P(A) ~ P(B) before RL, which the drift metrics need.

SFTConfig's defaults (repro.training.sft_config) are a plain 7,000-step recipe of batches of 8;
the tiny default's stage 1 (`models.tiny-base` in config/config.yaml) overrides them, for a
reason measured in docs/sft-robustness.md: the arithmetic arrives in a sudden transition whose
step moves with the seed and with the CPU's float kernels (runs are not bitwise equal across
machines). Under the old recipe (7,000 x 8 with synth-lcb's long demos) it landed in the
cosine's tail, so seeds and kernel sets decided whether it happened at all (3 of 8 runs missed
it). The default now trains batches of 32 on synth-aime and synth-hmmt only (no padding to
synth-lcb's ~730 tokens): ~2x the demonstrations in about the old wall. In 6 of 8 measured
runs it arrived within the schedule, in 2 in the gate's floor phase; the gate (`gate_reward`,
`max_steps`) stops the workflow with the measured reward if a run misses it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from repro.atomic import atomic_dir
from repro.benchmarks import build_messages, get_benchmark, row_to_problem
from repro.generation.base import SamplingConfig
from repro.generation.hf import HFEngine
from repro.models import TinyModelConfig, build_tiny, load
from repro.tasks import synthetic_demonstrations, synthetic_probes, synthetic_rows
from repro.tasks.base import Probe
from repro.training.sft_config import SFTConfig, _fail, allocate  # torch-free home, re-exported
from repro.training.sft_schedule import floor_factor, grouped_batches, plain_batches

IGNORE = -100  # label of tokens that carry no loss (prompt, padding)
METRICS_FILE = "sft_metrics.json"
_EVAL_BATCH = 64  # prompts per generate call of the train-reward estimate
_CURVE_POINTS = 25  # loss-curve points kept in the metrics


def encode_demo(
    tok: PreTrainedTokenizerBase, messages: list[dict[str, str]], max_len: int
) -> tuple[list[int], list[int]] | None:
    """(input_ids, labels) of one chat; labels are IGNORE except on the assistant reply + EOS.

    The prompt is rendered exactly as generation will see it (chat template + generation
    prompt), so the model learns to continue the prompts it is sampled on. None if too long.
    """
    prompt = tok.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tok(messages[-1]["content"] + tok.eos_token, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + target_ids
    if len(ids) > max_len:
        return None
    return ids, [IGNORE] * len(prompt_ids) + target_ids


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example; padding is masked out of attention and loss."""
    width = max(len(ids) for ids, _ in examples)
    batch: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for ids, labels in examples:
        pad = width - len(ids)
        batch["input_ids"].append(ids + [pad_id] * pad)
        batch["attention_mask"].append([1] * len(ids) + [0] * pad)
        batch["labels"].append(labels + [IGNORE] * pad)
    return {key: torch.tensor(value) for key, value in batch.items()}


def sft_step(
    model: PreTrainedModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
    grad_clip: float,
) -> float:
    """One teacher-forced step; the loss is the mean over the batch's assistant tokens, plus,
    on an MoE model, transformers' router load-balancing loss x the config's coefficient."""
    moe = hasattr(model.config, "output_router_logits")
    loss = model(**batch, **({"output_router_logits": True} if moe else {})).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return float(loss.detach())


def _make_grader(task: str) -> Any:
    """The task's real grader; code needs a working sandbox, checked before any training."""
    if get_benchmark(task).grader == "math":
        from repro.graders.math import MathGrader

        return MathGrader()
    from repro.graders.code import CodeGrader
    from repro.sandbox import Sandbox, SandboxConfig

    return CodeGrader(Sandbox(SandboxConfig()))


def _form_of(probe: Probe, text: str) -> str:
    """Form "A"/"B" when the completion reaches the branch point and takes one, else "other"."""
    cut = len(probe.branch_prefix)
    if text.startswith(probe.branch_prefix):
        for label, form in (("A", probe.form_a), ("B", probe.form_b)):
            if text[cut : cut + 1] == form[cut : cut + 1]:
                return label
    return "other"


def estimate_reward(
    model: PreTrainedModel, tok: PreTrainedTokenizerBase, cfg: SFTConfig,
    graders: Mapping[str, Any], seen: Mapping[str, set[str]],
) -> dict[str, Any]:
    """Solve rate on a fresh draw of train problems, sampled like RL rollouts, real graders.

    Also split by whether SFT saw the problem (memorised vs learned) and the A/B form balance.
    """
    engine = HFEngine(model, tok, batch_size=_EVAL_BATCH)
    sampling = SamplingConfig(temperature=cfg.eval_temperature, top_p=1.0, top_k=0, min_p=0.0,
                              max_new_tokens=cfg.eval_max_new_tokens, n=1, seed=cfg.seed)
    per_task, rewards, in_sft, forms = {}, [], [], Counter()
    for task, n in allocate(cfg.tasks, cfg.eval_n).items():
        if n == 0:
            continue
        spec = get_benchmark(task)
        rows = synthetic_rows(task, "train", n, cfg.seed + 1)
        problems = [row_to_problem(spec, row, allow_pickle=True) for row in rows]
        probes = {p.problem_id: p for p in synthetic_probes(task, n, cfg.seed + 1, "train")}
        prompts = [tok.apply_chat_template(build_messages(spec, p), tokenize=False,
                                           add_generation_prompt=True) for p in problems]
        keys = [f"{task}/{p.problem_id}" for p in problems]  # independent streams per task
        texts = [c[0].text for c in engine.generate(prompts, sampling, keys=keys)]
        pairs = list(zip(problems, texts, strict=True))
        grades = graders[task].grade_many(pairs)
        task_rewards = [float(g.correct) for g in grades]
        per_task[task] = sum(task_rewards) / n
        rewards += task_rewards
        in_sft += [p.problem_id in seen[task] for p in problems]
        forms.update(_form_of(probes[p.problem_id], t) for p, t in pairs)

    def mean(flags: list[bool]) -> float | None:
        picked = [r for r, f in zip(rewards, flags, strict=True) if f]
        return sum(picked) / len(picked) if picked else None

    return {"mean": sum(rewards) / len(rewards), "n": len(rewards), "per_task": per_task,
            "seen_in_sft": mean(in_sft), "unseen": mean([not f for f in in_sft]),
            "n_seen": sum(in_sft), "forms": {k: forms[k] for k in ("A", "B", "other")}}


class GateMissed(RuntimeError):
    """Stage-1 SFT reached its step cap without passing its quality gate."""


def _train(
    model: PreTrainedModel, pad_id: int, examples: list[tuple[list[int], list[int]]],
    cfg: SFTConfig, estimate: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The optimisation loop: AdamW (no decay on norms), warm-up + cosine, clipped gradients.

    With `cfg.gate_reward`, `estimate()` (the train-reward estimate) is read at `steps`; below
    the gate, training goes on at the cosine's floor rate and reads it every `gate_every` steps
    until it passes. A miss at the cap raises GateMissed, naming the best estimate.
    """
    torch.manual_seed(cfg.seed)  # the data order is seeded separately, by the batch stream
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # norms: decay would shrink them
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: floor_factor(s, cfg.warmup, cfg.steps))
    cap = (cfg.max_steps or 2 * cfg.steps) if cfg.gate_reward else cfg.steps
    losses, tokens, target_tokens, checks, curve = [], 0, 0, [], []
    reward: dict[str, Any] | None = None
    batches = (grouped_batches([len(ids) for ids, _ in examples], cfg.batch_size, cfg.seed)
               if cfg.group_by_length else plain_batches(len(examples), cfg.batch_size, cfg.seed))
    start = time.perf_counter()
    bar = tqdm(total=cfg.steps, desc="sft", unit="step")
    step = 0
    while step < cfg.steps or (cfg.gate_reward and reward["mean"] < cfg.gate_reward):
        if step >= cap:
            best = max(checks, key=lambda c: c[1])
            raise GateMissed(
                f"SFT gate missed: train reward {reward['mean']:.3f} after the cap of "
                f"{cap} steps (best {best[1]:.3f} at step {best[0]}) < gate_reward "
                f"{cfg.gate_reward}; raise max_steps or lower gate_reward")
        batch = collate([examples[i] for i in next(batches)], pad_id)
        losses.append(sft_step(model, optimizer, batch, cfg.grad_clip))
        scheduler.step()
        tokens += int(batch["attention_mask"].sum())
        target_tokens += int((batch["labels"] != IGNORE).sum())
        step += 1
        bar.update()
        if step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if cfg.eval_every and step < cfg.steps and step % cfg.eval_every == 0:
            model.eval()
            curve.append([step, estimate()["mean"]])  # type: ignore[misc]
            model.train()
            bar.write(f"sft: step {step}, train reward {curve[-1][1]:.3f}")
        if cfg.gate_reward and step >= cfg.steps and (step - cfg.steps) % cfg.gate_every == 0:
            model.eval()
            reward = estimate()  # type: ignore[misc]
            model.train()
            checks.append([step, reward["mean"]])
            bar.write(f"sft gate: step {step}, train reward {reward['mean']:.3f} "
                      f"(gate {cfg.gate_reward})")
    bar.close()
    seconds = time.perf_counter() - start
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    every = max(1, len(losses) // _CURVE_POINTS)
    return {
        "loss": {"first": losses[0], "final": sum(tail) / len(tail), "min": min(losses),
                 "curve": [[s, losses[s]] for s in range(0, len(losses), every)]},
        "steps_run": step, "gate_checks": checks, "gated_reward": reward, "reward_curve": curve,
        "tokens": tokens, "target_tokens": target_tokens, "tokens_per_s": tokens / seconds,
        "train_time_s": seconds,
    }


def run_sft(cfg: SFTConfig, out_dir: str | Path) -> dict[str, Any]:
    """Train, estimate the train reward, save model + tokenizer + metrics; returns the metrics.

    `out_dir` becomes a model folder (`repro.models.load(out_dir)`) holding `sft_metrics.json`,
    written in one atomic rename; an existing non-SFT, non-empty folder is refused up front.
    """
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / METRICS_FILE).exists():
        raise FileExistsError(f"{out} is a non-empty folder that is not an SFT output; refusing "
                              "to replace it")
    start = time.perf_counter()
    tiny = isinstance(cfg.model, TinyModelConfig)
    model, tok = build_tiny(cfg.model) if tiny else load(cfg.model)
    if tok.chat_template is None or tok.pad_token_id is None:
        _fail("model", "must have a tokenizer with a chat template and a pad token", cfg.model)
    demos, seen = [], {}
    for task, n in allocate(cfg.tasks, cfg.n_demos).items():
        task_demos = synthetic_demonstrations(task, "train", n, cfg.seed)
        id_field = next(h for h, t in get_benchmark(task).fields.items() if t == "problem_id")
        seen[task] = {str(d[id_field]) for d in task_demos}
        demos += task_demos
    encoded = [encode_demo(tok, d["messages"], cfg.max_len) for d in demos]
    kept = [(d, e) for d, e in zip(demos, encoded, strict=True) if e is not None]
    if not kept:
        _fail("max_len", "drops every demonstration; raise it", cfg.max_len)
    graders = {task: _make_grader(task) for task in cfg.tasks} if cfg.eval_n else {}
    try:  # graders first: a missing sandbox fails before the training time is spent
        metrics: dict[str, Any] = {
            "config": dataclasses.asdict(cfg),
            "n_params": sum(p.numel() for p in model.parameters()),
            "n_demos": len(kept), "n_dropped_too_long": len(demos) - len(kept),
            "demo_forms": dict(Counter(d["form"] for d, _ in kept)),
            **_train(model, tok.pad_token_id, [e for _, e in kept], cfg,
                     lambda: estimate_reward(model, tok, cfg, graders, seen)),
        }
        eval_start = time.perf_counter()  # under a gate, its last estimate is the final one
        metrics["train_reward"] = metrics.pop("gated_reward") or (
            estimate_reward(model, tok, cfg, graders, seen) if cfg.eval_n else None)
        metrics["eval_time_s"] = time.perf_counter() - eval_start
    finally:
        for grader in graders.values():
            if hasattr(grader, "close"):
                grader.close()
    metrics["wall_time_s"] = time.perf_counter() - start
    metrics["torch_threads"] = torch.get_num_threads()

    def save(d: Path) -> None:
        model.save_pretrained(d)
        tok.save_pretrained(d)
        (d / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")

    atomic_dir(out, save)
    return metrics
