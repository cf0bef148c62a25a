"""The options of `repro theory` (its CLI is generated from them).

A module of its own so that `repro` builds its options without importing torch (the experiment
and its tabular policy need it; `repro.bench.options` says why that matters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from repro.config_bounds import check_bounds, setting
from repro.objectives.base import require

VOCAB = 8  # tokens of the tabular task (repro.theory.policy); bounds template_prob below


@dataclass
class TheoryConfig:
    """Budget and task knobs of the tabular experiment (identical for every algorithm)."""

    steps: int = setting(60, "Rollout batches per algorithm and seed.", min=1)
    seed: int = setting(0, "First seed; seeds are seed..seed+n_seeds-1.", min=0)
    n_seeds: int = setting(3, "Independent runs per algorithm.", min=1)
    groups: int = setting(4, "Groups per rollout batch (one prompt).", min=1)
    group_size: int = field(default=8, metadata={"help": "Responses per group (G)."})
    updates: int = setting(4, "SGD updates per rollout batch (K); s != 1 from the 2nd.", min=1)
    lr: float = field(default=1.0, metadata={"help": "SGD learning rate on the logit table."})
    template_prob: float = field(
        default=0.97,
        metadata={"help": "Initial probability of each template token at its context."},
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        require(self.group_size >= 2, self, "group_size", "must be >= 2 (a group needs a baseline)")
        require(math.isfinite(self.lr) and self.lr > 0, self, "lr", "must be finite and > 0")
        require(
            1 / VOCAB < self.template_prob < 1, self, "template_prob", f"must be in (1/{VOCAB}, 1)"
        )
