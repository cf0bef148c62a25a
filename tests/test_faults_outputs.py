"""Faults in job outputs: damaged files are detected against the manifest their job wrote and
moved aside (one line) so Snakemake reruns their job; readers check inputs before writing
anything; a failing aggregate keeps the previous one; a full disk keeps the previous file and
names the path."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from committed import copy_committed
from test_reporting import write_eval, write_train
from typer.testing import CliRunner

from repro.atomic import WriteFailed
from repro.cli import app
from repro.results import TRAIN_LOG, read_table, write_table
from repro.results import manifest as mf
from repro.training.checkpoint import STATE_FILE, write_checksums
from repro.training.export import export_run

ROOT = Path(__file__).resolve().parents[1]
AGG_NAMES = ("train_curves.parquet", "runs.parquet", "eval_problems.parquet",
             "eval_samples.parquet")


def recorded_run(root: Path) -> Path:
    """One finished run's train log with the manifest its job writes."""
    log = write_train(root, "gspo", 0, [0.1, 0.2, 0.3])
    mf.write_manifest(log.parent, [log.name])
    return log


def recorded_eval(root: Path) -> Path:
    problems = write_eval(root, "gspo", 0, "synth-aime", np.eye(3, 4, dtype=bool))
    mf.write_manifest(problems.parent, ["samples.parquet", "problems.parquet"])
    return problems


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_manifest_catches_truncation_garbage_and_unlisted_damage(tmp_path):
    log = recorded_run(tmp_path)
    good = log.read_bytes()
    entry = json.loads((log.parent / mf.MANIFEST).read_text())["files"][log.name]
    assert entry["rows"] == 3 and entry["schema"] == "train_log" and mf.verify_file(log) is None
    log.write_bytes(good[: len(good) // 2])
    assert "bytes" in mf.verify_file(log)
    log.write_bytes(bytes(len(good)))  # same size, garbage
    assert "sha256" in mf.verify_file(log)
    stray = tmp_path / "stray.parquet"  # no manifest lists it: the footer is still read
    stray.write_bytes(good[:-100])
    assert "unreadable Parquet" in mf.verify_file(stray)


def test_quarantine_moves_bad_outputs_aside_in_one_line(tmp_path, monkeypatch):
    bad, good = recorded_run(tmp_path / "a"), recorded_eval(tmp_path / "b")
    bad.write_bytes(bad.read_bytes()[:-10])
    cache = tmp_path / "verified.json"
    said = mf.quarantine([bad, good, tmp_path / "not-there.parquet"], cache)
    assert len(said) == 1 and str(bad) in said[0] and "\n" not in said[0], said
    assert not bad.exists() and bad.with_name(bad.name + ".corrupt").exists()
    assert good.exists() and str(good) in json.loads(cache.read_text())

    def no_hashing(path):
        raise AssertionError(f"{path} was hashed again although unchanged")

    monkeypatch.setattr(mf, "sha256_of", no_hashing)
    assert mf.quarantine([good], cache) == []


def test_aggregate_checks_every_input_first_and_keeps_the_previous_one(tmp_path):
    files = [recorded_run(tmp_path), recorded_eval(tmp_path)]
    out = tmp_path / "aggregate"
    runner = CliRunner()
    args = ["aggregate", "--out", str(out), *map(str, files)]
    assert runner.invoke(app, args).exit_code == 0
    assert all(mf.verify_file(out / name) is None for name in AGG_NAMES)
    before = snapshot(out)
    samples = files[1].with_name("samples.parquet")
    samples.write_bytes(samples.read_bytes()[:-1] + b"\0")  # one byte of rot
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and str(samples) in result.output, result.output
    assert "fails verification" in result.output
    assert snapshot(out) == before and not list(out.glob(".staging-*"))


def test_tables_refuse_a_damaged_aggregate(tmp_path):
    files = [recorded_run(tmp_path), recorded_eval(tmp_path)]
    out = tmp_path / "aggregate"
    args = ["aggregate", "--out", str(out), *map(str, files)]
    assert CliRunner().invoke(app, args).exit_code == 0
    runs = out / "runs.parquet"
    runs.write_bytes(runs.read_bytes()[:-8])
    result = CliRunner().invoke(app, ["tables", "--aggregate", str(out),
                                      "--out", str(tmp_path / "tables")])
    assert result.exit_code != 0 and str(runs) in result.output, result.output
    assert not (tmp_path / "tables").exists()


def full_disk_after(n_bytes: int):
    """A pyarrow-free stand-in for a file system that fills after `n_bytes`."""
    real_write = pq.ParquetWriter.write_table
    written = {"n": 0}

    def write_table(self, table, *a, **kw):
        written["n"] += table.nbytes
        if written["n"] > n_bytes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, table, *a, **kw)

    return write_table


def test_disk_full_while_writing_parquet_keeps_the_previous_file(tmp_path, monkeypatch):
    log = recorded_run(tmp_path)
    before = log.read_bytes()
    rows = read_table(log, TRAIN_LOG).to_pylist()
    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_disk_after(0))
    with pytest.raises(WriteFailed) as err:
        write_table(rows, TRAIN_LOG, log)
    assert str(log) in str(err.value) and "disk full" in str(err.value)
    assert log.read_bytes() == before and mf.verify_file(log) is None
    assert sorted(p.name for p in log.parent.iterdir()) == [mf.MANIFEST, log.name]


def test_disk_full_while_aggregating_keeps_the_previous_aggregate(tmp_path, monkeypatch):
    files = [recorded_run(tmp_path), recorded_eval(tmp_path)]
    out = tmp_path / "aggregate"
    args = ["aggregate", "--out", str(out), *map(str, files)]
    assert CliRunner().invoke(app, args).exit_code == 0
    before = snapshot(out)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_disk_after(2000))
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and isinstance(result.exception, WriteFailed)
    assert str(out) in str(result.exception) and "disk full" in str(result.exception)
    assert snapshot(out) == before and not list(out.glob(".staging-*"))


def test_disk_full_on_a_real_small_file_system(tmp_path):
    """A 1 MiB tmpfs where mounting is allowed (root); elsewhere the injected tests stand."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        target = mount / "log.parquet"
        rows = [{"x": 1.0}]
        import pyarrow as pa

        schema = pa.schema([("x", pa.float64())], metadata={b"schema_name": b"t"})
        write_table(rows, schema, target)
        before = target.read_bytes()
        noise = np.random.default_rng(0).random(400_000).tolist()  # ~3 MiB: does not fit
        with pytest.raises(WriteFailed) as err:
            write_table([{"x": v} for v in noise], schema, target)
        assert str(target) in str(err.value) and "disk full" in str(err.value)
        assert target.read_bytes() == before
        assert [p.name for p in mount.iterdir()] == ["log.parquet"]  # temp file removed
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def fake_scratch(root: Path) -> Path:
    """A finished scratch run: log, one checkpoint (with checksums) and its manifest."""
    scratch = root / "scratch"
    ckpt = scratch / "checkpoints" / "step_000001"
    (ckpt / "policy").mkdir(parents=True)
    (ckpt / "policy" / "model.safetensors").write_bytes(os.urandom(4096))
    (ckpt / STATE_FILE).write_bytes(b"state")
    write_checksums(ckpt)
    shutil.copy(write_train(root, "gspo", 0, [0.5]), scratch / "train_log.parquet")
    (scratch / "manifest.json").write_text(json.dumps({"fraction_steps": {"1.0": 1}}))
    return scratch


def test_export_checks_checkpoints_and_survives_a_full_disk(tmp_path, monkeypatch):
    scratch, dest = fake_scratch(tmp_path), tmp_path / "run"
    export_run(scratch, dest)
    listed = json.loads((dest / mf.MANIFEST).read_text())["files"]
    assert sorted(listed) == ["policy/frac=1.0/model.safetensors", "train_log.parquet"]
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copytree", full)
    with pytest.raises(WriteFailed, match=r"policy/frac=1\.0: disk full"):
        export_run(scratch, dest)
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    weights = scratch / "checkpoints" / "step_000001" / "policy" / "model.safetensors"
    weights.write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"step_000001: checkpoint of budget fraction 1\.0 fails"):
        export_run(scratch, dest)
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before


SNAKEFILE = """
from types import SimpleNamespace

from repro.pipeline.layout import Layout

CODE = {{"aggregate": "test"}}
layout = Layout("results")
jobs = SimpleNamespace(train_logs=lambda: ["{log}"], eval_problems=lambda: ["{problems}"],
                       study_options=lambda: "--experiment test")


include: "{rules}/aggregate.smk"
"""


def test_a_failing_aggregate_job_leaves_the_committed_aggregate(tmp_path):
    """The real rule (rules/aggregate.smk) under Snakemake: its update() outputs are neither
    deleted before the job nor after its failure."""
    files = [recorded_run(tmp_path / "in"), recorded_eval(tmp_path / "in")]
    copy_committed(tmp_path, "results/aggregate")
    before = snapshot(tmp_path / "results" / "aggregate")
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(
        log=files[0].relative_to(tmp_path), problems=files[1].relative_to(tmp_path),
        rules=ROOT / "rules"))
    files[0].write_bytes(files[0].read_bytes()[:-5])  # damaged after its job wrote it
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "aggregate"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stderr[-3000:]
    log = (tmp_path / "logs" / "aggregate" / "aggregate.log").read_text()
    assert "fails verification" in log and str(files[0].relative_to(tmp_path)) in log, log
    assert snapshot(tmp_path / "results" / "aggregate") == before
    files[0].unlink()
    recorded_run(tmp_path / "in")  # the rerun job's output: now the aggregate succeeds
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "aggregate"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = snapshot(tmp_path / "results" / "aggregate")
    assert after != before and all(mf.verify_file(tmp_path / "results" / "aggregate" / n) is None
                                   for n in AGG_NAMES)


def test_snakemake_moves_a_damaged_output_aside_and_says_why(tmp_path):
    """Parse time: the damaged train log of a run of the default config is moved aside in one
    line, so the plan rebuilds it. The copy holds what a fresh clone holds (the committed
    results only), whatever the pipeline already left in this checkout (issue 22)."""
    for name in ("Snakefile", "rules", "config", "profiles", "envs", "repro"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    copy_committed(tmp_path, "results/aggregate", "results/paper")
    log = recorded_run(tmp_path / "results" / "stage")
    run = tmp_path / "results" / "runs" / "algo=gspo" / "model=tiny" / "group_size=8" / "seed=0"
    run.mkdir(parents=True)
    for path in log.parent.iterdir():
        shutil.copy(path, run / path.name)
    damaged = run / "train_log.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-5])
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "fails verification" in line]
    assert len(said) == 1 and "train_log.parquet" in said[0] and "bytes" in said[0], said
    assert not damaged.exists() and damaged.with_name("train_log.parquet.corrupt").exists()
