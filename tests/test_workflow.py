"""The Snakemake workflow: dry runs of every preset, lint, the smoke preset end to end (outputs and
schemas, nothing to do on rerun, code edits rerun training, a killed training job resumes), and
tables/figures from the committed aggregate alone.

Snakemake locks its working directory, so every test that runs jobs works in its own temp copy of
the workflow (Snakefile, rules, config, profiles, envs and the package, which rules import from
the working directory through `python -m repro`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.name for p in (ROOT / "config" / "presets").glob("*.yaml"))
WORKFLOW = ["Snakefile", "rules", "config", "profiles", "envs", "scripts", "repro",
            "pyproject.toml"]
SMOKE = ["--configfile", "config/presets/smoke.yaml"]


def snakemake(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(cwd)}
    cmd = [sys.executable, "-m", "snakemake", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess, cwd: Path | None = None) -> str:
    """Assert success; on failure show Snakemake's output and every job log."""
    if proc.returncode != 0:
        logs = "".join(f"\n--- {p}\n{p.read_text()[-3000:]}"
                       for p in sorted((cwd or ROOT).glob("logs/**/*.log")))
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-6000:]}{logs}")
    return proc.stdout + proc.stderr


def jobs_planned(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> count."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    if "Job stats:" not in lines:
        return counts
    for line in lines[lines.index("Job stats:") + 3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


def copy_workflow(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    for name in WORKFLOW + list(extra):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def dry_run(lock) -> Callable[..., str]:
    """`-n -F -p` output for config files over config.yaml (--forceall: the whole DAG, whatever
    outputs this checkout already holds), each plan parsed once per module: the every-preset
    test and the tests reading one preset's commands share it (a parse is ~15 s on 2 cores)."""
    plans: dict[tuple[str, ...], str] = {}

    def plan(*configfiles: str) -> str:
        if configfiles not in plans:
            args = ["-n", "-F", "-p", "--nolock", "--cores", "2", "--config", f"data_lock={lock}"]
            plans[configfiles] = ok(snakemake(*args, *(["--configfile", *configfiles]
                                                        if configfiles else [])))
        return plans[configfiles]

    return plan


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_dry_run_of_every_preset(preset, dry_run):
    planned = jobs_planned(dry_run(f"config/presets/{preset}") if preset else dry_run())
    assert planned.get("train", 0) >= 2 and planned.get("evaluate", 0) >= 2, planned
    assert {"aggregate", "tables", "figures"} <= set(planned), planned


def test_the_study_preset_keeps_its_own_results_and_shares_the_sft(dry_run):
    """config `results`: the tiny study's runs, evaluations, aggregate and tables live under
    results/tiny-study/ (the default's committed aggregate is never its output); the SFT start
    and the paper reference are shared."""
    out = dry_run("config/presets/tiny-study.yaml")
    assert "repro aggregate --out results/tiny-study/aggregate" in out
    assert "repro tables --aggregate results/tiny-study/aggregate" in out
    assert "--out results/tiny-study/tables" in out
    assert ("results/tiny-study/runs/algo=grpo/model=tiny/group_size=8/seed=4/"
            "train_log.parquet") in out
    assert ("--config results/tiny-study/eval/algo=init/model=tiny/seed=4/frac=0.0/resolved.yaml"
            in out)
    assert "results/models/model=tiny/sft" in out and "tiny-study/models" not in out
    assert " results/aggregate/" not in out and "--out results/aggregate " not in out
    # its logs and benchmarks too, so the default's are never overwritten; SFT logs are shared
    assert "> logs/tiny-study/train/algo=grpo/model=tiny/group_size=8/seed=4.log" in out
    assert "benchmark: benchmarks/tiny-study/train/algo=grpo/model=tiny/group_size=8/seed=4" in out
    assert "> logs/train/" not in out and "> logs/evaluate" not in out
    assert "> logs/sft/model=tiny.log" in out


def test_every_evaluation_runs_from_its_resolved_config(dry_run):
    """Each evaluation job reads its resolved.yaml (written by its own config job, values in
    tests/test_pipeline_jobs.py), no option string."""
    out = dry_run("config/presets/paper-qwen3-32b.yaml")
    planned = jobs_planned(out)
    assert planned["eval_config"] == planned["evaluate"] >= 2, planned
    assert planned["init_eval_config"] == planned["evaluate_init"] >= 1, planned
    commands = [line.strip() for line in out.splitlines() if "python -m repro eval" in line]
    assert len(commands) == planned["evaluate"] + planned["evaluate_init"]
    assert all(c.split("python -m repro eval ")[1].split(" >")[0].startswith("--config ")
               and c.split(" >")[0].endswith("/resolved.yaml") for c in commands), commands


def config_lines(out: str) -> list[str]:
    """What a run printed besides Snakemake's own banner lines about profiles and config."""
    return [line for line in out.splitlines() if line.startswith("config")
            and not line.startswith("Config file config/config.yaml is extended")]


def no_traceback(out: str) -> bool:
    return "Traceback" not in out and 'File "' not in out and " in file " not in out


def test_paper_dry_run_without_a_lock_warns_and_the_real_run_refuses_before_any_job(tmp_path):
    """A fresh clone has no data.lock.yaml: the dry run plans the whole DAG (the paper plan:
    accelerate launch, nodes and per-node GPUs) after one warning line; the real run stops
    before any job, naming the missing pins and the command that writes them."""
    preset = ("--configfile", "config/presets/paper-qwen3-32b.yaml")
    wd = copy_workflow(tmp_path)
    proc = snakemake("-n", "-p", "--nolock", "--cores", "2", *preset, cwd=wd)
    out = ok(proc)
    warning = config_lines(out)
    assert len(warning) == 1 and warning[0].startswith("config: warning: LiveCodeBench sha256 "
                                                       "pins missing"), warning
    assert "lcb-train lacks ['test.jsonl'" in warning[0] and "livecodebench lacks" in warning[0]
    assert jobs_planned(out)["train"] >= 2 and no_traceback(out), out[-3000:]
    assert "fi; accelerate launch " in out and "nodes=1, gres=gpu:8" in out

    proc = snakemake("--cores", "1", *preset, cwd=wd)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and no_traceback(out), out[-3000:]
    refusal = [line for line in config_lines(out) if "warning" not in line]
    assert len(refusal) == 1 and "repro data pin --benchmark lcb-train --benchmark " \
        "livecodebench" in refusal[0], out[-3000:]
    assert not (wd / "logs").exists() and not (wd / "results" / "runs").exists(), out[-3000:]


def test_an_eval_sampling_key_repro_eval_lacks_fails_at_parse_time(tmp_path):
    """(Every key it has reaches the resolved config: tests/test_pipeline_jobs.py.)"""
    cfg = tmp_path / "sampling.yaml"
    cfg.write_text("eval: {sampling: {presence_penalty: 1.5}}\n")
    proc = snakemake("-n", "--nolock", "--configfile", str(cfg))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "presence_penalty" in out and "Job stats" not in out, out


def test_slurm_profile_leaves_gpus_and_nodes_to_config_hardware():
    """GPU jobs take nodes, per-node GPUs and the evaluation walltime from config hardware: and
    the planner; the profile keeps the site (partition, account, CPUs, memory)."""
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    for rule in ("train", "evaluate", "evaluate_init"):
        res = profile["set-resources"][rule]
        assert not {"gpu", "gpus", "gres", "nodes"} & set(res), (rule, res)
        assert res["slurm_partition"] == "'gpu'"
        assert rule == "train" or "runtime" not in res, res
    rules = "".join(p.read_text() for p in (ROOT / "rules").glob("*.smk"))
    assert "gpu=" not in rules and "slurm" not in rules  # sites live in the profile


def test_lint_is_clean():
    out = ok(snakemake("--lint", "--nolock"))
    assert "Lints for" not in out, out


def test_bad_config_key_fails_at_parse_time_naming_it(tmp_path):
    """One line naming the key, and no Snakemake traceback lines, for every kind of check."""
    bad = tmp_path / "bad.yaml"
    for overlay, message in [
            ("eval: {k: 0}", "config ['eval']['k']: 0 is less than the minimum of 1"),
            ("run: {algorithms: [gspo, not_an_algo]}", "run.algorithms names ['not_an_algo']"),
            ("models: {tiny: {source: sft, base: nowhere}}", "models.tiny.base names 'nowhere'"),
            ("ablations: {group_sizes: [3]}", "ablations.group_sizes has 3"),
            ("train: {lr: -1.0}", "TrainConfig.lr")]:
        bad.write_text(overlay + "\n")
        proc = snakemake("-n", "--nolock", "--configfile", str(bad))
        out = proc.stdout + proc.stderr
        lines = config_lines(out)
        assert proc.returncode != 0 and len(lines) == 1 and message in lines[0], out
        assert no_traceback(out), out


def check_every_parquet_schema(results: Path) -> dict[str, int]:
    """Every Parquet file under `results` has the schema of repro.results its name says; a file
    with no known schema fails. Returns how many files of each name were checked."""
    from repro import results as r

    by_name = {"train_log.parquet": r.TRAIN_LOG, "samples.parquet": r.EVAL_SAMPLES,
               "problems.parquet": r.EVAL_PROBLEMS, "theory.parquet": r.THEORY,
               "reference.parquet": r.PAPER_REFERENCE, "train_curves.parquet": r.AGG_TRAIN_CURVES,
               "eval_problems.parquet": r.AGG_EVAL_PROBLEMS,
               "eval_samples.parquet": r.AGG_EVAL_SAMPLES, "runs.parquet": r.AGG_RUNS}
    counts: dict[str, int] = {}
    for path in sorted(results.rglob("*.parquet")):
        assert path.name in by_name, f"{path}: a Parquet output with no schema in repro.results"
        got = pq.read_schema(path).remove_metadata()
        assert got.equals(by_name[path.name].remove_metadata()), f"{path}:\n{got}"
        counts[path.name] = counts.get(path.name, 0) + 1
    return counts


# The smoke end to end on seed 0 only: every rule and every kind of output with 20 job processes,
# not 28 (~8 s of start-up each). The smoke preset's two seeds run end to end in .ci/run's
# cross-ISA stage; pairing across seeds is tested on the committed aggregates' tables.
ONE_SEED = "run: {seeds: [0]}\n"


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path):
    """Every output, every Parquet file's schema; rerun does nothing; editing objectives reruns
    training."""
    wd = copy_workflow(tmp_path)
    (wd / "one_seed.yaml").write_text(ONE_SEED)
    smoke = [*SMOKE, "one_seed.yaml"]
    ok(snakemake("--cores", "2", *smoke, timeout=900, cwd=wd), wd)

    for name in ("train_curves", "eval_problems", "eval_samples", "runs"):
        assert pq.read_metadata(wd / "results" / "aggregate" / f"{name}.parquet").num_rows > 0
    checked = check_every_parquet_schema(wd / "results")
    assert checked["train_log.parquet"] >= 5 and checked["problems.parquet"] >= 8, checked
    assert checked["theory.parquet"] == 1 and checked["reference.parquet"] == 1, checked
    for name in ("main", "compute", "mechanism", "ablations", "verdict", "budget", "paper"):
        for ext in ("md", "tex"):
            assert (wd / "results" / "tables" / f"{name}.{ext}").stat().st_size > 0
    for fig in ("reward_vs_compute", "entropy_vs_step", "logodds_drift_vs_step",
                "kl_template_vs_step", "mechanism_vs_step", "group_size_ablation"):
        for ext in ("pdf", "png"):
            assert (wd / "results" / "figures" / f"{fig}.{ext}").stat().st_size > 0
    assert (wd / "results" / "theory" / "theory.parquet").exists()

    assert jobs_planned(ok(snakemake("-n", "--cores", "2", *smoke, cwd=wd), wd)) == {}

    log = sorted((wd / "results" / "runs").rglob("train_log.parquet"))[0]
    log.write_bytes(log.read_bytes()[:-100])  # damaged after its job finished
    out = ok(snakemake("-n", "--cores", "2", *smoke, cwd=wd), wd)
    said = [line for line in out.splitlines() if "fails verification" in line]
    assert len(said) == 1 and str(log.relative_to(wd)) in said[0], said
    planned = jobs_planned(out)
    assert planned.get("train") == 1 and "sft" not in planned, planned

    gspo = wd / "repro" / "objectives" / "gspo.py"
    gspo.write_text(gspo.read_text() + "\n# an edit of the objectives code\n")
    planned = jobs_planned(ok(snakemake("-n", "--cores", "2", *smoke, cwd=wd), wd))
    assert planned.get("train") == 5 and "sft" not in planned, planned

    report = wd / "results" / "report.html"
    ok(snakemake("--report", str(report), *smoke, cwd=wd), wd)
    assert report.stat().st_size > 10_000


TRL_SMOKE = "train: {engine: trl}\n"
# The committed RL start (tests/fixtures/synth_rule_start) as the runs' model: no SFT jobs.
START = "tests/fixtures/synth_rule_start"
FROM_START = f"models: {{tiny: {{source: hub, id: {START}}}}}\n"
# The end-to-end TRL run: every stage after SFT on a smaller DAG. It starts from the committed
# RL start as a local model folder (`source: hub`, as the paper presets start from a hub model;
# the native smoke run covers SFT) and keeps one seed of the main runs and of another group size
# (another TRL batch layout), evaluated at the final checkpoint: more seeds, fractions and
# objective variants add no engine code, only jobs, ~8 s of start-up each.
TRL_SMOKE_E2E = TRL_SMOKE + FROM_START + """\
run: {algorithms: [gspo, dfpo_min], seeds: [0]}
ablations: {algorithms: [], group_algorithms: [gspo], group_sizes: [2, 4], seeds: [0]}
eval: {fractions: [1.0]}
"""


def test_smoke_preset_with_the_trl_engine_plans_every_stage(tmp_path, dry_run):
    """The end-to-end TRL run below, as a dry run: the same DAG as the native smoke run."""
    (tmp_path / "trl.yaml").write_text(TRL_SMOKE)
    trl = jobs_planned(dry_run(SMOKE[1], str(tmp_path / "trl.yaml")))
    assert trl and trl == jobs_planned(dry_run(SMOKE[1]))


@pytest.mark.slow
def test_smoke_preset_end_to_end_with_the_trl_engine(tmp_path):
    """train.engine: trl on CPU (one process, no GPU, no vLLM): every run trains through TRL and
    the rest of the pipeline reads its outputs as it reads the native engine's."""
    wd = copy_workflow(tmp_path, extra=(START,))
    (wd / "trl.yaml").write_text(TRL_SMOKE_E2E)
    ok(snakemake("--cores", "2", *SMOKE, "trl.yaml", timeout=1200, cwd=wd), wd)
    assert not (wd / "results" / "models").exists()  # no SFT: the runs start from the fixture

    from repro.results import AGG_TRAIN_CURVES, TRAIN_LOG

    logs = sorted((wd / "results" / "runs").glob("**/train_log.parquet"))
    assert len(logs) == 3, logs
    for path in logs:
        schema = pq.read_schema(path)
        assert schema.remove_metadata().equals(TRAIN_LOG.remove_metadata()), path
        assert json.loads(schema.metadata[b"config"])["engine"] == "trl", path
        assert pq.read_table(path).num_rows == 4, path
        assert (path.parent / "policy" / "frac=1.0" / "config.json").exists(), path
    curves = pq.read_table(wd / "results" / "aggregate" / "train_curves.parquet")
    assert curves.schema.remove_metadata().equals(AGG_TRAIN_CURVES.remove_metadata())
    for name in ("main", "compute", "mechanism", "ablations", "paper"):
        assert (wd / "results" / "tables" / f"{name}.md").stat().st_size > 0
    assert jobs_planned(ok(snakemake("-n", "--cores", "2", *SMOKE, "trl.yaml", cwd=wd), wd)) == {}


def training_process(wd: Path, scratch: str) -> int:
    """pid of the `repro train` process working in `scratch` of the workflow copy `wd` (found
    through /proc). The folder must match too: another test's job on another xdist worker can
    train the same run under the same relative path (the TRL smoke run did, and was killed)."""
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if (cmd[1:4] == [b"-m", b"repro", b"train"] and any(scratch.encode() in c for c in cmd)
                and cwd == wd.resolve()):
            return int(entry.name)
    raise AssertionError(f"no training process for {scratch} in {wd}")


@pytest.mark.slow
def test_killed_training_job_resumes_from_its_checkpoint(tmp_path):
    wd = copy_workflow(tmp_path, extra=(START,))
    # from the committed start: no SFT jobs before the kill
    (wd / "longer.yaml").write_text("train: {steps: 12, checkpoint_every: 2}\n" + FROM_START)
    args = ["--configfile", "config/presets/smoke.yaml", "longer.yaml"]
    run = "algo=gspo/model=tiny/group_size=4/seed=0"
    target = f"results/runs/{run}/train_log.parquet"
    scratch = wd / "results" / "scratch" / run / "checkpoints"
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(wd)}
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", target, "--cores", "1", *args],
                            cwd=wd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while not (scratch / "step_000004").exists():
        assert proc.poll() is None and time.time() < deadline, "job ended before its checkpoint"
        time.sleep(0.2)
    trainer = training_process(wd, f"scratch/{run}")
    os.kill(trainer, signal.SIGKILL)  # the job dies mid-run (OOM killer, preemption)
    assert proc.wait(timeout=120) != 0  # Snakemake reports the failed job and removes its outputs
    assert not (wd / target).exists()

    ok(snakemake(target, "--cores", "1", *args, cwd=wd), wd)
    log = (wd / "logs" / "train" / f"{run}.log").read_text()
    assert "resuming from" in log and "step_00000" in log, log[-2000:]
    steps = pq.read_table(wd / target).column("step").to_pylist()
    assert steps == list(range(1, 13))


@pytest.mark.slow
def test_tables_and_figures_from_the_committed_aggregate_alone(tmp_path):
    """A fresh clone: no runs, only results/aggregate and results/paper."""
    wd = copy_workflow(tmp_path, extra=("results/aggregate", "results/paper"))
    # the run's own plan (its Job stats) is what a dry run would plan: no separate parse
    planned = jobs_planned(ok(snakemake("--cores", "2", "tables", "figures", cwd=wd), wd))
    assert set(planned) == {"tables", "figures"}, planned
    assert (wd / "results" / "tables" / "main.md").read_text().count("|") > 10
    assert (wd / "results" / "figures" / "reward_vs_compute.pdf").stat().st_size > 1000


# each pre-registered study: its preset, the page that reports its verdicts, the heading of
# that section (its first table holds the verdicts) and the ids the table must have
STUDIES = {
    "tiny-study": ("docs/results.md", "## Study 1: the pre-registered tiny study",
                   {"V", *(f"P{i}" for i in range(1, 9))}),
    "mechanism-study": ("docs/results.md", "## Study 2: the mechanism study",
                        {"G1", "G2", "G3", "P1", "P2", "P3", "P4", "P5", "P6a", "P6b", "P7",
                         "P8", "P9"}),
    # a table with blocks: its rows are keyed (source, id)
    "offpolicy-study": ("docs/results.md", "## Study 3: realistic off-policy sources",
                        {*((s, i) for s in ("reuse", "stale", "bf16")
                           for i in ("G1", "G2", *(f"Q{q}" for q in range(1, 7)))),
                         *(("pooled", f"Q{q}") for q in range(1, 7))}),
}


@pytest.mark.slow
@pytest.mark.parametrize("study", sorted(STUDIES))
def test_the_study_verdicts_come_from_its_committed_aggregate_and_match_its_page(study, tmp_path):
    """`snakemake tables` under the study's preset, on a fresh clone (only the study's committed
    aggregate and the paper reference), writes verdict.md; its verdicts are the ones the page
    that reports the study shows."""
    page, heading, ids = STUDIES[study]
    wd = copy_workflow(tmp_path, extra=(f"results/{study}/aggregate", "results/paper"))
    args = ("tables", "--cores", "2", "--configfile", f"config/presets/{study}.yaml")
    assert set(jobs_planned(ok(snakemake(*args, cwd=wd), wd))) == {"tables"}  # as a dry run's
    table = (wd / "results" / study / "tables" / "verdict.md").read_text()
    computed = {_key(cells): cells[-1] for cells in _rows(_first_table(table))}
    section = (ROOT / page).read_text().split(heading)[1]
    shown = {_key(cells): cells[-1].replace("*", "").split(" (")[0]
             for cells in _rows(_first_table(section, header_ends="| verdict |"))}
    assert set(computed) == ids
    assert shown == {k: v.split(" (")[0] for k, v in computed.items()}  # the rule's word


def _key(cells: list[str]) -> str | tuple[str, str]:
    """A verdict row's id, or (block, id) where the table has a block column (`pooled`, a
    source): ids are P1, G2, Q3, V, ..."""
    return cells[0] if re.fullmatch(r"[A-Z]\d*[a-z]?", cells[0]) else (cells[0], cells[1])


def _first_table(text: str, header_ends: str = "") -> str:
    """The first Markdown table in `text` (its contiguous '|' lines) whose header line ends
    with `header_ends`."""
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("| ")
                 and ln.rstrip().endswith(header_ends)
                 and (i == 0 or not lines[i - 1].startswith("|")))
    rest = lines[first:]
    return "\n".join(rest[:next((i for i, ln in enumerate(rest) if not ln.startswith("|")),
                                 len(rest))])


def _rows(markdown: str) -> list[list[str]]:
    """Cells of a Markdown table's body rows."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ") and "---" not in ln]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]]
