"""The options of `repro theory` (its CLI is generated from them).

A module of its own so that `repro` builds its options without importing torch (the experiment
and its tabular policy need it; `repro.bench.options` says why that matters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from repro.objectives.base import require

VOCAB = 8  # tokens of the tabular task (repro.theory.policy); bounds template_prob below


@dataclass
class TheoryConfig:
    """Budget and task knobs of the tabular experiment (identical for every algorithm)."""

    steps: int = field(default=60, metadata={"help": "Rollout batches per algorithm and seed."})
    seed: int = field(default=0, metadata={"help": "First seed; seeds are seed..seed+n_seeds-1."})
    n_seeds: int = field(default=3, metadata={"help": "Independent runs per algorithm."})
    groups: int = field(default=4, metadata={"help": "Groups per rollout batch (one prompt)."})
    group_size: int = field(default=8, metadata={"help": "Responses per group (G)."})
    updates: int = field(
        default=4, metadata={"help": "SGD updates per rollout batch (K); s != 1 from the 2nd."}
    )
    lr: float = field(default=1.0, metadata={"help": "SGD learning rate on the logit table."})
    template_prob: float = field(
        default=0.97,
        metadata={"help": "Initial probability of each template token at its context."},
    )

    def __post_init__(self) -> None:
        for name in ("steps", "n_seeds", "groups", "updates"):
            require(getattr(self, name) >= 1, self, name, "must be >= 1")
        require(self.seed >= 0, self, "seed", "must be >= 0")
        require(self.group_size >= 2, self, "group_size", "must be >= 2 (a group needs a baseline)")
        require(math.isfinite(self.lr) and self.lr > 0, self, "lr", "must be finite and > 0")
        require(
            1 / VOCAB < self.template_prob < 1, self, "template_prob", f"must be in (1/{VOCAB}, 1)"
        )
