"""Checkpoints: policy (save_pretrained), optimizer, RNG states, step, counters, log rows.

Written into a temp folder and renamed into place, so a folder named step_NNNNNN is complete;
a run killed at any point resumes from the newest one. Resumable state lives under the run's
`checkpoints/`, apart from the declared outputs (Snakemake deletes a failed job's outputs).

The last file written is `checksums.json` (sha256 and size of every other file): a checkpoint
whose files were later damaged (a bad disk block, a truncated copy, garbage from a crashed node)
fails `verify_checkpoint`, and `latest_checkpoint` skips it with a one-line message and
falls back to the newest one that verifies. Any engine that writes this layout through
`save_checkpoint` gets the same protection.

Retention (`keep`): a paper-scale checkpoint is ~400 GB (float32 masters of a 32B model plus
AdamW state), so a run checkpointing every 10 of 200 steps would need ~8 TB of scratch. With
keep = N > 0 only the N newest checkpoints survive a new one, besides the budget-fraction
checkpoints (`state.fraction_steps`), which the export copies; keep = 0 keeps all.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repro.atomic import atomic_dir
from repro.results.manifest import sha256_of

STATE_FILE = "trainer_state.pt"
IDENTITY_FILE = "run.json"  # what produced the checkpoint: resolved config + caller's fingerprint
CHECKSUMS_FILE = "checksums.json"  # written last: {relative path: {"sha256", "bytes"}}
OPTIMIZER_DIR = "optimizer"  # a sharded optimizer's state (torch.distributed.checkpoint files)


@dataclass
class RunState:
    """What a checkpoint carries besides weights and optimizer: counters, probe baselines, the
    log so far, which budget fractions were saved at which step, and the lagged policies a
    stale sampler draws from."""

    step: int = 0
    gen_cum: int = 0
    flops_cum: float = 0.0
    logodds0: float = math.nan
    prev_ctx: Any = None
    preamble0: Any = None  # the start's PreambleMeasure (tasks with preambles), else None
    log: list[dict[str, Any]] = field(default_factory=list)
    fraction_steps: dict[float, int] = field(default_factory=dict)  # fraction -> step saved
    # train.staleness = d: the policy's weights (CPU state dicts) at the start of the last d
    # rollout steps, oldest first; the oldest samples the next rollout. Empty when d = 0.
    lagged: list[dict[str, Any]] = field(default_factory=list)
    started: str | None = None  # UTC time of step 0 (ISO); a resumed run keeps its first start


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, optimizer, state: RunState,
    identity: dict[str, Any], *, policy_dir: Path | None = None,
    optimizer_dir: Path | None = None, keep: int = 0,
) -> Path:
    """A sharded model (FSDP2) passes `policy_dir`, the policy folder its processes wrote
    (`repro.engines.policy_files`), and `optimizer_dir`,
    where every process saved its optimizer shards (torch.distributed.checkpoint); one process
    then writes the checkpoint, moving those folders into it."""
    import torch

    final = run_dir / "checkpoints" / f"step_{step:06d}"

    def write(tmp: Path) -> None:
        (tmp / IDENTITY_FILE).write_text(json.dumps(identity, sort_keys=True, default=str))
        if policy_dir is not None:
            shutil.move(policy_dir, tmp / "policy")
        else:
            model.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
        if optimizer_dir is not None:
            shutil.move(optimizer_dir, tmp / OPTIMIZER_DIR)
        torch.save({
            "optimizer": optimizer.state_dict() if optimizer_dir is None else None,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "python": random.getstate()},
            "state": dataclasses.asdict(state),
        }, tmp / STATE_FILE)
        write_checksums(tmp)

    atomic_dir(final, write)
    if keep > 0:
        prune_checkpoints(run_dir, keep, set(state.fraction_steps.values()))
    return final


def prune_checkpoints(run_dir: Path, keep: int, protected: set[int]) -> list[Path]:
    """Delete all but the `keep` newest step_* checkpoints, never one of the `protected` steps;
    returns what was deleted. Older first, so a crash midway leaves the newest intact."""
    steps = sorted((int(p.name.removeprefix("step_")), p)
                   for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir())
    doomed = [p for step, p in steps[:-keep] if step not in protected]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def write_checksums(folder: Path) -> None:
    """Record sha256 and size of every file under `folder` (call it after the last write)."""
    sums = {str(p.relative_to(folder)): {"sha256": sha256_of(p), "bytes": p.stat().st_size}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != CHECKSUMS_FILE}
    (folder / CHECKSUMS_FILE).write_text(json.dumps(sums, indent=1, sort_keys=True))


def verify_checkpoint(ckpt: Path) -> str | None:
    """None when every recorded file is present with its size and sha256; else why not."""
    try:
        sums = json.loads((ckpt / CHECKSUMS_FILE).read_text())
    except FileNotFoundError:
        return f"no {CHECKSUMS_FILE} (incomplete, or written before checksums were recorded)"
    except ValueError as exc:
        return f"{CHECKSUMS_FILE} is unreadable ({exc})"
    if STATE_FILE not in sums:
        return f"{CHECKSUMS_FILE} does not list {STATE_FILE}"
    for name, want in sorted(sums.items()):
        path = ckpt / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, {want['bytes']} recorded"
        if sha256_of(path) != want["sha256"]:
            return f"{name} does not match its recorded sha256"
    return None


def latest_checkpoint(
    run_dir: Path, say: Callable[[str], object] = print
) -> Path | None:
    """The newest checkpoint that verifies; each newer one that does not is skipped, one line
    each through `say`, and left on disk for inspection."""
    root = run_dir / "checkpoints"
    found = sorted(root.glob("step_*"), reverse=True) if root.exists() else []
    for ckpt in found:
        problem = verify_checkpoint(ckpt)
        if problem is None:
            return ckpt
        say(f"repro train: skipping checkpoint {ckpt}: {problem}")
    return None


def same_run(ckpt: Path, identity: dict[str, Any]) -> bool:
    """Was `ckpt` written by this run (same resolved config and fingerprint)? A pipeline rerun
    after a config or code change must start over, not continue the old run's state."""
    path = ckpt / IDENTITY_FILE
    if not path.exists():
        return False
    stored = json.loads(path.read_text())
    return stored == json.loads(json.dumps(identity, sort_keys=True, default=str))


def load_trainer_state(path: Path, optimizer,
                       restore_optimizer: Callable[[Path], None] | None = None) -> RunState:
    """Restore optimizer and RNG states; return the run's RunState. A sharded optimizer is
    restored by `restore_optimizer(path / OPTIMIZER_DIR)` (each process reads its shards)."""
    import torch

    blob = torch.load(path / STATE_FILE, weights_only=False)
    if restore_optimizer is None:
        optimizer.load_state_dict(blob["optimizer"])
    else:
        restore_optimizer(path / OPTIMIZER_DIR)
    torch.set_rng_state(blob["rng"]["torch"])
    np.random.set_state(blob["rng"]["numpy"])
    random.setstate(blob["rng"]["python"])
    return RunState(**blob["state"])
