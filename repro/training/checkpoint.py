"""Checkpoints: policy (save_pretrained), optimizer, RNG states, step, counters, log rows.

Written into a temp folder and renamed into place, so a folder named step_NNNNNN is complete;
a run killed at any point resumes from the newest one. Resumable state lives under the run's
`checkpoints/`, apart from the declared outputs (Snakemake deletes a failed job's outputs).
"""

from __future__ import annotations

import os
import random
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, optimizer, state: dict[str, Any]
) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-{uuid.uuid4().hex}"
    try:
        model.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
        torch.save({
            "optimizer": optimizer.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "python": random.getstate()},
            "state": state,
        }, tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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
