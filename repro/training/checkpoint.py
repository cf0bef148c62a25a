"""Checkpoints: policy (save_pretrained), optimizer, RNG states, step, counters, log rows.

Written into a temp folder and renamed into place, so a folder named step_NNNNNN is complete;
a run killed at any point resumes from the newest one. Resumable state lives under the run's
`checkpoints/`, apart from the declared outputs (Snakemake deletes a failed job's outputs).
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repro.atomic import atomic_dir

STATE_FILE = "trainer_state.pt"
IDENTITY_FILE = "run.json"  # what produced the checkpoint: resolved config + caller's fingerprint


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, optimizer, state: Any,
    identity: dict[str, Any],
) -> Path:
    final = run_dir / "checkpoints" / f"step_{step:06d}"

    def write(tmp: Path) -> None:
        (tmp / IDENTITY_FILE).write_text(json.dumps(identity, sort_keys=True, default=str))
        model.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
        torch.save({
            "optimizer": optimizer.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "python": random.getstate()},
            "state": dataclasses.asdict(state),
        }, tmp / STATE_FILE)

    atomic_dir(final, write)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = run_dir / "checkpoints"
    done = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists()) if root.exists() else []
    return done[-1] if done else None


def same_run(ckpt: Path, identity: dict[str, Any]) -> bool:
    """Was `ckpt` written by this run (same resolved config and fingerprint)? A pipeline rerun
    after a config or code change must start over, not continue the old run's state."""
    path = ckpt / IDENTITY_FILE
    if not path.exists():
        return False
    stored = json.loads(path.read_text())
    return stored == json.loads(json.dumps(identity, sort_keys=True, default=str))


def load_trainer_state(path: Path, optimizer) -> Any:
    """Restore optimizer and RNG states; return the loop's RunState."""
    from repro.training.loop import RunState

    blob = torch.load(path / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"]["torch"])
    np.random.set_state(blob["rng"]["numpy"])
    random.setstate(blob["rng"]["python"])
    return RunState(**blob["state"])
