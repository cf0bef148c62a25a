"""Faults in training state: a damaged newest checkpoint is skipped (one line) and the run
resumes from the newest good one, ending identical to an uninterrupted run; a full disk while
writing a checkpoint leaves the previous one intact and names the path."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import torch
from train_helpers import comparable

from repro.atomic import WriteFailed
from repro.engines.registry import train
from repro.models import TinyModelConfig, build_tiny
from repro.results import TRAIN_LOG, read_table
from repro.training import checkpoint
from repro.training.checkpoint import latest_checkpoint, verify_checkpoint
from repro.training.config import TrainConfig


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "tiny"
    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


pytestmark = pytest.mark.usefixtures("hashed")  # every run here grades by hash


def config(model: Path, **kw) -> TrainConfig:
    base = {"model": str(model), "steps": 4, "prompts_per_step": 4, "group_size": 4,
            "minibatches": 2, "max_new_tokens": 8, "probe_n": 2, "checkpoint_every": 1,
            "checkpoint_fractions": [1.0], "lr": 1e-3}
    return TrainConfig(**(base | kw))


def log_rows(out: Path) -> list[dict]:
    return comparable(read_table(out / "train_log.parquet", TRAIN_LOG).to_pylist())


def killed_after(run: Path, step: int) -> None:
    """What a run killed after writing checkpoint `step` leaves: no later state, no final."""
    for ckpt in (run / "checkpoints").glob("step_*"):
        if int(ckpt.name.split("_")[1]) > step:
            shutil.rmtree(ckpt)
    shutil.rmtree(run / "final")
    (run / "manifest.json").unlink()


def test_resume_skips_damaged_checkpoints_and_ends_identical(tiny_model, tmp_path, capsys):
    cfg = config(tiny_model)
    run = tmp_path / "run"
    train(cfg, run)
    whole = log_rows(run)
    killed_after(run, 3)
    ckpts = run / "checkpoints"
    (ckpts / "step_000003" / "policy" / "model.safetensors").write_bytes(b"garbage" * 100)
    state = ckpts / "step_000002" / checkpoint.STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # truncated
    assert "model.safetensors" in verify_checkpoint(ckpts / "step_000003")
    assert "bytes" in verify_checkpoint(ckpts / "step_000002")
    assert verify_checkpoint(ckpts / "step_000001") is None
    capsys.readouterr()
    train(cfg, run, resume=True)
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if "skipping checkpoint" in line]
    assert len(skipped) == 2 and "step_000003" in skipped[0] and "step_000002" in skipped[1], out
    assert "resuming from" in out and "step_000001 (step 1)" in out, out
    assert log_rows(run) == whole  # bit for bit, floats included
    assert all(verify_checkpoint(c) is None for c in ckpts.glob("step_*"))  # rewritten good


def test_no_good_checkpoint_starts_over(tiny_model, tmp_path, capsys):
    cfg = config(tiny_model, steps=2)
    train(cfg, tmp_path / "whole")
    run = tmp_path / "run"
    train(cfg, run)
    for ckpt in (run / "checkpoints").glob("step_*"):
        (ckpt / checkpoint.CHECKSUMS_FILE).unlink()
    assert latest_checkpoint(run) is None
    train(cfg, run, resume=True)
    assert "resuming" not in capsys.readouterr().out
    assert log_rows(run) == log_rows(tmp_path / "whole")


def test_disk_full_while_checkpointing_keeps_the_previous_one(tiny_model, tmp_path, monkeypatch):
    cfg = config(tiny_model, steps=3)
    run = tmp_path / "run"
    train(cfg, run)
    killed_after(run, 2)
    previous = run / "checkpoints" / "step_000002"
    before = {p: p.read_bytes() for p in previous.rglob("*") if p.is_file()}
    real_save = torch.save

    def full_disk(obj, path, *a, **kw):
        real_save(obj, path, *a, **kw)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(WriteFailed) as err:
        train(cfg, run, resume=True)  # resumes at step 2; saving step 3 finds the disk full
    message = str(err.value)
    assert "disk full" in message and "step_000003" in message and "\n" not in message, message
    assert not (run / "checkpoints" / "step_000003").exists()
    assert not list((run / "checkpoints").glob(".*"))  # no temp folder left to fill the disk
    assert {p: p.read_bytes() for p in previous.rglob("*") if p.is_file()} == before
    assert verify_checkpoint(previous) is None
