"""`SFTConfig`, the options of one SFT warm start (`repro sft`), apart from the training code.

The workflow checks every `models.*.sft` block against it at parse time; importing
`repro.training.sft` for that would load torch and transformers on every Snakemake parse (and
every job's re-parse). `repro.training.sft` re-exports `SFTConfig` and `allocate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from repro.models.tiny_config import TinyModelConfig
from repro.tasks import SYNTHETIC, synthetic_size

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
