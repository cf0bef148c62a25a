"""Launching the trainer: the train rule's choice of python / `accelerate launch` / srun per node
from train.engine and the job's resources, the SLURM profile's sbatch flags (built by the executor
plugin's own code), the multi-node launcher under a fake srun and scontrol, the FSDP2 accelerate
config on CPU, and the pinned GPU stack (pyproject extras, constraints, conda env) kept equal.
Nothing here runs on a GPU or a real cluster: no GPU or SLURM was available to this project.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from test_workflow import ROOT, copy_workflow, ok, snakemake

from repro.training.config import ENGINES

SLURM_PROFILE = ROOT / "profiles" / "slurm" / "config.yaml"
ACCELERATE = "--config_file config/accelerate/fsdp2.yaml"


def train_jobs(output: str) -> list[tuple[dict[str, str], str]]:
    """(resources, shell command) of every train job in a `snakemake -n -p` output."""
    jobs = []
    for block in output.split("rule train:")[1:]:
        res = re.search(r"^\s+resources: (.*)$", block, re.M).group(1)
        shell = re.search(r"^Shell command: (.*)$", block, re.M).group(1)
        shell = re.sub(r"^if \[ -s \S+ \]; .*?; fi; ", "", shell)  # the log kept per attempt
        jobs.append((dict(item.split("=", 1) for item in res.split(", ")), shell))
    return jobs


def dry_run(*args: str, profile: Path = SLURM_PROFILE.parent) -> str:
    """A dry run's output with a SLURM profile (64 cores, so threads are not capped)."""
    return ok(snakemake("-n", "-F", "-p", "--nolock", "--cores", "64",
                        "--workflow-profile", str(profile), *args))


def plan(*args: str, profile: Path = SLURM_PROFILE.parent) -> list[tuple[dict[str, str], str]]:
    """Train jobs of a dry run with a SLURM profile."""
    out = dry_run(*args, profile=profile)
    jobs = train_jobs(out)
    assert jobs, out[-3000:]
    return jobs


class FakeResources(dict):
    """A job's evaluated resources as the SLURM executor plugin reads them."""

    def __getattr__(self, name):
        return self[name]


def sbatch_flags(resources: dict[str, str]) -> str:
    """The sbatch call the SLURM executor plugin builds for a job with these resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    values = FakeResources({k: int(v) if v.isdigit() else v for k, v in resources.items()
                            if "TBD" not in v})
    job = type("Job", (), {"resources": values, "threads": 64})()
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "c", "account": "",
              "partition": "", "workdir": None}
    return get_submit_command(job, params) + set_gres_string(job)


@pytest.fixture(scope="module")
def paper_32b_dry_run(lock) -> str:
    """The 32B preset's dry run with the SLURM profile, parsed once: two tests read its train
    and its evaluate jobs."""
    return dry_run("--configfile", "config/presets/paper-qwen3-32b.yaml",
                   "--config", f"data_lock={lock}")


def test_paper_32b_runs_trl_under_accelerate_fsdp2_on_one_node_of_hardware_train(
        tmp_path, lock, paper_32b_dry_run):
    preset_args = ("--configfile", "config/presets/paper-qwen3-32b.yaml",
                   "--config", f"data_lock={lock}")
    jobs = train_jobs(paper_32b_dry_run)
    assert jobs, paper_32b_dry_run[-3000:]
    for resources, shell in jobs:
        assert shell.startswith(f"accelerate launch {ACCELERATE} --num_processes 8 "
                                "--main_process_port 0 -m repro train --config "), shell
        assert "--threads 8 " in shell  # 64 CPUs of the node over its 8 processes
        assert resources["nodes"] == "1" and resources["gres"] == "gpu:8", resources
    sbatch = sbatch_flags(jobs[0][0])
    for flag in ("--nodes=1", "--gres=gpu:8", "--cpus-per-gpu=8"):
        assert flag in sbatch, (flag, sbatch)
    assert "--gpus" not in sbatch and "--cpus-per-task" not in sbatch, sbatch
    assert "--ntasks-per-gpu" not in sbatch, sbatch

    # the engine reaches the trainer through the run's resolved config
    cfg = shlex.split(jobs[0][1])[shlex.split(jobs[0][1]).index("--config") + 1]
    wd = copy_workflow(tmp_path)
    ok(snakemake("--cores", "1", cfg, *preset_args, cwd=wd), wd)
    assert yaml.safe_load((wd / cfg).read_text())["engine"] == "trl"


@pytest.fixture(scope="module")
def multinode_plan(lock) -> list[tuple[dict[str, str], str]]:
    """Train jobs of the 80B preset (hardware.train: 2 nodes x 8 GPUs) with the SLURM profile."""
    return plan("--configfile", "config/presets/paper-qwen3-next-80b.yaml",
                "--config", f"data_lock={lock}")


def test_several_nodes_plan_one_accelerate_launch_per_node_under_srun(multinode_plan):
    resources, shell = multinode_plan[0]
    assert shell.startswith(
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=64 --gres=gpu:8 "
        f"scripts/launch_accelerate.sh {ACCELERATE} --num_processes 16 -m repro train --config "
    ), shell
    sbatch = sbatch_flags(resources)
    for flag in ("--nodes=2", "--ntasks=2", "--gres=gpu:8", "--cpus-per-gpu=8"):
        assert flag in sbatch, (flag, sbatch)
    assert "--ntasks-per-gpu" not in sbatch and "--gpus" not in sbatch, sbatch


def test_evaluation_gets_its_gpus_and_the_planners_walltime(paper_32b_dry_run):
    block = paper_32b_dry_run.split("rule evaluate:")[1]
    res = dict(item.split("=", 1) for item in re.search(
        r"^\s+resources: (.*)$", block, re.M).group(1).split(", "))
    assert res["nodes"] == "1" and res["gres"] == "gpu:4", res
    # (30 + 30) x 32 x 38912 + 175 x 32 x 32768 tokens at 2000 tokens/s, x1.2: 43 h
    tokens = 60 * 32 * 38912 + 175 * 32 * 32768
    assert int(res["runtime"]) == -(-tokens * 1.2 // (2000 * 60)), res


def test_the_profiles_dry_run_leaves_no_unawaited_coroutine(paper_32b_dry_run):
    """Snakemake's default disk_mb (input.size_mb, evaluated while the DAG is built for the
    train params that read `resources`) warns "coroutine ... was never awaited" into every job
    log unless the profile sets disk_mb (docs/slurm.md)."""
    assert "was never awaited" not in paper_32b_dry_run, paper_32b_dry_run[:3000]
    assert "disk_mb=1000" in paper_32b_dry_run.split("rule train:")[1]


FAKES = {
    # srun: start one task per --ntasks, as SLURM would on that many nodes (one task per node)
    "srun": """#!/usr/bin/env bash
echo "srun $*" >> "$FAKE_LOG"
n=1; while [ "${1#-}" != "$1" ]; do case "$1" in --ntasks=*) n=${1#--ntasks=};; esac; shift; done
for ((i = 0; i < n; i++)); do
  SLURM_JOB_NODELIST="gpu[07-08]" SLURM_NNODES=$n SLURM_PROCID=$i SLURM_NODEID=$i "$@" || exit
done
""",
    "scontrol": """#!/usr/bin/env bash
echo "scontrol $*" >> "$FAKE_LOG"
[ "$*" = "show hostnames gpu[07-08]" ] && printf 'gpu07\\ngpu08\\n'
""",
    "accelerate": """#!/usr/bin/env bash
echo "accelerate $*" >> "$FAKE_LOG"
""",
}


def fake_cluster(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return env | {"PATH": f"{bin_dir}:{env['PATH']}", "FAKE_LOG": str(log)}, log


def test_rule_command_for_several_nodes_starts_one_launcher_per_node(tmp_path, multinode_plan):
    """The train rule's shell (as planned for 2 nodes) run as the job step would run it, with
    fake srun/scontrol/accelerate recording what they were asked to do."""
    _, shell = multinode_plan[0]
    env, log = fake_cluster(tmp_path)
    work = tmp_path / "job"
    (work / "logs" / "train").mkdir(parents=True)
    (work / "scripts").symlink_to(ROOT / "scripts")
    log_file = re.search(r"> (\S+) 2>&1$", shell).group(1)
    (work / log_file).parent.mkdir(parents=True, exist_ok=True)
    for job_id in ("4242", "4243"):
        # the jobstep plugin keeps only the job's identity of the SLURM_* variables
        proc = subprocess.run(["bash", "-c", shell], cwd=work, env=env | {"SLURM_JOB_ID": job_id},
                              capture_output=True, text=True)
        assert proc.returncode == 0, (proc.stderr, (work / log_file).read_text())
    calls = log.read_text().splitlines()
    srun = [c for c in calls if c.startswith("srun ")]
    assert len(srun) == 2 and "--nodes=2 --ntasks=2 --ntasks-per-node=1" in srun[0], calls
    launches = [shlex.split(c)[2:] for c in calls if c.startswith("accelerate launch ")]
    assert len(launches) == 4, calls  # 2 jobs x 2 nodes
    ports = []
    for job in (launches[:2], launches[2:]):
        opts = [dict(zip(args[:8:2], args[1:8:2], strict=True)) for args in job]
        assert [o["--machine_rank"] for o in opts] == ["0", "1"], job
        assert {o["--num_machines"] for o in opts} == {"2"}, job
        assert {o["--main_process_ip"] for o in opts} == {"gpu07"}, job  # the job's first host
        port = {o["--main_process_port"] for o in opts}
        assert len(port) == 1 and 20000 <= int(min(port)) < 30000, job  # nodes agree
        ports += port
        for args in job:
            assert args[8:16] == ["--config_file", "config/accelerate/fsdp2.yaml",
                                  "--num_processes", "16", "-m", "repro", "train", "--config"]
    assert ports[0] != ports[1]  # another job, another port


def test_launcher_refuses_to_run_outside_one_task_per_node(tmp_path):
    env, log = fake_cluster(tmp_path)
    script = str(ROOT / "scripts" / "launch_accelerate.sh")
    proc = subprocess.run([script, "-m", "repro"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "SLURM_JOB_ID is not set" in proc.stderr, proc.stderr
    two_tasks_one_node = env | {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[07-08]",
                                "SLURM_NNODES": "2", "SLURM_PROCID": "1", "SLURM_NODEID": "0"}
    proc = subprocess.run([script], env=two_tasks_one_node, capture_output=True, text=True)
    assert proc.returncode == 2 and "--ntasks-per-node=1" in proc.stderr, proc.stderr
    part_of_the_job = two_tasks_one_node | {"SLURM_NNODES": "1", "SLURM_PROCID": "0"}
    proc = subprocess.run([script], env=part_of_the_job, capture_output=True, text=True)
    assert proc.returncode == 2 and "--nodes=2" in proc.stderr, proc.stderr
    assert "accelerate" not in log.read_text()


def test_fsdp2_config_starts_one_process_per_gpu_with_full_state_dict(tmp_path):
    """The single-node launch line on CPU: the config file parses and every process sees FSDP2,
    full state dicts, and bf16 mixed precision (float32 masters, bf16 compute: issue 17)."""
    # One write per process (the launcher runs them unbuffered: print's text and newline were two
    # writes, and two ranks' lines once came out as `{...}{...}`), and every object is read out.
    (tmp_path / "show_env.py").write_text(
        "import json, os, sys\nsys.stdout.write(json.dumps({k: os.environ.get(k) for k in ('RANK',"
        " 'WORLD_SIZE', 'ACCELERATE_USE_FSDP', 'FSDP_VERSION', 'FSDP_STATE_DICT_TYPE',"
        " 'ACCELERATE_MIXED_PRECISION')}) + '\\n')\nsys.stdout.flush()\n")
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", *ACCELERATE.split(),
           "--num_processes", "2", "--main_process_port", "0", "-m", "show_env"]
    env = os.environ | {"PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [json.loads(obj) for obj in re.findall(r"\{[^{}]*\}", proc.stdout)]
    assert sorted(s["RANK"] for s in seen) == ["0", "1"], proc.stdout
    for s in seen:
        assert s["WORLD_SIZE"] == "2" and s["ACCELERATE_USE_FSDP"] == "true", s
        assert s["FSDP_VERSION"] == "2" and s["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT", s
        assert s["ACCELERATE_MIXED_PRECISION"] == "bf16", s


def test_native_engine_on_several_gpus_is_refused_naming_the_key(tmp_path):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("hardware: {train: {gpus_per_node: 8}}\n")
    proc = snakemake("-n", "-F", "--nolock", "--configfile", str(gpus))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config train.engine is native" in out, out[-3000:]
    assert "Traceback" not in out and 'File "' not in out, out[-3000:]


def test_bad_engine_fails_at_parse_time_naming_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {engine: deepspeed}\n")
    proc = snakemake("-n", "--nolock", "--configfile", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert f"TrainConfig.engine must be one of {ENGINES}, got 'deepspeed'" in out, out[-3000:]
    assert "Traceback" not in out and 'File "' not in out, out[-3000:]


def requirements(items) -> dict[str, Requirement]:
    reqs = [Requirement(s) for s in items if s.strip() and not s.startswith(("#", "-"))]
    return {r.name.lower(): r for r in reqs}


def test_gpu_stack_pins_agree_in_pyproject_constraints_and_conda_env():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    constraints = requirements((ROOT / "constraints" / "gpu.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "envs" / "gpu.yaml").read_text())
    conda = requirements(next(d for d in env["dependencies"] if isinstance(d, dict))["pip"])
    assert requirements(extras["train-gpu"]) == {"dfpo-repro": Requirement("dfpo-repro[trl,gpu]")}
    assert "dfpo-repro" in requirements(extras["test"])  # CI runs the TRL engine's tests
    for name, req in (requirements(extras["trl"]) | requirements(extras["gpu"])).items():
        assert str(conda[name]) == str(req), (name, conda.get(name), req)
    for name, req in constraints.items():
        assert str(conda[name]) == str(req), (name, conda.get(name), req)
        pinned = requirements(extras["trl"]) | requirements(extras["gpu"])
        if name in pinned:
            assert str(pinned[name].specifier) == str(req.specifier), (name, pinned[name], req)


def test_jobs_run_under_the_workflows_python_where_its_venv_is_not_activated(tmp_path):
    """A job's `python -m repro` is the interpreter that runs Snakemake, not PATH's first python
    (without rules/launch.smk's PATH entry the job ran the system python: 'No module named
    typer', or no `python` at all)."""
    wd = copy_workflow(tmp_path)
    bare = os.pathsep.join(d for d in ("/usr/bin", "/bin") if Path(d).is_dir())
    env = os.environ | {"PATH": bare, "PYTHONPATH": str(wd), "VIRTUAL_ENV": ""}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "paper_reference"],
                          cwd=wd, env=env, capture_output=True, text=True, timeout=300)
    ok(proc, wd)
    assert (wd / "results" / "paper" / "reference.parquet").stat().st_size > 0
