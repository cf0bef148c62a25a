"""Faults on the live SLURM cluster (scripts/local_slurm.sh), through profiles/slurm: a training
job cancelled mid-run and one killed at its time limit each end with the workflow complete and
the run resumed from its checkpoint (the profile's `retries: 1` resubmits it); a drained node
leaves a job pending with the workflow saying so, and it finishes once the node returns; on a
cluster without accounting the default status command does not hang in silence.

Each runs one training job from the committed RL start (no SFT jobs). Skipped where no such
cluster is up, failed instead under REPRO_REQUIRE_SLURM=1 (.ci/run).
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import time

import pyarrow.parquet as pq
import pytest
from slurm_cluster import (
    NODE,
    accounting,
    cluster,
    finish,
    jobs_of,
    local_slurm,
    run_name,
    slurm_workflow,
    snakemake_slurm,
    squeue,
    stop_started,
    wait_for,
)
from test_workflow import FROM_START, SMOKE, START, training_process

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_snakemake_left():
    yield
    stop_started()

RUN = "algo=gspo/model=tiny/group_size=4/seed=0"
TARGET = f"results/runs/{RUN}/train_log.parquet"


def submitted(wd, rule: str) -> list[str]:
    """SLURM job ids of `rule`'s jobs, in the order Snakemake submitted them."""
    out = (wd / "snakemake.log").read_text()
    ids = re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+)/", out)
    return [job for job, name in ids if name == rule]


def training_run(tmp_path, steps: int, overlay: dict | None = None):
    wd = slurm_workflow(tmp_path, extra=(START,), overlay=overlay)
    (wd / "longer.yaml").write_text(f"train: {{steps: {steps}, checkpoint_every: 2}}\n"
                                    + FROM_START)
    proc = snakemake_slurm(wd, TARGET, *SMOKE, "longer.yaml")
    return wd, proc


def assert_resumed(wd, steps: int, after: int) -> int:
    """The run's log holds steps 1..steps once each and its last attempt resumed from a
    checkpoint at or after step `after`; returns that step."""
    log = (wd / "logs" / "train" / f"{RUN}.log").read_text()
    resumed = re.findall(r"^repro train: resuming from \S+ \(step (\d+)\)$", log, re.M)
    assert resumed, f"the retry did not resume from a checkpoint:\n{log[-2000:]}"
    assert int(resumed[-1]) >= after, (resumed, after)
    assert pq.read_table(wd / TARGET).column("step").to_pylist() == list(range(1, steps + 1))
    return int(resumed[-1])


def test_cancelled_training_job_is_resubmitted_and_resumes(tmp_path):
    """`scancel` of the train job once its step-4 checkpoint exists (a user's mistake, an admin's
    clean-up): the job ends CANCELLED, reported with who cancelled it where sacct answers,
    Snakemake resubmits it, the retry resumes."""
    cluster()
    steps = 8
    wd, proc = training_run(tmp_path, steps)
    ckpt = wd / "results" / "scratch" / RUN / "checkpoints" / "step_000004"
    wait_for("the step-4 checkpoint", ckpt.exists, 300, proc, wd)
    first = submitted(wd, "train")
    assert len(first) == 1, first
    trainer = training_process(wd, f"scratch/{RUN}")
    subprocess.run(["scancel", first[0]], check=True)
    wait_for("SLURM to end the cancelled job's processes",
             lambda: not _alive(trainer), 60, proc, wd)
    out = finish(proc, wd, 600)
    assert f"SLURM-job '{first[0]}' failed, SLURM status is: 'CANCELLED'" in out, out[-3000:]
    jobs = submitted(wd, "train")
    assert len(jobs) == 2 and jobs[0] == first[0], jobs
    assert_resumed(wd, steps, after=4)
    if accounting():
        states = {j["JobIDRaw"]: j["State"] for j in jobs_of(run_name(out), "JobIDRaw,State")}
        assert states[jobs[0]].startswith("CANCELLED") and states[jobs[1]] == "COMPLETED", states
        who = f"cancelled by user {pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
        assert f"SLURM status is: 'CANCELLED'. Reason: {who}." in out, out[-3000:]


def test_training_job_killed_at_its_time_limit_resumes(tmp_path):
    """A train job whose first attempt has a 1-minute time limit: SLURM kills it (TIMEOUT) with
    checkpoints written, the retry (30 minutes) resumes from the newest. The trainer is stopped
    (SIGSTOP) once its step-2 checkpoint exists, so the job is still running when the limit
    comes whatever this machine's speed (a step took 0.5-4 s here); SLURM kills it, stopped or
    not (its limit check runs every 30 s: 60-90 s in)."""
    cluster()
    steps = 6
    limit = {"set-resources": {"train": {"runtime": "1 if attempt == 1 else 30"}}}
    wd, proc = training_run(tmp_path, steps, overlay=limit)
    ckpt = wd / "results" / "scratch" / RUN / "checkpoints" / "step_000002"
    wait_for("the step-2 checkpoint", ckpt.exists, 60, proc, wd)
    trainer = training_process(wd, f"scratch/{RUN}")
    os.kill(trainer, signal.SIGSTOP)
    wait_for("SLURM to end the job at its time limit", lambda: not _alive(trainer), 120, proc, wd)
    out = finish(proc, wd, 600)
    first, second = submitted(wd, "train")
    assert f"SLURM-job '{first}' failed, SLURM status is: 'TIMEOUT'" in out, out[-3000:]
    assert_resumed(wd, steps, after=2)
    if accounting():
        rows = {j["JobIDRaw"]: j for j in jobs_of(run_name(out), "JobIDRaw,State,Timelimit")}
        assert rows[first]["State"] == "TIMEOUT" and rows[first]["Timelimit"] == "00:01:00"
        assert rows[second]["State"] == "COMPLETED" and rows[second]["Timelimit"] == "00:30:00"


def test_drained_node_leaves_the_job_pending_with_a_notice_then_it_runs(tmp_path):
    """The only node of the profile's partitions drained before the run: the job pends, the
    workflow says which job and why (the plugin itself says nothing), and finishes once the node
    is resumed."""
    cluster()
    reason = "repro-test-drain"
    wd = slurm_workflow(tmp_path)
    subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN",
                    f"Reason={reason}"], check=True)
    try:
        proc = snakemake_slurm(wd, "results/theory/theory.parquet", *SMOKE)
        notice = wait_for("the pending-job notice", lambda: [
            line for line in (wd / "snakemake.log").read_text().splitlines()
            if line.startswith("slurm: job ") and " is pending: " in line], 120, proc, wd)
        assert len(notice) == 1 and "(rule_theory)" in notice[0], notice
        assert f"nodes out of service: {NODE} drained ({reason})" in notice[0], notice
        job = notice[0].split()[2]
        assert squeue("-j", job, "-o", "%T|%r")[0][0] == "PENDING"
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], check=True)
    out = finish(proc, wd, 600)
    assert f"slurm: job {job} is no longer pending" in out, out[-3000:]
    assert (wd / "results" / "theory" / "theory.parquet").stat().st_size > 0


@pytest.fixture
def no_accounting():
    """The cluster restarted without accounting (AccountingStorageType=accounting_storage/none),
    then restored as it was."""
    cluster()
    had = accounting()
    local_slurm("start", "--no-accounting")
    try:
        yield
    finally:
        local_slurm("start", *([] if had else ["--no-accounting"]))


def test_default_status_command_on_a_cluster_without_accounting(tmp_path, no_accounting):
    """The plugin's own detection picks sacct, which answers "Slurm accounting storage is
    disabled": without repro.pipeline.slurm the run waits forever in silence. Here one line says
    so within a minute and the run completes."""
    probe = subprocess.run(["sacct"], capture_output=True, text=True)
    assert probe.returncode != 0 and "accounting storage is disabled" in probe.stderr, probe
    wd = slurm_workflow(tmp_path)
    start = time.time()
    proc = snakemake_slurm(wd, "results/theory/theory.parquet", *SMOKE)
    said = wait_for("a line about sacct", lambda: [
        line for line in (wd / "snakemake.log").read_text().splitlines()
        if line.startswith("slurm: sacct fails")], 60, proc, wd)
    assert time.time() - start < 60 and len(said) == 1, said
    assert "Slurm accounting storage is disabled" in said[0] and "polls squeue" in said[0], said
    finish(proc, wd, 240)
    assert (wd / "results" / "theory" / "theory.parquet").stat().st_size > 0


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False
