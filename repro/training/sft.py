"""SFT warm start (`repro sft`): teacher-forced training on synthetic demonstrations.

RL from a random policy gets no reward and hence no signal, so every RL run starts from this
checkpoint: a model that solves a fair share, but not all, of its training problems (groups with
mixed rewards are the ones that carry gradient). The demonstrations use the two equally correct
surface forms half-and-half, so P(A) ~ P(B) before RL, which the drift metrics need.

The dataclass defaults are a plain 7,000-step recipe of batches of 8; the tiny default's stage
1 (`models.tiny-base` in config/config.yaml) overrides them, for a reason measured in
docs/sft-robustness.md: the arithmetic arrives in a sudden transition whose step moves with the
seed and with the CPU's float kernels (runs are not bitwise equal across machines). Under the
old recipe (7,000 x 8 with synth-lcb's long demos) it landed in the cosine's tail, so seeds and
kernel sets decided whether it happened at all (3 of 8 runs missed it). The default now trains
batches of 32 on synth-aime and synth-hmmt only (no padding to synth-lcb's ~730 tokens), where it
arrives by about two thirds of the schedule; the gate (`gate_reward`, `max_steps`) still stops
the workflow with the measured reward if a run misses it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from repro.benchmarks import build_messages, get_benchmark, row_to_problem
from repro.generation.base import SamplingConfig
from repro.generation.hf import HFEngine
from repro.atomic import atomic_dir
from repro.models import TinyModelConfig, build_tiny, load
from repro.tasks import (
    SYNTHETIC,
    synthetic_demonstrations,
    synthetic_probes,
    synthetic_rows,
    synthetic_size,
)
from repro.tasks.base import Probe
from repro.training.sft_schedule import floor_factor, grouped_batches, plain_batches

IGNORE = -100  # label of tokens that carry no loss (prompt, padding)
METRICS_FILE = "sft_metrics.json"
_EVAL_BATCH = 64  # prompts per generate call of the train-reward estimate
_CURVE_POINTS = 25  # loss-curve points kept in the metrics
_INT_FLOORS = {"n_demos": 1, "steps": 1, "batch_size": 1, "warmup": 0, "max_len": 2, "seed": 0,
               "eval_n": 0, "eval_max_new_tokens": 1, "gate_every": 1, "max_steps": 0,
               "eval_every": 0}


@dataclass
class SFTConfig:
    """One SFT warm-start run (the options of `repro sft`)."""

    tasks: dict[str, float] = field(
        default_factory=lambda: {"synth-aime": 1.0},
        metadata={"help": "Synthetic task -> weight; demos and reward problems split by weight."},
    )
    model: TinyModelConfig | str = field(
        default_factory=TinyModelConfig,
        metadata={"help": "A TinyModelConfig (built fresh; the default ~81k-parameter one is the "
                          "tuned size) or the path / hub id of a model to fine-tune."},
    )
    n_demos: int = field(default=8000, metadata={"help": "Demonstrations (train problems)."})
    steps: int = field(default=7000, metadata={"help": "Optimizer steps."})
    batch_size: int = field(default=8, metadata={"help": "Demonstrations per step."})
    lr: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate."})
    warmup: int = field(default=60, metadata={"help": "Linear warm-up steps, then cosine."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    grad_clip: float = field(default=1.0, metadata={"help": "Max global gradient norm."})
    max_len: int = field(default=1024, metadata={"help": "Longer demonstrations are dropped."})
    seed: int = field(default=0, metadata={"help": "Seeds demo choice, data order, sampling."})
    eval_n: int = field(
        default=128, metadata={"help": "Train problems for the train-reward estimate; 0 = skip."}
    )
    eval_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the estimate (RL's rollouts)."}
    )
    eval_max_new_tokens: int = field(
        default=256, metadata={"help": "Generation budget per sample of the estimate."}
    )
    group_by_length: bool = field(
        default=False, metadata={"help": "Batches of similar lengths (transformers' "
                                         "group_by_length): ~2x cheaper on stage 1's mix, but it "
                                         "learned slower there (docs/sft-robustness.md)."})
    gate_reward: float = field(
        default=0.0, metadata={"help": "0 = stop after `steps`. > 0: if the train-reward "
                                       "estimate at `steps` is below this, go on at the "
                                       "cosine's floor lr, estimating every `gate_every` steps, "
                                       "until it passes; a miss at `max_steps` is an error and "
                                       "no model is written."})
    gate_every: int = field(default=500, metadata={"help": "Steps between gate estimates."})
    max_steps: int = field(
        default=0, metadata={"help": "Cap on steps under a gate (0 = 2 x steps)."})
    eval_every: int = field(
        default=0, metadata={"help": "Also estimate the train reward every this many steps "
                                     "of the schedule, kept as `reward_curve` in the metrics "
                                     "(0 = never): when did the transition arrive?"})

    def __post_init__(self) -> None:
        if isinstance(self.model, Mapping):
            self.model = TinyModelConfig(**self.model)
        elif isinstance(self.model, Path):
            self.model = str(self.model)
        if not isinstance(self.model, (TinyModelConfig, str)) or self.model == "":
            _fail("model", "must be a TinyModelConfig or a model path / hub id", self.model)
        if not isinstance(self.tasks, Mapping) or not self.tasks:
            _fail("tasks", "must be a non-empty mapping of task name -> weight", self.tasks)
        self.tasks = dict(self.tasks)
        for name, weight in self.tasks.items():
            if name not in SYNTHETIC:
                _fail("tasks", f"names unknown task {name!r} (known: {sorted(SYNTHETIC)})",
                      self.tasks)
            if not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
                _fail("tasks", f"weight of {name!r} must be a finite number > 0", self.tasks)
        for name, low in _INT_FLOORS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                _fail(name, f"must be an int >= {low}", value)
        if not isinstance(self.group_by_length, bool):
            _fail("group_by_length", "must be true or false", self.group_by_length)
        if not isinstance(self.gate_reward, (int, float)) or not 0 <= self.gate_reward <= 1:
            _fail("gate_reward", "must be a number in [0, 1] (0 = no gate)", self.gate_reward)
        if (self.gate_reward or self.eval_every) and self.eval_n == 0:
            _fail("eval_n", "must be > 0 when gate_reward or eval_every is set (both read an "
                  "estimate)", self.eval_n)
        if self.max_steps and self.max_steps < self.steps:
            _fail("max_steps", f"must be 0 or >= steps ({self.steps})", self.max_steps)
        for name in ("lr", "grad_clip", "weight_decay", "eval_temperature"):
            value, strict = getattr(self, name), name in ("lr", "grad_clip")
            if not isinstance(value, (int, float)) or not 0 <= value < math.inf or \
                    (strict and value == 0):
                _fail(name, f"must be a finite number {'>' if strict else '>='} 0", value)
        if self.warmup > self.steps:
            _fail("warmup", f"must be <= steps ({self.steps})", self.warmup)
        if isinstance(self.model, TinyModelConfig) and self.max_len > \
                self.model.max_position_embeddings:
            _fail("max_len", f"must be <= model.max_position_embeddings "
                  f"({self.model.max_position_embeddings})", self.max_len)
        for name, count in allocate(self.tasks, self.n_demos).items():
            if not 1 <= count <= synthetic_size(name, "train"):
                _fail("n_demos", f"gives {count} demos of {name!r}, which has "
                      f"{synthetic_size(name, 'train')} train problems (need >= 1)", self.n_demos)


def _fail(name: str, rule: str, value: object) -> NoReturn:
    raise ValueError(f"SFTConfig.{name} {rule}, got {value!r}")


def allocate(weights: Mapping[str, float], n: int) -> dict[str, int]:
    """Split `n` over the tasks by weight (largest remainder), so the counts sum to `n`."""
    total = sum(weights.values())
    exact = {name: n * w / total for name, w in weights.items()}
    counts = {name: math.floor(x) for name, x in exact.items()}
    by_remainder = sorted(exact, key=lambda name: counts[name] - exact[name])
    for name in by_remainder[: n - sum(counts.values())]:
        counts[name] += 1
    return counts


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
    """One teacher-forced step; the loss is the mean over the batch's assistant tokens."""
    loss = model(**batch).loss
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
