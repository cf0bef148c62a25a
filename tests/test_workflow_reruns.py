"""docs/pipeline.md's claim: "a changed config value reruns only the runs it touches".

The smoke preset's run configs are written for real (`--until run_config`: YAML files only,
seconds), then a dry run after each config change lists the runs Snakemake would redo: the
params trigger of `run_config` rewrites a run's config.yaml (and so retrains that run, whose
training job reads it) only when one of that run's resolved values changed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_workflow import FROM_START, SMOKE, START, copy_workflow, jobs_planned, ok, snakemake

UNTIL = ["--until", "run_config", "--cores", "1", *SMOKE]
SMOKE_RUNS = 7  # gspo, dfpo_min x 2 seeds at G = 4; dfpo_global; gspo and dfpo_min at G = 2


def replanned(wd, overlay: str) -> list[str]:
    """Runs whose config.yaml a dry run with `overlay` would rewrite."""
    (wd / "change.yaml").write_text(overlay)
    out = ok(snakemake("-n", *UNTIL, "change.yaml", cwd=wd), wd)
    runs = re.findall(r"results/runs/(algo=[^\s,]+/seed=\d+)/config\.yaml", out)
    assert jobs_planned(out).get("run_config", 0) == len(set(runs)), out[-3000:]
    return sorted(set(runs))


@pytest.mark.slow  # five Snakemake parses: ~1 minute on a quiet 2-core machine
def test_a_changed_config_value_reruns_only_the_runs_it_touches(tmp_path):
    wd = copy_workflow(tmp_path)
    ok(snakemake(*UNTIL, cwd=wd), wd)
    assert len(list((wd / "results" / "runs").rglob("config.yaml"))) == SMOKE_RUNS
    assert replanned(wd, "{}\n") == []  # nothing changed, nothing to redo

    # one algorithm's objective: only its runs, at every group size and seed
    touched = replanned(wd, "algorithms: {dfpo_min: {algorithm: dfpo, objective: "
                            "{transform: min_replace, weight_clip: [0.0, 10.0]}}}\n")
    assert touched == ["algo=dfpo_min/model=tiny/group_size=2/seed=0",
                       "algo=dfpo_min/model=tiny/group_size=4/seed=0",
                       "algo=dfpo_min/model=tiny/group_size=4/seed=1"]
    # a value every run shares: every run
    assert len(replanned(wd, "train: {steps: 5}\n")) == SMOKE_RUNS
    # an evaluation setting: no training run
    assert replanned(wd, "eval: {k: 3}\n") == []


RUN = "results/runs/algo=gspo/model=tiny/group_size=4/seed=0"
# The smoke preset's one-run DAG up to training: the SFT stages, the run's config, its outputs
PLACEHOLDERS = ["results/models/model=tiny-base/sft/", "results/models/model=tiny/sft/",
                f"{RUN}/config.yaml", f"{RUN}/manifest.json", f"{RUN}/train_log.parquet",
                f"{RUN}/policy/frac=0.5/", f"{RUN}/policy/frac=1.0/"]


def train_reason(out: str) -> str:
    """The `reason:` line of the dry run's train job ('' when none is planned)."""
    block = out.split("rule train:", 1)[1] if "rule train:" in out else ""
    return next((line for line in block.splitlines() if "reason:" in line), "")


def test_editing_config_fields_replans_training(tmp_path):
    """repro/config_fields.py, which training imports through training/config.py (the old hand
    list missed it): its edit changes the train job's code digest, a params rerun trigger. The
    run's outputs are placeholders marked done with --touch (records their params), not
    trained."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wd = copy_workflow(tmp_path)
    for name in PLACEHOLDERS:
        path = wd / name
        path.mkdir(parents=True) if name.endswith("/") else path.parent.mkdir(parents=True,
                                                                              exist_ok=True)
    pq.write_table(pa.table({"step": [1]}), wd / RUN / "train_log.parquet")
    for name in ("config.yaml", "manifest.json"):
        (wd / RUN / name).write_text("{}\n")
    args = [f"{RUN}/train_log.parquet", "--cores", "1", *SMOKE]  # target first: see SMOKE
    ok(snakemake("--touch", "-F", *args, cwd=wd), wd)

    edited = wd / "repro" / "config_fields.py"
    edited.write_text(edited.read_text() + "\n# an edit of config_fields\n")
    out = ok(snakemake("-n", *args, cwd=wd), wd)
    assert jobs_planned(out).get("train") == 1, out[-3000:]
    reason = train_reason(out)
    assert "Params have changed" in reason and "Missing output" not in reason, reason


INIT = "results/eval/algo=init/model=tiny/seed=0/frac=0.0"


@pytest.mark.slow  # one evaluation job and four Snakemake parses: ~1 minute on 2 cores
def test_an_evaluation_job_runs_its_resolved_yaml_and_reruns_when_a_value_changes(tmp_path):
    """The start's evaluation (from the committed RL start: no SFT) for real: its config job
    writes resolved.yaml, `repro eval --config` runs it, and the same file run by hand
    reproduces the rows; a changed `eval:` value rewrites it and reruns the evaluation, an
    unchanged config nothing."""
    import yaml

    from repro.results import EVAL_PROBLEMS, read_table

    wd = copy_workflow(tmp_path, extra=(START,))
    (wd / "start.yaml").write_text(FROM_START)
    target = [f"{INIT}/benchmark=synth-rule/problems.parquet", "--cores", "1", *SMOKE,
              "start.yaml"]
    ok(snakemake(*target, cwd=wd), wd)
    resolved = yaml.safe_load((wd / INIT / "resolved.yaml").read_text())
    assert (resolved["model"], resolved["k"], resolved["sampling"]) == (
        START, 2, {"max_new_tokens": 24})
    by_hand = wd / "by-hand"
    done = subprocess.run([sys.executable, "-m", "repro", "eval", "--config",
                           str(wd / INIT / "resolved.yaml"), "--out", str(by_hand)], cwd=wd,
                          env=os.environ | {"PYTHONPATH": str(wd)}, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (read_table(by_hand / "benchmark=synth-rule" / "problems.parquet", EVAL_PROBLEMS)
            .to_pylist() == read_table(wd / target[0], EVAL_PROBLEMS).to_pylist())

    assert jobs_planned(ok(snakemake("-n", *target, cwd=wd), wd)) == {}
    (wd / "change.yaml").write_text("eval: {k: 3}\n")
    planned = jobs_planned(ok(snakemake("-n", *target, "change.yaml", cwd=wd), wd))
    assert planned == {"init_eval_config": 1, "evaluate_init": 1}, planned
