"""`repro compare` (CI's cross-ISA check, issue 22): two aggregates agree within the tolerances,
and a difference beyond one, or a run only one of them holds, fails with its line; `--exact`
(a rerun on the same kernels) holds every value but the wall-clock seconds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from test_reporting import write_eval, write_train
from typer.testing import CliRunner

from repro.cli import app
from repro.reporting.compare import TOLERANCE, cpu_note, folder_free
from repro.results import manifest as mf
from repro.results.environment import cpu_model


def aggregate(root: Path, rewards: list[float], seeds: tuple[int, ...] = (0,),
              edit: Callable[[Path], None] | None = None) -> Path:
    files = []
    for seed in seeds:
        log = write_train(root, "gspo", seed, rewards)
        if edit:
            edit(log)
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
    assert "reward_final: largest |diff| 0" in result.output, result.output
    assert f"{cpu_model()} (" in result.output and "same CPU model and kernels" in result.output


def test_the_cpu_note_tells_a_rerun_from_another_model_and_other_kernels():
    amd, intel = "AMD EPYC (AVX512)", "Intel(R) Xeon(R) Processor (AVX512)"
    assert cpu_note([amd], [amd]).startswith("same CPU model and kernels")
    assert cpu_note([amd], [intel]).startswith("other CPU models on the same ATen kernels")
    assert cpu_note([amd], ["AMD EPYC (AVX2)"]).startswith("other CPU kernels")


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


def set_column(column: str, value: float) -> Callable[[Path], None]:
    """An edit of a train log, before its manifest: `column` = `value` on every step."""
    def edit(log: Path) -> None:
        table = pq.read_table(log)
        i = table.schema.get_field_index(column)
        field = table.schema.field(i)
        pq.write_table(table.set_column(i, field, pa.array([value] * table.num_rows,
                                                           field.type)), log)
    return edit


def test_exact_holds_every_value_but_the_wall_clock_seconds(tmp_path):
    rewards = [0.1, 0.2, 0.3]
    a = aggregate(tmp_path / "a", rewards)
    slower = aggregate(tmp_path / "b", rewards, edit=set_column("time_update", 9.0))
    moved = aggregate(tmp_path / "c", rewards, edit=set_column("grad_norm", 0.25))
    rerun = CliRunner().invoke(app, ["compare", str(a), str(slower), "--exact"])
    assert rerun.exit_code == 0 and "exact: 0 column(s) differ" in rerun.output, rerun.output
    assert CliRunner().invoke(app, ["compare", str(a), str(moved)]).exit_code == 0  # no summary
    exact = CliRunner().invoke(app, ["compare", str(a), str(moved), "--exact"])
    assert exact.exit_code == 1, exact.output
    assert "train_curves.parquet: grad_norm differs in 3 of 3 rows" in exact.output, exact.output


def test_exact_compares_a_runs_policy_path_without_its_results_folder():
    """Two runs of one preset in other results folders (config `results`) name the same policy;
    another run, or a shared start model, still differs."""
    a = ["/data/smoke/runs/algo=gspo/model=tiny/group_size=4/seed=1/policy/frac=1.0",
         "/data/models/model=tiny/sft"]
    b = ["/data/smoke-2/runs/algo=gspo/model=tiny/group_size=4/seed=1/policy/frac=1.0",
         "/data/models/model=tiny/sft"]
    assert folder_free("model", a) == folder_free("model", b)
    assert folder_free("model", a)[1] == "/data/models/model=tiny/sft"
    other = [b[0].replace("seed=1", "seed=2"), b[1]]
    assert folder_free("model", a) != folder_free("model", other)
    assert folder_free("checkpoint", a) == a  # only the policy path column
