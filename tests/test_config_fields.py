"""Config keys and value types are checked against the dataclasses before any compute: in the
pipeline at Snakemake parse time, and in `repro train` / `repro sft` KEY=VALUE (one-line errors)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repro.cli import app
from repro.config_fields import check_fields

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class _Example:
    n: int = 1
    x: float = 0.5
    flag: bool = False
    name: str = "a"
    budget: int | None = None
    weights: dict[str, float] = field(default_factory=dict)
    pair: tuple[float, float] | None = None
    fracs: list[float] = field(default_factory=list)


@pytest.mark.parametrize("data", [
    {"n": 3}, {"x": 2}, {"x": 2.5}, {"flag": True}, {"budget": None}, {"budget": 7},
    {"weights": {"a": 1, "b": 0.5}}, {"pair": [0.1, 2]}, {"fracs": [0.5, 1]}, {},
])
def test_well_typed_values_pass(data):
    check_fields(_Example, data)


@pytest.mark.parametrize(("data", "message"), [
    ({"m": 3}, r"unknown _Example key\(s\) \['m'\]; valid keys: \['budget', 'flag'"),
    ({"n": 3.0}, r"_Example\.n must be int, got 3\.0"),
    ({"n": True}, r"_Example\.n must be int"),
    ({"n": "3"}, r"_Example\.n must be int, got '3'"),
    ({"x": "fast"}, r"_Example\.x must be float"),
    ({"flag": 1}, r"_Example\.flag must be bool"),
    ({"budget": 1.5}, r"_Example\.budget must be int \| null"),
    ({"weights": {"a": "heavy"}}, r"_Example\.weights must be dict\[str, float\]"),
    ({"weights": [1.0]}, r"_Example\.weights"),
    ({"pair": [1.0]}, r"_Example\.pair"),
    ({"fracs": 0.5}, r"_Example\.fracs must be list\[float\]"),
])
def test_bad_key_or_type_names_it(data, message):
    with pytest.raises(ValueError, match=message):
        check_fields(_Example, data)


@pytest.mark.parametrize(("args", "message"), [
    (["learning_rate=1e-4"], "unknown TrainConfig key(s) ['learning_rate']; valid keys"),
    (["steps=fast"], "TrainConfig.steps must be int, got 'fast'"),
    (["steps=4.5"], "TrainConfig.steps must be int, got 4.5"),
    (["kl_coef=[1]"], "TrainConfig.kl_coef must be float"),
    (["algorithm=dfpo", "objective.transfrom=min_replace"],
     "objective: unknown DFPOConfig key(s) ['transfrom']"),
    (["algorithm=dfpo", "objective.stop_gradient=maybe"], "DFPOConfig.stop_gradient must be bool"),
])
def test_repro_train_overrides_are_one_line_errors(tmp_path, args, message):
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path), "model=x", *args])
    assert result.exit_code == 2 and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # typer.Exit, not a traceback
    assert message in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize(("args", "message"), [
    (["stepz=3"], "unknown SFTConfig key(s) ['stepz']"),
    (["steps=3.5"], "SFTConfig.steps must be int, got 3.5"),
    (["tasks={synth-aime: x}"], "SFTConfig.tasks must be dict[str, float]"),
    (["model={hiden_size: 32}"], "SFTConfig.model: unknown TinyModelConfig key(s) ['hiden_size']"),
])
def test_repro_sft_overrides_are_one_line_errors(tmp_path, args, message):
    result = CliRunner().invoke(app, ["sft", "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert message in result.output, result.output


@pytest.mark.parametrize(("overlay", "named"), [
    ("train: {prompts_per_step: 8, group_size: 8, minibatches: 4, learning_rate: 1.0e-4}",
     "config train: unknown TrainConfig key(s) ['learning_rate']"),
    ("algorithms: {dfpo_min: {algorithm: dfpo, objective: {transfrom: min_replace}}}",
     "config algorithms.dfpo_min.objective: unknown DFPOConfig key(s) ['transfrom']"),
    ("models: {tiny: {source: sft, sft: {stepz: 3}}}",
     "config models.tiny.sft: unknown SFTConfig key(s) ['stepz']"),
    ("train: {prompts_per_step: 8, group_size: 8, minibatches: 4, steps: '40'}",
     "config train: TrainConfig.steps must be int, got '40'"),
])
def test_snakemake_dry_run_names_the_typo_at_parse_time(tmp_path, overlay, named):
    """The typo fails the dry run while Snakemake parses the config, before any DAG is built."""
    path = tmp_path / "typo.yaml"
    path.write_text(overlay + "\n")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-F", "--nolock", "--cores", "1",
         "--configfile", str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and named in out, out[-3000:]
    assert "Building DAG of jobs" not in out, out[-3000:]
    assert "Traceback" not in out and 'File "' not in out, out[-3000:]  # one line, no traceback
    assert "valid keys" in out or "must be" in out
