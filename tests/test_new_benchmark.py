"""Adding a benchmark is adding its spec YAML (issue 39): in a copy of the package and its tests,
a throwaway spec (synth-aime's generator under another name and seed: an existing loader) is
listed by the registry, evaluated by `repro eval`, trained on by `repro train` and tested by the
tests that iterate the registry, with no other file touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repro.models import TinyModelConfig, build_tiny
from repro.results import EVAL_PROBLEMS, TRAIN_LOG, read_table

ROOT = Path(__file__).resolve().parents[1]
NAME = "synth-throwaway"


@pytest.mark.slow  # 4 interpreters and 3 test files in the copy: ~2 minutes on 2 cores
def test_a_spec_yaml_is_all_a_new_benchmark_needs(tmp_path):
    copy = tmp_path / "copy"
    for name in ("repro", "tests", "config"):  # config: repro.bench.options reads a preset
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    specs = copy / "repro" / "benchmarks" / "specs"
    spec = yaml.safe_load((specs / "synth-aime.yaml").read_text())
    spec |= {"name": NAME, "seed": 7, "description": "A throwaway benchmark."}
    (specs / f"{NAME}.yaml").write_text(yaml.safe_dump(spec))
    env = os.environ | {"PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    listed = run("-c", "import repro, repro.benchmarks as b; print(repro.__file__, "
                       "b.benchmark_names())")
    assert listed.stdout.startswith(str(copy)) and f"'{NAME}'" in listed.stdout

    model, out = tmp_path / "model", tmp_path / "eval"
    build_tiny(TinyModelConfig(), model)
    run("-m", "repro", "eval", "--model", str(model), "--benchmark", NAME, "--out", str(out),
        "--k", "1", "--limit", "2", "--max-new-tokens", "8", "--engine", "hf", "--workers", "1")
    rows = read_table(out / "problems.parquet", EVAL_PROBLEMS).to_pylist()
    assert [r["benchmark"] for r in rows] == [NAME, NAME]

    run("-m", "repro", "train", "--out", str(tmp_path / "run"), f"model={model}",
        f"tasks={{{NAME}: 1.0}}", "steps=1", "prompts_per_step=2", "group_size=2",
        "minibatches=1", "max_new_tokens=8", "probe_n=2", "checkpoint_every=0")
    log = read_table(tmp_path / "run" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert len(log) == 1 and log[0]["step"] == 1  # an RL prompt set too: synth-aime's train split

    # the registry's own tests, whole (a hard-coded list of names would fail here), and the
    # evaluation tests that iterate the registry
    tested = run("-m", "pytest", "-n", "0", "-v", "-p", "no:cacheprovider",
                 "tests/test_benchmarks.py", "tests/test_tasks.py", "tests/test_eval_checks.py")
    ours = [line for line in tested.stdout.splitlines()
            if line.startswith("tests/") and f"[{NAME}]" in line]  # -v's result lines
    assert len(ours) >= 3 and all("PASSED" in line for line in ours), tested.stdout[-3000:]
