"""Checkpoints: policy (save_pretrained), optimizer, RNG states, step, counters, log rows.

Written into a temp folder and renamed into place, so a folder named step_NNNNNN is complete;
a run killed at any point resumes from the newest one. Resumable state lives under the run's
`checkpoints/`, apart from the declared outputs (Snakemake deletes a failed job's outputs).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repro.atomic import atomic_dir

STATE_FILE = "trainer_state.pt"


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, optimizer, state: dict[str, Any]
) -> Path:
    final = run_dir / "checkpoints" / f"step_{step:06d}"

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
        torch.save({
            "optimizer": optimizer.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "python": random.getstate()},
            "state": state,
        }, tmp / STATE_FILE)

    atomic_dir(final, write)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = run_dir / "checkpoints"
    done = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists()) if root.exists() else []
    return done[-1] if done else None


def load_trainer_state(path: Path, optimizer) -> dict[str, Any]:
    blob = torch.load(path / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"]["torch"])
    np.random.set_state(blob["rng"]["numpy"])
    random.setstate(blob["rng"]["python"])
    return blob["state"]
