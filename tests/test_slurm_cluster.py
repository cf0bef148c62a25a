"""The workflow as cluster users run it: the smoke preset submitted through profiles/slurm to a
live slurmctld (scripts/local_slurm.sh), and the train rule's several-nodes launcher under real
`srun` on two slurmd nodes.

- Every job of the smoke preset runs as a SLURM job and completes; what slurmctld recorded for
  each (partition, account, time limit, memory, CPUs, GPUs, job name, rule) is what the profile
  and the rule asked for; the aggregate equals a local run's exactly (`repro compare --exact`
  in REPRO_SLURM_LOCAL_RESULTS, which .ci/run points at its local smoke run's results folder,
  or a local run made here; the SLURM run writes to a folder of the same name, since the
  aggregate names each evaluated model by its path).
- Two nodes: the rule's `srun ... scripts/launch_accelerate.sh` line, as planned for
  hardware.train 2 nodes x 1 GPU, submitted with the sbatch flags the executor plugin builds,
  runs `repro bench twin`'s reference on 2 gloo processes, one per node: ranks, world and
  rendezvous come from SLURM, and the 2-process loss equals one process's within the twin's
  tolerance.

Skipped where no such cluster is up, failed instead under REPRO_REQUIRE_SLURM=1 (.ci/run).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from slurm_cluster import (
    ACCOUNT,
    NODE,
    accounting,
    cluster,
    env,
    finish,
    jobs_of,
    run_name,
    slurm_workflow,
    snakemake_slurm,
    stop_started,
)
from test_launch import FakeResources, train_jobs
from test_workflow import FROM_START, ROOT, SMOKE, START, copy_workflow, jobs_planned, ok, snakemake

pytestmark = pytest.mark.slow

# the local run's results folder, relative to the repository root (`--config results=`)
LOCAL_RESULTS = os.environ.get("REPRO_SLURM_LOCAL_RESULTS")


@pytest.fixture(autouse=True)
def _no_snakemake_left():
    yield
    stop_started()


def local_rules() -> set[str]:
    """The Snakefile's `localrules:` (they run beside Snakemake, never as SLURM jobs), read from
    the Snakefile itself so that a rule made local there is local here."""
    block = re.search(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", (ROOT / "Snakefile").read_text(),
                      re.M)
    assert block, "Snakefile: no `localrules:` block"
    return {name.strip(" \t,") for name in block.group(1).splitlines()}


LOCAL_RULES = local_rules()
SACCT = ("JobIDRaw,JobName,Comment,Partition,Account,Timelimit,ReqMem,AllocCPUS,ReqTRES,State,"
         "ExitCode")  # AllocCPUS: sacct's ReqCPUS is 1 for --cpus-per-gpu=2 --gpus=1


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, str]:
    """The smoke preset through profiles/slurm: (workflow copy, Snakemake's output)."""
    cluster()
    wd = slurm_workflow(tmp_path_factory.mktemp("slurm-smoke"))
    start = time.time()
    same = ("--config", f"results={LOCAL_RESULTS}") if LOCAL_RESULTS else ()
    out = finish(snakemake_slurm(wd, *SMOKE, *same), wd, 1500)
    print(f"smoke preset through profiles/slurm: {time.time() - start:.0f} s")
    return wd, out


def submitted_jobs(out: str) -> list[dict]:
    """Each job Snakemake submitted: rule, resources and threads as it evaluated them, and the
    SLURM job id."""
    blocks = {}
    for block in re.split(r"^(?=rule \w+:$)", out, flags=re.M)[1:]:
        rule = block.split(":", 1)[0].removeprefix("rule ")
        jobid = re.search(r"^\s+jobid: (\d+)$", block, re.M).group(1)
        res = re.search(r"^\s+resources: (.*)$", block, re.M).group(1)
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        blocks[jobid] = {"rule": rule, "threads": int(threads.group(1)) if threads else 1,
                         "resources": dict(kv.split("=", 1) for kv in res.split(", "))}
    return [blocks[job] | {"slurm": slurm} for job, slurm in
            re.findall(r"^Job (\d+) has been submitted with SLURM jobid (\d+)", out, re.M)]


def minutes(limit: str) -> int:
    """sacct's Timelimit ([D-]HH:MM:SS) in minutes."""
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


def test_every_smoke_job_runs_on_slurm_and_completes(smoke):
    _, out = smoke
    planned = jobs_planned(out)
    jobs = submitted_jobs(out)
    remote = {rule: n for rule, n in planned.items() if rule not in LOCAL_RULES}
    assert sum(remote.values()) == len(jobs) >= 20, (remote, len(jobs))  # no job resubmitted
    assert {j["rule"] for j in jobs} == set(remote)
    if accounting():
        rows = jobs_of(run_name(out), "JobIDRaw,State,ExitCode")
        assert sorted(r["JobIDRaw"] for r in rows) == sorted(j["slurm"] for j in jobs)
        assert {(r["State"], r["ExitCode"]) for r in rows} == {("COMPLETED", "0:0")}, rows


def test_every_rules_sbatch_options_reached_slurmctld(smoke):
    """Per job, slurmctld's record (sacct) against the job's resources as Snakemake evaluated
    them from the rule and the profile, and each rule's partition against the profile."""
    wd, out = smoke
    if not accounting():
        pytest.fail("this check reads sacct: start the cluster with accounting")
    profile = yaml.safe_load((wd / "profiles" / "slurm_ci" / "config.yaml").read_text())
    records = {r["JobIDRaw"]: r for r in jobs_of(run_name(out), SACCT)}
    seen_rules = set()
    for job in submitted_jobs(out):
        rule, res, got = job["rule"], job["resources"], records[job["slurm"]]
        asked = profile["set-resources"].get(rule, {}).get(
            "slurm_partition", profile["default-resources"]["slurm_partition"])
        assert res["slurm_partition"] == asked.strip("'"), (rule, res, asked)
        gpus = int(res.get("gpu", 0))
        cpus = gpus * int(res["cpus_per_gpu"]) if gpus else job["threads"]
        want = {"JobName": run_name(out), "Partition": res["slurm_partition"],
                "Account": ACCOUNT, "ReqMem": f"{res['mem_mb']}M", "AllocCPUS": str(cpus)}
        assert {k: got[k] for k in want} == want, (rule, got)
        assert got["Comment"].startswith(f"rule_{rule}"), (rule, got)
        assert minutes(got["Timelimit"]) == int(res["runtime"]), (rule, got, res)
        assert (f"gres/gpu={gpus}" in got["ReqTRES"]) == bool(gpus), (rule, got)
        seen_rules.add(rule)
    assert {"sft", "train", "evaluate", "evaluate_init", "theory"} <= seen_rules, seen_rules


def test_slurm_aggregate_equals_the_local_runs(smoke, tmp_path):
    wd, _ = smoke
    if LOCAL_RESULTS:
        local = ROOT / LOCAL_RESULTS / "aggregate"
    else:
        here = copy_workflow(tmp_path)
        ok(snakemake("--cores", "2", *SMOKE, cwd=here, timeout=1500), here)
        local = here / "results" / "aggregate"
    slurm = wd / (LOCAL_RESULTS or "results") / "aggregate"
    proc = subprocess.run([sys.executable, "-m", "repro", "compare", "--exact", str(local),
                           str(slurm)], capture_output=True, text=True, env=env(ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


TWO_NODES = """train: {engine: trl, prompts_per_step: 4}
hardware: {train: {nodes: 2, gpus_per_node: 1}}
""" + FROM_START


def plugin_sbatch(resources: dict[str, str], threads: int, wd: Path, name: str) -> list[str]:
    """The sbatch call the SLURM executor plugin builds for a job with these resources, in
    partition nodes2 (both nodes)."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    values = FakeResources({k: int(v) if v.isdigit() else v for k, v in resources.items()
                            if "TBD" not in v})
    job = type("Job", (), {"resources": values, "threads": threads})()
    params = {"run_uuid": name, "slurm_logfile": str(wd / "two_nodes.log"),
              "comment_str": "rule_train_two_nodes", "account": f"-A {ACCOUNT}",
              "partition": "-p nodes2", "workdir": str(wd)}
    return (get_submit_command(job, params) + set_gres_string(job)).split()


def test_train_launcher_on_two_slurm_nodes_matches_one_process(tmp_path):
    cluster()
    from repro.bench.twin import preset_lr, run_config, tiny_bf16_model

    wd = slurm_workflow(tmp_path / "wf", extra=(START,),
                        overlay={"set-resources": {"train": {"cpus_per_gpu": 1}}})
    (wd / "two.yaml").write_text(TWO_NODES)
    plan = ok(snakemake("-n", "-p", "--nolock", "--workflow-profile", "profiles/slurm_ci",
                        *SMOKE, "two.yaml", cwd=wd))
    resources, shell = train_jobs(plan)[0]
    launcher = shell.split(" -m repro train ")[0]
    assert launcher.startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 "), launcher
    model = tiny_bf16_model(tmp_path / "model")
    config = json.dumps(run_config(model, "dfpo", preset_lr()))
    out = tmp_path / "out"
    (wd / "job.sh").write_text(
        "#!/bin/bash\nset -e\n"
        f"export ACCELERATE_USE_CPU=true OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 "
        f"PYTHONPATH={wd}:{ROOT / 'tests'} PATH={Path(sys.executable).parent}:$PATH\n"
        f"{launcher} -m slurm_two_nodes {out} {model} '{config}'\n")
    name = f"repro-two-nodes-{os.getpid()}"
    sbatch = plugin_sbatch(resources, 1, wd, name)
    for flag in ("--nodes=2", "--ntasks=2", "--gres=gpu:1"):
        assert flag in sbatch, sbatch
    proc = subprocess.run([*sbatch, "--wait", str(wd / "job.sh")], cwd=wd, env=env(wd),
                          capture_output=True, text=True, timeout=600)
    log = (wd / "two_nodes.log").read_text() if (wd / "two_nodes.log").exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-4000:]
    job = proc.stdout.strip().split(";")[0]

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert {r["SLURMD_NODENAME"] for r in ranks} == {NODE, f"{NODE}-b"}, ranks
    for seen in ranks:
        assert seen["WORLD_SIZE"] == "2" and seen["LOCAL_WORLD_SIZE"] == "1", seen
        assert seen["SLURM_JOB_ID"] == job and seen["SLURM_PROCID"] == seen["GROUP_RANK"], seen
        assert seen["MASTER_ADDR"] == NODE, seen  # the job's first host
        assert seen["MASTER_PORT"] == str(20000 + int(job) % 10000), seen
    ref = json.loads((out / "reference.json").read_text())
    assert (ref["processes"], ref["backend"], ref["dtensor_params"]) == (2, "gloo", True), ref
    assert ref["losses_2proc"] and len(ref["losses_2proc"]) == ref["minibatches"], ref
    for two, one, tol in zip(ref["losses_2proc"], ref["losses_1proc"], ref["tolerance"],
                             strict=True):
        assert abs(two - one) <= tol, (two, one, tol)
    if accounting():
        row = jobs_of(name, "JobIDRaw,NNodes,Partition,AllocTRES,State")[0]
        assert (row["NNodes"], row["Partition"], row["State"]) == ("2", "nodes2", "COMPLETED")
        assert "gres/gpu=2" in row["AllocTRES"], row
