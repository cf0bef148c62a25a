"""Test helpers for the trainer: a deterministic stand-in reward, and a subprocess entry point.

The tiny models here are untrained, so real graders would give reward 0 everywhere and every
advantage would vanish; a hash of the completion gives reproducible 0/1 rewards instead, which
exercises the whole loop (the graders themselves are tested in the evaluation tests).

Run as a script: `python train_helpers.py CONFIG_JSON OUT [--resume]`.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

TIMING = ("time_rollout", "time_update")


def hashed_rewards(self, items):
    return [float(hashlib.sha256(text.encode()).digest()[0] % 2) for _, text in items]


def small(model: str | Path, **kw) -> dict:
    """TrainConfig fields of a run that takes seconds on the tiny policy `model` (2 steps of 4
    groups of 4, K = 2, 12 tokens, no checkpoints), with `kw` over them."""
    return {"model": str(model), "steps": 2, "prompts_per_step": 4, "group_size": 4,
            "minibatches": 2, "max_new_tokens": 12, "probe_n": 2, "checkpoint_every": 0,
            "checkpoint_fractions": [1.0], "lr": 1e-3} | kw


def run(config: dict, out: Path, resume: bool = False) -> None:
    import torch

    from repro.engines.registry import train
    from repro.training import rollout
    from repro.training.config import TrainConfig

    torch.set_num_threads(1)
    rollout.Rewarder.__call__ = hashed_rewards
    train(TrainConfig(**config), out, resume=resume)


def kill_and_resume(config: dict, tmp_path: Path) -> tuple[list[dict], list[dict]]:
    """Run `config` uninterrupted, and again SIGKILLed somewhere after its step-2 checkpoint
    and resumed (`--resume`), each in a subprocess of this script; (uninterrupted log rows,
    resumed log rows)."""
    import os
    import signal
    import subprocess
    import time

    from repro.results import TRAIN_LOG, read_table

    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps(config))
    script = [sys.executable, __file__, str(cfg_file)]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    subprocess.run([*script, str(tmp_path / "whole")], check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen([*script, str(killed)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (killed / "checkpoints" / "step_000002").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its checkpoint"
        time.sleep(0.05)
    time.sleep(0.3)  # somewhere inside step 3 or 4: an arbitrary point
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "final").exists()
    subprocess.run([*script, str(killed), "--resume"], check=True, env=env, capture_output=True)
    return (read_table(tmp_path / "whole" / "train_log.parquet", TRAIN_LOG).to_pylist(),
            read_table(killed / "train_log.parquet", TRAIN_LOG).to_pylist())


def comparable(rows: list[dict]) -> list[dict]:
    """Rows without timing columns, NaN (a diagnostic without shared nodes) made comparable."""
    def norm(v):
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return [{k: norm(v) for k, v in r.items() if k not in TIMING} for r in rows]


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), "--resume" in sys.argv)


def sharpened_tiny_policy(path: Path) -> Path:
    """A random tiny policy with sharpened logits (final norm x10), saved at `path`: sampled at
    T = 1, the early tokens of a group coincide (shared nodes, as template tokens of a trained
    model would) while later ones diverge (distinct completions, so rewards differ)."""
    import torch

    from repro.models import TinyModelConfig, build_tiny

    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    with torch.no_grad():
        model.model.norm.weight.mul_(10.0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
