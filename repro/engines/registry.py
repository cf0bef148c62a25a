"""`repro train`'s engines by name (TrainConfig.engine): `train` dispatches through
repro.training.trainers.TRAINERS (name -> import path), read from each engine module's own
`ENGINE` declaration.

Engines sit above repro.training (config, rollout, checkpoints, run bookkeeping), which never
imports them back. An engine is imported on use: accelerate and TRL load only for theirs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from repro.training.config import TrainConfig
from repro.training.trainers import TRAINERS

Trainer = Callable[..., Path]  # (cfg, out, *, label, resume, fingerprint) -> out/final


def trainer(engine: str) -> Trainer:
    """The trainer of `engine`, imported now (repro.training.trainers names it by path)."""
    module, _, name = TRAINERS[engine].partition(":")
    return getattr(importlib.import_module(module), name)


def train(
    cfg: TrainConfig, out: Path, *, label: str | None = None, resume: bool = False,
    fingerprint: str = "",
) -> Path:
    """Train with `cfg.engine` into `out`; returns the final policy folder `out/final`.

    `fingerprint` (e.g. the pipeline's source digest) is stored with every checkpoint next to the
    resolved config; `resume` continues only from a checkpoint with the same pair."""
    return trainer(cfg.engine)(cfg, out, label=label, resume=resume, fingerprint=fingerprint)


def train_and_export(
    cfg: TrainConfig, out: Path, *, export: Path | None = None, label: str | None = None,
    resume: bool = False, fingerprint: str = "",
) -> Path:
    """`train`, then (with `export`) copy the run's outputs there once, by the main process of a
    multi-process (accelerate) run: what `repro train --export` does, callable without the CLI
    (the FSDP2 twin's worker runs it in-process)."""
    final = train(cfg, out, label=label, resume=resume, fingerprint=fingerprint)
    if export is not None:
        from accelerate import PartialState

        from repro.training.export import export_run

        dist = PartialState()
        if dist.is_main_process:
            export_run(out, export)
        dist.wait_for_everyone()
    return final
