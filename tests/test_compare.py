"""`repro compare` (CI's cross-ISA check, issue 22): two aggregates agree within the tolerances,
and a difference beyond one, or a run only one of them holds, fails with its line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_reporting import write_eval, write_train
from typer.testing import CliRunner

from repro.cli import app
from repro.reporting.compare import TOLERANCE
from repro.results import manifest as mf


def aggregate(root: Path, rewards: list[float], seeds: tuple[int, ...] = (0,)) -> Path:
    files = []
    for seed in seeds:
        log = write_train(root, "gspo", seed, rewards)
        problems = write_eval(root, "gspo", seed, "synth-aime", np.eye(3, 4, dtype=bool))
        mf.write_manifest(log.parent, [log.name])
        mf.write_manifest(problems.parent, ["samples.parquet", "problems.parquet"])
        files += [log, problems]
    out = root / "aggregate"
    result = CliRunner().invoke(app, ["aggregate", "--out", str(out), *map(str, files)])
    assert result.exit_code == 0, result.output
    return out


def test_equal_aggregates_pass_and_say_their_kernels(tmp_path):
    a, b = aggregate(tmp_path / "a", [0.1, 0.2, 0.3]), aggregate(tmp_path / "b", [0.1, 0.2, 0.3])
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "reward_final: largest |diff| 0" in result.output and "CPU kernels" in result.output


def test_a_difference_beyond_the_tolerance_fails_naming_the_run(tmp_path):
    step = TOLERANCE["reward_final"] + 0.01  # reward_final: mean over the last steps
    a = aggregate(tmp_path / "a", [0.1, 0.2, 0.3])
    b = aggregate(tmp_path / "b", [0.1 + 3 * step, 0.2 + 3 * step, 0.3 + 3 * step])
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 1 and "reward_final ('tiny', 'gspo'" in result.output, result.output
    wide = CliRunner().invoke(app, ["compare", str(a), str(b), "--tol", "reward_final=1"])
    assert wide.exit_code == 0, wide.output
    bad = CliRunner().invoke(app, ["compare", str(a), str(b), "--tol", "reward=1"])
    assert bad.exit_code == 2 and "unknown metric" in bad.output


def test_a_run_only_one_aggregate_holds_fails(tmp_path):
    a = aggregate(tmp_path / "a", [0.1, 0.2], seeds=(0, 1))
    b = aggregate(tmp_path / "b", [0.1, 0.2])
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 1 and "in only one of the two aggregates" in result.output
