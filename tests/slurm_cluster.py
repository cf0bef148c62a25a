"""The live SLURM cluster of the tests (scripts/local_slurm.sh) and `profiles/slurm` on it.

Tests that need the cluster call `cluster()`: where none is up (a user's laptop) they skip with
the reason; under `.ci/run` (REPRO_REQUIRE_SLURM=1) they fail. Only the script's own cluster
(ClusterName=repro with its partition `nodes2`) counts: these tests drain nodes and cancel jobs.

The profile runs as `profiles/slurm` plus the documented small-cluster overlay
(profiles/slurm-small.yaml, merged by scripts/slurm_profile.py as docs/slurm.md shows), which
only scales it to the test node (2 CPUs, ~20 GB) and keeps the runs' thread counts those of the
local run, so the aggregates can be compared exactly; everything else (executor, partitions,
account, runtimes, retries, GPU request of sft, job names, logs) is the profile's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_workflow import ROOT, copy_workflow

sys.path.insert(0, str(ROOT / "scripts"))
from slurm_profile import write_profile

SCRIPT = ROOT / "scripts" / "local_slurm.sh"
ACCOUNT = "ci"  # the account scripts/local_slurm.sh creates (REPRO_SLURM_ACCOUNT)
NODE = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
# The documented small-cluster overlay (docs/slurm.md): sizes only, so the runs' thread counts
# are those of a local `--cores 2` run and the aggregates compare exactly.
SMALL_OVERLAY = ROOT / "profiles" / "slurm-small.yaml"


def cluster() -> None:
    """Skip (fail under REPRO_REQUIRE_SLURM=1) unless scripts/local_slurm.sh's cluster is up."""
    reason = None
    if shutil.which("sinfo") is None:
        reason = "SLURM is not installed (apt-get install slurm-wlm munge)"
    else:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True)
        if proc.returncode != 0:
            reason = f"no SLURM controller answers ({proc.stderr.strip()})"
        elif "nodes2" not in proc.stdout.split() or cluster_name() != "repro":
            reason = ("the SLURM cluster up is not scripts/local_slurm.sh's (these tests drain "
                      "nodes)")
    if reason is None:
        return
    reason += "; start one with `sudo scripts/local_slurm.sh start`"
    if os.environ.get("REPRO_REQUIRE_SLURM") == "1":
        pytest.fail(f"{reason}: REPRO_REQUIRE_SLURM=1 (CI) must run these tests")
    pytest.skip(reason)


def config_value(key: str) -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    match = re.search(rf"^{key}\s*=\s*(.*)$", out, re.M)
    return match.group(1).strip() if match else ""


def cluster_name() -> str:
    return config_value("ClusterName")


def accounting() -> bool:
    return config_value("AccountingStorageType") != "accounting_storage/none"


def local_slurm(*args: str) -> None:
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr


def ci_profile(wd: Path, overlay: dict | None = None) -> Path:
    """profiles/slurm with SMALL_OVERLAY (and a test's `overlay`) merged in by the documented
    scripts/slurm_profile.py, as profiles/slurm_ci of `wd`."""
    return write_profile([SMALL_OVERLAY, overlay or {}], wd / "profiles" / "slurm_ci")


def slurm_workflow(tmp_path: Path, extra: tuple[str, ...] = (),
                   overlay: dict | None = None) -> Path:
    wd = copy_workflow(tmp_path, extra=extra)
    ci_profile(wd, overlay)
    return wd


def env(wd: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return clean | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(wd),
                    "REPRO_SLURM_ACCOUNT": ACCOUNT}


STARTED: list[subprocess.Popen] = []


def snakemake_slurm(wd: Path, *args: str, log: Path | None = None) -> subprocess.Popen:
    """Snakemake under profiles/slurm_ci in `wd`, its output to `log` (wd/snakemake.log)."""
    sink = (log or wd / "snakemake.log").open("w")
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", "profiles/slurm_ci", *args]
    proc = subprocess.Popen(cmd, cwd=wd, env=env(wd), stdout=sink, stderr=subprocess.STDOUT,
                            start_new_session=True)
    STARTED.append(proc)
    return proc


def stop_started() -> None:
    """End every Snakemake started here that still runs (a failed test's, or one waiting on a
    job forever): SIGTERM, on which the executor cancels its SLURM jobs."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def finish(proc: subprocess.Popen, wd: Path, timeout: float) -> str:
    """Wait for Snakemake; its output, asserting success (with every job log on failure)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_started()
    out = (wd / "snakemake.log").read_text()
    if proc.returncode != 0:
        logs = "".join(f"\n--- {p}\n{p.read_text()[-2000:]}"
                       for p in sorted(wd.glob("logs/**/*.log")))
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{out[-5000:]}{logs}")
    return out


def wait_for(what: str, check, timeout: float, proc: subprocess.Popen | None = None,
             wd: Path | None = None):
    """Poll `check()` until it returns something truthy; fail naming `what`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            tail = (wd / "snakemake.log").read_text()[-3000:] if wd else ""
            raise AssertionError(f"snakemake ended ({proc.returncode}) before {what}:\n{tail}")
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_name(output: str) -> str:
    """The executor's SLURM job name (its "SLURM run ID")."""
    return re.search(r"SLURM run ID: (\S+)", output).group(1)


def jobs_of(name: str, fields: str, accounting_db: bool = True) -> list[dict[str, str]]:
    """Every job named `name`: sacct's records (accounting) or squeue's (otherwise)."""
    if accounting_db:
        cmd = ["sacct", "-X", "-n", "-P", "--name", name, f"--format={fields}",
               "--starttime", "now-1days"]
    else:
        cmd = ["squeue", "-h", "--states=all", "--name", name, f"--Format={fields}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    keys = fields.split(",")
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line]


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True,
                         check=True).stdout
    return [line.split("|") for line in out.splitlines() if line]
