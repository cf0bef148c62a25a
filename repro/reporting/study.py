"""Study settings: which runs a report compares and how. Set once by `repro aggregate` and
stored in every aggregate file's `config` metadata, so tables and figures need no other input.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from repro.config_bounds import check_bounds

# The SFT starting point is evaluated once per model as algo=init/model=M/seed=S/frac=0.0/...
# (no group_size): a pipeline convention.
INIT_ALGO = "init"
INIT_FRAC = 0.0


def _setting(default: Any, help_text: str, **bounds: Any) -> Any:
    return field(default=default, metadata={"help": help_text, **bounds})


@dataclass(frozen=True)
class Study:
    experiment: str = _setting("tiny", "Free label of the experiment: tiny, paper-qwen3-32b, ...")
    baseline: str = _setting("gspo", "Run label every comparison is against (Δ, compute ratio).")
    proposed: str = _setting("dfpo_min", "The proposed method: the reference row of the ablations.")
    main_algos: tuple[str, ...] = _setting(
        ("grpo", "grpo_fix", "gspo", "dfpo_min", "dfpo_orth"),
        "Run labels of the main comparison (comma-separated on the CLI).",
    )
    main_group_size: int = _setting(8, "Group size G of the main comparison and variant ablations.")
    ablation_algos: tuple[str, ...] = _setting(
        ("dfpo_min_nosg", "dfpo_global", "dfpo_orth_plain"),
        "Run labels of the variant ablations, run at the main group size.",
    )
    group_algos: tuple[str, ...] = _setting(
        ("gspo", "dfpo_min"), "Run labels of the group-size ablation (must include the baseline)."
    )
    threshold: float = _setting(0.35, "κ: smoothed train reward counted as reached (compute); "
                                "0.35 on the tiny scale, the paper's 0.70 is for Qwen3-32B.")
    smooth_window: int = _setting(5, "Trailing window (steps) of train curves and final reward.",
                                  min=1)
    final_frac: float = _setting(1.0, "Share of the training budget of the checkpoint compared.")

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"study setting {name} {rule}, got {getattr(self, name)!r}")

        need(self.baseline in self.main_algos, "baseline",
             f"must be one of main_algos {self.main_algos}")
        need(not self.group_algos or self.baseline in self.group_algos, "group_algos",
             f"must include the baseline {self.baseline!r} (Δ is against it)")
        need(self.main_group_size >= 2, "main_group_size", "must be >= 2")
        check_bounds(self, spell=lambda name: f"study setting {name}")
        need(0 < self.final_frac <= 1, "final_frac", "must lie in (0, 1]")

    def to_config(self) -> dict[str, Any]:
        return {"study": dataclasses.asdict(self)}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Study:
        data = dict(config["study"])
        for f in dataclasses.fields(cls):
            if f.name in data and isinstance(data[f.name], list):
                data[f.name] = tuple(data[f.name])
        return cls(**data)

    @classmethod
    def from_parquet(cls, path: Path) -> Study:
        """The settings a `repro aggregate` file was written with."""
        meta = pq.read_schema(path).metadata or {}
        try:
            return cls.from_config(json.loads(meta[b"config"]))
        except (KeyError, TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: no study settings in its metadata ({err!r}); "
                             "was it written by repro aggregate?") from None

